"""Offset-packing instances as CSV (``id,lower,upper,size``, lifetimes half-open ``[lower, upper)``).

The format of MiniMalloc's benchmarks and of the idealloc project's traces.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from ..errors import ReorderError

__all__ = ["Instance", "load_instance"]


@dataclass(frozen=True)
class Instance:
    name: str
    ids: list[str]
    starts: list[int]
    ends: list[int]
    sizes: list[int]


def load_instance(path: str | Path) -> Instance:
    """Read and check a CSV instance; errors name the file, line and field."""
    path = Path(path)
    try:
        rows = list(csv.reader(path.read_text().splitlines()))
    except FileNotFoundError:
        raise ReorderError(f"no such instance file: {path}") from None
    if not rows or [c.strip() for c in rows[0]] != ["id", "lower", "upper", "size"]:
        raise ReorderError(f"{path}: the first line must be the header 'id,lower,upper,size'")
    inst = Instance(path.name, [], [], [], [])
    seen = set()
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != 4:
            raise ReorderError(f"{path}:{line}: expected 4 fields, got {len(row)}")
        ident = row[0].strip()
        try:
            lower, upper, size = (int(x) for x in row[1:])
        except ValueError:
            raise ReorderError(f"{path}:{line}: lower, upper and size must be integers: {row}") from None
        if ident in seen:
            raise ReorderError(f"{path}:{line}: duplicate id {ident!r}")
        if size < 0 or upper <= lower:
            raise ReorderError(f"{path}:{line}: buffer {ident!r} needs size >= 0 and lower < upper, got {row[1:]}")
        seen.add(ident)
        inst.ids.append(ident)
        inst.starts.append(lower)
        inst.ends.append(upper)
        inst.sizes.append(size)
    return inst
