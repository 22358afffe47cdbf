"""Writing the graphs a compile goes through: torch's simulator JSON plus Inductor's figures.

The files (``<graph>.json`` and ``inductor-figures.json``, in the layout of
the bundled ``torch-<release>-figures.json``) are what ``reorder optimize`` and
the benchmark suite read offline. A graph whose sizes have size symbols
(compiled with dynamic shapes) is written in the library's own format
instead, which keeps the expressions, the hints and the symbols' ranges
(torch's format has no place for them); Inductor's figures are at the hints.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..graph import Graph
from ..io import graph_to_dict, graph_to_simulator
from .figures import figures_record

__all__ = ["write_capture"]


def write_capture(folder: Path, name: str, graph: Graph, figures: dict | None) -> Path:
    """Save ``graph`` as ``folder/<name>.json`` and add Inductor's ``figures`` for it to the folder's index."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = name.replace("/", "_")
    path = folder / f"{stem}.json"
    data = graph_to_dict(graph) if graph.symbols else graph_to_simulator(graph)
    path.write_text(json.dumps(data, indent=1) + "\n")
    if figures is None:
        return path
    index = folder / "inductor-figures.json"
    data = json.loads(index.read_text()) if index.exists() else {}
    data[stem] = figures_record(graph, figures)
    index.write_text(json.dumps(data, indent=1) + "\n")
    return path
