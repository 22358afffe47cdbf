"""Pictures: live bytes over the steps of two orders, and the slab layout of a plan.

matplotlib is an optional dependency (``pip install 'reorder[plot]'``);
functions here raise :class:`~reorder.errors.ReorderError` with that hint
when it is missing. Figures are written with the Agg backend (no display).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from .errors import ReorderError
from .graph import Graph
from .planning import SlabPlan
from .report import axis_unit
from .timeline import estimate_peak_memory

__all__ = ["plot_graph", "plot_live_bytes", "plot_slab", "pyplot"]



def pyplot():
    """matplotlib's pyplot on the file-only Agg backend; a one-line ReorderError when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ReorderError("plots need matplotlib: pip install 'reorder[plot]'") from None
    return plt


def plot_live_bytes(graph: Graph, orders: Mapping[str, Sequence[int]], ax, lower_bound: int | None = None) -> None:
    """One step line per order (label -> node ids), peaks marked, the lower bound dashed.

    The legend sits outside the axes, to their right, so it hides no step of
    any line (orders often differ only in their first steps, where a legend
    inside the axes would sit).
    """
    timelines = {label: estimate_peak_memory(graph, order) for label, order in orders.items()}
    scale, unit = axis_unit(max(t.peak for t in timelines.values()))
    for label, t in timelines.items():
        steps = range(len(t.live))
        line, = ax.step(steps, [x / scale for x in t.live], where="post", label=f"{label}: peak {t.peak / scale:.2f} {unit}")
        ax.plot([t.peak_step], [t.peak / scale], "o", color=line.get_color())
    if lower_bound is not None:
        ax.axhline(lower_bound / scale, color="grey", linestyle="--", linewidth=1, label=f"lower bound {lower_bound / scale:.2f} {unit}")
    ax.set_xlabel("step")
    ax.set_ylabel(f"live {unit}")
    ax.set_title(f"{graph.name}: live bytes per step")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8)
    ax.grid(alpha=0.3)


def plot_slab_layout(plan: SlabPlan, ax, title: str = "") -> None:
    """Each storage a rectangle: its steps across, its bytes up; the lower bound dashed."""
    from matplotlib.patches import Rectangle

    scale, unit = axis_unit(plan.slab_bytes)
    cmap = pyplot().get_cmap("tab20")
    for k in range(len(plan.names)):
        ax.add_patch(Rectangle((plan.starts[k], plan.offsets[k] / scale), plan.ends[k] - plan.starts[k],
                               plan.sizes[k] / scale, facecolor=cmap(k % 20), edgecolor="black", linewidth=0.3))
    ax.axhline(plan.tensor_bound / scale, color="red", linestyle="--", linewidth=1)
    ax.axhline(plan.tensor_bytes / scale, color="black", linewidth=1)
    ax.set_xlim(0, max(plan.ends, default=1))
    ax.set_ylim(0, max(plan.slab_bytes, 1) / scale * 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel(f"offset ({unit})")
    ax.set_title(title or f"slab layout ({plan.strategy}, {len(plan.names)} buffers): slab {plan.tensor_bytes / scale:.2f} {unit} "
                 f"(black), live-bytes bound {plan.tensor_bound / scale:.2f} {unit} (red), ratio {plan.ratio:.4f}")


def plot_graph(graph: Graph, baseline: Sequence[int], chosen: Sequence[int], chosen_label: str, plan: SlabPlan,
               out: str | Path, lower_bound: int | None = None) -> Path:
    """Both pictures for one graph, one above the other, written to ``out`` (PNG)."""
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 8), constrained_layout=True)
    plot_live_bytes(graph, {"baseline": baseline, chosen_label: chosen}, top, lower_bound)
    plot_slab_layout(plan, bottom)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_slab(plan: SlabPlan, out: str | Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4), constrained_layout=True)
    plot_slab_layout(plan, ax)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)
