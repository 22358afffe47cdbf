"""One real-model row compiled under one variant in this process, for its compile seconds: the child of
:mod:`benchmarks.real.compile_rounds`.

    python -m benchmarks.real.compile_once MODEL MODE SPEC --out RESULT.json [--size bench]

``MODEL`` is a name of :data:`benchmarks.real.models.MODELS`, built as the benchmark builds it (seeded, so every
process compiles the same model); ``SPEC`` a column of the main table (``stock``, ``hook``, ``slab``, ``guard``:
:data:`benchmarks.real.variants.VARIANTS`, without a memory budget, the hook without ``compare=True``, whose
figures are the report's and not a user's compile) or else a variant of ``reorder compare`` (``budget:0.5``,
``budget:1+held=0:0/40980556/8;1:0/4/4``, ``inductor-budget:0.5``: :class:`reorder.compare.Variant`). Inductor's caches are off, so every graph is compiled and every C++ kernel built
in a cache folder of its own (``force_disable_caches``), as in a first compile on a new machine. The step is the
benchmark's (:func:`benchmarks.real.run.step_function`; training: forward and loss, ``backward()``, an eager SGD
step). The result file holds ``compile_seconds`` as the main table defines them (the first two calls minus two
steady calls: a second call may still compile), Dynamo's own count of its compile seconds, what our stages took
(:attr:`reorder.inductor.Session.stage_seconds`; None without the hook), the C++ kernels Inductor built
(:func:`kernels_counted`: most of a compile's seconds that are not our stages' go to generating and building
them), and one step's real peak (:func:`reorder.measure.measure`), which tells that the program compiled is the
one the benchmark's row measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch

from reorder.inductor.session import HookOptions

__all__ = ["compile_here", "kernels_counted", "main"]

#: Steady calls after the first two; their median is the steady step.
STEADY_CALLS = 3


@contextmanager
def kernels_counted() -> Iterator[Callable[[], int]]:
    """Inductor's cache folder made anew for the block (``TORCHINDUCTOR_CACHE_DIR``, read at every compile) and
    removed after it; yields a function that counts the C++ kernels built in it so far (its shared objects: a
    kernel whose source was built before in the process is not built again, so each distinct source counts once).
    Enter it before the process compiles anything."""
    previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="inductor-") as folder:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
        try:
            yield lambda: sum(1 for _ in Path(folder).rglob("*.so"))
        finally:
            if previous is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous


def compile_here(model_name: str, mode: str, spec: str, size: str = "bench") -> dict:
    """Compile and run ``model_name``'s step under the variant ``spec`` in this process: its compile seconds, our
    stages' seconds, the C++ kernels built and its real peak (see the module's docstring)."""
    with kernels_counted() as kernels_built:
        return _compile_here(model_name, mode, spec, size, kernels_built)


def _compile_here(model_name: str, mode: str, spec: str, size: str, kernels_built: Callable[[], int]) -> dict:
    from torch._inductor import config

    from reorder.compare import dynamo_compile_seconds
    from reorder.measure import measure

    from .models import build
    from .run import step_function

    config.force_disable_caches = True
    model, inputs = build(model_name, size, mode)
    train = mode == "train"
    fn = torch.compile(step_function(model, mode))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3) if train else None

    def step():
        if not train:
            with torch.no_grad():
                return fn(inputs)
        optimizer.zero_grad(set_to_none=True)
        loss = fn(inputs)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def timed() -> float:
        t0 = time.perf_counter()
        step()
        return time.perf_counter() - t0

    with _context(spec, train) as session:
        first_two = timed() + timed()  # the second call may still compile: inside the variant's context too
    steady = statistics.median(timed() for _ in range(STEADY_CALLS))
    if train:
        optimizer.zero_grad(set_to_none=True)
    return {"model": model_name, "mode": mode, "variant": spec, "torch": torch.__version__,
            "compile_seconds": max(0.0, first_two - 2 * steady), "dynamo_compile_seconds": dynamo_compile_seconds(),
            "stage_seconds": None if session is None else session.stage_seconds,
            "fallbacks": [] if session is None else [f"{f.stage} in {f.graph}: {f.reason}" for f in session.fallbacks],
            "kernels_built": kernels_built(), "step_seconds": steady, "real_peak": measure(step, "cpu").peak}


def _context(spec: str, train: bool):
    """The context ``spec`` compiles in (see the module's docstring); it yields the hook's session or None."""
    from reorder.compare import Variant

    from .variants import VARIANTS

    column = next((v for v in VARIANTS if v.name == spec and v.compiled), None)
    if column is None:
        return Variant.parse(spec).context()
    if isinstance(column.config, HookOptions):
        column = dataclasses.replace(column, config=dataclasses.replace(column.config, compare=False))
    return column.enter(train)


def main(argv: list[str] | None = None) -> int:
    from .models import MODELS, SIZES

    p = argparse.ArgumentParser(prog="python -m benchmarks.real.compile_once", description=__doc__.splitlines()[0])
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("mode", choices=("infer", "train"))
    p.add_argument("variant", help="a variant of reorder compare: stock, hook, slab, guard, budget:F, ...")
    p.add_argument("--size", choices=SIZES, default="bench")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.out.write_text(json.dumps(compile_here(args.model, args.mode, args.variant, args.size)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
