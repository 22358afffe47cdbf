"""One training step written the way people write it, under one variant, in this process: the child of
:mod:`benchmarks.real.wild`.

    python -m benchmarks.real.wild_step --row ROW --variant SPEC --out RESULT.json [--tensors FILE.pt]
                                        [--held-outside F,M,B] [SIZES]
    python -m benchmarks.real.wild_step --row ROW --alternate SPEC,SPEC,... --out TIMES.json [--rounds 21]
                                        [--held-outside F,M,B] [--held-outside-of JSON] [SIZES]

    SIZES: [--layers 4] [--hidden 256] [--seq 128] [--batch 4] [--vocab 2048]

A Llama-style decoder built from its ``transformers`` config (seeded random weights, nothing downloaded) trains
with SGD; ``ROW`` says how the step is written (:data:`ROWS`); ``SPEC`` is a variant of ``reorder compare``
(``stock``, ``budget:0.5``, ``inductor-budget:0.3``, :class:`reorder.compare.Variant`; on the rows that compile
each layer on its own, our budgets count every layer's call: :func:`variant_spec`). Inductor's caches are off,
so the first step compiles everything. The result file holds: the compile seconds (the first step's seconds minus a
steady step's, and Dynamo's own count), the C++ kernels Inductor built (in a cache folder of the process's own:
:func:`benchmarks.real.compile_once.kernels_counted`), the real peak of one step measured by
:func:`reorder.measure.measure` (the hook's session's :meth:`~reorder.inductor.Session.measure_step` for our
variants, which puts the meter's verdict in the records; the dynamic row: one step per sequence length, the verdict
at the first, the sizes it compiled at; with what eager code held in each phase, ``outside_by_phase``), the median
of ``--rounds`` steady steps, and the records. ``--tensors``: the first step's loss and gradients are saved there
(``torch.save``, read back with ``weights_only=True``) for the runner's accuracy check.

``--alternate``: the variants compiled side by side in this process and timed in alternation (:func:`alternate`),
the step times the runner compares; their compiles and real peaks are the fresh processes'.

The ``fsdp`` row runs as rank 0 of two: this process starts rank 1 (the same command with ``--rank 1``) and both
join a gloo group on loopback; each rank shards every decoder layer and the root with ``fully_shard`` and
compiles each layer. Rank 1 waits at most ``--timeout`` seconds for its peer, and rank 0 for rank 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

#: How each row's step is written.
ROWS = {
    "whole": "the model and its loss compiled whole",
    "per-layer": "each decoder layer compiled on its own (layer.compile(), as torchtitan does)",
    "fsdp": "per-layer compiles under FSDP2 (fully_shard per layer, 2 ranks, gloo on loopback); rank 0 measured "
            "(one program's real peak there moved by 3 MiB between processes, held by FSDP2's eager code as the two "
            "ranks' timing fell: docs/measured.md)",
    "autocast": "compiled whole under torch.autocast(bfloat16)",
    "checkpointed": "compiled whole with gradient_checkpointing_enable() (non-reentrant torch.utils.checkpoint)",
    "dynamic": "compiled whole with dynamic=True, trained at three sequence lengths",
    "eager-loss": "the model compiled, its cross-entropy loss computed eagerly after it",
}

#: The model's and the batch's sizes (options of both this command and the runner's), with their defaults.
SIZES = {"layers": 4, "hidden": 256, "seq": 128, "batch": 4, "vocab": 2048}

#: The dynamic row's sequence lengths, as fractions of ``--seq``.
DYNAMIC_LENGTHS = (0.5, 0.75, 1.0)


def build(args):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
                         num_hidden_layers=args.layers, num_attention_heads=max(1, args.hidden // 64),
                         num_key_value_heads=max(1, args.hidden // 64), max_position_embeddings=max(256, args.seq),
                         # a checkpointed layer cannot use a cache: transformers turns it off with a warning, which
                         # its 5.x releases log inside the compiled forward, a graph break
                         use_cache=args.row != "checkpointed")
    model = LlamaForCausalLM(config).train()
    if args.row == "checkpointed":
        # transformers 5.x routes each attention's kernels through a context variable that its forward sets, a side
        # effect Dynamo refuses inside a checkpoint (a graph break at every layer, which then runs eagerly); it
        # routes nothing that the backward's replay needs, so the step is compiled with Dynamo's own switch for it
        torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def token_batches(args) -> list[torch.Tensor]:
    """The input tokens of each measured length (one for every row but ``dynamic``)."""
    generator = torch.Generator().manual_seed(1)
    lengths = [int(args.seq * f) for f in DYNAMIC_LENGTHS] if args.row == "dynamic" else [args.seq]
    return [torch.randint(args.vocab, (args.batch, n + 1), generator=generator) for n in lengths]


def step_function(model, args, compiled: bool = True, backend="inductor"):
    """``step(tokens) -> loss`` as the row writes it (compiled where the row compiles, with ``backend``; nothing
    compiled with ``compiled=False``, the float64 reference's step)."""
    import functools

    from torch.nn import functional as F

    compile_ = functools.partial(torch.compile, backend=backend) if compiled else (lambda fn, **_: fn)
    if args.row in ("per-layer", "fsdp"):
        for layer in model.model.layers if compiled else ():
            layer.compile(backend=backend)
        return lambda tokens: model(input_ids=tokens[:, :-1], labels=tokens[:, :-1]).loss
    if args.row == "eager-loss":
        compiled_model = compile_(model)

        def eager_loss(tokens):
            logits = compiled_model(input_ids=tokens[:, :-1]).logits
            return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

        return eager_loss
    whole = compile_(lambda tokens: model(input_ids=tokens[:, :-1], labels=tokens[:, :-1]).loss,
                     dynamic=True if args.row == "dynamic" else None)
    if args.row == "autocast" and compiled:  # the float64 reference runs without autocast
        def autocast(tokens):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return whole(tokens)

        return autocast
    return whole


def variant_spec(args) -> str:
    """The variant as compiled: on the rows that compile each layer on its own, our budgets count every layer's
    call of the one region (``budget:0.5`` becomes ``budget:0.5x4`` with four layers: ``region_calls=4``)."""
    per_layer = args.row in ("per-layer", "fsdp") and args.variant.startswith("budget:") and "x" not in args.variant
    return f"{args.variant}x{args.layers}" if per_layer else args.variant


def _shard(model) -> None:
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)


