"""Orders that hold across sizes: a symbolic graph's order is chosen at the hint, checked at every point.

Inductor sizes a dynamic-shape graph's buffers with one value per symbol
(its hint), and so do our methods: the order they find is the lowest at the
hint. At another size, another order can have the lower peak, and the one
chosen can even be above Inductor's own. So for a graph with size symbols,
every candidate order (each method's) is estimated at every evaluation point
of the symbols' ranges (:meth:`~reorder.graph.Graph.evaluation_points`: the
hint, the lower bounds, points well above the hint), and the order kept is
the lowest at the hint among those **never above Inductor's own order at
any evaluated point**. Inductor's own order is a candidate that passes, so
there always is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..graph import Graph
from ..timeline import estimate_peak_memory

__all__ = ["INDUCTOR_METHODS", "INDUCTOR_ORDERS", "SizeChoice", "choose_across_sizes", "inductor_reference",
           "peaks_at_points"]

#: The methods of Inductor's own reorder pass (``torch/_inductor/memory.py``), which it picks the lowest of.
INDUCTOR_METHODS: tuple[str, ...] = ("lpmf", "bfs", "dfs")

#: The orders stock Inductor chooses among (its own listing and its three methods, or our ports of them): the
#: first lowest at the hint is the order a stock compile runs.
INDUCTOR_ORDERS: tuple[str, ...] = ("baseline", *INDUCTOR_METHODS)


def inductor_reference(peaks: Mapping[str, int]) -> str:
    """The method whose order stock Inductor runs: the first lowest of :data:`INDUCTOR_ORDERS` among ``peaks``."""
    return min((m for m in INDUCTOR_ORDERS if m in peaks), key=lambda m: peaks[m])


def peaks_at_points(graph: Graph, orders: Mapping[str, Sequence[int]],
                    points: Sequence[tuple[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    """``{point label: {order name: peak}}``: every order's estimated peak at every point (one graph per point)."""
    table = {}
    for label, point in points:
        at = graph.at(point)
        table[label] = {name: estimate_peak_memory(at, order).peak for name, order in orders.items()}
    return table


@dataclass(frozen=True)
class SizeChoice:
    """The order kept across sizes: ``method`` names it among the candidates, ``peak`` is its peak at the hint;
    ``points`` the evaluation points (label -> symbol values), ``peaks_at`` every candidate's peak there,
    ``reference`` the candidate that is Inductor's own order, ``note`` (empty unless a candidate lower at the
    hint was passed over, and why)."""

    method: str
    peak: int
    points: dict[str, dict[str, int]]
    peaks_at: dict[str, dict[str, int]]
    reference: str
    note: str = ""


def choose_across_sizes(graph: Graph, orders: Mapping[str, Sequence[int]], preference: Sequence[str],
                        reference: str) -> SizeChoice:
    """The lowest order at the hint among ``orders`` never above ``orders[reference]`` at any evaluation point.

    ``preference``: the candidates' names in the order that breaks ties at the
    hint (the first one that is lowest wins, as the best-of driver keeps the
    earlier method). See the module docstring.
    """
    points = graph.evaluation_points()
    table = peaks_at_points(graph, orders, points)
    hint = points[0][0]

    def above_reference(name: str) -> str | None:
        """The first point where ``name`` peaks above the reference, or None."""
        return next((label for label, _ in points if table[label][name] > table[label][reference]), None)

    ranked = sorted(preference, key=lambda name: table[hint][name])  # stable: ties keep the preference order
    chosen = next(name for name in ranked if above_reference(name) is None)
    note = ""
    if table[hint][chosen] > table[hint][ranked[0]]:
        lowest = ranked[0]
        where = above_reference(lowest)
        note = (f"kept {chosen} ({table[hint][chosen]:,} B at the hint) over {lowest} ({table[hint][lowest]:,} B): "
                f"{lowest} peaks at {table[where][lowest]:,} B at {where} "
                f"({', '.join(f'{s}={v}' for s, v in dict(points)[where].items())}), above Inductor's order "
                f"({table[where][reference]:,} B)")
    return SizeChoice(chosen, table[hint][chosen], {label: dict(point) for label, point in points}, table,
                      reference, note)
