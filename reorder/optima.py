"""Recorded minimum peaks: each graph file's optimum (or a certified bound), stored next to it.

Proving an optimum takes the ``optimal`` method seconds to minutes per graph,
so ``python -m benchmarks.optimum`` solves once and writes ``optima.json``
into the graph's folder; the demo, the benchmark report and the real-model
report read it here and show an "optimum" column without running the solver.
A record holds the best peak found, the bound no order can beat (equal to it
when proven), and the effort and seconds it took.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping

from .report import format_bytes

__all__ = ["OPTIMA_FILE", "Optimum", "load_optima", "optimum_for", "save_optima"]

#: The file name, in each graph folder, that holds the folder's optima (keyed by graph file stem).
OPTIMA_FILE = "optima.json"


@dataclass(frozen=True)
class Optimum:
    """``peak``: the lowest peak found; ``bound``: proven that no order has a lower peak;
    ``proven``: ``peak == bound``; ``default_peak``: the default pass's peak on the same graph;
    ``effort``/``workers``: the solver's options; ``seconds``: its wall time when recorded."""

    nodes: int
    peak: int
    bound: int
    proven: bool
    default_peak: int
    effort: float
    workers: int
    seconds: float

    @property
    def gap(self) -> float:
        """How far the best peak found may be above the optimum, as a fraction of the bound."""
        return (self.peak - self.bound) / self.bound if self.bound else 0.0

    def column(self, size: Callable[[int], str] = format_bytes) -> str:
        """The "optimum" table cell, bytes written by ``size``: the proven optimum, or the certified range."""
        if self.proven:
            return f"{size(self.peak)} (proven)"
        return f">= {size(self.bound)} ({100 * self.gap:.1f}% gap)"


def load_optima(folder: str | Path) -> dict[str, Optimum]:
    """The optima recorded in ``folder`` (empty if none were), keyed by graph file stem."""
    path = Path(folder) / OPTIMA_FILE
    if not path.is_file():
        return {}
    return {name: Optimum(**record) for name, record in json.loads(path.read_text()).items()}


def optimum_for(graph_file: str | Path) -> Optimum | None:
    """The recorded optimum of one graph file, or None."""
    graph_file = Path(graph_file)
    return load_optima(graph_file.parent).get(graph_file.stem)


def save_optima(folder: str | Path, optima: Mapping[str, Optimum]) -> Path:
    """Write ``optima`` (sorted by name) to ``folder``'s :data:`OPTIMA_FILE`."""
    path = Path(folder) / OPTIMA_FILE
    path.write_text(json.dumps({k: asdict(optima[k]) for k in sorted(optima)}, indent=1) + "\n")
    return path