def _start_peer(args, port: int) -> subprocess.Popen:
    """Rank 1: this command's row, variant and sizes, nothing written."""
    sizes = [f"--{name}={getattr(args, name)}" for name in (*SIZES, "rounds", "timeout")]
    if args.held_outside:
        sizes.append(held_outside_option(args.held_outside))
    if args.held_outside_of:
        sizes.append(f"--held-outside-of={args.held_outside_of}")
    which = f"--alternate={args.alternate}" if args.alternate else f"--variant={args.variant}"
    command = [sys.executable, "-m", "benchmarks.real.wild_step", f"--row={args.row}", which,
               *sizes, "--rank=1", f"--port={port}"]
    errors = tempfile.TemporaryFile("w+")  # a pipe would fill with an alternation's compile logs and stall rank 1
    peer = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, text=True)
    peer.errors = errors
    return peer


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, kernels_built: Callable[[], int]) -> dict:
    """One variant's first step (its compile), steady steps and measured steps; ``kernels_built`` counts the C++
    kernels Inductor built so far (:func:`benchmarks.real.compile_once.kernels_counted`)."""
    from torch._inductor import config

    from reorder.compare import dynamo_compile_seconds
    from reorder.measure import measure

    from .run import unique_graphs

    config.force_disable_caches = True
    peer = _join(args)
    step, gradients = _trainer(args)
    batches = token_batches(args)
    result: dict = {"row": args.row, "variant": args.variant, "rank": args.rank, "spec": variant_spec(args)}
    variant = _variant(args, args.variant, args.held_outside)
    if variant.hook is not None and "held_outside" in variant.hook:
        result["held_outside"] = variant.hook["held_outside"]
    with variant.context() as session:
        t0 = time.perf_counter()
        first = step(batches[0])
        first_seconds = time.perf_counter() - t0
        if args.tensors:
            torch.save([first.clone(), *(g.detach().clone() for g in gradients())], args.tensors)
        for tokens in batches[1:]:  # the other lengths compile here (dynamic: once, for every length)
            step(tokens)
        steady = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            step(batches[-1])
            steady.append(time.perf_counter() - t0)
        estimates = [r.feasible for r in session.partitions] if session is not None else []
        graphs_before = unique_graphs()
        peaks = []
        for k, tokens in enumerate(batches):  # the records get the meter's verdict at the sizes they compiled at
            meter = session.measure_step if session is not None and k == 0 else measure
            measured = meter(lambda tokens=tokens: step(tokens), "cpu")
            peaks.append({"seq": tokens.shape[1] - 1, "real_peak": measured.peak,
                          "outside": measured.outside_compiled_bytes, "outside_by_phase": measured.outside_by_phase,
                          "compiled_forward_calls": len(measured.forward_calls)})
    compiles_measured = unique_graphs() - graphs_before  # a compile inside a measured step counts its memory
    step_seconds = statistics.median(steady)
    result.update({
        "real_peak": peaks[-1]["real_peak"], "peaks": peaks, "step_seconds": step_seconds, "step_times": steady,
        "compile_seconds": max(0.0, first_seconds - step_seconds), "first_step_seconds": first_seconds,
        "dynamo_compile_seconds": dynamo_compile_seconds(), "kernels_built": kernels_built(),
        "loss": float(first), "fallbacks": [f"{f.stage} in {f.graph}: {f.reason}" for f in session.fallbacks]
        if session is not None else [],
        "estimate_feasible": estimates, "compiles_while_measured": compiles_measured,
        "records": [r.to_dict() for r in session.records] if session is not None else [],
    })
    _leave(args, peer)
    return result


