"""One model in one mode under every variant, in one process, on the same inputs: the row's raw data.

For each variant the model is a fresh copy of the same seeded weights. The
first call compiles (under the variant's context) and gives the outputs and
gradients checked against stock; a second call gives the steady time
(compile seconds = first minus steady); the third is measured with
:func:`reorder.measure.measure`. A training step is the compiled function
(forward and loss), ``loss.backward()`` and ``SGD.step()`` (the optimizer
is eager, outside the compiled function); gradients are set to None before
each call, so what a step leaves allocated is its gradients. Each variant's
entry keeps the records of its first call's compiles (``"records"``: each
record's ``to_dict()``; :func:`benchmarks.variants.load_records` reads them
back, and the entries of rows cached before them).
"""

from __future__ import annotations

import copy
import gc
import statistics
import time
import warnings
from pathlib import Path

import torch

from reorder.inductor.session import OrderRecord
from reorder.compare import thin
from reorder.measure import measure

from ..variants import load_records, records_json
from .models import BATCH, build, parameter_bytes
from .tables import GAP, largest_estimate
from .variants import HOOK, NO_LAYOUT_OPTIMIZATION, VARIANTS, Variant

__all__ = ["CURVE_POINTS", "capture_case", "run_case", "run_variant", "unique_graphs"]

#: Points kept of each measured curve (the highest of each time bucket), enough for a plot.
CURVE_POINTS = 600

#: Calls timed after the first two (which compile); the step time is their median.
STEADY_CALLS = 3


def unique_graphs() -> int:
    """The graphs Dynamo has compiled in this process so far (its ``unique_graphs`` counter)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors(v)]
    return []


def step_function(model: torch.nn.Module, mode: str):
    if mode == "train":
        return lambda inputs: model(**inputs).loss
    return lambda inputs: tuple(model(**inputs).to_tuple())


def run_variant(base: torch.nn.Module, inputs: dict, mode: str, variant: Variant,
                capture_dir: Path | None = None, steady_calls: int = STEADY_CALLS) -> tuple[dict, list[torch.Tensor]]:
    """Compile (or not), check, time and measure one variant; returns its record and its outputs (+ gradients).

    ``capture_dir`` (a hook variant only): the hook also writes each graph and Inductor's figures there.
    The record keeps the records of the first call's compiles (``"records"``, each ``to_dict()``); the second
    call, which may compile again, runs under the variant too (not captured).
    """
    later_calls = variant  # without capture: a later call's compile is hooked, not captured
    if capture_dir is not None:
        variant = variant.with_hook(capture_dir=capture_dir)
    torch._dynamo.reset()
    model = copy.deepcopy(base)
    fn = variant.compile(step_function(model, mode))
    train = mode == "train"
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3) if train else None

    def step():
        if not train:
            with torch.no_grad():
                return fn(inputs)
        loss = fn(inputs)
        loss.backward()
        optimizer.step()
        return loss.detach()

    t0 = time.perf_counter()
    with variant.enter(train) as session:
        outputs = step()
    first_seconds = time.perf_counter() - t0
    checked = [t.detach().clone() for t in tensors(outputs)]
    if train:
        checked += [p.grad.clone() for p in model.parameters() if p.grad is not None]
        optimizer.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    with later_calls.enter(train):
        # A second call may still compile (a guard failing after the first step's side effects), and the
        # steady calls and the measured one run what it compiled: under the variant too, or they run stock's.
        step()
    second_seconds = time.perf_counter() - t0
    times = []
    for _ in range(steady_calls):
        if train:
            optimizer.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    steady_seconds = statistics.median(times)
    if train:
        optimizer.zero_grad(set_to_none=True)
    gc.collect()
    m = measure(step, "cpu")
    gradient_bytes = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None) if train else 0
    if train:
        optimizer.zero_grad(set_to_none=True)
    record = {
        "variant": variant.name,
        "compile_seconds": (max(0.0, first_seconds + second_seconds - 2 * steady_seconds)
                            if variant.compiled else 0.0),
        "step_seconds": steady_seconds,
        "real_peak": m.peak,
        "allocations": m.allocations,
        "real_end": m.end,
        "held_at_backward": m.held_at_backward,
        "gradient_bytes": gradient_bytes,
        "peak_composition": m.peak_composition,
        "phases": {k: vars(r) for k, r in m.phases.items()},
        "compiled_calls": [vars(r) for r in m.compiled_calls],
        "curve": [list(p) for p in thin(m.curve, CURVE_POINTS)],
        "records": records_json(session),
    }
    del model, fn, optimizer
    torch._dynamo.reset()
    return record, checked


def difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float | None:
    """Largest absolute difference, relative to the largest magnitude (None: different structure)."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        return None
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        if x.numel():
            scale = max(1e-6, float(y.abs().max()))
            worst = max(worst, float((x.float() - y.float()).abs().max()) / scale)
    return worst


