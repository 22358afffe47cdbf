"""A few training steps of a small GPT-2 language model under torch.compile, built from a config (nothing downloaded).

Run it as it is (``python examples/train_gpt2.py``), or let reorder compare its
real memory under every variant without changing a line:

    python -m reorder compare examples/train_gpt2.py --steps 3

Its own arguments set its length and size: ``--steps`` (training steps),
``--batch``, ``--seq`` and ``--layers``.
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--seq", type=int, default=128)
parser.add_argument("--layers", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
config = GPT2Config(n_layer=args.layers, n_embd=128, n_head=4, n_positions=args.seq, vocab_size=5000,
                    attn_implementation="eager")
model = GPT2LMHeadModel(config)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq))


@torch.compile
def loss_of(batch):
    return model(input_ids=batch, labels=batch).loss


for step in range(args.steps):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_of(tokens)
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
