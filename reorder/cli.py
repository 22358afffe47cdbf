"""The ``reorder`` command line: ``python -m reorder SUBCOMMAND ...``.

Subcommands print a readable summary, or one JSON object with ``--json``
(whose keys are a contract other tools rely on; see each handler); given a
folder, the commands that read graph files or packing instances handle every
file in it (``--json``: a list of those objects). Bad input or a bad option
ends with one line ``reorder: error: ...`` on stderr and exit status 2.

Each subcommand is one :class:`Command` in :data:`COMMANDS`: its handler, its
help and the function that declares its arguments, written side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from .errors import PlanError, ReorderError
from .graph import Graph
from .io import load_graph
from .optima import OPTIMA_FILE, optimum_for
from .report import Progress, format_bytes, format_table
from .script import run_script, split_script_args
from .sizes import parse_point, range_text
from .timeline import estimate_peak_memory, estimate_peak_memory_allocfree, lower_bound

__all__ = ["COMMANDS", "Command", "build_parser", "graph_files", "main"]

log = logging.getLogger("reorder")


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one line of help, the function that declares its arguments (besides
    ``--json``, added when ``json`` is true) and the handler that runs it (exit status)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    json: bool = False


COMMANDS: dict[str, Command] = {}


def command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None], json: bool = False):
    """Register the decorated handler as subcommand ``name`` (see :class:`Command`)."""

    def register(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = Command(name, help, add_arguments, run, json)
        return run

    return register


# ---------------------------------------------------------------------------------------------------------------
# Inputs: a file or a folder of files.


def input_files(path: str | Path, pattern: str, what: str, skip: Callable[[Path], bool] = lambda f: False) -> list[Path]:
    """The files at ``path``: the file itself, or every file matching ``pattern`` in a folder (sorted) but
    those ``skip`` names; ``what`` names them in the error for a folder without any."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.glob(pattern) if f.is_file() and not skip(f))
        if not files:
            raise ReorderError(f"no {what} ({pattern}) in {p}")
        return files
    if not p.exists():
        raise ReorderError(f"no such file or folder: {p}")
    return [p]


