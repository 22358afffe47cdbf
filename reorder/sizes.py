"""Buffer sizes: plain integers, or size expressions in a small grammar of our own.

Inductor graphs compiled with dynamic shapes carry sizes such as ``s0*4096``.
Every algorithm works on integers, so an expression is resolved once, when
the graph is built, by substituting the graph's size hints (``{"s0": 8}``);
the text is kept for reports and for writing the graph back out.

Graph files are untrusted, so an expression is never handed to Python or to
``sympy.sympify`` (both evaluate code). :func:`parse_size` reads exactly this
grammar (``docs/format.md`` lists it for users)::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/" | "//" | "%") unary)*
    unary  := ("+" | "-") unary | power
    power  := atom ("**" INTEGER)?
    atom   := INTEGER | NAME | NAME "(" expr ("," expr)* ")" | "(" expr ")"

with ``NAME = [A-Za-z_][A-Za-z0-9_]*`` and the functions of :data:`FUNCTIONS`
(those Inductor's size expressions print). The work is bounded so that a
hostile file cannot hang or exhaust memory: at most :data:`MAX_TEXT`
characters, :data:`MAX_DEPTH` levels of nesting, :data:`MAX_DIGITS` digits in
a literal, a literal exponent of at most :data:`MAX_EXPONENT`, and every
intermediate value below :data:`MAX_MAGNITUDE` in absolute value (numerator
and denominator). Arithmetic is exact (fractions); a size must come out a
whole, non-negative number of bytes.

Sympy expressions passed through the Python API go the same way, through
their printed form, so a symbol matches its hint by name whatever its sympy
assumptions (``Symbol('s0', integer=True, positive=True)`` as Inductor
creates it resolves with ``{"s0": 8}``).
"""

from __future__ import annotations

import math
import numbers
import re
from fractions import Fraction
from typing import Callable, Mapping, Union

import sympy

from .errors import GraphError

__all__ = [
    "FUNCTIONS", "MAX_BYTES", "MAX_DEPTH", "MAX_DIGITS", "MAX_EXPONENT", "MAX_MAGNITUDE", "MAX_TEXT", "NAME",
    "Size", "check_size_hints", "evaluate_size", "parse_size", "resolve_size",
]

Size = Union[int, str, sympy.Basic]

