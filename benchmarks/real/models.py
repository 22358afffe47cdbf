"""Real architectures from Hugging Face ``transformers`` configs, random weights, nothing downloaded.

``MODELS[name]`` is a :class:`Spec`; ``build(name, size, mode)`` returns the
model (seeded, so every build is identical) and its inputs. Two sizes:

* ``bench``: the architecture at a few layers and a small width (batch 8,
  sequence 128 for text, 64x64 images), compiling in well under a minute;
* ``full``: the configuration class's defaults, which are the published
  checkpoints' shapes (BERT-base, GPT-2 small, T5-small, ALBERT-xxlarge,
  DeBERTa-v2-xlarge, MobileBERT, ResNet-50, ConvNeXt-T, ViT-B/16, Swin-T,
  MobileNetV2 1.0, EfficientNet-B7), batch 8, sequence 128, 224x224 images.

Every dropout and stochastic-depth probability is set to 0, so compiled and
eager runs compute the same numbers; in ``train`` mode the inputs carry
labels and the model computes its loss itself, inside the compiled function.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["MODELS", "SIZES", "Spec", "build", "build_model", "make_inputs", "parameter_bytes"]

SIZES = ("bench", "full")
BATCH = 8
SEQUENCE = 128
IMAGE = {"bench": 64, "full": 224}

_TEXT_BENCH = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512,
               "vocab_size": 5000}


@dataclass(frozen=True)
class Spec:
    """One architecture: its ``transformers`` model class, config class, input kind and bench-size overrides."""

    model_class: str
    config_class: str
    inputs: str                      # "qa", "mlm", "causal", "seq2seq" or "image"
    bench: dict = field(default_factory=dict)
    full: dict = field(default_factory=dict)


MODELS: dict[str, Spec] = {
    "DebertaV2ForQuestionAnswering": Spec("DebertaV2ForQuestionAnswering", "DebertaV2Config", "qa", _TEXT_BENCH),
    "AlbertForMaskedLM": Spec("AlbertForMaskedLM", "AlbertConfig", "mlm", {**_TEXT_BENCH, "embedding_size": 64}),
    "AlbertForQuestionAnswering": Spec("AlbertForQuestionAnswering", "AlbertConfig", "qa",
                                       {**_TEXT_BENCH, "embedding_size": 64}),
    "MobileBertForQuestionAnswering": Spec(
        "MobileBertForQuestionAnswering", "MobileBertConfig", "qa",
        {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
         "embedding_size": 64, "intra_bottleneck_size": 64, "true_hidden_size": 64, "num_feedforward_networks": 2,
         "vocab_size": 5000}),
    "BertForMaskedLM": Spec("BertForMaskedLM", "BertConfig", "mlm", _TEXT_BENCH),
    "GPT2LMHeadModel": Spec("GPT2LMHeadModel", "GPT2Config", "causal",
                            {"n_embd": 128, "n_layer": 2, "n_head": 4, "vocab_size": 5000, "n_positions": SEQUENCE,
                             "bos_token_id": 0, "eos_token_id": 0}),
    "T5ForConditionalGeneration": Spec("T5ForConditionalGeneration", "T5Config", "seq2seq",
                                       {"d_model": 128, "d_ff": 512, "d_kv": 32, "num_layers": 2,
                                        "num_decoder_layers": 2, "num_heads": 4, "vocab_size": 5000}),
    "ResNetForImageClassification": Spec("ResNetForImageClassification", "ResNetConfig", "image",
                                         {"embedding_size": 16, "hidden_sizes": [32, 64, 128, 256],
                                          "depths": [1, 1, 1, 1], "num_labels": 10}, {"num_labels": 1000}),
    "ConvNextForImageClassification": Spec("ConvNextForImageClassification", "ConvNextConfig", "image",
                                           {"hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 2, 1],
                                            "num_labels": 10}, {"num_labels": 1000}),
    "ViTForImageClassification": Spec("ViTForImageClassification", "ViTConfig", "image",
                                      {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                                       "intermediate_size": 512, "patch_size": 8, "image_size": 64, "num_labels": 10},
                                      {"num_labels": 1000}),
    "SwinForImageClassification": Spec("SwinForImageClassification", "SwinConfig", "image",
                                       {"embed_dim": 32, "depths": [1, 1, 2, 1], "num_heads": [2, 2, 4, 8],
                                        "window_size": 2, "image_size": 64, "num_labels": 10}, {"num_labels": 1000}),
    "MobileNetV2ForImageClassification": Spec("MobileNetV2ForImageClassification", "MobileNetV2Config", "image",
                                              {"depth_multiplier": 0.35, "image_size": 64, "num_labels": 10},
                                              {"num_labels": 1000}),
    "EfficientNetForImageClassification": Spec("EfficientNetForImageClassification", "EfficientNetConfig", "image",
                                               {"width_coefficient": 0.5, "depth_coefficient": 0.5, "hidden_dim": 640,
                                                "image_size": 64, "num_labels": 10},
                                               {"image_size": IMAGE["full"], "num_labels": 1000}),
}


def _transformers():
    try:
        import transformers
    except ImportError as exc:  # an optional extra: say which
        raise ImportError("benchmarks.real needs transformers: pip install -e '.[bench]'") from exc
    return transformers


def _config(spec: Spec, size: str, overrides: dict | None = None):
    transformers = _transformers()
    config = getattr(transformers, spec.config_class)(**{**(spec.bench if size == "bench" else spec.full),
                                                         **(overrides or {})})
    for key, value in config.to_dict().items():
        if ("drop" in key and isinstance(value, float)) or key == "drop_path_rate":
            setattr(config, key, 0.0)  # deterministic: compiled and eager draw no random masks
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return config


def make_inputs(name: str, config, size: str, mode: str, batch: int = BATCH, sequence: int = SEQUENCE
                ) -> dict[str, torch.Tensor]:
    """Seeded inputs of ``MODELS[name]`` for a batch of ``batch`` (and, for text, ``sequence`` tokens)."""
    spec = MODELS[name]
    generator = torch.Generator().manual_seed(1)
    train = mode == "train"
    if spec.inputs == "image":
        side = IMAGE[size]
        inputs = {"pixel_values": torch.randn(batch, config.num_channels, side, side, generator=generator)}
        if train:
            inputs["labels"] = torch.randint(config.num_labels, (batch,), generator=generator)
        return inputs
    tokens = torch.randint(config.vocab_size, (batch, sequence), generator=generator)
    inputs = {"input_ids": tokens, "attention_mask": torch.ones(batch, sequence, dtype=torch.long)}
    if spec.inputs == "seq2seq":
        inputs["decoder_input_ids"] = torch.randint(config.vocab_size, (batch, sequence), generator=generator)
        if train:
            inputs["labels"] = torch.randint(config.vocab_size, (batch, sequence), generator=generator)
    elif train and spec.inputs == "qa":
        inputs["start_positions"] = torch.randint(sequence, (batch,), generator=generator)
        inputs["end_positions"] = torch.randint(sequence, (batch,), generator=generator)
    elif train:
        inputs["labels"] = tokens
    return inputs


def build_model(name: str, size: str, mode: str, overrides: dict | None = None):
    """``MODELS[name]`` at ``size`` (config fields replaced by ``overrides``), in train or eval mode, with seeded
    random weights; and its config."""
    spec = MODELS[name]
    config = _config(spec, size, overrides)
    torch.manual_seed(0)
    model = getattr(_transformers(), spec.model_class)(config)
    model.train(mode == "train")
    return model, config


def build(name: str, size: str, mode: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """``MODELS[name]`` at ``size``, in train or eval mode, with seeded random weights, and its inputs."""
    model, config = build_model(name, size, mode)
    return model, make_inputs(name, config, size, mode)


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters and buffers (distinct storages: tied weights count once)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in [*model.parameters(), *model.buffers()]}
    return sum(storages.values())
