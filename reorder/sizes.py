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

**Symbols have ranges.** A graph compiled with dynamic shapes holds for every
value of its symbols in their ranges (Inductor's ``ShapeEnv`` value ranges;
:data:`SymbolRange`, inclusive, an upper bound of None meaning every value
from the lower one up). Its sizes are kept as parsed expressions, so that it
can be evaluated at any point of those ranges (:func:`evaluation_points`
gives the ones every symbolic result is checked at), bounded over the whole
ranges (:func:`size_interval`, interval arithmetic: a proof, not a sample),
and turned into sympy expressions built node by node from the parsed tree
(:func:`to_sympy`; never from text) for plans whose offsets are expressions.
"""

from __future__ import annotations

import math
import numbers
import re
from fractions import Fraction
from typing import Callable, Iterable, Mapping, Optional, Sequence, Union

import sympy

from .errors import GraphError

__all__ = [
    "DEFAULT_LOWER", "Expr", "align_expression", "FUNCTIONS", "HIGH_FACTOR", "MAX_BYTES", "MAX_DEPTH", "MAX_DIGITS", "MAX_EXPONENT",
    "MAX_MAGNITUDE", "MAX_TEXT", "NAME", "Point", "Size", "SymbolRange", "check_size_hints", "check_size_ranges",
    "evaluate_bytes", "evaluate_size", "evaluation_points", "format_point", "format_size", "in_range", "range_text", "parse_point", "parse_size",
    "resolve_size", "size_expression", "size_interval", "size_symbols", "to_sympy",
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


def size_symbols(tree: Expr) -> set[str]:
    """The symbol names a parsed expression uses."""
    if isinstance(tree, str):
        return {tree}
    if isinstance(tree, tuple):
        return set().union(*(size_symbols(x) for x in tree[1:]))
    return set()


def evaluate_size(tree: Expr, hints: Mapping[str, int], what: str = "size") -> Fraction:
    """The exact value of a parsed expression with every symbol replaced by its hint. A symbol without a hint is
    the error, before any other the evaluation met (looked for only then: the passes evaluate every size of a
    graph at each point they check)."""

    def missing_hint() -> None:
        missing = sorted(size_symbols(tree) - set(hints))
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
    except (KeyError, ZeroDivisionError, GraphError) as error:
        missing_hint()
        if isinstance(error, ZeroDivisionError):
            raise GraphError(f"{what}: division by zero with the hints given") from None
        raise


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


def _whole_bytes(value: numbers.Rational, what: str, text: str | Callable[[], str] | None) -> int:
    """``value`` as bytes, or the :class:`GraphError` that names ``what`` and the size's ``text`` (or a function
    that writes it, called only for the error)."""
    if value.denominator == 1 and 0 <= value <= MAX_BYTES:
        return int(value)
    text = text() if callable(text) else text
    shown = f"size {value}" if text is None or text == str(value) else f"size {text!r} (= {value})"
    if value.denominator != 1:
        raise GraphError(f"{what}: {shown} is not a whole number of bytes")
    if value < 0:
        raise GraphError(f"{what}: {shown} is negative")
    raise GraphError(f"{what}: {shown} is larger than 2**60 bytes")


def size_expression(size: Size, what: str) -> Expr:
    """A size as an int (a constant, checked to be a whole number of bytes) or a parsed expression with symbols.

    Raises :class:`GraphError` naming ``what`` for booleans, floats, text
    outside the grammar and constants that are not whole, non-negative,
    at most 2**60 bytes.
    """
    if type(size) is int:  # the common case, without the abstract-class checks below
        return _whole_bytes(size, what, None)
    if isinstance(size, bool) or not isinstance(size, (numbers.Integral, str, sympy.Basic)):
        raise GraphError(f"{what}: a size must be an integer number of bytes or an expression, got {size!r}")
    if isinstance(size, numbers.Integral):
        return _whole_bytes(int(size), what, None)  # an int is its own Rational
    text = size.strip() if isinstance(size, str) else str(size)
    tree = parse_size(text, what)
    if not size_symbols(tree):
        return _whole_bytes(evaluate_size(tree, {}, what), what, text)  # a constant such as "4096" or "64*64"
    return tree


def evaluate_bytes(tree: Expr, point: Mapping[str, int], what: str) -> int:
    """The bytes an expression of :func:`size_expression` comes to at ``point``, checked as a size."""
    if type(tree) is int:
        return tree
    return _whole_bytes(evaluate_size(tree, point, what), what, lambda: format_size(tree))


def resolve_size(size: Size, hints: Mapping[str, int], what: str) -> tuple[int, str | None]:
    """Return ``(bytes, symbolic_text)`` for a size given as an int, an expression text or a sympy expression.

    ``what`` names the buffer and field for error messages; ``symbolic_text``
    is ``None`` for plain integers. Raises :class:`GraphError` for booleans,
    floats, negative, fractional or oversized values, text outside the
    grammar, and symbols with no hint.
    """
    tree = size_expression(size, what)
    if type(tree) is int:
        return tree, None
    return evaluate_bytes(tree, hints, what), (size.strip() if isinstance(size, str) else str(size))


def _division_free(tree: Expr) -> bool:
    """Whether an expression is built of integers, symbols, ``+ - *``, powers, Max and Min only (so it is an
    integer for integer symbols)."""
    if not isinstance(tree, tuple):
        return True
    return tree[0] in ("+", "-", "*", "neg", "**", "Max", "Min") and all(
        _division_free(x) for x in (tree[1:2] if tree[0] == "**" else tree[1:]))


def _multiple_of(tree: Expr, alignment: int) -> bool:
    """Whether an expression is a multiple of ``alignment`` for every integer value of its symbols (a sufficient
    syntactic test: constants, integer products with such a factor, sums, negations, Max and Min of them)."""
    if isinstance(tree, int):
        return tree % alignment == 0
    if isinstance(tree, str):
        return alignment == 1
    op, *args = tree
    if op == "*":
        return any(_multiple_of(x, alignment) for x in args) and all(_division_free(x) for x in args)
    if op in ("+", "-", "Max", "Min"):
        return all(_multiple_of(x, alignment) for x in args)
    if op == "neg":
        return _multiple_of(args[0], alignment)
    return alignment == 1 and _division_free(tree)


def align_expression(tree: Expr, alignment: int) -> Expr:
    """``tree`` rounded up to a multiple of ``alignment`` for every value of its symbols: an int for a constant,
    the expression itself where it is always a multiple, else ``CeilDiv(tree, alignment)*alignment``."""
    if isinstance(tree, int):
        return -(-tree // alignment) * alignment
    if _multiple_of(tree, alignment):
        return tree
    return ("*", ("CeilDiv", tree, alignment), alignment)


_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2, "neg": 3, "**": 4}


def format_size(tree: Expr) -> str:
    """A parsed expression written back in the grammar :func:`parse_size` reads (parentheses only where needed)."""
    if isinstance(tree, int):
        return str(tree)
    if isinstance(tree, str):
        return tree
    op, *args = tree
    if op not in _PRECEDENCE:
        return f"{op}({', '.join(format_size(a) for a in args)})"

    def operand(x: Expr, right: bool = False) -> str:
        text = format_size(x)
        inner = _PRECEDENCE.get(x[0], 5) if isinstance(x, tuple) else (5 if not isinstance(x, int) or x >= 0 else 3)
        # a right operand of the same level needs parentheses for "-", "/", "//", "%" (and we add them for all)
        if inner < _PRECEDENCE[op] or (right and inner == _PRECEDENCE[op] and op != "**"):
            return f"({text})"
        return text

    if op == "neg":
        return f"-{operand(args[0], right=True)}"
    if op == "**":  # the base alone: an operator or a function call in it gets parentheses (no chained powers)
        base = format_size(args[0])
        return f"({base})**{args[1]}" if isinstance(args[0], tuple) else f"{base}**{args[1]}"
    return f"{operand(args[0])}{op}{operand(args[1], right=True)}"


# ---------------------------------------------------------------------------------------------------------------
# Symbols and their ranges.

#: A symbol's value range: ``(lower, upper)``, both inclusive; ``upper`` None: every value from ``lower`` up;
#: ``lower`` None: every value down from ``upper`` (Inductor gives such ranges to some integer inputs).
SymbolRange = tuple[Optional[int], Optional[int]]

#: A point of the symbols' ranges: one integer per symbol.
Point = Mapping[str, int]

#: The lower bound of a symbol whose range nobody gave (a graph file with hints only): 1, or the hint if smaller.
DEFAULT_LOWER = 1

#: How far above the hint :func:`evaluation_points` reaches when a range has no upper bound.
HIGH_FACTOR = 8


def default_range(hint: int) -> SymbolRange:
    """The range of a symbol known only by its hint: from :data:`DEFAULT_LOWER` (or the hint if lower) up."""
    return min(DEFAULT_LOWER, hint), None


def check_size_ranges(ranges: Mapping | None, hints: Mapping[str, int],
                      what: str = "size_ranges") -> dict[str, SymbolRange]:
    """``ranges`` (symbol -> ``[lower, upper]``, null/None for unbounded) checked against ``hints``.

    Every hinted symbol gets a range (:func:`default_range` where none is
    given); a range needs a hint, integer bounds, ``lower <= upper``, and the
    hint inside it. Raises :class:`GraphError` naming the symbol.
    """
    if ranges is not None and not isinstance(ranges, Mapping):
        raise GraphError(f"{what}: expected an object of symbol names to [lower, upper], got {type(ranges).__name__}")
    out: dict[str, SymbolRange] = {}
    for key, value in (ranges or {}).items():
        if not isinstance(key, str) or not NAME.match(key):
            raise GraphError(f"{what}: {key!r} is not a symbol name")
        if key not in hints:
            raise GraphError(f"{what}: symbol {key!r} has a range but no size hint")
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
            raise GraphError(f"{what}: the range of {key!r} must be [lower, upper] (upper null for unbounded), "
                             f"got {value!r}")
        lower, upper = value
        for bound, name in ((lower, "lower"), (upper, "upper")):
            if bound is None:
                continue
            if isinstance(bound, bool) or not isinstance(bound, numbers.Integral) or abs(int(bound)) > MAX_BYTES:
                raise GraphError(f"{what}: the {name} bound of {key!r} must be an integer of at most 2**60, "
                                 f"got {bound!r}")
        lower, upper = None if lower is None else int(lower), None if upper is None else int(upper)
        if lower is not None and upper is not None and lower > upper:
            raise GraphError(f"{what}: the range of {key!r} is empty ([{lower}, {upper}])")
        if not in_range(hints[key], (lower, upper)):
            raise GraphError(f"{what}: the hint {hints[key]} of {key!r} lies outside its range "
                             f"{range_text((lower, upper))}")
        out[key] = (lower, upper)
    for key, hint in hints.items():
        out.setdefault(key, default_range(hint))
    return out


def in_range(value: int, bounds: SymbolRange) -> bool:
    lower, upper = bounds
    return (lower is None or lower <= value) and (upper is None or value <= upper)


def range_text(bounds: SymbolRange) -> str:
    """``[2, inf]``, ``[-inf, 0]``: a range as messages and tables show it."""
    lower, upper = bounds
    return f"[{'-inf' if lower is None else lower}, {'inf' if upper is None else upper}]"


def evaluation_points(hints: Mapping[str, int], ranges: Mapping[str, SymbolRange],
                      symbols: Iterable[str] | None = None) -> list[tuple[str, dict[str, int]]]:
    """The points of the symbols' ranges at which symbolic orders and plans are checked, labelled, hint first.

    All symbols together at: the hint; the lower bound (the hint where the
    range has none); twice and four times the hint; and ``high``, the upper
    bound where there is one, else :data:`HIGH_FACTOR` times the hint (each
    value clamped into its range).
    With several symbols, also each symbol alone at its lower bound and at
    ``high``, the others at their hints (``"s0 lower"``, ``"s0 high"``).
    Identical points are listed once, under their first label. ``symbols``
    restricts the points to those symbols (default: all of ``hints``).
    """
    names = sorted(hints if symbols is None else symbols)

    def clamp(name: str, value: int) -> int:
        lower, upper = ranges[name]
        value = value if upper is None else min(upper, value)
        return value if lower is None else max(lower, value)

    def low(name: str) -> int:
        lower = ranges[name][0]
        return hints[name] if lower is None else lower

    def high(name: str) -> int:
        upper = ranges[name][1]
        return upper if upper is not None else clamp(name, HIGH_FACTOR * hints[name])

    together = {
        "hint": {n: hints[n] for n in names},
        "lower": {n: low(n) for n in names},
        "x2": {n: clamp(n, 2 * hints[n]) for n in names},
        "x4": {n: clamp(n, 4 * hints[n]) for n in names},
        "high": {n: high(n) for n in names},
    }
    points = list(together.items())
    if len(names) > 1:
        for n in names:
            points.append((f"{n} lower", {**together["hint"], n: low(n)}))
            points.append((f"{n} high", {**together["hint"], n: high(n)}))
    seen: set[tuple[int, ...]] = set()
    unique = []
    for label, point in points:
        key = tuple(point[n] for n in names)
        if key not in seen:
            seen.add(key)
            unique.append((label, point))
    return unique


def format_point(point: Mapping[str, int]) -> str:
    """``s0=512,s1=8``: a point as ``--at`` takes it."""
    return ",".join(f"{name}={value}" for name, value in sorted(point.items()))


def parse_point(text: str, hints: Mapping[str, int], ranges: Mapping[str, SymbolRange],
                what: str = "--at") -> dict[str, int]:
    """A point from ``s0=512,s1=8``: the hints with the symbols named replaced, each checked to be a symbol of
    the graph and inside its range. Raises :class:`GraphError` naming the symbol."""
    point = dict(hints)
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, equals, value = item.partition("=")
        name = name.strip()
        if not equals:
            raise GraphError(f"{what} {text!r}: {item!r} is not symbol=value")
        if name not in hints:
            known = ", ".join(sorted(hints)) or "none: the graph has no symbolic sizes"
            raise GraphError(f"{what} {text!r}: the graph has no symbol {name!r} (its symbols: {known})")
        try:
            number = int(value.strip())
        except ValueError:
            raise GraphError(f"{what} {text!r}: the value of {name!r} must be an integer, got {value.strip()!r}") \
                from None
        if not in_range(number, ranges[name]):
            raise GraphError(f"{what} {text!r}: {name}={number} lies outside its range {range_text(ranges[name])}")
        point[name] = number
    return point


# ---------------------------------------------------------------------------------------------------------------
# Bounds over whole ranges (interval arithmetic).

Bound = Union[Fraction, float]  # a Fraction, or -inf / +inf


def _product(a: Bound, b: Bound) -> Bound:
    return 0 if a == 0 or b == 0 else a * b  # 0 * inf is 0 here: a zero factor is exactly zero


def _corners(a: tuple[Bound, Bound], b: tuple[Bound, Bound]) -> tuple[Bound, Bound]:
    values = [_product(x, y) for x in a for y in b]
    return min(values), max(values)


def _monotone(f: Callable[[Fraction], Fraction], interval: tuple[Bound, Bound]) -> tuple[Bound, Bound]:
    """A non-decreasing ``f`` of an interval; infinities map to themselves."""
    return tuple(x if math.isinf(x) else Fraction(f(x)) for x in interval)  # type: ignore[return-value]


def _modulo(divisor: tuple[Bound, Bound]) -> tuple[Bound, Bound]:
    """Python's ``a % b`` for any ``a``: in ``[0, b)`` for positive ``b``."""
    if divisor[0] > 0:
        return Fraction(0), divisor[1]
    return -math.inf, math.inf