MAX_TEXT = 10_000
MAX_DEPTH = 64
MAX_DIGITS = 30
MAX_EXPONENT = 64
MAX_MAGNITUDE = 2**128
#: The largest size of a buffer in bytes (an exbibyte); anything above is a corrupt file.
MAX_BYTES = 2**60

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(//|\*\*|[-+*/%(),]))")


def _floor(x: Fraction) -> Fraction:
    return Fraction(math.floor(x))


def _ceil(x: Fraction) -> Fraction:
    return Fraction(math.ceil(x))


def _divide(a: Fraction, b: Fraction) -> Fraction:
    if b == 0:
        raise ZeroDivisionError
    return a / b


def _mod(a: Fraction, b: Fraction) -> Fraction:
    if b == 0:
        raise ZeroDivisionError
    return a % b


#: name -> (number of arguments, or None for one or more; the function on exact values).
FUNCTIONS: dict[str, tuple[int | None, Callable[..., Fraction]]] = {
    "floor": (1, _floor),
    "FloorToInt": (1, _floor),
    "ceiling": (1, _ceil),
    "CeilToInt": (1, _ceil),
    "TruncToInt": (1, lambda x: Fraction(math.trunc(x))),
    "Abs": (1, abs),
    "Identity": (1, lambda x: x),
    "Max": (None, max),
    "Min": (None, min),
    "FloorDiv": (2, lambda a, b: _floor(_divide(a, b))),
    "CeilDiv": (2, lambda a, b: _ceil(_divide(a, b))),
    "CleanDiv": (2, lambda a, b: _floor(_divide(a, b))),
    "Mod": (2, _mod),
    "PythonMod": (2, _mod),
    "ModularIndexing": (3, lambda x, d, m: _mod(_floor(_divide(x, d)), m)),
}

# A parsed expression: an int literal, a symbol name, or (operator or function name, operands).
Expr = Union[int, str, tuple]


class _Parser:
    """Recursive descent over the tokens of one expression, depth-bounded."""

    def __init__(self, text: str, what: str):
        self.what = what
        self.text = text
        self.tokens = self._tokenize(text)
        self.pos = 0
        self.depth = 0

    def fail(self, reason: str) -> GraphError:
        shown = self.text if len(self.text) <= 80 else self.text[:77] + "..."
        return GraphError(f"{self.what}: {reason} in size expression {shown!r}")

    def _tokenize(self, text: str) -> list[str]:
        tokens: list[str] = []
        pos = 0
        while pos < len(text):
            if text[pos:].isspace():
                break
            m = _TOKEN.match(text, pos)
            if m is None:
                rest = text[pos:].lstrip()
                raise self.fail(f"unexpected character {rest[0]!r}")
            number, name, op = m.groups()
            if number is not None and len(number) > MAX_DIGITS:
                raise self.fail(f"a literal longer than {MAX_DIGITS} digits")
            tokens.append(number or name or op)
            pos = m.end()
        return tokens

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None:
            raise self.fail("unexpected end" + (f" (expected {expected!r})" if expected else ""))
        if expected is not None and token != expected:
            raise self.fail(f"expected {expected!r}, found {token!r}")
        self.pos += 1
        return token

    def nested(self, parse: Callable[[], Expr]) -> Expr:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"more than {MAX_DEPTH} levels of nesting")
        try:
            return parse()
        finally:
            self.depth -= 1

    def expression(self) -> Expr:
        left = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            left = (op, left, self.term())
        return left

    def term(self) -> Expr:
        left = self.unary()
        while self.peek() in ("*", "/", "//", "%"):
            op = self.take()
            left = (op, left, self.unary())
        return left

    def unary(self) -> Expr:
        if self.peek() in ("+", "-"):
            op = self.take()
            operand = self.nested(self.unary)
            return ("neg", operand) if op == "-" else operand
        return self.power()

    def power(self) -> Expr:
        base = self.atom()
        if self.peek() == "**":
            self.take()
            exponent = self.take()
            if not exponent.isdigit() or int(exponent) > MAX_EXPONENT:
                raise self.fail(f"an exponent must be a literal integer from 0 to {MAX_EXPONENT}, found {exponent!r}")
            if self.peek() == "**":
                raise self.fail("chained exponents")
            return ("**", base, int(exponent))
        return base

    def atom(self) -> Expr:
        token = self.take()
        if token.isdigit():
            return int(token)
        if token == "(":
            inner = self.nested(self.expression)
            self.take(")")
            return inner
        if NAME.match(token):
            if self.peek() != "(":
                return token
            if token not in FUNCTIONS:
                raise self.fail(f"unknown function {token!r} (known: {', '.join(sorted(FUNCTIONS))})")
            self.take("(")
            args = [self.nested(self.expression)]
            while self.peek() == ",":
                self.take()
                args.append(self.nested(self.expression))
            self.take(")")
            arity = FUNCTIONS[token][0]
            if arity is not None and len(args) != arity:
                raise self.fail(f"{token} takes {arity} argument{'s' if arity > 1 else ''}, got {len(args)}")
            return (token, *args)
        raise self.fail(f"unexpected {token!r}")


def parse_size(text: str, what: str = "size") -> Expr:
    """Parse a size expression into a small tree; raise :class:`GraphError` naming ``what`` on anything else."""
    if len(text) > MAX_TEXT:
        raise GraphError(f"{what}: size expression longer than {MAX_TEXT} characters")
    parser = _Parser(text, what)
    if not parser.tokens:
        raise parser.fail("nothing")
    tree = parser.expression()
    if parser.peek() is not None:
        raise parser.fail(f"unexpected {parser.peek()!r}")
    return tree


def _symbols(tree: Expr) -> set[str]:
    if isinstance(tree, str):
        return {tree}
    if isinstance(tree, tuple):
        return set().union(*(_symbols(x) for x in tree[1:]))
    return set()