def output_folder(path: Path, option: str) -> Path:
    """``path`` made as a folder for a command's output; ReorderError (one line) when it cannot be one."""
    if path.exists() and not path.is_dir():
        raise ReorderError(f"{option} {path}: a file is there; name a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReorderError(f"{option} {path}: cannot make the folder ({exc.strerror or exc})") from None
    return path


def graph_files(path: str | Path) -> list[Path]:
    """The JSON graph files at ``path``: the file itself, or every ``*.json`` in a folder but figure
    files and recorded optima."""
    return input_files(path, "*.json", "graph files", lambda f: "figures" in f.name or f.name == OPTIMA_FILE)


def instance_files(path: str | Path) -> list[Path]:
    """The packing instances at ``path``: the CSV file itself, or every ``*.csv`` in a folder."""
    return input_files(path, "*.csv", "packing instances")


class EachFile:
    """The files of one command's input, worked through one by one; a folder keeps going past a bad file.

    Iterating yields each file. For a single file an error stops the command
    as usual (one line, exit 2). For a folder, a file whose work raises
    :class:`ReorderError` inside ``with each.guard(path):`` is reported at once
    as one line on stderr (``reorder: error: FILE: ...``) and in ``failed``,
    the remaining files still run, and :meth:`finish` gives exit status 2 at the end.
    """

    def __init__(self, files: list[Path], source: str | Path, progress: Progress | None = None):
        self.files = files
        self.folder = Path(source).is_dir()
        self.failed: list[dict] = []
        self.progress = progress  # where the command shows its progress: an error line must end that line

    def __iter__(self):
        return iter(self.files)

    @contextlib.contextmanager
    def guard(self, path: Path, records: list[dict] | None = None):
        """Run the block for ``path``; in a folder, its error is reported and also appended to ``records``
        (``{"file": ..., "error": ...}``, in the place of the file's JSON object)."""
        try:
            yield
        except ReorderError as exc:
            if not self.folder:
                raise
            message = str(exc) if str(path) in str(exc) else f"{path}: {exc}"
            if self.progress is not None:
                self.progress.done(f"reorder: error: {message}")
            else:
                print(f"reorder: error: {message}", file=sys.stderr)
            self.failed.append({"file": str(path), "error": message})
            if records is not None:
                records.append(self.failed[-1])

    def finish(self) -> int:
        """The command's exit status, 2 if any file failed (said in one closing line), else 0."""
        if self.failed:
            print(f"reorder: error: {len(self.failed)} of {len(self.files)} files failed (listed above); the "
                  f"others were done", file=sys.stderr)
            return 2
        return 0


def print_json(records: list[dict], path: str | Path, indent: int | None = 1) -> None:
    """One JSON object for a file, a list of them (one per file) for a folder."""
    print(json.dumps(records if Path(path).is_dir() else records[0], indent=indent))


def add_file(p: argparse.ArgumentParser, what: str = "a graph file (our format or torch's simulator JSON)") -> None:
    p.add_argument("file", help=f"{what}, or a folder of them")


def add_methods(p: argparse.ArgumentParser, help: str = "reordering methods (as for optimize)") -> None:
    p.add_argument("--methods", help=help)


def add_at(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--at", metavar="S=V,...",
                   help=f"a point of a symbolic graph's size symbols, e.g. s0=512,s1=8 (symbols not named keep "
                        f"their hints): {what}")


def graph_at(graph: Graph, at: str | None) -> Graph:
    """``graph`` at the point ``--at`` names (itself without one); one-line errors name the symbol."""
    if at is None:
        return graph
    return graph.at(parse_point(at, graph.size_hints, graph.size_ranges))


def symbols_record(graph: Graph) -> dict:
    """A symbolic graph's symbols with their hints (the point its figures are at) and ranges (upper null:
    unbounded)."""
    return {s: {"hint": graph.size_hints[s], "range": list(graph.size_ranges[s])} for s in graph.symbols}


def point_text(point: dict) -> str:
    return ", ".join(f"{s}={v}" for s, v in point.items())


def method_list(text: str | None) -> list[str] | None:
    """``--methods`` as method specs (None: the default methods). The method registry checks every name and
    option; its one-line error comes out after the flag and its value."""
    from .schedulers import make_method, split_methods

    if text is None:
        return None
    try:
        specs = split_methods(text)
        for spec in specs:
            make_method(spec)
    except ReorderError as exc:
        raise ReorderError(f"--methods {text!r}: {exc}") from None
    return specs


# ---------------------------------------------------------------------------------------------------------------
# Planning options: declared once, turned into the planner's options in one place.


def add_packing_arguments(p: argparse.ArgumentParser) -> None:
    """The offset planner's options that ``plan`` and ``pack`` share."""
    from .planning import STRATEGY_NAMES
    from .planning.exact_packing import DEFAULT_NODES

    p.add_argument("--strategy", default="search", choices=STRATEGY_NAMES, help="offset strategy (default: search)")
    add_search_limits(p)
    p.add_argument("--exact", action="store_true",
                   help="minimise the slab with the exact packer (branch and bound) from the strategy's offsets")
    p.add_argument("--nodes", type=int, default=DEFAULT_NODES,
                   help=f"effort of the exact packer: placements tried (default {DEFAULT_NODES:,}); results depend "
                        f"on it, not on the machine")


def add_search_limits(p: argparse.ArgumentParser) -> None:
    """The offset search's effort and its wall-clock safety cap (every command that plans a slab)."""
    from .planning import DEFAULT_MAX_SECONDS, DEFAULT_RESTARTS

    p.add_argument("--restarts", type=int,
                   help=f"effort of the offset search: random restarts per order (default {DEFAULT_RESTARTS}); "
                        f"results depend on it, not on the machine")
    p.add_argument("--seconds", type=float,
                   help=f"wall-clock safety cap on the offset search or the exact packer (default "
                        f"{DEFAULT_MAX_SECONDS:g}); reported when it stops them")


def plan_options(args: argparse.Namespace):
    """The planner's :class:`~reorder.planning.PlanOptions` from a command's arguments: the one place where
    flags become planning options (``plan``, ``pack``, ``plot`` and ``demo`` all pass what this returns).
    Options a command does not have, or that were not given, keep the planner's defaults; ``--seconds`` is
    ``max_seconds``. PlanOptions checks every value (``PlanError`` names the option, the value and what is
    allowed)."""
    from .planning import PlanOptions

    given = vars(args)
    options = {field: given[key] for key, field in PLAN_FIELDS.items() if given.get(key) is not None}
    if "exclude_inputs" in given:
        options["include_inputs"] = not given["exclude_inputs"]
    try:
        return PlanOptions(**options)
    except PlanError as exc:
        field, _, why = str(exc).partition(": ")
        key = next((k for k, f in PLAN_FIELDS.items() if field.startswith(f + "=")), None)
        raise PlanError(f"--{key} {given[key]}: {why}" if key else str(exc)) from None


#: Each planning flag's argument name and the PlanOptions field it sets.
PLAN_FIELDS = {"strategy": "strategy", "alignment": "alignment", "restarts": "restarts", "exact": "exact",
               "nodes": "nodes", "seconds": "max_seconds"}


#: Printed when the wall-clock safety cap cut the slab search short.
CAPPED_NOTE = ("note: the --seconds cap stopped the slab search before its restarts were done; "
               "this plan depends on the machine's speed (raise --seconds, or lower --restarts)")


# ---------------------------------------------------------------------------------------------------------------
# estimate


def estimate_arguments(p: argparse.ArgumentParser) -> None:
    add_file(p)
    add_at(p, "estimate the graph there")


def estimate_record(graph: Graph) -> dict:
    """The ``estimate`` JSON object for one graph; a symbolic graph's also has its ``symbols`` (hints and ranges)
    and ``peaks_at``: the peak of its own order at each evaluation point (label -> point and peak)."""
    timeline = estimate_peak_memory(graph)
    record = {
        "graph": graph.name,
        "nodes": graph.num_nodes,
        "buffers": graph.num_buffers,
        "edges": graph.num_edges,
        "peak": timeline.peak,
        "peak_step": timeline.peak_step,
        "peak_allocfree": estimate_peak_memory_allocfree(graph).peak,
        "lower_bound": lower_bound(graph),
    }
    if graph.symbols:
        record["symbols"] = symbols_record(graph)
        record["peaks_at"] = {label: {"point": point, "peak": estimate_peak_memory(graph.at(point)).peak}
                              for label, point in graph.evaluation_points()}
    return record


@command("estimate", "peak memory of a graph's own order (file or folder of graphs)", estimate_arguments, json=True)
def cmd_estimate(args: argparse.Namespace) -> int:
    """Peak of the graph's own order; JSON keys: peak, peak_allocfree, lower_bound, nodes (a symbolic graph: also
    symbols and peaks_at, the peak at each evaluation point; --at: the figures at that point)."""
    each, records = EachFile(graph_files(args.file), args.file), []
    for f in each:
        with each.guard(f, records):
            records.append(estimate_record(graph_at(load_graph(f), args.at)))
    if args.json:
        print_json(records, args.file)
        return each.finish()
    records = [r for r in records if "error" not in r]
    rows = [
        (r["graph"], r["nodes"], r["buffers"], format_bytes(r["peak"]), format_bytes(r["peak_allocfree"]),
         format_bytes(r["lower_bound"]), f"{r['peak'] / r['lower_bound']:.3f}" if r["lower_bound"] else "-")
        for r in records
    ]
    print(format_table(["graph", "nodes", "buffers", "peak", "peak (alloc/free)", "lower bound", "peak/bound"], rows))
    for r in records:
        if "symbols" in r:
            print(f"\n{r['graph']}: at {point_text({s: v['hint'] for s, v in r['symbols'].items()})}; "
                  f"peak of its own order at each evaluation point:")
            print(format_table(["point", "symbols", "peak"], [(label, point_text(at["point"]), format_bytes(at["peak"]))
                                                              for label, at in r["peaks_at"].items()]))
    return each.finish()


# ---------------------------------------------------------------------------------------------------------------
# optimize


def optimize_arguments(p: argparse.ArgumentParser) -> None:
    add_file(p)
    add_methods(p, "comma-separated, e.g. lpmf,bfs,refine (options: 'exact:max_states=10000,refine:window=10'; "
                   "'optimal:effort=30:workers=1' solves with CP-SAT, needs the exact extra)")
    add_at(p, "optimize with that point as the hint")


def optimize_record(graph: Graph, methods: Sequence[str] | None) -> dict:
    """The ``optimize`` JSON object for one graph."""
    from .schedulers import reorder_for_peak_memory

    result = reorder_for_peak_memory(graph, methods)
    return {
        "graph": graph.name,
        "nodes": graph.num_nodes,
        "methods": result.peaks,
        "best": {"method": result.method, "peak": result.peak},
        "order": graph.names_of(result.order),
        "lower_bound": result.lower_bound,
        "gap": result.gap,
        "optimal": result.optimal,
        "seconds": result.seconds,
        "notes": result.notes,
        **({"symbols": symbols_record(graph), "points": result.points, "peaks_at": result.peaks_at,
            "inductor_order": result.reference} if result.points else {}),
    }


@command("optimize", "find the lowest-peak order", optimize_arguments, json=True)
def cmd_optimize(args: argparse.Namespace) -> int:
    """Best order over methods; JSON keys: methods, best, order, lower_bound, seconds (a symbolic graph: also
    symbols, points, peaks_at {point: {method: peak}} and inductor_order, the method that is Inductor's order)."""
    methods = method_list(args.methods)
    each, records = EachFile(graph_files(args.file), args.file), []
    for f in each:
        with each.guard(f, records):
            records.append(optimize_record(graph_at(load_graph(f), args.at), methods))
    if args.json:
        print_json(records, args.file)
        return each.finish()
    for r in (r for r in records if "error" not in r):
        base = r["methods"]["baseline"]
        print(f"{r['graph']}: {r['nodes']} nodes, lower bound {format_bytes(r['lower_bound'])}")
        rows = [
            (name, format_bytes(peak), f"{peak / base:.3f}" if base else "-", f"{r['seconds'][name] * 1000:.1f}",
             "*" if name == r["best"]["method"] else "", r["notes"].get(name, ""))
            for name, peak in r["methods"].items()
        ]
        print(format_table(["method", "peak", "vs baseline", "ms", "best", "note"], rows))
        status = "optimal" if r["optimal"] else f"{100 * r['gap']:.2f}% above the lower bound"
        print(f"best: {r['best']['method']} at {format_bytes(r['best']['peak'])} ({status})")
        if "points" in r:
            best, reference = r["best"]["method"], r["inductor_order"]
            print(f"across sizes: {best} is never above Inductor's order ({reference}) at any evaluation point")
            print(format_table(["point", "symbols", f"Inductor's order ({reference})", f"ours ({best})", "change"], [
                (label, point_text(point), format_bytes(r["peaks_at"][label][reference]),
                 format_bytes(r["peaks_at"][label][best]),
                 f"{r['peaks_at'][label][best] / max(r['peaks_at'][label][reference], 1) - 1:+.2%}")
                for label, point in r["points"].items()]))
        print()
    return each.finish()


# ---------------------------------------------------------------------------------------------------------------
# plan


def plan_arguments(p: argparse.ArgumentParser) -> None:
    add_file(p)
    add_packing_arguments(p)
    p.add_argument("--alignment", type=int, help="bytes every offset and size is a multiple of (default: the planner's)")
    p.add_argument("--order", default="all", choices=["all", "best", "baseline"],
                   help="plan every method's order and keep the smallest slab (all), only the lowest-peak order, "
                        "or the graph's own")
    add_methods(p, "reordering methods whose orders are candidates (as for optimize)")
    p.add_argument("--exclude-inputs", action="store_true", help="leave graph inputs to the caller")
    add_at(p, "a symbolic graph's plan (valid for every size) shown at that point")


def plan_graph(graph: Graph, args: argparse.Namespace, methods: Sequence[str] | None):
    """``(order method, validated plan)`` for ``graph`` as ``plan``'s options ask: a
    :class:`~reorder.planning.SlabPlan`, or for a symbolic graph a
    :class:`~reorder.planning.symbolic.StackedPlan` valid at every point of its symbols' ranges (the orders
    are those that hold across sizes: the ones never above Inductor's own at any evaluation point)."""
    from .planning import plan_memory, plan_orders
    from .schedulers import reorder_for_peak_memory

    if args.order == "baseline":
        return "baseline", plan_memory(graph, None, plan_options(args), symbolic=True)
    result = reorder_for_peak_memory(graph, methods)
    orders = result.orders if args.order == "all" else {result.method: result.order}
    if result.points:  # only orders that hold across sizes
        reference = result.reference
        orders = {name: order for name, order in orders.items()
                  if all(peaks[name] <= peaks[reference] for peaks in result.peaks_at.values())}
    return plan_orders(graph, orders, plan_options(args), symbolic=True)


@command("plan", "pack every buffer into one slab at static offsets (file or folder of graphs)", plan_arguments,
         json=True)
def cmd_plan(args: argparse.Namespace) -> int:
    """Slab plan; JSON keys: order, slab_bytes, lower_bound, strategy, buffers [{name, offset, size, start, end}];
    with --exact also status and nodes."""
    methods = method_list(args.methods)
    each, records = EachFile(graph_files(args.file), args.file), []
    for path in each:
        with each.guard(path, records):
            record = plan_one(path, args, methods)
            if record is not None:
                records.append(record)
    if args.json:
        print_json(records, args.file)
    return each.finish()


def plan_one(path: Path, args: argparse.Namespace, methods: Sequence[str] | None) -> dict | None:
    """``plan`` of one graph file: its JSON object with ``--json``, else its summary printed (None)."""
    from .planning.symbolic import StackedPlan

    graph = load_graph(path)
    chosen, plan = plan_graph(graph, args, methods)
    stacked = plan if isinstance(plan, StackedPlan) else None
    point = parse_point(args.at, graph.size_hints, graph.size_ranges) if args.at else None
    if stacked is not None and point is not None:
        plan = stacked.at(point)
        plan.validate()
    if args.json:
        data = stacked.to_json() if stacked is not None and point is None else plan.to_json()
        return {"graph": graph.name, "order_method": chosen, **data,
                **({"point": {s: point[s] for s in graph.symbols}} if point is not None else {})}
    if stacked is not None and point is None:
        print_stacked(graph, chosen, stacked, args.verbose)
        return None
    if point is not None:
        print(f"at {point_text({s: point[s] for s in graph.symbols})} (the plan holds for every size; "
              f"its offsets evaluated there):")
    print(f"{graph.name}: {len(plan.names)} storages, order from {chosen}, strategy {plan.strategy}, "
          f"alignment {plan.alignment}")
    print(f"slab {format_bytes(plan.slab_bytes)} ({plan.slab_bytes} B), lower bound "
          f"{format_bytes(plan.lower_bound)}, ratio {plan.ratio:.4f}; plan validated: no two live buffers share "
          f"a byte")
    if plan.status:
        print(f"exact packer: {plan.status} after {plan.nodes} nodes")
    if plan.capped:
        print(CAPPED_NOTE)
    if args.verbose:
        rows = [(plan.names[k], plan.offsets[k], plan.sizes[k], plan.symbolic_sizes[k] or "", plan.starts[k],
                 plan.ends[k]) for k in range(len(plan.names))]
        print(format_table(["buffer", "offset", "size", "symbolic", "start", "end"], rows))
    return None


def print_stacked(graph: Graph, chosen: str, plan, verbose: bool) -> None:
    """``plan``'s summary of a symbolic graph: its slab as an expression, its figures at each evaluation point,
    and with ``verbose`` every buffer's offset expression."""
    offsets, slab = plan.expressions
    symbols = ", ".join(f"{s} in {range_text(plan.ranges[s])} (hint {graph.size_hints[s]})" for s in plan.symbols)
    print(f"{graph.name}: {len(plan.names)} storages, order from {chosen}, stacked for every size of {symbols}, "
          f"alignment {plan.alignment}")
    print(f"slab = {slab}")
    print("plan validated for every value of the symbols (sizes non-negative over their ranges; every two "
          "buffers live together stacked one on the other), and at each point below:")
    rows = []
    for label, point in plan.points:
        at = plan.at(point)
        rows.append((label, point_text(point), format_bytes(at.slab_bytes), format_bytes(at.lower_bound),
                     f"{at.ratio:.4f}"))
    print(format_table(["point", "symbols", "slab", "lower bound", "slab/bound"], rows))
    print(f"(stacking from the offset search at {plan.stacking.chosen_at}: the smallest worst ratio of the "
          f"points' own packings)")
    if plan.capped:
        print(CAPPED_NOTE)
    if verbose:
        print(format_table(["buffer", "offset", "size", "start", "end", "on"], [
            (plan.names[k], str(offsets[k]), plan.symbolic_sizes[k] or plan.sizes[k], plan.starts[k], plan.ends[k],
             ", ".join(plan.names[j] for j in plan.stacking.below[k])) for k in range(len(plan.names))]))


# ---------------------------------------------------------------------------------------------------------------
# pack


def pack_arguments(p: argparse.ArgumentParser) -> None:
    add_file(p, "a packing instance (CSV id,lower,upper,size)")
    add_packing_arguments(p)
    p.add_argument("--capacity", type=byte_count, help="with --exact: decide whether a slab of this many bytes suffices")


def byte_count(text: str) -> int:
    """An argparse type: a whole number of bytes, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes >= 0, got {text!r}")
    return value


@command("pack", "pack an offset instance (CSV id,lower,upper,size; file or folder of them)", pack_arguments,
         json=True)
def cmd_pack(args: argparse.Namespace) -> int:
    """Pack a CSV instance; JSON keys: slab_bytes, lower_bound, offsets {id: offset};
    with --exact also status, capacity, nodes, clock_stopped, note (offsets and slab_bytes null without a packing)."""
    from .planning import load_instance

    if args.capacity is not None and not args.exact:
        raise ReorderError(f"--capacity needs --exact (got --capacity {args.capacity} without it)")
    each, records = EachFile(instance_files(args.file), args.file), []
    for f in each:
        with each.guard(f, records):
            records.append((pack_exactly if args.exact else pack_instance)(args, load_instance(f)))
    if args.json:
        print_json(records, args.file, indent=None)
    return each.finish()


def pack_instance(args: argparse.Namespace, inst) -> dict:
    """``pack`` by a strategy: the validated packing's JSON object (printed as a line unless ``--json``).
    The search's improvements are shown on stderr as they come."""
    from .planning import plan_intervals

    options = plan_options(args)
    t0 = time.perf_counter()
    with Progress() as progress:
        def show(restarts: int, slab: int) -> None:
            progress.show(f"{inst.name}: {time.perf_counter() - t0:5.1f}s  restart {restarts:5d}  best slab {slab}")

        plan = plan_intervals(inst.ids, inst.starts, inst.ends, inst.sizes, options,
                              progress=None if args.json else show)  # validated
    seconds = time.perf_counter() - t0
    slab, bound = plan.slab_bytes, plan.lower_bound
    if not args.json:
        print(f"{inst.name}: {len(inst.ids)} buffers, slab {slab} B, lower bound {bound} B, "
              f"ratio {slab / bound if bound else 1.0:.4f}, {seconds:.2f}s ({args.strategy}); valid")
        if plan.capped:
            print(CAPPED_NOTE)
    return {"instance": inst.name, "strategy": args.strategy, "buffers": len(inst.ids), "slab_bytes": slab,
            "lower_bound": bound, "ratio": slab / bound if bound else 1.0, "seconds": seconds,
            "capped": plan.capped, "offsets": dict(zip(inst.ids, plan.offsets, strict=True))}


def pack_exactly(args: argparse.Namespace, inst) -> dict:
    """``pack --exact``: the exact packer's verdict as a JSON object (printed as a line unless ``--json``);
    any packing is validated first."""
    from .planning import solve_packing
    from .planning.slab import SlabPlan

    found = solve_packing(inst.starts, inst.ends, inst.sizes, args.capacity, plan_options(args))
    if found.offsets is not None:
        SlabPlan.of_intervals(inst.ids, inst.starts, inst.ends, inst.sizes, found.offsets, "exact").validate()
    bound = found.lower_bound
    if not args.json:
        if found.slab is None:
            slab = "no packing"
        else:
            ratio = f"{found.slab / bound:.4f}" if bound else "1.0000" if found.slab == 0 else "-"
            slab = f"slab {found.slab} B (ratio {ratio}); valid"
        within = "" if found.capacity is None else f" within {found.capacity} B"
        stopped = ", stopped by the clock" if found.clock_stopped else ""
        print(f"{inst.name}: {len(inst.ids)} buffers, {found.status}{within}: {slab}, lower bound {bound} B, "
              f"{found.nodes} nodes, {found.seconds:.2f}s{stopped}" + (f" ({found.note})" if found.note else ""))
    return {"instance": inst.name, "strategy": "exact", "buffers": len(inst.ids), "status": found.status,
            "capacity": found.capacity, "slab_bytes": found.slab, "lower_bound": bound,
            "ratio": found.slab / bound if found.slab is not None and bound else None,
            "nodes": found.nodes, "seconds": found.seconds, "clock_stopped": found.clock_stopped, "note": found.note,
            "offsets": None if found.offsets is None else dict(zip(inst.ids, found.offsets, strict=True))}


# ---------------------------------------------------------------------------------------------------------------
# capture


def capture_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("script", help="the Python file to run (as 'python SCRIPT ARGS...' would)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.add_argument("--out", default="captured", help="folder for the graphs (default: ./captured)")


@command("capture", "run a script with the Inductor hook and save its graphs", capture_arguments)
def cmd_capture(args: argparse.Namespace) -> int:
    """Run a script with the Inductor hook on; write every compiled graph and Inductor's figures to --out."""
    from . import inductor

    found, rest = split_script_args(args.script_args, {"--out": True})  # --out is accepted after the script too
    out = Path(found.get("--out", args.out))
    # without a budget: the graphs as Inductor partitions and fuses them (the budget's guard refuses fusions)
    with inductor.use(capture_dir=out, memory_budget=None) as session:
        run_script(args.script, rest)
    for fallback in session.fallbacks:
        print(f"not captured: {fallback.graph}: {fallback.reason}", file=sys.stderr)
    captured = session.graphs
    if not captured:
        raise ReorderError(f"no graph reached Inductor's scheduler while {args.script} ran (does it call "
                           f"torch.compile and run the compiled function?); nothing was written to {out}")
    rows = [(r.graph, r.nodes, format_bytes(r.inductor["baseline"]), format_bytes(r.inductor_best),
             format_bytes(r.peak), r.method) for r in captured]
    print(format_table(["graph", "nodes", "Inductor baseline", "Inductor best", "ours", "method"], rows))
    print(f"wrote {len(captured)} graphs and inductor-figures.json to {out} (Inductor's caches were off while "
          f"capturing, so every compiled graph went through the pass)")
    return 0


# ---------------------------------------------------------------------------------------------------------------
# compare


#: ``reorder compare``'s own options (name -> takes a value), also accepted after the script (before a ``--``).
COMPARE_OPTIONS = {"--variants": True, "--device": True, "--out": True, "--json": False}


def compare_arguments(p: argparse.ArgumentParser) -> None:
    from .compare import VARIANTS

    p.add_argument("script", help="the Python file to run (as 'python SCRIPT ARGS...' would), once per variant")
    p.add_argument("script_args", nargs=argparse.REMAINDER,
                   help="arguments passed to the script (our options may follow them; after '--' all go to the script)")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated: {', '.join(VARIANTS)} (hook, slab and guard as use() compiles them: a "
                        f"training step with the memory budget of 1.0 use() gives it); budget:F "
                        f"(use(memory_budget=F), F a fraction of "
                        f"stock's estimated step peak in (0, 1]), budget:12MB (bytes: B, KB, MB, GB, KiB, MiB, GiB), "
                        f"budget:0.5x4 (each compiled region run 4 times a step: a compile per layer), "
                        f"budget:0.5+held=F/M/B (held_outside: bytes the step's eager code holds while the compiled "
                        f"forwards run / between / while the backwards run, the last by backward call as "
                        f"B0+B1+..., as session.measure_step names them; "
                        f"by region number, +held=0:F/M/B;1:N, quoted), "
                        f"budget:0.5+allocated (last: use(fusion_guard_allocated=True)), "
                        f"inductor-budget:F (stock with Inductor's own activation_memory_budget=F)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", default="compare-out",
                   help="folder for the plot, compare.json and what each run printed, VARIANT.log (default: "
                        "./compare-out)")


@command("compare", "run a script under every variant, each in a fresh process; real memory side by side",
         compare_arguments, json=True)
def cmd_compare(args: argparse.Namespace) -> int:
    """A table (variant, real peak, against stock, last step, compile s, run s, graphs, fallbacks), one sentence
    naming the lowest variant, a PNG; ``--json``: every figure (see :class:`reorder.compare.Comparison`)."""
    from .compare import compare

    found, script_args = split_script_args(args.script_args, COMPARE_OPTIONS)
    variants = str(found.get("--variants", args.variants))
    comparison = compare(args.script, script_args, [v for v in variants.split(",") if v],
                         str(found.get("--device", args.device)), found.get("--out", args.out))
    if args.json or found.get("--json"):
        print(json.dumps(comparison.to_json(), indent=1))
        return 0
    print(comparison.table())
    print(comparison.sentence)
    if comparison.plot:
        print(f"plot: {comparison.plot}")
    logs = [run.log for run in comparison.runs if run.log]
    if logs:
        print(f"what each run printed: {Path(logs[0]).parent}/VARIANT.log")
    return 0


# ---------------------------------------------------------------------------------------------------------------
# plot


def plot_arguments(p: argparse.ArgumentParser) -> None:
    add_file(p)
    p.add_argument("--out", required=True,
                   help="PNG file to write; for a folder of graphs, a folder (one NAME.png per graph)")
    add_methods(p)
    add_search_limits(p)


def plot_targets(files: list[Path], source: str, out: str) -> list[Path]:
    """Where each graph's PNG goes: ``out`` itself for one graph file, ``out/NAME.png`` for a folder of graphs
    (or when ``out`` is an existing folder)."""
    target = Path(out)
    if not Path(source).is_dir() and not target.is_dir():
        return [target]
    if target.suffix.lower() == ".png" or target.is_file():
        raise ReorderError(f"--out {out}: {source} is a folder of {len(files)} graph files, so --out must be a "
                           f"folder (one NAME.png per graph)")
    return [target / f"{f.stem}.png" for f in files]


@command("plot", "draw live bytes per step and the slab layout (needs matplotlib; file or folder of graphs)",
         plot_arguments)
def cmd_plot(args: argparse.Namespace) -> int:
    """Live bytes per step (baseline vs the chosen order) and the slab layout, in one PNG per graph."""
    from .planning import plan_orders
    from .plot import plot_graph
    from .schedulers import reorder_for_peak_memory

    methods = method_list(args.methods)
    each = EachFile(graph_files(args.file), args.file)
    for path, target in zip(each, plot_targets(each.files, args.file, args.out), strict=True):
        with each.guard(path):
            graph = load_graph(path)
            result = reorder_for_peak_memory(graph, methods)
            method, plan = plan_orders(graph, result.orders, plan_options(args))
            written = plot_graph(graph, list(range(graph.num_nodes)), result.order, result.method, plan, target,
                                 result.lower_bound)
            print(f"wrote {written}: peak {format_bytes(result.peaks['baseline'])} -> {format_bytes(result.peak)} "
                  f"({result.method}), slab {format_bytes(plan.slab_bytes)} (order of {method})")
            if plan.capped:
                print(CAPPED_NOTE)
    return each.finish()


# ---------------------------------------------------------------------------------------------------------------
# demo

BUNDLED_GRAPHS = Path(__file__).resolve().parent / "data" / "graphs"


def demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", nargs="?", default=str(BUNDLED_GRAPHS), help="default: the bundled Inductor graphs")
    p.add_argument("--out", default="demo-out", help="folder for the plots (default: ./demo-out)")
    add_search_limits(p)


@command("demo", "reorder and plan every graph in a folder, print a table, draw plots", demo_arguments)
def cmd_demo(args: argparse.Namespace) -> int:
    """End to end on a folder of graphs (default: the bundled ones): reorder, plan the slab, table, plots."""
    from .planning import plan_orders
    from .schedulers import reorder_for_peak_memory
    from .schedulers.across_sizes import INDUCTOR_ORDERS

    options = plan_options(args)
    out = Path(args.out)
    plots = True
    try:
        from .plot import plot_graph

        output_folder(out, "--out")
    except ReorderError as exc:
        plots = False
        print(f"(no plots: {exc})", file=sys.stderr)
    rows, records = [], []
    files = graph_files(args.folder)
    with Progress() as progress:
        each = EachFile(files, args.folder, progress)
        for k, path in enumerate(each, 1):
            with each.guard(path):
                graph = load_graph(path)
                optimum = optimum_for(path)
                result = reorder_for_peak_memory(graph)
                plan_method, plan = plan_orders(graph, result.orders, options)
                peaks = result.peaks
                inductor = min(peaks[m] for m in INDUCTOR_ORDERS)
                saved = inductor - result.peak
                if plots:
                    plot_graph(graph, list(range(graph.num_nodes)), result.order, result.method, plan,
                               out / f"{graph.name}.png", result.lower_bound)
                rows.append((
                    graph.name, graph.num_nodes, format_bytes(peaks["baseline"]), format_bytes(inductor),
                    format_bytes(result.peak),
                    f"{format_bytes(saved)} ({100 * saved / inductor:.2f}%)" if inductor else "-",
                    result.method, optimum_cell(result.peak, result.lower_bound, optimum),
                    format_bytes(plan.slab_bytes), f"{plan.ratio:.4f}" + (" capped" if plan.capped else ""),
                    f"{sum(result.seconds.values()) * 1000:.0f}",
                ))
                records.append({"graph": graph.name, "nodes": graph.num_nodes, "inductor_best": inductor,
                                "ours": result.peak, "method": result.method, "lower_bound": result.lower_bound,
                                "optimal": result.optimal, "slab_bytes": plan.slab_bytes,
                                "slab_lower_bound": plan.lower_bound, "peaks": peaks,
                                "optimum": asdict(optimum) if optimum else None})
            progress.show(f"[{k}/{len(each.files)}] {path.stem}")
    print(format_table(["graph", "nodes", "baseline", "Inductor best", "ours", "saved", "method", "optimum", "slab",
                        "slab/bound", "ms"], rows))
    print(DEMO_LEGEND)
    print(f"\n{lower_count(records)}")
    if plots:
        (out / "demo.json").write_text(json.dumps(records, indent=1) + "\n")
        print(f"plots (live bytes per step, slab layout) and demo.json in {out}/")
    return each.finish()


#: What the demo table's columns are.
DEMO_LEGEND = """\
baseline: the peak of the graph's own order, as Inductor's scheduler made it. Inductor best: the lowest peak of
  that order and Inductor's three heuristics (LPMF, BFS, DFS), what torch's reorder_for_peak_memory keeps.
ours: the lowest peak our methods found (method: which one); saved: Inductor best minus ours.
optimum: the lowest peak any order can have, "(proven)" where a search proved it (recorded beside the graphs
  by benchmarks.optimum, or our own lower bound met); otherwise the proven bound and how far ours may be above.
slab/bound: the planned slab against the order's largest live bytes (1.0000: no byte wasted); ms: our methods."""


def optimum_cell(peak: int, lower_bound: int, optimum) -> str:
    """The demo's "optimum" cell for an order of ``peak``: the proven optimum (a recorded one, or ``peak`` itself
    where it meets a proven lower bound), with how far ours is above it; else the best proven bound."""
    if optimum is not None and optimum.proven:
        above = "" if peak <= optimum.peak else f"; ours +{100 * (peak - optimum.peak) / optimum.peak:.2f}%"
        return f"{format_bytes(optimum.peak)} (proven){above}"
    bound = max(lower_bound, optimum.bound if optimum else 0)
    if peak <= bound:
        return f"{format_bytes(peak)} (proven)"
    return f">= {format_bytes(bound)} (ours at most {100 * (peak - bound) / bound:.1f}% above)"


#: A graph counts as lowered only where the saving shows at the table's precision (0.01%).
SHOWN_SAVING = 1e-4


def lower_count(records: list[dict]) -> str:
    """The demo's closing sentence: never above Inductor's best, and on how many graphs the saving shows."""
    never_worse = all(r["ours"] <= r["inductor_best"] for r in records)
    shown = sum(r["inductor_best"] - r["ours"] >= SHOWN_SAVING * r["inductor_best"] > 0 for r in records)
    less = sum(0 < r["inductor_best"] - r["ours"] < SHOWN_SAVING * r["inductor_best"] for r in records)
    tail = f" ({less} more by less than that)" if less else ""
    return (f"ours <= Inductor's best on every graph: {never_worse}; lower by at least 0.01% on {shown} of "
            f"{len(records)}{tail}.")


# ---------------------------------------------------------------------------------------------------------------
# The parser: one loop over the registry.


class Parser(argparse.ArgumentParser):
    """argparse with its complaints (unknown option, bad value, missing argument) raised as one
    :class:`ReorderError` line, like every other error of the command line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ReorderError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="reorder", description="Estimate, lower and plan the peak memory of Inductor graphs.")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log each method's peak (INFO on the 'reorder' logger); with plan, list every buffer")
    sub = parser.add_subparsers(dest="command", required=True)
    for cmd in COMMANDS.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=plain_text(cmd.run.__doc__ or cmd.help))
        cmd.add_arguments(p)
        if cmd.json:
            p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        for action in p._actions:
            if action.help and action.default not in (None, False, argparse.SUPPRESS) and "default" not in action.help:
                action.help += f" (default: {action.default})"
    return parser


def plain_text(doc: str) -> str:
    """A docstring as ``--help`` shows it: reStructuredText's markup taken off (````--json```` is --json,
    ``:class:`~reorder.compare.Comparison``` is Comparison, a full path stays a full path)."""
    doc = re.sub(r":[a-z]+:`~[\w.]*?(\w+)`", r"\1", doc)
    doc = re.sub(r":[a-z]+:`([^`]+)`", r"\1", doc)
    return " ".join(doc.replace("``", "").split())


#: The commands that run a script: everything after their first ``--`` is the script's.
SCRIPT_COMMANDS = ("capture", "compare")


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed; for a command that runs a script, everything after the first ``--`` goes to the script.

    argparse alone drops a ``--`` that directly follows the script's name, and
    the options after it would then be read as ours (``reorder compare s.py
    -- --out x`` must hand ``--out x`` to the script). So the words after the
    first ``--`` are set apart before parsing and handed back after a ``--``
    in ``script_args``, where :func:`~reorder.script.split_script_args` gives
    them to the script untouched. A script named only after the ``--``
    (``reorder compare --variants stock -- s.py ARGS``) is the script.
    """
    parser = build_parser()
    words = list(argv)
    command = next((k for k, w in enumerate(words) if not w.startswith("-")), None)
    if command is None or words[command] not in SCRIPT_COMMANDS or "--" not in words[command + 1:]:
        return parser.parse_args(words)
    cut = words.index("--", command + 1)
    ours, theirs = words[:cut], words[cut + 1:]
    try:
        args = parser.parse_args(ours)
    except ReorderError:
        if not theirs:
            raise
        args = parser.parse_args(ours + theirs[:1])  # the script was named after the '--'
        theirs = theirs[1:]
    args.script_args = [*args.script_args, "--", *theirs]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_arguments(sys.argv[1:] if argv is None else argv)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
        if any(key in vars(args) for key in ("strategy", "restarts", "seconds", "alignment")):
            plan_options(args)  # every planning option checked before any work starts
        return COMMANDS[args.command].run(args)
    except ReorderError as exc:
        print(f"reorder: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
