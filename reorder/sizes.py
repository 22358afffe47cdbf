"""Buffer sizes that are plain integers or symbolic expressions.

Inductor graphs compiled with dynamic shapes carry sizes such as ``s0*4096``.
Every algorithm here works on integers, so an expression is resolved once, when
the graph is built, by substituting the graph's size hints (``{"s0": 8}``); the
expression itself is kept for reports and for writing the graph back out.
"""

from __future__ import annotations

import numbers
from typing import Mapping, Union

import sympy

from .errors import GraphError

__all__ = ["Size", "resolve_size"]

Size = Union[int, str, sympy.Expr]


def resolve_size(size: Size, hints: Mapping[str, int], what: str) -> tuple[int, str | None]:
    """Return ``(bytes, symbolic_text)`` for a size given as an int or an expression.

    ``what`` names the buffer for error messages. ``symbolic_text`` is ``None``
    for plain integers. Raises :class:`GraphError` for negative, fractional,
    boolean or unparsable sizes and for symbols with no hint.
    """
    if isinstance(size, bool):
        raise GraphError(f"{what}: size must be an integer number of bytes, got {size!r}")
    if isinstance(size, numbers.Integral):
        value = int(size)
        if value < 0:
            raise GraphError(f"{what}: size must not be negative, got {value}")
        return value, None
    if isinstance(size, str):
        try:
            expr = sympy.sympify(size)
        except (sympy.SympifyError, SyntaxError, TypeError) as exc:
            raise GraphError(f"{what}: cannot parse size expression {size!r}") from exc
    elif isinstance(size, sympy.Basic):
        expr = size
    else:
        raise GraphError(f"{what}: size must be an integer or an expression, got {size!r}")
    if expr.is_Integer:
        return resolve_size(int(expr), hints, what)
    missing = sorted(str(s) for s in expr.free_symbols if str(s) not in hints)
    if missing:
        raise GraphError(f"{what}: size {expr} needs a size hint for {', '.join(missing)}")
    value = expr.subs({sympy.Symbol(k): v for k, v in hints.items()})
    if not value.is_Integer:
        raise GraphError(f"{what}: size {expr} is not a whole number of bytes ({value}) with the hints given")
    resolved, _ = resolve_size(int(value), hints, what)
    return resolved, str(expr)
