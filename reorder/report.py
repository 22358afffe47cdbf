"""Plain-text tables and byte counts for the command line and reports."""

from __future__ import annotations

from typing import Sequence

__all__ = ["format_bytes", "format_table", "markdown_table"]


def format_bytes(n: int | float) -> str:
    """``1536`` -> ``'1.50 KiB'``; exact byte counts stay in JSON output."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} GiB"


def _cells(rows: Sequence[Sequence[object]]) -> list[list[str]]:
    return [[str(c) for c in row] for row in rows]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A fixed-width table: text columns left-aligned, the rest right-aligned."""
    body = _cells(rows)
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(headers)]
    numeric = [all(_looks_numeric(r[i]) for r in body) and body for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)).rstrip()

    out = [line(list(headers)), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in body]
    return "\n".join(out)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    body = _cells(rows)
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(out)


def _looks_numeric(cell: str) -> bool:
    head = cell.split(" ")[0].rstrip("%x").replace(".", "", 1).replace(",", "").lstrip("-+")
    return head.isdigit()
