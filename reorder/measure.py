"""What a call really allocates, from the allocator's own accounting.

An estimate is a promise; this module checks it. :func:`measure` runs a
callable once under ``torch.profiler.profile(profile_memory=True)`` and reads
the allocator's events the profiler records: one per allocation (positive
bytes) and per free (negative), with its device, address and time. The
running sum over the memory the call itself allocated is its live bytes, so
the peak, the curve and the bytes left at the end come straight from the
allocator, to the byte (CPU: the bytes asked for; CUDA: the caching
allocator's rounded blocks).

Frees of memory allocated before the call (a step's ``zero_grad`` freeing
the last step's gradients) are left out. On CPU the profiler reports such a
free only when the memory was allocated under an earlier profile, and with
the size it had then, even if the address was since freed and reused
unprofiled; counting them would make the same call measure differently after
different earlier work. A measurement is therefore the most bytes the call's
own allocations held at once, whatever ran before it.

The same profile's operator ranges split the call into phases when it is a
training step: ``forward`` until the autograd engine starts, ``backward``
while it runs, ``optimizer`` for ``Optimizer.step``/``zero_grad``; the live
bytes where backward begins are what the forward held for it (saved
activations, outputs). Each call of a compiled graph (Inductor's ``## Call
CompiledFxGraph`` ranges) is a region of its own, so memory inside compiled
code can be told from work around it.

On CUDA the call is also bracketed by ``torch.cuda.max_memory_allocated`` and
``max_memory_reserved`` (their peaks above the start), which cross-check the
events and add what the caching allocator reserved beyond them.

Kineto, the profiler's C++ backend, writes ``USDT: ... profiler_start`` and
``profiler_stop`` to file descriptor 2 whenever a trace starts or stops, at
any log level Python can still set (``KINETO_LOG_LEVEL`` is read once, at the
first profile of the process). :func:`measure` drops those two lines and
nothing else: see :func:`without_kineto_markers`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from .errors import ReorderError

__all__ = ["MemoryMeasurement", "Region", "measure", "without_kineto_markers"]


@dataclass(frozen=True)
class Region:
    """A stretch of the call: its name, start and end (seconds from the call's start), and live bytes
    (above the call's start) when it began, at its highest, and when it ended. A compiled graph's call also has
    its ``role``: ``"forward"`` (a forward autograd will run the backward of), ``"backward"``, or None (an
    inference call, a forward recomputed during the backward; and every phase)."""

    name: str
    start: float
    end: float
    live_at_start: int
    peak: int
    live_at_end: int
    role: str | None = None


@dataclass(frozen=True)
class MemoryMeasurement:
    """The allocations of one call on one device.

    ``peak``: the most bytes the call's own allocations held at once (frees
    of memory allocated before it are not counted: see the module's doc);
    ``end``: what the call left allocated (its results, gradients...);
    ``curve``: ``(seconds, live bytes)`` after every allocation and every
    free of the call's own memory;
    ``phases``: ``forward``/``backward``/``optimizer`` regions of a training
    step (empty when no autograd ran); ``held_at_backward``: live bytes where
    backward began; ``compiled_calls``: one region per call of a compiled
    graph; ``cuda``: ``max_memory_allocated``/``max_memory_reserved`` above
    the start, on CUDA; ``peak_composition``: the peak's bytes by where they
    were allocated (:func:`peak_composition`); ``outside_by_phase``: the most
    bytes eager code and the compiled forwards' kept outputs held while the
    compiled forwards ran, between them and the backwards, and while the
    compiled backwards ran, and where several backward calls ran, beside each
    of them (``"backward calls"``, with the outputs of those before it that
    the step holds) (:func:`outside_held`: what a memory budget's
    ``held_outside`` counts for the step's eager code); ``outside_by_region``:
    the same for each compiled region, in the order the step first ran them,
    counting later regions beside eager code (:func:`outside_by_region`: a
    budget's ``held_outside`` per region).
    """

    device: str
    peak: int
    end: int
    allocations: int
    frees: int
    curve: tuple[tuple[float, int], ...]
    phases: dict[str, Region] = field(default_factory=dict)
    held_at_backward: int | None = None
    compiled_calls: tuple[Region, ...] = ()
    cuda: dict[str, int] | None = None
    peak_composition: dict[str, int] = field(default_factory=dict)
    outside_by_phase: dict = field(default_factory=dict)
    outside_by_region: tuple[dict, ...] = ()

    @property
    def outside_compiled_bytes(self) -> int:
        """What of the peak eager code allocated outside the compiled graphs (a loss computed after a compiled
        model, its gradient): the ``outside compiled*`` entries of :attr:`peak_composition`."""
        return sum(nbytes for origin, nbytes in self.peak_composition.items() if origin.startswith("outside compiled"))

    @property
    def forward_calls(self) -> tuple[Region, ...]:
        """The compiled forward calls autograd runs a backward of (a budgeted region's calls): not inference
        calls (a teacher model under ``no_grad``, a graph of no parameters) nor forwards recomputed in the
        backward."""
        return tuple(c for c in self.compiled_calls if c.role == "forward")

    def held_beside_regions(self) -> list[tuple]:
        """:attr:`outside_by_region` as a memory budget's ``held_outside`` takes it: ``(while the forwards run,
        between, while the backwards run)`` bytes per region, by region number."""
        return [phase_bytes(held) for held in self.outside_by_region]

    def to_json(self) -> dict:
        return {
            "device": self.device, "peak": self.peak, "end": self.end, "allocations": self.allocations,
            "frees": self.frees, "held_at_backward": self.held_at_backward, "cuda": self.cuda,
            "phases": {k: vars(r) for k, r in self.phases.items()},
            "compiled_calls": [vars(r) for r in self.compiled_calls],
            "peak_composition": self.peak_composition, "outside_by_phase": self.outside_by_phase,
            "outside_by_region": list(self.outside_by_region),
        }


def _live_between(times: list[int], live: list[int], start: int, end: int) -> tuple[int, int, int]:
    """Live bytes when ``[start, end]`` begins, its highest inside, and when it ends."""
    import bisect

    lo = bisect.bisect_left(times, start)
    hi = bisect.bisect_right(times, end)
    before = live[lo - 1] if lo else 0
    inside = live[lo:hi]
    return before, max([before, *inside]), inside[-1] if inside else before


def _ranges(events: list, keep: Callable[[str], bool]) -> list[tuple[int, int, str]]:
    return sorted((e.start_ns(), e.start_ns() + e.duration_ns(), e.name()) for e in events
                  if e.name() != "[memory]" and keep(e.name()))


def _walk(events: list):
    stack = list(reversed(events))
    while stack:
        event = stack.pop()
        yield event
        stack.extend(reversed(event.children))


def _outermost_operator_end(event) -> int | None:
    """End time of the outermost ``aten::`` operator the allocation ``event`` happened in (None outside any)."""
    end, parent = None, event.parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            end = parent.end_time_ns
        parent = parent.parent
    return end


def _paired_allocations(tree: list, device: torch.device) -> tuple[list, dict[int, int], list[int]]:
    """The allocator's events of ``device`` in time order, each allocation's free time by the allocation's index
    (paired by address), and the indices of frees of memory allocated before the measurement began."""
    want_cuda = device.type == "cuda"
    allocation = torch._C._profiler._EventType.Allocation
    events = sorted((e for e in _walk(tree) if e.tag == allocation and e.extra_fields.alloc_size
                     and (e.extra_fields.device.type == "cuda") == want_cuda), key=lambda e: e.start_time_ns)
    open_at: dict[int, int] = {}        # address -> index of its live allocation
    freed_at: dict[int, int] = {}       # index of an allocation -> time of its free
    unmatched: list[int] = []
    for k, event in enumerate(events):
        ptr, size = event.extra_fields.ptr, event.extra_fields.alloc_size
        if size > 0:
            open_at[ptr] = k
        elif ptr in open_at:
            freed_at[open_at.pop(ptr)] = event.start_time_ns
        else:
            unmatched.append(k)
    return events, freed_at, unmatched


#: The phases of a training step in which :func:`outside_held` counts what eager code holds.
OUTSIDE_PHASES = ("forward", "between", "backward")


def phase_bytes(held: dict) -> tuple:
    """:func:`outside_held`'s bytes by phase as a memory budget's ``held_outside`` takes them: ``(while the
    forwards run, between, while the backwards run)``, the last by backward call (a tuple, in the order they
    ran) where several ran."""
    forward, between, backward = (held.get(phase, 0) for phase in OUTSIDE_PHASES)
    return forward, between, tuple(held["backward calls"]) if "backward calls" in held else backward


def outside_held(paired: tuple[list, dict[int, int], list[int]], calls: list[tuple[int, int, bool]],
                 own: list[tuple[int, int, bool]] | None = None) -> dict[str, int]:
    """The most bytes held beside the compiled calls ``calls`` (``(start, end, in_backward)`` ns; ``paired``:
    :func:`_paired_allocations`) that their estimates do not count, in each phase of :data:`OUTSIDE_PHASES`:
    while a compiled forward runs, from the end of the last compiled forward to the start of the first compiled
    backward (every call's saved values held), and while a compiled backward runs, less what that call frees (its
    inputs: the region's estimate counts them). Empty where no compiled forward and backward both ran.

    Two kinds of bytes count: what was allocated outside ``own`` (calls as ``calls`` gives them; default:
    ``calls``): eager code, and given ``own`` (one region's calls and earlier regions'), later regions; and,
    after the last forward, the *outputs* of ``own``'s forwards that later code keeps: allocated by a forward
    call, freed by none of ``own`` (not a saved value, which a backward frees). The estimate holds its saved
    values from the forward to the backward and nothing else of the forward, but a model's logits live until
    an eager loss is done with them, and a step that keeps the model's output in a variable holds it through
    the backward. While the forwards run, a call's output that a later call of the same region reads is that
    call's input, which its estimate counts: only eager code counts there.

    Where several backward calls ran (a region run many times a step: a compile per layer, FSDP), ``"backward
    calls"`` holds, for each in the order they ran, what the ``"backward"`` phase counts beside it and what
    the backward calls before it allocated and the step still holds (not freed by this call): the gradients of
    a per-layer compile's parameters stay, where FSDP reduce-scatters and frees them. A budget's estimate then
    counts each call beside its own, not the phase's most beside the call that holds the most saved values."""
    forwards = [(s, e) for s, e, backward in calls if not backward]
    backwards = [(s, e) for s, e, backward in calls if backward]
    if not forwards or not backwards:
        return {}
    last_forward, first_backward = max(e for _, e in forwards), min(s for s, _ in backwards)
    events, freed_at, _ = paired
    made = [(e.start_time_ns, freed_at.get(k), e.extra_fields.alloc_size) for k, e in enumerate(events)
            if e.extra_fields.alloc_size > 0]
    within = lambda t, spans: any(s <= t <= f for s, f in spans)  # noqa: E731
    own = calls if own is None else own
    spans, own_forwards = [(s, e) for s, e, _ in own], [(s, e) for s, e, backward in own if not backward]
    eager = [a for a in made if not within(a[0], spans)]
    kept = [a for a in made if within(a[0], own_forwards) and (a[1] is None or not within(a[1], spans))]

    def live(allocations: list[tuple[int, int | None, int]], at: int, end: int) -> int:
        """Those of ``allocations`` live at ``at``, but those the compiled call running until ``end`` frees: its
        inputs (the tangents a backward is handed), which the region's own estimate counts."""
        return sum(size for t, freed, size in allocations if t <= at and (freed is None or freed > end))

    between = [last_forward, *(t for t, _, _ in eager if last_forward <= t <= first_backward)]
    beside_backwards = [live(eager + kept, s, e) for s, e in backwards]
    held = {"forward": max(live(eager, s, e) for s, e in forwards), "between": _most_live(eager + kept, between),
            "backward": max(beside_backwards)}
    if len(backwards) > 1:
        by_call, earlier = [], []  # earlier: what the backward calls before this one allocated
        for beside, (s, e) in zip(beside_backwards, backwards):
            by_call.append(beside + live(earlier, s, e))
            earlier += [a for a in made if s <= a[0] <= e]
        held["backward calls"] = tuple(by_call)
    return held


def _most_live(allocations: list[tuple[int, int | None, int]], times: list[int]) -> int:
    """The most bytes of ``allocations`` (``(time, freed at or None, bytes)``) live at any of ``times``: one
    sweep over their allocations and frees in time order."""
    changes = sorted([(t, size) for t, _, size in allocations]
                     + [(freed, -size) for _, freed, size in allocations if freed is not None])
    most = live = k = 0
    for at in sorted(times):
        while k < len(changes) and changes[k][0] <= at:
            live += changes[k][1]
            k += 1
        most = max(most, live)
    return most


def outside_by_region(paired: tuple[list, dict[int, int], list[int]],
                      calls: list[tuple[int, int, str, str | None]]) -> tuple[dict[str, int], ...]:
    """For each compiled region of a step (its forward calls, in the order the step first calls them, with the
    backward calls autograd pairs with them: the last forward call not yet paired, as autograd runs a chain of
    regions' backwards in reverse), what :func:`outside_held` counts beside it when its own calls and earlier
    regions' are not outside: eager code, later regions (a loss compiled apart runs between the model's
    forward and backward), and the outputs of it and of earlier regions that the step keeps. ``calls``:
    :func:`_region_calls`, in time order; a call of no role (an inference call) belongs to no region, and what
    it allocates is outside every region."""
    names: list[str] = []
    members: list[list[int]] = []
    unpaired: list[int] = []
    for k, (_, _, name, role) in enumerate(calls):
        if role == "forward":
            if name not in names:
                names.append(name)
                members.append([])
            region = names.index(name)
            members[region].append(k)
            unpaired.append(region)
        elif role == "backward" and unpaired:
            members[unpaired.pop()].append(k)
    as_held = [(start, end, role == "backward") for start, end, _, role in calls]  # as outside_held takes them
    return tuple(outside_held(paired, [as_held[k] for k in ks],
                              [as_held[k] for earlier in members[:region + 1] for k in earlier])
                 for region, ks in enumerate(members))


def _region_calls(events: list, call_ranges: list[tuple[int, int, str]], in_backward: list[bool]
                  ) -> list[tuple[int, int, str, str | None]]:
    """Each compiled call as ``(start, end, frame, role)`` for :func:`outside_by_region`: ``frame``, the Dynamo
    frame that made it (``Torch-Compiled Region: <frame>/<compile>``; a recompile is the same region; graphs'
    own names are all ``None`` with Inductor's caches off); ``role``, ``"backward"`` inside autograd's
    ``CompiledFunctionBackward``, ``"forward"`` inside ``CompiledFunction`` (a forward autograd will run the
    backward of), None else (an inference call, a forward recomputed during the backward). Where those ranges
    are missing, the role follows the time: inside the autograd engine is backward."""
    functions = _ranges(events, lambda n: n in ("CompiledFunction", "CompiledFunctionBackward"))
    frames = _ranges(events, lambda n: n.startswith("Torch-Compiled Region"))
    calls = []
    for (start, end, name), during in zip(call_ranges, in_backward):
        frame = max(((s, n) for s, e, n in frames if s <= start and end <= e), default=(0, name))[1]
        frame = frame.removeprefix("Torch-Compiled Region: ").partition("/")[0]
        if not functions:
            role = "backward" if during else "forward"
        else:
            inside = [n for s, e, n in functions if s <= start and end <= e]
            role = "backward" if "CompiledFunctionBackward" in inside else "forward" if inside else None
        calls.append((start, end, frame, role))
    return calls


def peak_composition(paired: tuple[list, dict[int, int], list[int]], peak_time: int, calls: list[tuple[int, int]],
                     backward_begin: int | None) -> dict[str, int]:
    """The bytes live at ``peak_time``, by where they were allocated; the values sum to the peak.

    Each allocation is paired with its free by address (``paired``:
    :func:`_paired_allocations`). Origins: ``compiled forward``/``compiled
    backward`` (inside a compiled graph's call, ``calls`` as ``(start, end)``
    ns; ``compiled`` when no backward ran), ``outside compiled`` (eager
    code, the autograd engine, the optimizer), each with `` (operator
    temporaries)`` for allocations freed before the outermost ``aten::``
    operator that made them returned (an extern kernel's scratch).
    """
    events, freed_at, _ = paired
    out: dict[str, int] = {}
    for k, event in enumerate(events):
        t, size = event.start_time_ns, event.extra_fields.alloc_size
        if t > peak_time:
            break
        if size < 0 or freed_at.get(k, peak_time + 1) <= peak_time:
            continue
        inside = any(s <= t <= e for s, e in calls)
        origin = "compiled" if inside else "outside compiled"
        if backward_begin is not None:
            origin += " forward" if t < backward_begin else " backward"
        operator_end = _outermost_operator_end(event)
        if operator_end is not None and k in freed_at and freed_at[k] <= operator_end:
            origin += " (operator temporaries)"
        out[origin] = out.get(origin, 0) + size
    return out


KINETO_MARKER = b"USDT:"


def _flush_stderr() -> None:
    if sys.stderr is not None:  # None under pythonw
        sys.stderr.flush()


@contextlib.contextmanager
def without_kineto_markers() -> Iterator[None]:
    """Drop the lines Kineto writes to file descriptor 2 that start with ``USDT:``; keep every other line.

    While the block runs, descriptor 2 points at a temporary file; on exit it
    is restored and the file's other lines are written to it, in order.
    Meant for the profiler's start and stop only: anything written to
    stderr inside the block appears when the block ends, not before.
    """
    _flush_stderr()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                _flush_stderr()
                os.dup2(saved, 2)
                sink.seek(0)
                kept = [line for line in sink.read().splitlines(keepends=True) if not line.startswith(KINETO_MARKER)]
                if kept:
                    os.write(2, b"".join(kept))
    finally:
        os.close(saved)


@contextlib.contextmanager
def _profiling(activities: list) -> Iterator[Any]:
    """``torch.profiler.profile`` with memory events, started and stopped without Kineto's marker lines."""
    from torch.profiler import profile

    prof = profile(activities=activities, profile_memory=True)
    with without_kineto_markers():
        prof.start()
    try:
        yield prof
    finally:
        with without_kineto_markers():
            prof.__exit__(None, None, None)


def measure(fn: Callable[[], Any], device: torch.device | str | None = None) -> MemoryMeasurement:
    """Run ``fn()`` once and measure what it allocates on ``device`` (default: CUDA if available, else CPU).

    The result of ``fn`` is dropped after the measurement, so the bytes it
    holds count in ``end``. Raises :class:`ReorderError` if a profiler is
    already running (they cannot nest).
    """
    from torch.profiler import ProfilerActivity

    if torch._C._autograd._profiler_enabled():
        raise ReorderError("measure: a torch profiler is already running; memory events cannot be nested")
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    cuda = None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    with _profiling(activities) as prof:
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    del result
    if device.type == "cuda":
        cuda = {"max_memory_allocated": torch.cuda.max_memory_allocated(device) - allocated,
                "max_memory_reserved": torch.cuda.max_memory_reserved(device) - reserved}
    events = list(prof.profiler.kineto_results.events())
    paired = _paired_allocations(prof.profiler.kineto_results.experimental_event_tree(), device)
    before_the_call = set(paired[2])
    memory = [(e.start_time_ns, e.extra_fields.alloc_size) for k, e in enumerate(paired[0]) if k not in before_the_call]
    origin = min((e.start_ns() for e in events), default=0)
    times, live, curve = [], [], []
    current = peak = allocations = frees = 0
    peak_time = origin
    for t, nbytes in memory:
        current += nbytes
        if current > peak:
            peak, peak_time = current, t
        allocations += nbytes > 0
        frees += nbytes < 0
        times.append(t)
        live.append(current)
        curve.append(((t - origin) / 1e9, current))

    def region(name: str, start: int, end: int, role: str | None = None) -> Region:
        before, high, after = _live_between(times, live, start, end)
        return Region(name, (start - origin) / 1e9, (end - origin) / 1e9, before, high, after, role)

    phases: dict[str, Region] = {}
    held = None
    backward = _ranges(events, lambda n: n.startswith("autograd::engine::evaluate_function"))
    if backward:
        begin, finish = backward[0][0], max(e for _, e, _ in backward)
        phases["forward"] = region("forward", origin, begin)
        phases["backward"] = region("backward", begin, finish)
        held = phases["backward"].live_at_start
    optimizer = _ranges(events, lambda n: n.startswith("Optimizer."))
    if optimizer:
        phases["optimizer"] = region("optimizer", optimizer[0][0], max(e for _, e, _ in optimizer))
    call_ranges = _ranges(events, lambda n: n.startswith("## Call CompiledFxGraph"))
    in_backward = [any(b <= s <= f for b, f, _ in backward) for s, _, _ in call_ranges]
    roles = _region_calls(events, call_ranges, in_backward)
    calls = tuple(region(name.strip("# ").removeprefix("Call ") + (" (backward)" if during else ""), s, e, role)
                  for (s, e, name), during, (_, _, _, role) in zip(call_ranges, in_backward, roles, strict=True))
    composition = peak_composition(paired, peak_time, [(s, e) for s, e, _ in call_ranges],
                                   backward[0][0] if backward else None)
    outside = outside_held(paired, [(s, e, during) for (s, e, _), during in zip(call_ranges, in_backward)])
    by_region = outside_by_region(paired, roles)
    if len(by_region) != 1:  # backward calls of several regions are not one region's calls
        outside.pop("backward calls", None)
    return MemoryMeasurement(str(device), peak, current, allocations, frees, tuple(curve), phases, held, calls, cuda,
                             composition, outside, by_region)
