"""A few training steps of a small ALBERT question-answering model under torch.compile, built from a config
(random weights, nothing downloaded).

Run it as it is (``python examples/train_albert.py``), or let reorder compare its real memory under every
variant without changing a line:

    python -m reorder compare examples/train_albert.py

Its own arguments set its length and size: ``--steps`` (training steps, default 3), ``--batch``,
``--seq`` and ``--layers``.
"""

import argparse

import torch
from transformers import AlbertConfig, AlbertForQuestionAnswering

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--seq", type=int, default=128)
parser.add_argument("--layers", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
config = AlbertConfig(vocab_size=5000, embedding_size=64, hidden_size=128, num_hidden_layers=args.layers,
                      num_attention_heads=4, intermediate_size=512, max_position_embeddings=max(512, args.seq),
                      attn_implementation="eager")
model = AlbertForQuestionAnswering(config).train()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
batch = {
    "input_ids": torch.randint(config.vocab_size, (args.batch, args.seq)),
    "attention_mask": torch.ones(args.batch, args.seq, dtype=torch.long),
    "start_positions": torch.randint(args.seq, (args.batch,)),
    "end_positions": torch.randint(args.seq, (args.batch,)),
}


@torch.compile
def loss_of(inputs):
    return model(**inputs).loss


for step in range(args.steps):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_of(batch)
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
