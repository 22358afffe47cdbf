"""A dependency-free progress bar on stderr for anything that takes more than a few seconds."""

from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")


def progress(items: Sequence[T] | Iterable[T], label: str, width: int = 28) -> Iterator[T]:
    """Yield ``items``, drawing ``label [#####....] k/n  elapsed  current item`` as it goes."""
    items = list(items)
    total = len(items)
    start = time.perf_counter()
    for k, item in enumerate(items):
        _draw(label, k, total, start, item, width)
        yield item
    _draw(label, total, total, start, "done", width)
    sys.stderr.write("\n")


def _draw(label: str, k: int, total: int, start: float, item: object, width: int) -> None:
    filled = width * k // max(total, 1)
    text = f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {k}/{total} {time.perf_counter() - start:5.0f}s  {item}"
    sys.stderr.write(text[:120].ljust(120))
    sys.stderr.flush()
