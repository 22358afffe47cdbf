"""A few training steps of a small Llama-style decoder whose loss is computed eagerly, after the compiled model, as
many training scripts do (random weights from a config, nothing downloaded).

Only the model is compiled: the cross-entropy over its logits, and that loss's gradient, are eager code around
the compiled region, which a memory budget's estimates cannot see. Compare the variants' real memory:

    python -m reorder compare examples/train_eager_loss.py --variants stock,budget:1.0,budget:0.5,inductor-budget:0.5

Its own arguments set its length and size: ``--steps`` (training steps, default 3), ``--batch``, ``--seq``,
``--layers`` and ``--vocab``.
"""

import argparse

import torch
from torch.nn import functional as F
from transformers import LlamaConfig, LlamaForCausalLM

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--seq", type=int, default=128)
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--vocab", type=int, default=4096)
args = parser.parse_args()

torch.manual_seed(0)
config = LlamaConfig(vocab_size=args.vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=args.layers,
                     num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=max(256, args.seq))
model = LlamaForCausalLM(config).train()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
tokens = torch.randint(args.vocab, (args.batch, args.seq + 1))
inputs, targets = tokens[:, :-1], tokens[:, 1:]
compiled = torch.compile(model)

for step in range(args.steps):
    optimizer.zero_grad(set_to_none=True)
    logits = compiled(input_ids=inputs).logits  # the compiled region ends here
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # eager: its softmax and gradient too
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