def alternate(args) -> dict:
    """Every variant of ``--alternate`` in this process, timed side by side: each compiles a fresh copy of the
    seeded model with an Inductor backend of its own (dynamo would otherwise run one variant's code for another's:
    :func:`benchmarks.variants.own_inductor`) and runs its first steps, every length, in its own context, with
    our budgets' ``held_outside`` as its own process had it (``--held-outside-of``); then ``--rounds`` rounds call
    every variant once on the longest batch (:func:`benchmarks.timing.alternated_times`). Each variant's real
    peak is measured once more here (one step, :func:`reorder.measure.measure`): equal to its fresh process's,
    it shows the same program was timed. ``compiles_after_context``: graphs compiled after the variants' first
    steps, outside their contexts (0 when every timed step ran the code its variant compiled)."""
    from torch._dynamo import config as dynamo_config
    from torch._inductor import config

    from reorder.measure import measure

    from ..timing import alternated_times
    from ..variants import own_inductor
    from .run import unique_graphs

    config.force_disable_caches = True
    dynamo_config.recompile_limit = dynamo_config.accumulated_recompile_limit = 1024
    names = args.alternate.split(",")
    held = json.loads(args.held_outside_of) if args.held_outside_of else {}
    peer = _join(args)
    batches = token_batches(args)
    steps = {}
    for name in names:
        step, _ = _trainer(args, backend=own_inductor())
        with _variant(args, name, held.get(name, args.held_outside)).context():
            for tokens in (*batches, batches[-1]):  # a second call at a size may still compile
                step(tokens)
        steps[name] = step
    compiled = unique_graphs()
    peaks = {name: measure(lambda step=step: step(batches[-1]), "cpu").peak for name, step in steps.items()}
    times = alternated_times({name: (lambda step=step: step(batches[-1])) for name, step in steps.items()},
                             args.rounds)
    compiles_after_context = unique_graphs() - compiled
    _leave(args, peer)
    return {"row": args.row, "rank": args.rank, "rounds": args.rounds,
            "compiles_after_context": compiles_after_context, "variants": {
                name: {"step_times": times[name], "step_seconds": statistics.median(times[name]),
                       "real_peak": peaks[name]} for name in names}}


