"""``reorder compare SCRIPT.py``: a person's own script under every variant, real memory side by side.

Each variant runs the unmodified script once, in a fresh Python process
(:func:`child_main`), with Inductor's caches off and the variant installed
around every ``torch.compile`` the script makes, as ``reorder capture`` does
(:func:`reorder.script.run_script`). The whole run is measured with
:func:`reorder.measure.measure`: the allocator's own events on CPU, and on
CUDA also ``max_memory_allocated``/``max_memory_reserved`` (and a memory
snapshot for PyTorch's memory viewer where ``_record_memory_history``
exists). Per variant: the real peak above the script's start, the last
step's peak (from the start of the last step's first compiled forward call,
:func:`last_step_start`, to the end of the run, above the live bytes at its
start: what ``python -m benchmarks.real`` measures for one step), the
compile and wall seconds, the graphs Inductor compiled, the hook's fallbacks
and what the run printed (:func:`log_path`).

Curves of different runs are aligned by what they did, not by their own
clocks (:func:`align_times`): the starts and ends of the compiled calls are
marks matched between runs, and between two marks each run's allocations are
spread over the reference run's stretch in their order, so a longer compile
or an idle stretch in one run never looks like memory saved.
The child sets ``REORDER_VARIANT`` to the variant's name, so a script can
tell which variant it runs under.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence, TextIO

from .errors import ReorderError
from .report import Progress, axis_unit, format_bytes, format_table
from .script import script_path

__all__ = ["VARIANTS", "Comparison", "Variant", "parse_variants", "VariantRun", "align_times", "compare",
           "draw_comparison", "dynamo_compile_seconds", "plot_comparison", "thin", "ties"]

#: The named variants, each one's hook options (None: stock ``torch.compile``, nothing of ours installed), over
#: ``use()``'s defaults (a training step budgeted at 1.0); the command line's default. The benchmarks' columns of
#: the same names take these options without a budget (:func:`benchmarks.variants.hooked`), as they were measured.
VARIANTS: dict[str, dict | None] = {
    "stock": None,
    "hook": {},
    "slab": {"slab": True},
    "guard": {"fusion_guard": True},
}

#: The suffix of a budget variant whose fusion guard also judges what the generated code allocates.
ALLOCATED = "+allocated"

#: Byte units a budget may be written in.
UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


@dataclass(frozen=True)
class Variant:
    """One way to compile the script: a name from :data:`VARIANTS`, or a budget.

    ``spec`` is as written (``"slab"``, ``"budget:0.5"``, ``"budget:12MB"``,
    ``"inductor-budget:0.5"``); ``hook``: the :class:`~reorder.inductor.HookOptions`
    fields it installs (None: stock ``torch.compile``); ``functorch``: AOTAutograd
    configuration it sets (Inductor's own ``activation_memory_budget``).
    """

    spec: str
    hook: dict | None
    functorch: tuple[tuple[str, object], ...] = ()

    @classmethod
    def parse(cls, spec: str) -> "Variant":
        """A variant from its spec; :class:`~reorder.errors.ReorderError` (one line) naming what is wrong.

        ``budget:F`` is ``use(memory_budget=F)``: a number with no unit is a
        fraction of stock's estimated step peak, in (0, 1]; bytes take a unit
        (``12MB``, ``1.5GiB``, ``500000B``); ``budget:0.5x4`` is
        ``use(memory_budget=0.5, region_calls=4)``, for a region run four
        times a step (each layer compiled on its own); ``+held=F/M/B`` (or
        ``+held=N``) after either is ``held_outside=(F, M, B)`` (or ``N``),
        the bytes the step's eager code holds beside the compiled regions, as
        ``session.measure_step`` names them (a unit is optional: ``+held=8MB``;
        ``+held=F/M/B0+B1+B2`` gives the backward's bytes by call);
        by region number, ``+held=0:F/M/B;1:N`` is ``held_outside={0: (F, M,
        B), 1: N}``. ``+allocated`` at the end is ``fusion_guard_allocated=True``
        (the fusion guard also judges by what the generated code allocates).
        ``inductor-budget:F`` is stock with Inductor's own
        ``activation_memory_budget=F``, F in [0, 1].
        """
        name, colon, value = spec.strip().partition(":")
        if name in VARIANTS and not colon:
            return cls(spec, VARIANTS[name])
        if name == "budget" and value:
            allocated = value.endswith(ALLOCATED)
            value = value.removesuffix(ALLOCATED)
            value, plus, held = value.partition("+")
            value, x, calls = value.partition("x")
            hook = {"memory_budget": budget_value(value, spec)}
            if x:
                if not calls.strip().isdigit() or int(calls) < 1:
                    raise ReorderError(f"variant {spec!r}: 'xN' after a budget is how many times each compiled "
                                       f"region runs a step (region_calls), an int >= 1")
                hook["region_calls"] = int(calls)
            if plus:
                hook["held_outside"] = held_value(held, spec)
            if allocated:
                hook["fusion_guard_allocated"] = True
            return cls(spec, hook)
        if name == "inductor-budget" and value:
            try:
                fraction = float(value)
            except ValueError:
                fraction = -1.0
            if not 0.0 <= fraction <= 1.0:
                raise ReorderError(f"variant {spec!r}: Inductor's activation_memory_budget is a fraction in [0, 1]")
            return cls(spec, None, (("activation_memory_budget", fraction),))
        raise ReorderError(f"variant {spec!r}: known variants are {', '.join(VARIANTS)}, budget:FRACTION, "
                           f"budget:BYTES (with a unit: 12MB, 1.5GiB), either followed by xCALLS, +held=BYTES and "
                           f"{ALLOCATED}, and inductor-budget:FRACTION")

    @contextlib.contextmanager
    def context(self) -> Iterator:
        """The context the script runs in under this variant; it yields the hook's session, or None."""
        from . import inductor

        with contextlib.ExitStack() as stack:
            if self.functorch:
                from torch._functorch import config as functorch_config

                stack.enter_context(functorch_config.patch(dict(self.functorch)))
            yield None if self.hook is None else stack.enter_context(inductor.use(**self.hook))


def _number_and_unit(text: str) -> tuple[float | None, str]:
    """``12MB`` as ``(12.0, "MB")``, ``0.5`` as ``(0.5, "")``; None for a number that does not parse. The unit is
    upper-cased and not checked against :data:`UNITS`."""
    text = text.strip()
    number = text.rstrip("BbKkMmGgIi")
    try:
        return float(number), text[len(number):].upper()
    except ValueError:
        return None, text[len(number):].upper()


def budget_value(text: str, spec: str) -> int | float:
    """``budget:``'s value: a fraction in (0, 1] without a unit, bytes (an int) with one."""
    value, unit = _number_and_unit(text)
    if value is None or (unit and unit not in UNITS):
        raise ReorderError(f"variant {spec!r}: a budget is a fraction of stock's estimated step peak in (0, 1], or "
                           f"bytes with a unit ({', '.join(u.replace('I', 'i') for u in UNITS)})")
    if not unit:
        if not 0.0 < value <= 1.0:
            raise ReorderError(f"variant {spec!r}: a budget without a unit is a fraction of stock's estimated step "
                               f"peak, in (0, 1]; write bytes with a unit (12MB, 1.5GiB)")
        return value
    if value * UNITS[unit] < 1:
        raise ReorderError(f"variant {spec!r}: a budget in bytes must be at least 1 B")
    return int(value * UNITS[unit])


def held_value(text: str, spec: str) -> int | tuple | dict[int, int | tuple]:
    """``+held=``'s value: bytes (a unit optional) for all three phases, or three separated by ``/``, the last
    one per backward call where separated by ``+``; or, by region number, ``R:`` before either, regions
    separated by ``;``."""
    key, _, value = text.partition("=")
    if key.strip() != "held":
        _refuse_held(spec)
    if ":" in value:
        regions = {}
        for part in value.split(";"):
            region, _, amounts = part.partition(":")
            if not region.strip().isdigit() or int(region) in regions or ":" in amounts:
                _refuse_held(spec)
            regions[int(region)] = held_value(f"held={amounts}", spec)
        return regions
    amounts = []
    for part in value.split("/"):
        by_call = []
        for text in part.split("+"):
            number, unit = _number_and_unit(text)
            unit = unit or "B"
            amount = -1.0 if number is None or unit not in UNITS else number * UNITS[unit]
            if amount < 0 or amount != int(amount):
                _refuse_held(spec)
            by_call.append(int(amount))
        amounts.append(by_call[0] if len(by_call) == 1 else tuple(by_call))
    if len(amounts) not in (1, 3) or any(isinstance(a, tuple) for a in amounts[:-1]) or (
            len(amounts) == 1 and isinstance(amounts[0], tuple)):
        _refuse_held(spec)
    return amounts[0] if len(amounts) == 1 else tuple(amounts)


def _refuse_held(spec: str) -> None:
    raise ReorderError(f"variant {spec!r}: '+held=' takes the bytes the step's eager code holds beside the "
                       f"compiled regions (held_outside): one amount, or three separated by '/' (while the "
                       f"forwards run / between / while the backwards run, the last one per backward call, "
                       f"separated by '+', where several ran), each a whole number of bytes or "
                       f"with a unit (8MB); by region, 'R:' before each, each region once, separated by ';' "
                       f"(0:0/40MB/1MB;1:4, quoted in a shell)")


def parse_variants(text: str | Sequence[str]) -> list[Variant]:
    """``--variants``: comma-separated specs (or a list of them), each parsed by :meth:`Variant.parse`."""
    specs = [v.strip() for v in (text.split(",") if isinstance(text, str) else text) if v.strip()]
    if not specs:
        raise ReorderError(f"--variants {text!r}: name at least one variant ({', '.join(VARIANTS)}, budget:F, ...)")
    try:
        variants = [Variant.parse(v) for v in specs]
    except ReorderError as exc:
        raise ReorderError(f"--variants {','.join(specs)!r}: {exc}") from None
    seen = [v.spec for v in variants]
    if len(set(seen)) < len(seen):
        raise ReorderError(f"--variants {','.join(seen)!r}: a variant is named twice")
    return variants


#: Points kept of each run's curve (the highest of each time bucket; the peak is always kept).
CURVE_POINTS = 2000


@dataclass(frozen=True)
class VariantRun:
    """One variant's run of the script. Bytes are real allocated bytes above the script's start.

    ``error``: the script's (or the child's) error under this variant, None
    when it ran through; ``marks``: times (s, the run's own clock) where
    compiled calls started and ended, in order; ``curve``: ``(s, bytes)`` over the whole run, thinned to
    :data:`CURVE_POINTS`; ``last_step_start`` and ``step_curve``: where the last step began and its own curve,
    from there to the end, thinned separately (so that a short step keeps its detail); ``step_base``: the live
    bytes when it began (``step_peak`` is counted above them);
    ``cuda``: ``max_memory_allocated``/``max_memory_reserved`` above the start; ``step_seconds``: the last
    step's compiled work, from the start of its first compiled forward call to the end of its last compiled call
    (what a budget's recomputation slows; the script's own eager work and waits left out); ``stage_seconds``: of
    ``compile_seconds``, what our own stages took (:attr:`reorder.inductor.Session.stage_seconds`; None for stock
    and Inductor's budget, which run none); ``log``: the file that holds everything the run printed (the
    script's own output, our warnings, a traceback).
    """

    variant: str
    error: str | None = None
    peak: int | None = None
    step_peak: int | None = None
    compile_seconds: float = 0.0
    wall_seconds: float = 0.0
    graphs: int = 0
    fallbacks: tuple[str, ...] = ()
    compiled_calls: int = 0
    marks: tuple[float, ...] = ()
    curve: tuple[tuple[float, int], ...] = ()
    cuda: dict | None = None
    snapshot: str | None = None
    last_step_start: float | None = None
    step_curve: tuple[tuple[float, int], ...] = ()
    step_base: int | None = None
    step_seconds: float | None = None
    stage_seconds: float | None = None
    log: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Comparison:
    """Every variant's run of one script, the reference (stock when it ran) and the verdict."""

    script: str
    args: tuple[str, ...]
    device: str
    runs: tuple[VariantRun, ...]
    reference: str | None
    sentence: str
    plot: str | None = None

    def to_json(self) -> dict:
        data = asdict(self)
        for run, raw in zip(self.runs, data["runs"], strict=True):
            raw["against_reference"] = self.against_reference(run)
        return data

    def run_of(self, variant: str) -> VariantRun | None:
        return next((r for r in self.runs if r.variant == variant), None)

    def against_reference(self, run: VariantRun) -> float | None:
        """``run``'s real peak relative to the reference's (-0.1: 10% lower), None where either failed."""
        ref = self.run_of(self.reference) if self.reference else None
        if ref is None or not run.ok or not ref.peak:
            return None
        return run.peak / ref.peak - 1.0

    def table(self) -> str:
        cuda = self.device.startswith("cuda")
        headers = ["variant", "real peak", f"against {self.reference or 'stock'}", "last step peak", "last step s",
                   "compile s", "our stages s", "run s", "graphs", "fallbacks"] + (["reserved peak"] if cuda else [])
        rows = []
        for r in self.runs:
            if not r.ok:
                rows.append([r.variant, "failed", "-", "-", "-", "-", "-", f"{r.wall_seconds:.1f}", "-", r.error]
                            + (["-"] if cuda else []))
                continue
            against = self.against_reference(r)
            rows.append([r.variant, format_bytes(r.peak), "-" if against is None else f"{against:+.1%}",
                         format_bytes(r.step_peak) if r.step_peak is not None else "-",
                         "-" if r.step_seconds is None else f"{r.step_seconds:.3f}", f"{r.compile_seconds:.1f}",
                         "-" if r.stage_seconds is None else f"{r.stage_seconds:.1f}",
                         f"{r.wall_seconds:.1f}", r.graphs, len(r.fallbacks)]
                        + ([format_bytes(r.cuda["max_memory_reserved"]) if r.cuda else "-"] if cuda else []))
        return format_table(headers, rows)


def align_times(times: Sequence[float], marks: Sequence[float], reference: Sequence[float], end: float,
                reference_end: float) -> list[float]:
    """``times`` (one run's curve, ascending) placed on the reference run's clock, by what the run did.

    ``marks`` and ``reference`` are the times of the same events in the two
    runs (the k-th compiled call's start and end, phases): the first
    ``min(len)`` pairs are matched, with both runs' starts (0) and ends, and
    pairs that would run backwards are dropped. Between two matched marks a
    run's points are spread evenly over the reference's stretch, in their
    order: by event, not by clock, so an idle stretch in one run (a slower
    kernel, a pause) never looks like memory held for less time or saved.
    """
    k = min(len(marks), len(reference))
    xs, ys = [0.0], [0.0]
    for x, y in zip([*marks[:k], end], [*reference[:k], reference_end], strict=True):
        if x >= xs[-1] and y >= ys[-1] and (x, y) != (xs[-1], ys[-1]):
            xs.append(x)
            ys.append(y)
    segment = [min(max(bisect.bisect_right(xs, t) - 1, 0), len(xs) - 2) if len(xs) > 1 else 0 for t in times]
    counts: dict[int, int] = {}
    for j in segment:
        counts[j] = counts.get(j, 0) + 1
    placed, seen = [], {}
    for j in segment:
        rank = seen.get(j, 0)
        seen[j] = rank + 1
        if len(ys) == 1:
            placed.append(0.0)
        else:
            placed.append(ys[j] + (rank + 0.5) / counts[j] * (ys[j + 1] - ys[j]))
    return placed


def thin(curve: Sequence[tuple[float, int]], points: int = CURVE_POINTS) -> list[tuple[float, int]]:
    """``curve`` cut to at most about ``2 * points + 2`` points without losing its shape.

    The events are split into ``points`` runs of equal count (by event, not
    by clock, so that two runs with the same allocations thin to the same
    shape however long each event took); of each run the lowest and the
    highest point are kept, in their order, and the first and last points of
    the curve always are: its peak, every dip deeper than a run, and its end
    survive.
    """
    if len(curve) <= 2 * points + 2:
        return [tuple(p) for p in curve]
    keep = {0, len(curve) - 1}
    for k in range(points):
        lo, hi = k * len(curve) // points, (k + 1) * len(curve) // points
        if lo < hi:
            keep.add(min(range(lo, hi), key=lambda i: (curve[i][1], i)))
            keep.add(max(range(lo, hi), key=lambda i: (curve[i][1], -i)))
    return [tuple(curve[i]) for i in sorted(keep)]


def run_end(curve: Sequence[tuple[float, int]], marks: Sequence[float]) -> float:
    """Where a run (or its step) ended on its own clock: its last event, or the end of its last compiled call
    if that came later (a call that frees nothing at its end leaves no event there)."""
    return max(curve[-1][0] if curve else 0.0, marks[-1] if marks else 0.0)


def drawn_to(xs: list[float], ys: list[float], end: float) -> tuple[list[float], list[float]]:
    """A step curve held at its last value up to ``end``: every run's line reaches the end of the panel."""
    if xs and end > xs[-1]:
        return [*xs, end], [*ys, ys[-1]]
    return xs, ys


def ties(runs: Sequence[VariantRun]) -> list[list[VariantRun]]:
    """``runs`` grouped by curve: runs whose thinned whole-run curves allocate the same bytes in the same order
    (and so have the same peak) form one group, drawn as one line named for all of them; groups keep the
    order of their first run."""
    groups: dict[tuple[int, ...], list[VariantRun]] = {}
    for r in runs:
        groups.setdefault(tuple(b for _, b in r.curve), []).append(r)
    return list(groups.values())


def _live_before(curve: Sequence[tuple[float, int]], start: float) -> int:
    """Live bytes just before ``start`` (0 before the first event)."""
    i = bisect.bisect_left([t for t, _ in curve], start)
    return curve[i - 1][1] if i else 0


LABEL_STEP_POINTS = 9  # one line of the points' 8-point labels


def _label_raises(points: Sequence[tuple[float, int]], near: float = 0.06) -> list[int]:
    """How many label lines each point's name is raised by, so that names of points drawn close together do not
    overprint (hook and guard often measure the same peak at about the same step time): a point's raise is one
    more than the highest raise among the earlier points within ``near`` of it on both axes, scaled to the
    axes' ranges (from 0 to the largest value, as the panel draws them)."""
    x_range = max((x for x, _ in points), default=0.0) or 1.0
    y_range = max((y for _, y in points), default=0) or 1
    raises: list[int] = []
    for i, (x, y) in enumerate(points):
        close = [raises[j] for j, (x2, y2) in enumerate(points[:i])
                 if abs(x - x2) <= near * x_range and abs(y - y2) <= near * y_range]
        raises.append(max(close) + 1 if close else 0)
    return raises


def _peak_against_step_time(ax, runs: Sequence[VariantRun], scale: float, unit: str) -> None:
    """One point per variant: its real peak against its last step's seconds (what a memory budget trades: lower
    and to the left is better), each named; hidden where no run has a step."""
    timed = [r for r in runs if r.step_seconds is not None]
    if not timed:
        ax.set_visible(False)
        return
    raises = _label_raises([(r.step_seconds, r.peak) for r in timed])
    for rank, r in enumerate(timed):
        ax.plot([r.step_seconds], [r.peak / scale], marker=PEAK_MARKERS[rank % len(PEAK_MARKERS)], linestyle="none",
                markersize=8, markeredgecolor="black", markeredgewidth=0.6)
        ax.annotate(r.variant, (r.step_seconds, r.peak / scale), textcoords="offset points",
                    xytext=(6, 4 + LABEL_STEP_POINTS * raises[rank]), fontsize=8)
    ax.set_xlabel("last step's compiled work (s)", fontsize=8)
    ax.set_ylabel(f"real peak ({unit})", fontsize=9)
    ax.set_title("memory against time")
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=0.0, top=max(r.peak for r in timed) / scale * 1.08)
    ax.set_xlim(left=0.0, right=max(r.step_seconds for r in timed) * 1.25)


def _step_peak(curve: Sequence[tuple[float, int]], start: float | None) -> int | None:
    """Highest live bytes from ``start`` to the end, above the live bytes just before ``start``."""
    if start is None:
        return None
    before = _live_before(curve, start)
    return max([before, *(live for t, live in curve if t >= start)]) - before


def dynamo_compile_seconds() -> float:
    """Seconds Dynamo and Inductor spent compiling in this process (forward frames and lazy backward compiles)."""
    from torch._dynamo.utils import compilation_time_metrics

    return sum(sum(compilation_time_metrics.get(key, ())) for key in ("_compile.compile_inner",
                                                                        "compile_fx.<locals>.bw_compiler"))


def _graphs_compiled() -> int:
    from torch._dynamo.utils import compilation_time_metrics

    return len(compilation_time_metrics.get("compile_fx_inner", ()))


def child_main(argv: Sequence[str] | None = None) -> int:
    """One variant's run, in its own process: ``argv`` is the spec file and the result file (JSON)."""
    import torch
    from torch._inductor import config

    from .measure import measure
    from .script import ScriptError, run_script

    spec_path, out_path = argv if argv is not None else sys.argv[1:3]
    spec = json.loads(Path(spec_path).read_text())
    variant, device = spec["variant"], spec["device"]
    os.environ["REORDER_VARIANT"] = variant
    config.force_disable_caches = True
    context = Variant.parse(variant).context()
    snapshot = None
    record_history = device == "cuda" and hasattr(torch.cuda.memory, "_record_memory_history")
    if record_history:
        torch.cuda.memory._record_memory_history(max_entries=100_000)
    errors: list[str] = []

    def script() -> None:
        try:
            run_script(spec["script"], spec["args"])
        except ScriptError as exc:
            errors.append(str(exc))
            if exc.__cause__ is not None:  # the run's log keeps the script's traceback, then the one line
                traceback.print_exception(exc.__cause__, file=sys.stderr)
            print(exc, file=sys.stderr)

    t0 = time.perf_counter()
    with context as session:
        m = measure(script, device)
    wall = time.perf_counter() - t0
    if record_history:
        snapshot = str(Path(spec["out"]) / f"{variant}.pickle")
        torch.cuda.memory._dump_snapshot(snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    last = last_step_start(m.compiled_calls)
    marks = tuple(t for c in m.compiled_calls for t in (c.start, c.end))
    fallbacks = tuple(f"{f.stage} in {f.graph}: {f.reason}" for f in session.fallbacks) if session else ()
    step_curve = tuple(thin([p for p in m.curve if p[0] >= last])) if last is not None else ()
    run = VariantRun(variant, errors[0] if errors else None, m.peak, _step_peak(m.curve, last),
                     dynamo_compile_seconds(),
                     wall, _graphs_compiled(), fallbacks, len(m.compiled_calls), marks, tuple(thin(m.curve)),
                     m.cuda, snapshot, last, step_curve, None if last is None else _live_before(m.curve, last),
                     None if last is None else m.compiled_calls[-1].end - last,
                     session.stage_seconds if session is not None else None)
    Path(out_path).write_text(json.dumps(asdict(run)))
    return 0


def _run_child(script: Path, args: Sequence[str], variant: str, device: str, out: Path,
               progress: Callable[[str], None]) -> VariantRun:
    """Run ``variant`` in a fresh process, reporting elapsed time; a crash of the child is the run's error. What
    the process prints is kept in ``out`` (:func:`log_path`)."""
    with tempfile.TemporaryDirectory() as tmp:
        spec, result = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec.write_text(json.dumps({"script": str(script), "args": list(args), "variant": variant, "device": device,
                                    "out": str(out)}))
        command = [sys.executable, "-c", "import sys; from reorder.compare import child_main; "
                   "sys.exit(child_main())", str(spec), str(result)]
        log = log_path(out, variant)
        t0 = time.perf_counter()
        with log.open("w") as sink:
            child = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, cwd=os.getcwd())
            while child.poll() is None:
                progress(f"{variant}: running, {time.perf_counter() - t0:.0f} s")
                time.sleep(1.0)
        wall = time.perf_counter() - t0
        if child.returncode != 0 or not result.exists():
            lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
            reason = lines[-1] if lines else f"exit status {child.returncode}"
            return VariantRun(variant, f"the run failed: {reason}", wall_seconds=wall, log=str(log))
        data = json.loads(result.read_text())
        data["log"] = str(log)
        data["fallbacks"] = tuple(data["fallbacks"])
        data["marks"] = tuple(data["marks"])
        data["curve"] = tuple(tuple(p) for p in data["curve"])
        data["step_curve"] = tuple(tuple(p) for p in data["step_curve"])
        return VariantRun(**data)


def last_step_start(calls: Sequence) -> float | None:
    """Where a run's last step began, from its compiled calls in time order (:class:`~reorder.measure.Region`\\ s,
    a backward's named ``... (backward)``): the first of the run of forward calls after the last backward that
    precedes the last forward call (a model compiled in several graphs, or a layer at a time, calls several
    forwards a step); with no backward at all (inference), the last forward call. None without a forward call."""
    forward = [not c.name.endswith("(backward)") for c in calls]
    if not any(forward):
        return None
    k = max(i for i, f in enumerate(forward) if f)
    if all(forward):
        return calls[k].start
    while k > 0 and forward[k - 1]:
        k -= 1
    return calls[k].start


def log_path(out: Path, variant: str) -> Path:
    """Where a run of ``variant`` keeps what it printed: ``out/VARIANT.log``, the variant's characters that are not
    letters, digits, dots or dashes written ``_`` (``budget:0.5`` -> ``budget_0.5.log``)."""
    return Path(out) / (re.sub(r"[^A-Za-z0-9.-]", "_", variant) + ".log")


def _sentence(comparison_runs: Sequence[VariantRun], reference: str | None) -> str:
    ref = next((r for r in comparison_runs if r.variant == reference), None)
    if ref is None:
        ran = [r for r in comparison_runs if r.ok]
        if not any(r.variant == "stock" for r in comparison_runs):
            best = min(ran, key=lambda r: r.peak, default=None)
            return ("stock was not among the variants, so nothing is measured against it"
                    + (f"; the lowest real peak is {best.variant}'s, {format_bytes(best.peak)}." if best else "."))
        return "stock did not run through, so no variant can be compared with it."
    others = [r for r in comparison_runs if r.ok and r.variant != reference]
    best = min(others, key=lambda r: r.peak, default=None)
    if best is not None and best.peak == ref.peak:
        tied = [r.variant for r in others if r.peak == ref.peak]
        rest = [r for r in others if r.peak != ref.peak]
        return (f"{and_list([reference, *tied])} tie: each measured a real peak of {format_bytes(ref.peak)}"
                + (f"; {and_list([r.variant for r in rest])} measured more." if rest else ".")
                + ("" if rest else " No variant lowers this script's real peak."))
    if best is None or best.peak > ref.peak:
        return (f"No variant beats {reference}: its real peak ({format_bytes(ref.peak)}) is the lowest"
                + (f"; {best.variant} comes closest at {format_bytes(best.peak)}." if best else "."))
    saved = ref.peak - best.peak
    lowest = [r.variant for r in others if r.peak == best.peak]
    named = (f"{best.variant} has the lowest real peak: {format_bytes(best.peak)}" if len(lowest) == 1 else
             f"{and_list(lowest)} tie for the lowest real peak: {format_bytes(best.peak)} each")
    return (f"{named} against {reference}'s {format_bytes(ref.peak)}, {format_bytes(saved)} "
            f"({saved / ref.peak:.1%}) less.")


def and_list(words: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def compare(script: str | Path, args: Sequence[str] = (), variants: Sequence[str] = tuple(VARIANTS),
            device: str = "cpu", out: str | Path = "compare-out", progress: TextIO | None = None) -> Comparison:
    """Run ``script`` once per variant (each in a fresh process) and compare the real memory of the runs.

    Raises :class:`~reorder.errors.ReorderError` for an unknown variant or
    device, a missing script, or a script that compiles nothing under any
    variant (there is then nothing to compare). A variant under which the
    script fails is a run with its error, not a failure of the comparison.
    """
    script = script_path(script)
    variants = [v.spec for v in parse_variants(variants)]
    if device not in ("cpu", "cuda"):
        raise ReorderError(f"--device {device!r}: expected cpu or cuda")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ReorderError("--device cuda: no CUDA device is available here")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ReorderError(f"--out {out}: a file is there; name a folder")
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    with Progress(progress) as status:
        for k, variant in enumerate(variants, 1):
            prefix = f"[{k}/{len(variants)}] "
            if not status.in_place:
                status.show(f"{prefix}{variant}: running")
            run = _run_child(script, args, variant, device, out,
                             lambda text, prefix=prefix: status.in_place and status.show(prefix + text))
            status.done(f"{prefix}{variant}: {'failed' if not run.ok else format_bytes(run.peak)} "
                        f"in {run.wall_seconds:.0f} s")
            runs.append(run)
    if not any(r.ok and r.graphs for r in runs):
        failed = [r for r in runs if not r.ok]
        if failed and len(failed) == len(runs):
            raise ReorderError(f"{script} failed under every variant; {failed[0].variant}: {failed[0].error}")
        raise ReorderError(f"{script} compiled nothing (does it call torch.compile and run the compiled function?)")
    reference = "stock" if any(r.variant == "stock" and r.ok for r in runs) else None
    comparison = Comparison(str(script), tuple(args), device, tuple(runs), reference, _sentence(runs, reference))
    plot = plot_comparison(comparison, out / "compare.png")
    comparison = Comparison(comparison.script, comparison.args, device, comparison.runs, reference,
                            comparison.sentence, str(plot) if plot else None)
    (out / "compare.json").write_text(json.dumps(comparison.to_json(), indent=1) + "\n")
    return comparison


def plot_comparison(comparison: Comparison, path: Path) -> Path | None:
    """Draw :func:`draw_comparison` to ``path`` (PNG); None without matplotlib or without a run to draw."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig = draw_comparison(comparison)
    if fig is None:
        return None
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


#: Markers at each line's peak, one per line in turn, so that lines that meet stay told apart.
PEAK_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def draw_comparison(comparison: Comparison):
    """Real memory against the reference run's progress, one line per variant (a matplotlib Figure; None
    without a run to draw).

    Two panels: the whole run, and its last step (from the start of each
    run's :func:`last_step_start`), each aligned on the reference run's
    compiled calls by :func:`align_times`. Variants whose curves are the same
    (:func:`ties`) are one line named for all of them; the other lines are
    drawn widest first, so that where two of them meet the narrower runs
    inside the wider and both stay visible, and each line marks its peak.
    """
    import matplotlib.pyplot as plt

    runs = [r for r in comparison.runs if r.ok and r.curve]
    if not runs:
        return None
    ref = comparison.run_of(comparison.reference) if comparison.reference else runs[0]
    top = max(r.peak for r in runs)
    scale, unit = axis_unit(top)
    fig, (whole, step, cost) = plt.subplots(1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [3, 2, 1.6]})
    ref_step = ref.last_step_start
    # the whole run on a scale of what it did: each compiled call, and each stretch between two (the first one
    # builds and compiles), is one unit, so a long compile or a pause takes no more room than a kernel call
    units = [float(k) for k in range(1, len(ref.marks) + 1)]
    for k in range(0, len(units), 2):
        whole.axvspan(units[k], units[k + 1] if k + 1 < len(units) else units[k], color="grey", alpha=0.08, lw=0)
    groups = ties(runs)
    for rank, group in enumerate(groups):
        r = group[0]
        names = ", ".join(g.variant for g in group) + (" (same curve)" if len(group) > 1 else "")
        width = 1.2 + 2.0 * (len(groups) - 1 - rank)  # widest first: a line drawn later runs inside it
        style = {"where": "post", "linewidth": width, "alpha": 0.9 if rank == len(groups) - 1 else 0.55,
                 "zorder": 2 + rank}
        times, values = drawn_to(
            align_times([t for t, _ in r.curve], r.marks, units, run_end(r.curve, r.marks), len(units) + 1.0),
            [b / scale for _, b in r.curve], len(units) + 1.0)
        line, = whole.step(times, values, label=f"{names}: peak {r.peak / scale:.2f} {unit}", **style)
        top_at = max(range(len(values)), key=values.__getitem__)
        marker = PEAK_MARKERS[rank % len(PEAK_MARKERS)]
        whole.plot([times[top_at]], [values[top_at]], marker=marker, color=line.get_color(), markersize=7,
                   markeredgecolor="black", markeredgewidth=0.6, zorder=10 + rank, linestyle="none")
        if ref_step is not None and r.step_curve:
            # the step on the reference step's clock: times and marks counted from each step's start
            start, ref_marks = r.last_step_start, [t - ref_step for t in ref.marks if t >= ref_step]
            ref_end = run_end(ref.step_curve, ref.marks) - ref_step
            xs, ys = drawn_to(
                align_times([t - start for t, _ in r.step_curve], [t - start for t in r.marks if t >= start],
                            ref_marks, run_end(r.step_curve, r.marks) - start, ref_end),
                [(b - r.step_base) / scale for _, b in r.step_curve], ref_end)
            step.step(xs, ys, color=line.get_color(), label=f"{names}: {r.step_peak / scale:.2f} {unit} above the "
                      f"step's start", **style)
            at = max(range(len(ys)), key=ys.__getitem__)
            step.plot([xs[at]], [ys[at]], marker=marker, color=line.get_color(), markersize=7,
                      markeredgecolor="black", markeredgewidth=0.6, zorder=10 + rank, linestyle="none")
    whole.set_xlabel("progress through the run: each compiled call (shaded) and each stretch between calls is\n"
                     "one unit, allocations evenly spaced inside it; seconds are in the table", fontsize=8)
    whole.set_ylabel(f"real allocated memory above the script's start ({unit})", fontsize=9)
    step.set_ylabel(f"above the step's start ({unit})", fontsize=9)
    whole.set_title("whole run")
    step.set_xlabel(f"seconds from the start of {ref.variant}'s last step, aligned the same way", fontsize=8)
    step.set_title("last step (its start: its first compiled forward call)")
    step_top = max((r.step_peak for r in runs if r.step_peak is not None), default=0)
    for ax, high in ((whole, top), (step, step_top)):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=min(0.0, ax.get_ylim()[0]), top=max(high, 1) / scale * 1.08)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1 if ax is step else 2, fontsize=8,
                  frameon=False)
    if ref_step is None:
        step.set_visible(False)
    _peak_against_step_time(cost, runs, scale, unit)
    fig.suptitle(f"{Path(comparison.script).name}: real memory per variant ({comparison.device})")
    fig.tight_layout()
    return fig