def _quotient(a: tuple[Bound, Bound], b: tuple[Bound, Bound]) -> tuple[Bound, Bound]:
    if b[0] <= 0 <= b[1]:
        return -math.inf, math.inf
    inverse = tuple(Fraction(0) if math.isinf(x) else 1 / x for x in (b[1], b[0]))
    return _corners(a, inverse)


def size_interval(tree: Expr, ranges: Mapping[str, SymbolRange]) -> tuple[Bound, Bound]:
    """Bounds of an expression over every point of ``ranges`` (interval arithmetic: sound, maybe not tight).

    ``size_interval(tree, ranges)[0] >= 0`` proves the size non-negative for
    every value of its symbols in their ranges.
    """
    if isinstance(tree, int):
        return Fraction(tree), Fraction(tree)
    if isinstance(tree, str):
        lower, upper = ranges[tree]
        return (-math.inf if lower is None else Fraction(lower)), (math.inf if upper is None else Fraction(upper))
    op, *operands = tree
    if op == "**":
        lo, hi = size_interval(operands[0], ranges)
        n = operands[1]
        if n == 0:
            return Fraction(1), Fraction(1)

        def power(x: Bound) -> Bound:
            if math.isinf(x):
                return x if n % 2 else math.inf
            return x ** n

        if n % 2 or lo >= 0:
            return power(lo), power(hi)
        if hi <= 0:
            return power(hi), power(lo)
        return Fraction(0), max(power(lo), power(hi))
    args = [size_interval(x, ranges) for x in operands]
    if op == "neg":
        return -args[0][1], -args[0][0]
    if op == "+":
        return args[0][0] + args[1][0], args[0][1] + args[1][1]
    if op == "-":
        return args[0][0] - args[1][1], args[0][1] - args[1][0]
    if op == "*":
        return _corners(args[0], args[1])
    if op == "/":
        return _quotient(args[0], args[1])
    if op in ("//", "FloorDiv", "CleanDiv"):
        return _monotone(math.floor, _quotient(args[0], args[1]))
    if op == "CeilDiv":
        return _monotone(math.ceil, _quotient(args[0], args[1]))
    if op in ("%", "Mod", "PythonMod"):
        return _modulo(args[1])
    if op == "ModularIndexing":
        return _modulo(args[2])
    if op in ("floor", "FloorToInt"):
        return _monotone(math.floor, args[0])
    if op in ("ceiling", "CeilToInt"):
        return _monotone(math.ceil, args[0])
    if op == "TruncToInt":
        return _monotone(math.trunc, args[0])
    if op == "Abs":
        lo, hi = args[0]
        if lo >= 0:
            return lo, hi
        if hi <= 0:
            return -hi, -lo
        return Fraction(0), max(-lo, hi)
    if op == "Identity":
        return args[0]
    if op == "Max":
        return max(a[0] for a in args), max(a[1] for a in args)
    if op == "Min":
        return min(a[0] for a in args), min(a[1] for a in args)
    raise GraphError(f"no interval rule for {op!r}")  # the parser admits only the functions above


