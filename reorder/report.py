"""Plain-text tables, byte counts and progress lines for the command line and reports."""

from __future__ import annotations

import sys
from typing import Sequence, TextIO

__all__ = ["Progress", "axis_unit", "byte_unit", "format_bytes", "format_table", "markdown_table"]


#: The units bytes are shown in, decimal as in the benchmark tables and the README (1 MB = 10**6 B).
UNITS = ((10**9, "GB"), (10**6, "MB"), (10**3, "kB"))


def byte_unit(n: int | float) -> tuple[int, str]:
    """The scale and name of the unit :func:`format_bytes` shows ``n`` in (an axis scaled for a peak of ``n``)."""
    return next(((scale, name) for scale, name in UNITS if abs(n) >= scale), (1, "B"))


def axis_unit(peak: int | float) -> tuple[int, str]:
    """The scale and label of a plot's byte axis that reaches ``peak`` (plain counts read "bytes")."""
    scale, name = byte_unit(peak)
    return scale, "bytes" if scale == 1 else name


def format_bytes(n: int | float) -> str:
    """``1536`` -> ``'1.54 kB'``, ``12_345_678`` -> ``'12.35 MB'``: decimal units, as the README's tables; exact
    byte counts stay in JSON output."""
    scale, unit = byte_unit(n)
    return f"{int(n)} B" if scale == 1 else f"{n / scale:.2f} {unit}"


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


class Progress:
    """Status lines on ``stream`` (default: stderr) while a long command works.

    On a terminal each line replaces the one before (a carriage return), and
    leaving the ``with`` block ends the last one with a newline; anywhere else
    (a pipe, a file, a log) each status is a line of its own, so that fifteen
    entries read as fifteen lines, not one.
    """

    def __init__(self, stream: TextIO | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.in_place = self.stream.isatty()
        self.width = 0

    def show(self, text: str) -> None:
        if self.in_place:
            print("\r" + text.ljust(self.width), end="", file=self.stream, flush=True)
            self.width = max(self.width, len(text))
        else:
            print(text, file=self.stream, flush=True)

    def done(self, text: str) -> None:
        """A status that stays: on a terminal it replaces the current line and ends it; elsewhere a line."""
        if self.in_place:
            print("\r" + text.ljust(self.width), file=self.stream, flush=True)
            self.width = 0
        else:
            print(text, file=self.stream, flush=True)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        if self.in_place and self.width:
            print(file=self.stream, flush=True)
