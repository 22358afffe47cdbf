"""One real-model row of ``python -m benchmarks.real`` as a plain script: build, compile, run its steps.

``python benchmarks/real/step_script.py MODEL MODE [--size bench] [--steps 6]`` builds ``MODEL``
(a name of :data:`benchmarks.real.models.MODELS`) exactly as the benchmark does and calls the
compiled step ``--steps`` times, with the gradients set to None before each call; the benchmark
measures its sixth call the same way. ``reorder compare benchmarks/real/step_script.py MODEL MODE``
therefore reports a last-step peak that is the benchmark's ``real_peak`` for that row and variant.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks`

import torch  # noqa: E402

from benchmarks.real.models import MODELS, SIZES, build  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("model", choices=sorted(MODELS))
parser.add_argument("mode", choices=["infer", "train"])
parser.add_argument("--size", choices=SIZES, default="bench")
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()

model, inputs = build(args.model, args.size, args.mode)
train = args.mode == "train"
if train:
    fn = torch.compile(lambda batch: model(**batch).loss)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
else:
    fn = torch.compile(lambda batch: tuple(model(**batch).to_tuple()))

for _ in range(args.steps):
    if train:
        optimizer.zero_grad(set_to_none=True)
        fn(inputs).backward()
        optimizer.step()
    else:
        with torch.no_grad():
            fn(inputs)