def _variant(args, name: str, held_outside=None):
    """The variant ``name`` as this row compiles it (:func:`variant_spec`), with ``held_outside`` for budgets."""
    from reorder.compare import Variant

    variant = Variant.parse(variant_spec(argparse.Namespace(**{**vars(args), "variant": name})))
    if held_outside and variant.hook is not None and "memory_budget" in variant.hook:
        variant = dataclasses.replace(variant, hook={**variant.hook, "held_outside": tuple(held_outside)})
    return variant


def _trainer(args, backend="inductor"):
    """A fresh seeded model of the row (sharded on the FSDP row), compiled with ``backend`` where the row compiles:
    ``step(tokens) -> loss`` (zero_grad, forward, backward, SGD) and ``gradients()`` (rank-local shards)."""
    model = build(args)
    if args.row == "fsdp":
        _shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_of = step_function(model, args, backend=backend)

    def step(tokens):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(tokens)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def gradients() -> list[torch.Tensor]:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        return [g.to_local() if hasattr(g, "to_local") else g for g in grads]

    return step, gradients


def _join(args) -> subprocess.Popen | None:
    """On the FSDP row, the gloo group of two ranks on loopback (rank 0 starts rank 1 and returns it)."""
    if args.row != "fsdp":
        return None
    import datetime

    import torch.distributed as dist

    peer = None
    if args.rank == 0:
        args.port = _free_port()
        peer = _start_peer(args, args.port)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=2,
                            timeout=datetime.timedelta(seconds=args.timeout))
    return peer


def _leave(args, peer: subprocess.Popen | None) -> None:
    """The group left, and rank 1 waited for (its failure raised)."""
    if args.row != "fsdp":
        return
    import torch.distributed as dist

    dist.destroy_process_group()
    if peer is not None:
        try:
            peer.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            peer.kill()
            raise RuntimeError(f"rank 1 did not finish within {args.timeout} s") from None
        peer.errors.seek(0)
        errors = peer.errors.read()
        peer.errors.close()
        if peer.returncode != 0:
            last = errors.strip().splitlines()[-1] if errors.strip() else f"exit status {peer.returncode}"
            raise RuntimeError(f"rank 1 failed: {last}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.real.wild_step", description=__doc__.splitlines()[0])
    p.add_argument("--row", choices=tuple(ROWS), required=True)
    p.add_argument("--variant", help="the variant to compile and measure (one of --variant or --alternate)")
    p.add_argument("--alternate", help="comma-separated variants compiled side by side and timed in alternation "
                                       "(:func:`alternate`)")
    p.add_argument("--out", type=Path)
    p.add_argument("--tensors", type=Path)
    for name, default in SIZES.items():
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--held-outside", type=parse_held_outside, default=None,
                   help="our budgets' held_outside: what eager code held in stock's step, three bytes (F,M,B), "
                        "the last by backward call where several ran (F,M,B0/B1/...)")
    p.add_argument("--held-outside-of", help="with --alternate: a JSON object, variant -> its budget's three bytes "
                                             "of held_outside (variants left out take --held-outside)")
    return p


def parse_held_outside(text: str) -> tuple:
    """``--held-outside``'s value: ``F,M,B`` bytes by phase, the last ``B0/B1/...`` by backward call."""
    forward, between, backward = text.split(",")
    by_call = tuple(int(b) for b in backward.split("/"))
    return int(forward), int(between), by_call if "/" in backward else by_call[0]


def held_outside_option(held) -> str:
    """``held_outside`` (three amounts by phase, the last an int or one per backward call) as the
    ``--held-outside`` option :func:`parse_held_outside` reads."""
    forward, between, backward = held
    by_call = "/".join(map(str, backward)) if isinstance(backward, (tuple, list)) else str(backward)
    return f"--held-outside={forward},{between},{by_call}"


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if (args.variant is None) == (args.alternate is None):
        p.error("give one of --variant and --alternate")
    if args.alternate is not None and args.tensors is not None:
        p.error("--tensors saves one variant's first step: give it with --variant")
    if args.variant is not None:
        from .compile_once import kernels_counted

        os.environ["REORDER_VARIANT"] = args.variant
        with kernels_counted() as kernels_built:
            result = run(args, kernels_built)
    else:
        result = alternate(args)
    if args.rank == 0 and args.out is not None:
        args.out.write_text(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
