"""Record the running torch release's figures for the bundled graphs: ``reorder/data/graphs/torch-<release>-figures.json``.

Run it under each supported release (``python -m benchmarks.release_figures``):
the release's own ``torch/_inductor/memory.py`` (its estimators and its three
orders) runs on the bundled graphs through :func:`~reorder.inductor.figures.torch_reference`,
and the file keeps what it gave. ``tests/test_releases.py`` then checks, under
whichever release runs the tests, that torch's functions still give that
release's file, and it compares the releases' files with one another, so that a
release that changes a rule shows as a named difference; the estimator's and
schedulers' tests check ours against the running release's file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from reorder import load_graph
from reorder.cli import BUNDLED_GRAPHS as GRAPHS
from reorder.inductor.figures import figures_record, torch_reference
from reorder.inductor.releases import running_release


def release_figures() -> dict:
    """Every bundled graph's figures from the running release's ``memory.py``, by graph name."""
    names = sorted(p.stem for p in GRAPHS.glob("*.json") if p.stem[-1].isdigit())
    return {name: figures_record(graph, torch_reference(graph).figures())
            for name in names for graph in [load_graph(GRAPHS / f"{name}.json")]}


def figures_path(release: str) -> Path:
    """Where the bundled figures of ``release`` (major.minor) lie."""
    return GRAPHS / f"torch-{release}-figures.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    path = figures_path(running_release())
    figures = release_figures()
    path.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"wrote {len(figures)} graphs' figures to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
