"""What every ordering method shares: its result record and the registry.

A method is a frozen dataclass whose fields are exactly its options (so the
CLI's ``--methods`` and Python callers configure it the same way) with a
``run(graph, start)`` that returns a :class:`MethodOutcome`. ``start`` is the
best order found so far; methods that improve an order begin there, the
others ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Protocol, Sequence

from ..graph import Graph

__all__ = ["MethodOutcome", "Method", "METHODS", "register"]


@dataclass(frozen=True)
class MethodOutcome:
    """An order and what the method can say about it.

    ``optimal`` is True only when the method proved no order has a lower
    peak; ``bound``, when not None, is a peak the method proved no order can
    beat (the solver's bound); ``note`` says why a search stopped early, if
    it did.
    """

    order: list[int]
    optimal: bool = False
    note: str = ""
    bound: int | None = None


class Method(Protocol):
    name: ClassVar[str]

    def run(self, graph: Graph, start: Sequence[int]) -> MethodOutcome: ...


METHODS: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator adding a method to :data:`METHODS` under its ``name``."""
    METHODS[cls.name] = cls
    return cls


def simple(fn: Callable[[Graph], list[int]]) -> Callable[..., MethodOutcome]:
    """Adapt an ``order = fn(graph)`` function into a ``run(self, graph, start)`` method."""

    def run(self, graph: Graph, start: Sequence[int]) -> MethodOutcome:
        return MethodOutcome(fn(graph, **self.__dict__))

    return run