def evaluate_size(tree: Expr, hints: Mapping[str, int], what: str = "size") -> Fraction:
    """The exact value of a parsed expression with every symbol replaced by its hint."""
    missing = sorted(_symbols(tree) - set(hints))
    if missing:
        raise GraphError(f"{what}: needs a size hint for {', '.join(missing)}")

    def value(node: Expr) -> Fraction:
        if isinstance(node, int):
            return Fraction(node)
        if isinstance(node, str):
            return Fraction(hints[node])
        op, *operands = node
        if op == "**":
            result = value(operands[0]) ** operands[1]
        else:
            args = [value(x) for x in operands]
            if op == "neg":
                result = -args[0]
            elif op == "+":
                result = args[0] + args[1]
            elif op == "-":
                result = args[0] - args[1]
            elif op == "*":
                result = args[0] * args[1]
            elif op == "/":
                result = _divide(args[0], args[1])
            elif op == "//":
                result = _floor(_divide(args[0], args[1]))
            elif op == "%":
                result = _mod(args[0], args[1])
            else:
                result = Fraction(FUNCTIONS[op][1](*args))
        if abs(result.numerator) >= MAX_MAGNITUDE or result.denominator >= MAX_MAGNITUDE:
            raise GraphError(f"{what}: a value of 2**128 or more while evaluating the size")
        return result

    try:
        return value(tree)
    except ZeroDivisionError:
        raise GraphError(f"{what}: division by zero with the hints given") from None


def check_size_hints(hints: Mapping[str, int] | None, what: str = "size_hints") -> dict[str, int]:
    """``hints`` as a plain dict, checked: symbol names to integers."""
    if hints is None:
        return {}
    if not isinstance(hints, Mapping):
        raise GraphError(f"{what}: expected an object of symbol names to integers, got {type(hints).__name__}")
    out = {}
    for key, value in hints.items():
        if not isinstance(key, str) or not NAME.match(key):
            raise GraphError(f"{what}: {key!r} is not a symbol name")
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise GraphError(f"{what}: the hint for {key!r} must be an integer, got {value!r}")
        if abs(int(value)) > MAX_BYTES:
            raise GraphError(f"{what}: the hint for {key!r} is larger than 2**60")
        out[key] = int(value)
    return out


def _whole_bytes(value: numbers.Rational, what: str, text: str | None) -> int:
    if value.denominator == 1 and 0 <= value <= MAX_BYTES:
        return int(value)
    shown = f"size {value}" if text is None or text == str(value) else f"size {text!r} (= {value})"
    if value.denominator != 1:
        raise GraphError(f"{what}: {shown} is not a whole number of bytes")
    if value < 0:
        raise GraphError(f"{what}: {shown} is negative")
    raise GraphError(f"{what}: {shown} is larger than 2**60 bytes")


def resolve_size(size: Size, hints: Mapping[str, int], what: str) -> tuple[int, str | None]:
    """Return ``(bytes, symbolic_text)`` for a size given as an int, an expression text or a sympy expression.

    ``what`` names the buffer and field for error messages; ``symbolic_text``
    is ``None`` for plain integers. Raises :class:`GraphError` for booleans,
    floats, negative, fractional or oversized values, text outside the
    grammar, and symbols with no hint.
    """
    if type(size) is int:  # the common case, without the abstract-class checks below
        return _whole_bytes(size, what, None), None
    if isinstance(size, bool) or not isinstance(size, (numbers.Integral, str, sympy.Basic)):
        raise GraphError(f"{what}: a size must be an integer number of bytes or an expression, got {size!r}")
    if isinstance(size, numbers.Integral):
        return _whole_bytes(int(size), what, None), None  # an int is its own Rational
    text = size.strip() if isinstance(size, str) else str(size)
    tree = parse_size(text, what)
    value = evaluate_size(tree, hints, what)
    if not _symbols(tree):
        return _whole_bytes(value, what, text), None  # a constant such as "4096" or "64*64"
    return _whole_bytes(value, what, text), text
