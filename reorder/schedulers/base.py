"""What every ordering method shares: its result record, its options and the registry.

A method is a frozen dataclass whose fields are exactly its options (so the
CLI's ``--methods exact:max_states=1000`` and Python's ``Exact(max_states=1000)``
configure it the same way), each declared with :func:`option` and checked on
construction (:class:`Method`), with a ``run(graph, start)`` that returns a
:class:`MethodOutcome`. ``start`` is the best order found so far; methods that
improve an order begin there, the others ignore it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

from ..errors import ReorderError
from ..graph import Graph

__all__ = ["Allowed", "MethodOutcome", "Method", "METHODS", "option", "register"]


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


@dataclass(frozen=True)
class Allowed:
    """The values an option allows: of ``kind`` (``int``, ``float``: any number, or ``str``), at least
    ``low`` (above it when ``above``), or one of ``choices``."""

    kind: type
    low: float | None = None
    above: bool = False
    choices: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        kind = {int: "int", float: "number", str: "text"}[self.kind]
        return kind if self.low is None else f"{kind} {'>' if self.above else '>='} {self.low:g}"

    def admits(self, value: Any) -> bool:
        kinds = (int, float) if self.kind is float else (self.kind,)
        if isinstance(value, bool) or not isinstance(value, kinds):
            return False
        if self.choices:
            return value in self.choices
        return self.low is None or (value > self.low if self.above else value >= self.low)

    def parse(self, text: str) -> Any:
        """The value of command-line ``text``; the text itself when it is not of ``kind`` (then not admitted)."""
        try:
            return self.kind(text)
        except ValueError:
            return text


def option(default: Any, kind: type, low: float | None = None, *, above: bool = False,
           choices: tuple[str, ...] = ()) -> Any:
    """A method option: a dataclass field with its default and what it allows (see :class:`Allowed`)."""
    return dataclasses.field(default=default, metadata={"allowed": Allowed(kind, low, above, choices)})


class Method:
    """Base of every ordering method: a frozen dataclass whose fields are its options, with a
    ``run(graph, start) -> MethodOutcome``. Each option is checked on construction, and a value it
    does not allow raises :class:`~reorder.errors.ReorderError` naming the method, the option, the
    value and what is allowed."""

    name: ClassVar[str]

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            allowed = field.metadata["allowed"]
            if not allowed.admits(value):
                raise ReorderError(f"method {self.name!r}: option {field.name}={value!r}: expected {allowed}")

    @classmethod
    def allowed(cls) -> dict[str, Allowed]:
        """Each option's name and what it allows, in declaration order."""
        return {field.name: field.metadata["allowed"] for field in dataclasses.fields(cls)}

    @classmethod
    def describe_options(cls) -> str:
        """The options as one line: ``options: max_states (int >= 1), max_nodes (int >= 1)``."""
        allowed = cls.allowed()
        if not allowed:
            return "it takes no options"
        return "options: " + ", ".join(f"{key} ({rule})" for key, rule in allowed.items())


METHODS: dict[str, type[Method]] = {}


def register(cls: type) -> type:
    """Class decorator adding a method (a :class:`Method` dataclass, every field an :func:`option`) to
    :data:`METHODS` under its ``name``."""
    if not issubclass(cls, Method) or any("allowed" not in f.metadata for f in dataclasses.fields(cls)):
        raise TypeError(f"method {cls.__name__}: subclass Method and declare every field with option()")
    METHODS[cls.name] = cls
    return cls


def simple(fn: Callable[[Graph], list[int]]) -> Callable[..., MethodOutcome]:
    """Adapt an ``order = fn(graph)`` function into a ``run(self, graph, start)`` method."""

    def run(self, graph: Graph, start: Sequence[int]) -> MethodOutcome:
        return MethodOutcome(fn(graph, **self.__dict__))

    return run