#: The tolerance of :func:`as_accurate`: ``torch._dynamo.utils.same``'s default.
ACCURACY_TOLERANCE = 1e-4


def float64_reference(base: torch.nn.Module, inputs: dict) -> list[torch.Tensor]:
    """The training step's loss and gradients computed eagerly in float64 (a copy of ``base``, floating inputs
    cast): the reference that PyTorch's own accuracy checks judge compiled results against, in the order of a
    variant's checked tensors (the loss, then each parameter's gradient)."""
    model = copy.deepcopy(base).double()
    cast = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    loss = step_function(model, "train")(cast)
    loss.backward()
    return [t.detach() for t in tensors(loss)] + [p.grad for p in model.parameters() if p.grad is not None]


def as_accurate(ours: list[torch.Tensor], stock: list[torch.Tensor], reference: list[torch.Tensor],
                tol: float = ACCURACY_TOLERANCE) -> tuple[bool, float] | None:
    """Whether every tensor of ``ours`` passes PyTorch's accuracy rule against stock's
    (``torch._dynamo.utils.same``, as its benchmark suite applies it: equal within ``tol`` absolute and relative,
    or no further from the float64 ``reference`` than a small multiple of stock's distance, by root mean square
    error, plus ``tol / 10``), and the largest ratio of our error to stock's (both against the reference; 0
    where both are exact). None where the structures differ. A tensor that is zero in exact arithmetic holds
    only rounding, so two correct programs differ there by 100% of its magnitude; this rule judges it by its
    distance to the exact value instead."""
    from torch._dynamo.utils import rmse, same

    if not (len(ours) == len(stock) == len(reference)) or any(
            x.shape != y.shape or x.shape != r.shape for x, y, r in zip(ours, stock, reference, strict=True)):
        return None
    passed, worst = True, 0.0
    for x, y, r in zip(ours, stock, reference, strict=True):
        passed &= bool(same(y, x, fp64_ref=r, tol=tol, log_error=lambda *args: None))
        ours_error, stock_error = float(rmse(r, x.double())), float(rmse(r, y.double()))
        if ours_error:
            worst = max(worst, ours_error / stock_error if stock_error else float("inf"))
    return passed, worst


def run_case(name: str, size: str, mode: str, variants: tuple[Variant, ...] = VARIANTS,
             capture_dir: Path | None = None) -> dict:
    """Every applicable variant of ``name`` in ``mode``; outputs compared with stock; gaps decomposed."""
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    from torch._inductor import config

    config.force_disable_caches = True  # every variant compiles for real: honest compile seconds
    base, inputs = build(name, size, mode)
    row = {"model": name, "size": size, "mode": mode, "batch": BATCH,
           "parameter_bytes": parameter_bytes(base),
           "input_bytes": sum(t.nbytes for t in inputs.values()), "variants": {}, "difference_to_stock": {}}
    outputs = {}
    for variant in variants:
        if mode == "train" and not variant.training:
            continue
        row["variants"][variant.name], outputs[variant.name] = run_variant(
            base, inputs, mode, variant, capture_dir if variant.name == "hook" else None,
            steady_calls=STEADY_CALLS if size == "bench" else 1)  # full depth: estimates first, steps are long
    if "stock" in outputs:
        for other, values in outputs.items():
            if other != "stock":
                row["difference_to_stock"][other] = difference(values, outputs["stock"])
    hook = row["variants"].get("hook")
    stock = row["variants"].get("stock")
    estimate = largest_estimate(load_records(hook), "inductor_best") if hook else None
    is_image = "pixel_values" in inputs
    if stock and estimate and abs(stock["real_peak"] - estimate) > GAP * estimate and is_image:
        rerun, _ = run_variant(base, inputs, mode, NO_LAYOUT_OPTIMIZATION)
        rerun.pop("curve")
        row["variants"][NO_LAYOUT_OPTIMIZATION.name] = rerun
    return row


def capture_case(name: str, size: str, mode: str, capture_dir: Path) -> list[OrderRecord]:
    """Compile ``name`` once under the hook and run that one step: its graphs and Inductor's figures, nothing timed.

    The estimate level of a configuration whose steps take too long on this
    machine to time and meter: the first call compiles the forward (and, in
    training, ``loss.backward()`` the backward), and every graph is written to
    ``capture_dir``. Returns the hook's record of each graph.
    """
    from torch._inductor import config

    config.force_disable_caches = True
    base, inputs = build(name, size, mode)
    torch._dynamo.reset()
    variant = HOOK.with_hook(capture_dir=capture_dir)
    fn = variant.compile(step_function(base, mode))
    with variant.enter(mode == "train") as session:
        if mode == "train":
            fn(inputs).backward()
        else:
            with torch.no_grad():
                fn(inputs)
    return session.graphs