# ---------------------------------------------------------------------------------------------------------------
# Sympy expressions, built from parsed trees (never from text).


def sympy_symbol(name: str, bounds: SymbolRange | None = None) -> sympy.Symbol:
    """The sympy symbol of a size symbol: an integer; positive from a lower bound of 1 up, non-negative from 0 up
    or where no range is known (a size symbol), else any integer."""
    lower = 0 if bounds is None else bounds[0]
    if lower is not None and lower >= 1:
        return sympy.Symbol(name, integer=True, positive=True)
    if lower is not None and lower >= 0:
        return sympy.Symbol(name, integer=True, nonnegative=True)
    return sympy.Symbol(name, integer=True)


def to_sympy(tree: Expr, ranges: Mapping[str, SymbolRange] | None = None,
             symbols: Mapping[str, sympy.Symbol] | None = None) -> sympy.Expr:
    """The sympy expression of a parsed tree, node by node (so nothing of a file is ever evaluated as code).

    Symbols are :func:`sympy_symbol` (with assumptions from ``ranges``), or
    taken from ``symbols`` by name (Inductor's own, say). Integer division
    and modulo become ``floor`` and ``Mod``; what sympy has no function for
    (``TruncToInt``) stays an undefined function of that name, which
    :func:`parse_size` reads back.
    """
    if isinstance(tree, int):
        return sympy.Integer(tree)
    if isinstance(tree, str):
        if symbols is not None and tree in symbols:
            return symbols[tree]
        return sympy_symbol(tree, ranges.get(tree) if ranges else None)
    op, *operands = tree
    if op == "**":
        return to_sympy(operands[0], ranges, symbols) ** operands[1]
    a = [to_sympy(x, ranges, symbols) for x in operands]
    if op == "neg":
        return -a[0]
    if op == "+":
        return a[0] + a[1]
    if op == "-":
        return a[0] - a[1]
    if op == "*":
        return a[0] * a[1]
    if op == "/":
        return a[0] / a[1]
    if op in ("//", "FloorDiv", "CleanDiv"):
        return sympy.floor(a[0] / a[1])
    if op == "CeilDiv":
        return sympy.ceiling(a[0] / a[1])
    if op in ("%", "Mod", "PythonMod"):
        return sympy.Mod(a[0], a[1])
    if op == "ModularIndexing":
        return sympy.Mod(sympy.floor(a[0] / a[1]), a[2])
    if op in ("floor", "FloorToInt"):
        return sympy.floor(a[0])
    if op in ("ceiling", "CeilToInt"):
        return sympy.ceiling(a[0])
    if op == "Abs":
        return sympy.Abs(a[0])
    if op == "Identity":
        return a[0]
    if op == "Max":
        return sympy.Max(*a)
    if op == "Min":
        return sympy.Min(*a)
    return sympy.Function(op)(*a)
