"""The fusion guard on its cases and on the model zoo: blocked fusions, peaks (estimated and real), step time.

    python -m benchmarks.fusion_guard [--workloads accumulation,pr157563,two_reductions,resnet,...]
                                      [--out report/fusion_guard.md] [--cache report/fusion_guard]

Each workload is compiled three times, caches off, once per value of
:data:`VARIANTS`: stock Inductor, ``reorder.inductor.use(memory_budget=None)``
(the reorder pass, "without"), and ``use(fusion_guard=True, memory_budget=None)``
("with"); the estimates
and the guard's figures come from each compile's session records. The real peak of one call comes from
:func:`reorder.measure.measure` on each of the three, in the same process;
the step time is the median of calls of the "without" and "with" programs
taken in alternation. The estimated peak is the highest of the reorder
pass's peaks over the workload's graphs. Outputs are checked against eager
(cases) or stock (models). Zoo models run a training step (forward, the
sum of the output, backward).

The cases:

* ``accumulation``: ``total = x; total = total + mm(x, w[i]).relu()`` for
  12 matmuls of 512x512 float32.
* ``pr157563``: PyTorch PR #157563's example, ``total = total + rand(N, N)``
  12 times with N=512, with ``fallback_random`` so each ``rand`` is a
  materialised buffer (and outputs equal eager's).
* ``two_reductions``: PyTorch issue #138685, ``(a @ c).sum(-1) + (b @ c).sum(-1)``
  with 2048x16 and 16x2048 float32 (16 MiB per product).

Inductor inlines a chain of pointwise adds while lowering, before any
fusion: the first two cases set ``realize_acc_reads_threshold=1`` so the
accumulated reads are materialised buffers and their fusion is the
scheduler's to decide (``realize_acc_reads_size_threshold`` stays off), for
all three programs alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
import torch._inductor.config as config

from reorder.measure import measure
from reorder.report import format_bytes, markdown_table

from .variants import Variant, hooked, stock
from .zoo import MODELS, make

MiB = 1 << 20


def accumulation():
    torch.manual_seed(0)
    x, w = torch.randn(512, 512), torch.randn(12, 512, 512)

    def program(x, w):
        total = x
        for i in range(12):
            total = total + torch.mm(x, w[i]).relu()
        return total

    return program, (x, w), {"realize_acc_reads_threshold": 1}


def pr157563():
    def program(seed):
        torch.manual_seed(0)
        total = torch.rand(512, 512)
        for _ in range(12):
            total = total + torch.rand(512, 512)
        return total + seed

    return program, (torch.zeros(()),), {"realize_acc_reads_threshold": 1, "fallback_random": True}


def two_reductions():
    torch.manual_seed(0)
    a, b, c = torch.randn(2048, 16), torch.randn(2048, 16), torch.randn(16, 2048)

    def program(a, b, c):
        return (a @ c).sum(dim=-1) + (b @ c).sum(dim=-1)

    return program, (a, b, c), {}


#: name -> () -> (program, inputs, Inductor config it needs)
CASES: dict[str, Callable[[], tuple[Callable, tuple, dict]]] = {
    "accumulation": accumulation,
    "pr157563": pr157563,
    "two_reductions": two_reductions,
}

VARIANTS: tuple[Variant, ...] = (
    stock(),
    hooked("without", "reorder.inductor.use(memory_budget=None): the reorder pass alone"),
    hooked("with", "reorder.inductor.use(fusion_guard=True, memory_budget=None): the reorder pass and the fusion "
           "guard", fusion_guard=True),
)


def compile_variant(program: Callable, inputs: tuple, variant: Variant, train: bool):
    """Compile ``program`` under one variant; returns the step, its output, compile seconds and the hook's session
    (None for stock)."""
    torch._dynamo.reset()
    compiled = variant.compile(program)

    def step():
        out = compiled(*inputs)
        if train:
            out.float().sum().backward()
        return out

    t0 = time.perf_counter()
    with variant.enter(train) as session:
        out = step()
    return step, out.detach(), time.perf_counter() - t0, session


def run_workload(name: str, rounds: int = 15) -> dict:
    """Every figure of one row of the table, as plain data (cached as JSON by :func:`main`)."""
    train = name in MODELS
    if train:
        model, inputs = make(name)
        program, patch = model, {}
    else:
        program, inputs, patch = CASES[name]()
    row: dict = {"workload": name, "train": train, "blocked": [], "guard_seconds": 0.0, "guard_work": 0,
                 "guard_failed": []}
    steps, outputs = {}, {}
    with config.patch(force_disable_caches=True, **patch):
        if not train:
            row["eager_peak"] = measure(lambda: program(*inputs)).peak
            outputs["eager"] = program(*inputs)
        for variant in VARIANTS:
            step, out, seconds, session = compile_variant(program, inputs, variant, train)
            if train:
                program.zero_grad(set_to_none=True)
            steps[variant.name], outputs[variant.name] = step, out
            row[f"{variant.name}_real_peak"] = measure(step).peak
            row[f"{variant.name}_compile_seconds"] = seconds
            if session is None:
                continue
            row[f"{variant.name}_estimated_peak"] = max((r.peak for r in session.graphs), default=0)
            for g in session.guards:
                row["blocked"] += list(g.blocked)
                row["guard_seconds"] += g.seconds
                row["guard_work"] += g.work
                row["guard_failed"] += [g.failed] if g.failed is not None else []
        reference = outputs["stock"] if train else outputs["eager"]
        # Equal up to float rounding of reordered sums: within 1e-4 of the output's largest magnitude.
        row["max_difference"] = max(float((outputs[v.name] - reference).abs().max()) for v in VARIANTS)
        row["outputs_equal"] = row["max_difference"] <= 1e-4 * float(reference.abs().max())
        times: dict[str, list[float]] = {"without": [], "with": []}
        for _ in range(rounds):
            for variant in times:
                t0 = time.perf_counter()
                steps[variant]()
                times[variant].append(time.perf_counter() - t0)
        for variant, values in times.items():
            row[f"{variant}_step_seconds"] = statistics.median(values)
    return row


def table(rows: list[dict]) -> str:
    headers = ["workload", "blocked", "est. peak without -> with", "real peak eager / stock / without / with",
               "step ms without / with", "guard s / compile s", "outputs equal"]
    body = []
    for r in rows:
        eager = format_bytes(r["eager_peak"]) if "eager_peak" in r else "-"
        real = " / ".join([eager] + [format_bytes(r[f"{v.name}_real_peak"]) for v in VARIANTS])
        ratio = r["with_step_seconds"] / r["without_step_seconds"]
        body.append([
            r["workload"] + (" (train)" if r["train"] else ""),
            len(r["blocked"]),
            f"{format_bytes(r['without_estimated_peak'])} -> {format_bytes(r['with_estimated_peak'])}",
            real,
            f"{r['without_step_seconds'] * 1e3:.2f} / {r['with_step_seconds'] * 1e3:.2f} ({ratio:.2f}x)",
            f"{r['guard_seconds']:.3f} / {r['with_compile_seconds']:.1f}",
            "yes" if r["outputs_equal"] else "NO",
        ])
    return markdown_table(headers, body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join([*CASES, *MODELS]))
    parser.add_argument("--out", default="report/fusion_guard.md")
    parser.add_argument("--cache", default="report/fusion_guard", help="one JSON per workload; present = reused")
    args = parser.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.workloads.split(","):
        path = cache / f"{name}.json"
        if path.exists():
            row = json.loads(path.read_text())
        else:
            row = run_workload(name)
            path.write_text(json.dumps(row, indent=1))
        rows.append(row)
        print(f"{name}: blocked {len(row['blocked'])}, real peak stock {row['stock_real_peak']} "
              f"without {row['without_real_peak']} with {row['with_real_peak']}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(table(rows) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
