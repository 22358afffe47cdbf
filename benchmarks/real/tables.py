"""What every section of the real-model report shares: where the results and the documents live, Markdown
tables (:class:`Column`, :func:`markdown`), and the largest per-graph estimate of a step.

The report (:mod:`benchmarks.real.report`) assembles its sections from here and
from the section modules (:mod:`benchmarks.real.budget_report`,
:mod:`benchmarks.real.dynamic_report`); the runners (:mod:`benchmarks.real.run`,
:mod:`benchmarks.real.budget`, :mod:`benchmarks.real.dynamic`) import the report,
never the other way round.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from reorder.inductor.session import OrderRecord, Record

__all__ = ["DOC", "GAP", "GRAPHS", "IMAGES", "REPORT_RELEASE", "RESULTS", "ROOT", "Column", "cached_rows", "count_of",
           "details_with_plots", "largest_estimate", "megabytes", "left", "markdown", "records_of", "release_folder",
           "write_between_markers"]

RESULTS = Path(__file__).resolve().parent / "results"
GRAPHS = Path(__file__).resolve().parent / "graphs" / "bench"
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "real-models.md"
IMAGES = ROOT / "docs" / "img" / "real"

#: The torch release (major.minor) the report's main tables were measured under.
REPORT_RELEASE = "2.13"


def cached_rows(folder: Path) -> list[dict]:
    """The benchmark rows cached in ``folder`` (every JSON file there that holds a row, with its ``variants``), by
    file name; none where the folder does not exist. The summaries written beside them are not rows."""
    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    return [row for row in rows if isinstance(row, dict) and "variants" in row]


def release_folder(size: str) -> str:
    """The name of the results (and captured graphs) folder of ``size`` under the running torch release:
    ``size`` itself under :data:`REPORT_RELEASE`, ``<size>-torch<release>`` under another, so that a run
    under another release sits beside the report's rows instead of replacing them."""
    from reorder.inductor.releases import running_release

    release = running_release()
    return size if release == REPORT_RELEASE else f"{size}-torch{release}"


def megabytes(n: int | None) -> str:
    """Bytes as the report's tables show them: decimal megabytes to two places; empty for None."""
    return "" if n is None else f"{n / 1e6:.2f}"


def count_of(pair: tuple[int, int]) -> str:
    """``(done, of)`` as a table cell: ``done/of``, in bold where some were not done."""
    done, of = pair
    return f"{done}/{of}" if done == of else f"**{done}/{of}**"


def details_with_plots(rows: Sequence, detail: Callable[[Any], list[str]], plot: Callable[[Any, Path], bool],
                       image: Callable[[Any], str], caption: Callable[[Any], str], images: Path = IMAGES) -> list[str]:
    """Each row's detail lines, then its plot (``<images>/<image(row)>``, docs/img/real by default, linked as the
    report's ``img/real/``) where one was drawn."""
    lines = []
    for row in rows:
        lines += detail(row)
        path = images / image(row)
        if plot(row, path):
            lines += [f"![{caption(row)}](img/real/{path.name})", ""]
    return lines


def write_between_markers(name: str, lines: list[str], doc: Path = ROOT / "docs" / "measured.md") -> None:
    """Replace what stands between ``<!-- name -->`` and ``<!-- /name -->`` in ``doc`` with ``lines`` (the measured
    tables docs/measured.md shows)."""
    text = doc.read_text()
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    doc.write_text(head + start + "\n" + "\n".join(lines) + "\n" + end + tail)

#: Relative difference between the real peak and the largest graph estimate that asks for a decomposition.
GAP = 0.05


def records_of(records: Sequence[Record], kind: type, stage: str | None = None) -> list:
    """The records of one kind (and stage) among a variant's records."""
    return [r for r in records if isinstance(r, kind) and (stage is None or r.stage == stage)]


def largest_estimate(records: Sequence[Record], key: str) -> int | None:
    """The largest per-graph estimate of a step: ``key`` is ``"ours"``, ``"inductor_best"`` or ``"inductor_baseline"``.

    Inductor's figures come from graphs compiled with ``compare`` (records without them are skipped).
    """
    values = []
    for g in records_of(records, OrderRecord):
        if key == "ours":
            values.append(g.peak)
        elif g.inductor is not None:
            values.append(min(g.inductor.values()) if key == "inductor_best" else g.inductor["baseline"])
    return max(values) if values else None


@dataclass(frozen=True)
class Column:
    """One column of a report table: its header, the cell's value from a :class:`Summary`, how to write it,
    and its Markdown alignment (``"---:"`` right, ``"---"`` left)."""

    header: str
    cell: Callable[[Any], Any]
    format: Callable[[Any], str] = str
    align: str = "---:"


def markdown(columns: Sequence[Column], rows: Sequence[Any]) -> list[str]:
    """A Markdown table: the header line, the alignment line, one line per row."""
    lines = ["| " + " | ".join(c.header for c in columns) + " |", "|" + "|".join(c.align for c in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(c.format(c.cell(row)) for c in columns) + " |")
    return lines


def left(header: str, cell: Callable[[Any], Any], format: Callable[[Any], str] = str) -> Column:
    """A left-aligned column (names, labels)."""
    return Column(header, cell, format, "---")
