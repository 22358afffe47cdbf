"""The scheduler graph: nodes that read and write buffers, as integer-indexed arrays.

A :class:`Graph` is built once from plain specs (:class:`NodeSpec`,
:class:`BufferSpec`, :class:`InputSpec`), validated, and never changed. Nodes and
buffers are numbered ``0..n-1`` in the order given; every per-node and
per-buffer fact is a tuple indexed by that number, so each algorithm is a pass
over arrays and none of them looks a name up in a dict.

The semantics follow Inductor 2.13 (``torch/_inductor/memory.py``):

* A computed buffer is allocated (``size_alloc``) at its producer's step and
  freed (``size_free``) after the step of its last reader; one that no node
  reads is freed at its own step. Graph outputs are never freed.
* A freeable graph input is live from step 0 until its last reader. A
  non-freeable input (a parameter the caller keeps) costs nothing.
* An alias (a mutation rename, or a view) is a new name over an existing
  buffer's storage: it costs nothing, and a node that reads it also keeps the
  alias chain's *root* alive and depends on the root's producer.
* A multi-output parent allocates the sum of its children and frees nothing;
  each child allocates nothing and frees its own size.
* Ordering-only edges (``NodeSpec.after``) constrain the order and keep
  nothing alive.

Nodes are listed in an order that runs (the *baseline* order: Inductor's, or
the program's); :func:`build_graph` rejects a listing that does not, and
names the cycle if there is one.

Sizes may be expressions in size symbols (a graph compiled with dynamic
shapes). The integer arrays hold their values at the graph's point (the size
hints, by default); :class:`SizeExprs` keeps the expressions and
``size_ranges`` the symbols' ranges, and :meth:`Graph.at` gives the same
graph at any other point of those ranges.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping, Sequence

from .errors import CycleError, GraphError, OrderError
from .sizes import (MAX_BYTES, Expr, Point, Size, SymbolRange, check_size_hints, check_size_ranges, evaluate_bytes,
                    evaluation_points, format_size, size_expression, size_symbols)

__all__ = ["BufferSpec", "InputSpec", "NodeSpec", "Graph", "Kahn", "SizeExprs", "build_graph", "implied_costs",
           "plain_graph"]

ALIAS_KINDS = ("mutation", "view")


@dataclass(frozen=True, slots=True)
class BufferSpec:
    """A buffer written by a node.

    ``size`` is the bytes of storage (int or expression). ``alias_of`` names the
    buffer whose storage this one reuses (``alias_kind`` "mutation" for an
    in-place rename, "view" for a view); ``parent`` names the multi-output
    buffer this one is a child of. ``size_alloc``/``size_free`` override the
    cost that the kind implies; graph files in torch's simulator format give
    them explicitly.
    """

    name: str
    size: Size = 0
    alias_of: str | None = None
    alias_kind: str = "mutation"
    parent: str | None = None
    size_alloc: Size | None = None
    size_free: Size | None = None


@dataclass(frozen=True, slots=True)
class InputSpec:
    """A graph input: freeable ones are live from step 0 until their last reader."""

    name: str
    size: Size = 0
    freeable: bool = True


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A scheduler node: the buffers it writes, reads, and nodes it must follow.

    ``workspace`` is scratch the node needs only while it runs and that other
    nodes may reuse; ``unique_workspace`` is scratch that is its own for the
    whole program (AITemplate's two kinds). The slab planner reserves them;
    Inductor's estimator ignores them.
    """

    name: str
    outputs: Sequence[BufferSpec] = ()
    reads: Sequence[str] = ()
    after: Sequence[str] = ()
    workspace: Size = 0
    unique_workspace: Size = 0


@dataclass(frozen=True)
class SizeExprs:
    """The sizes of a symbolic graph as parsed expressions (an int where constant), kept so that the graph can be
    evaluated at any point of its symbols' ranges (:meth:`Graph.at`).

    Per buffer: ``size``, and ``size_alloc``/``size_free`` as given (None
    where the buffer's kind implies them from the sizes, as
    :func:`build_graph` does); per node: ``workspace`` and ``unique_workspace``.
    """

    size: tuple[Expr, ...]
    size_alloc: tuple[Expr | None, ...]
    size_free: tuple[Expr | None, ...]
    workspace: tuple[Expr, ...]
    unique_workspace: tuple[Expr, ...]

    @property
    def symbols(self) -> tuple[str, ...]:
        """Every symbol the expressions use, sorted."""
        found: set[str] = set()
        for column in (self.size, self.size_alloc, self.size_free, self.workspace, self.unique_workspace):
            for tree in column:
                if tree is not None and type(tree) is not int:
                    found |= size_symbols(tree)
        return tuple(sorted(found))


@dataclass(frozen=True, eq=False)
class Graph:
    """An immutable scheduler graph. Build it with :func:`build_graph`.

    Buffer arrays (indexed by buffer id; graph inputs first, then each node's
    outputs in node order): ``buffer_names``, ``size`` (storage bytes),
    ``symbolic_size`` (expression text or None), ``size_alloc``, ``size_free``,
    ``producer`` (node id, None for graph inputs), ``freeable``, ``is_output``,
    ``alias_of`` (immediate base or None), ``alias_kind``, ``root`` (the buffer
    whose storage this one uses, itself when not an alias), ``parent``
    (multi-output parent or None), ``readers`` (nodes whose execution keeps it
    alive, in node order, aliases forwarded).

    Node arrays (indexed by node id): ``node_names``, ``outputs``, ``reads``
    (buffers kept alive until the node runs, aliases forwarded to roots),
    ``declared_reads`` (as written, which Inductor's DFS walks), ``after``
    (ordering-only predecessors), ``preds`` and ``succs`` (all ordering
    constraints), ``workspace`` and ``unique_workspace`` (scratch bytes, see
    :class:`NodeSpec`).

    Facts derived from these (``is_input``, ``alloc_size``, ``children``,
    ``members``, ``ancestors``, ``descendants``, the name indexes) are
    computed once, on first use, here and nowhere else.

    A symbolic graph (``size_exprs`` not None) holds its sizes at the point
    ``size_hints`` in the arrays above; ``size_ranges`` gives every symbol's
    range, :meth:`at` the graph at another point of them (made once per
    point), and :meth:`evaluation_points` the points its results are checked at.
    """

    name: str
    size_hints: Mapping[str, int]
    node_names: tuple[str, ...]
    buffer_names: tuple[str, ...]
    size: tuple[int, ...]
    symbolic_size: tuple[str | None, ...]
    size_alloc: tuple[int, ...]
    size_free: tuple[int, ...]
    producer: tuple[int | None, ...]
    freeable: tuple[bool, ...]
    is_output: tuple[bool, ...]
    alias_of: tuple[int | None, ...]
    alias_kind: tuple[str | None, ...]
    root: tuple[int, ...]
    parent: tuple[int | None, ...]
    readers: tuple[tuple[int, ...], ...]
    outputs: tuple[tuple[int, ...], ...]
    reads: tuple[tuple[int, ...], ...]
    declared_reads: tuple[tuple[int, ...], ...]
    after: tuple[tuple[int, ...], ...]
    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    workspace: tuple[int, ...]
    unique_workspace: tuple[int, ...]
    size_ranges: Mapping[str, SymbolRange] = field(default_factory=dict)
    size_exprs: SizeExprs | None = field(repr=False, default=None)
    _index: tuple[dict, dict] = field(repr=False, default=({}, {}))

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def num_buffers(self) -> int:
        return len(self.buffer_names)

    @property
    def num_edges(self) -> int:
        return sum(len(s) for s in self.succs)

    @cached_property
    def content_digest(self) -> str:
        """A digest of everything the graph says but its name: two graphs with the same digest are the same
        graph (the same scheduler nodes compiled again, in a recompile or in each layer compiled on its own)."""
        content = (sorted(self.size_hints.items()), self.node_names, self.buffer_names, self.size, self.symbolic_size,
                   self.size_alloc, self.size_free, self.producer, self.freeable, self.is_output, self.alias_of,
                   self.alias_kind, self.parent, self.declared_reads, self.after, self.workspace,
                   self.unique_workspace, sorted((k, repr(v)) for k, v in self.size_ranges.items()),
                   self.size_exprs)  # a symbolic graph's expressions: costs at other sizes too
        return hashlib.sha256(repr(content).encode()).hexdigest()

    @property
    def is_symbolic(self) -> bool:
        """Whether some size is an expression in size symbols."""
        return self.size_exprs is not None

    @cached_property
    def symbols(self) -> tuple[str, ...]:
        """The size symbols the graph's sizes use, sorted (none for a graph of constant sizes)."""
        return self.size_exprs.symbols if self.size_exprs is not None else ()

    def evaluation_points(self) -> list[tuple[str, dict[str, int]]]:
        """The labelled points of the symbols' ranges at which orders and plans of this graph are checked
        (:func:`reorder.sizes.evaluation_points`; only ``"hint"`` for a graph of constant sizes)."""
        if not self.symbols:
            return [("hint", {})]
        return evaluation_points(self.size_hints, self.size_ranges, self.symbols)

    def at(self, point: Point) -> Graph:
        """This graph with its sizes at ``point`` (symbols not named keep their hints): same nodes, buffers and
        ids; ``size_hints`` is the new point. Raises :class:`GraphError` naming the buffer or node and field
        whose size is not a whole number of bytes there. A graph of constant sizes is its own value."""
        if self.size_exprs is None:
            return self
        values = {**self.size_hints, **point}
        key = tuple(sorted(values.items()))
        made = self._graphs_at.get(key)
        if made is None:
            size, size_alloc, size_free, workspace, unique = _at_point(
                self.size_exprs, values, self.buffer_names, self.node_names, self.is_input, self.freeable,
                self.alias_of, self.parent)
            made = dataclasses.replace(self, size_hints=values, size=size, size_alloc=size_alloc,
                                       size_free=size_free, workspace=workspace, unique_workspace=unique)
            self._graphs_at[key] = made
        return made

    @cached_property
    def _graphs_at(self) -> dict[tuple, Graph]:
        """The graphs :meth:`at` made, by point: the passes ask for the same few points of one graph hundreds of
        times (a budgeted ``dynamic=True`` backward's order asked 209 times), and each evaluates every size."""
        return {}

    def with_free_inputs(self, names: Iterable[str]) -> Graph:
        """This graph with the inputs named in ``names`` at zero bytes (values that live before the program and
        stay after it, such as parameters, which its peak above its start does not count), at every point of a
        symbolic graph's sizes (:meth:`at`). Same nodes, buffers and ids."""
        wanted = set(names)
        free = {b for b, name in enumerate(self.buffer_names) if self.is_input[b] and name in wanted}
        if not free:
            return self
        zeroed = lambda sizes: tuple(0 if b in free else s for b, s in enumerate(sizes))  # noqa: E731
        exprs = self.size_exprs
        if exprs is not None:
            exprs = dataclasses.replace(exprs, size=zeroed(exprs.size), size_alloc=zeroed(exprs.size_alloc),
                                        size_free=zeroed(exprs.size_free))
        return dataclasses.replace(self, size=zeroed(self.size), size_alloc=zeroed(self.size_alloc),
                                   size_free=zeroed(self.size_free),
                                   symbolic_size=tuple(None if b in free else t for b, t in
                                                       enumerate(self.symbolic_size)),
                                   size_exprs=exprs)

    def with_input_bytes(self, sizes: Mapping[str, Size]) -> Graph:
        """This graph with each freeable input named in ``sizes`` at those bytes (a number, or an expression's text
        in the graph's own symbols), at every point of a symbolic graph's sizes: what the input's free returns
        (its storage), where Inductor's estimate counts what the program reads of it (its last read's extent).
        Inputs not named, or not freeable, keep their sizes; same nodes, buffers and ids. Raises
        :class:`GraphError` naming the input whose size does not parse, uses a symbol the graph has not, or is
        not a whole number of bytes at the hints."""
        index, trees = self.buffer_index, {}
        for name, size in sizes.items():
            b = index.get(name)
            if b is None or not self.is_input[b] or not self.freeable[b]:
                continue
            tree, at_hints = self.input_size(name, size)
            if at_hints != self.size[b] or (self.size_exprs is not None and tree != self.size_exprs.size[b]):
                text = None if type(tree) is int else size.strip() if isinstance(size, str) else str(size)
                trees[b] = (tree, at_hints, text)
        if not trees:
            return self
        sized = lambda sizes: tuple(trees[b][1] if b in trees else s for b, s in enumerate(sizes))  # noqa: E731
        exprs = self.size_exprs
        if exprs is not None:
            exprs = dataclasses.replace(exprs, size=tuple(trees[b][0] if b in trees else t
                                                          for b, t in enumerate(exprs.size)))
        symbolic = tuple(trees[b][2] if b in trees else t for b, t in enumerate(self.symbolic_size))
        return dataclasses.replace(self, size=sized(self.size), size_alloc=sized(self.size_alloc),
                                   size_free=sized(self.size_free), symbolic_size=symbolic, size_exprs=exprs)

    def input_size(self, name: str, size: Size) -> tuple[Expr, int]:
        """``size`` given for input ``name`` (:meth:`with_input_bytes`) as an expression in this graph's symbols and
        its bytes at the hints; a :class:`GraphError` naming the input where it does not parse, uses a symbol the
        graph has not, or is not a whole number of bytes at the hints."""
        tree = _size_tree(size, "input", name, "size")
        unknown = size_symbols(tree) - set(self.symbols) if type(tree) is not int else set()
        if unknown:
            raise GraphError(f"input {name!r} field 'size': symbol {sorted(unknown)[0]} is not one of the "
                             f"graph's ({', '.join(self.symbols) or 'none'})")
        return tree, evaluate_bytes(tree, self.size_hints, f"input {name!r} field 'size'")

    def size_text(self, b: int, field: str = "size") -> int | str:
        """Buffer ``b``'s ``size``, ``size_alloc`` or ``size_free`` as a graph file writes it: the expression's
        text where it has symbols, else the bytes."""
        if field == "size" and self.symbolic_size[b] is not None:
            return self.symbolic_size[b]
        tree = getattr(self.size_exprs, field)[b] if self.size_exprs is not None else None
        if tree is not None and type(tree) is not int:
            return format_size(tree)
        return getattr(self, field)[b]

    @property
    def node_index(self) -> Mapping[str, int]:
        return self._index[0]

    @property
    def buffer_index(self) -> Mapping[str, int]:
        return self._index[1]

    @cached_property
    def is_input(self) -> tuple[bool, ...]:
        """Graph inputs: the buffers no node produces."""
        return tuple(p is None for p in self.producer)

    @cached_property
    def alloc_size(self) -> tuple[int, ...]:
        """Bytes each node allocates when it runs: ``size_alloc`` summed over its outputs."""
        return tuple(sum(self.size_alloc[b] for b in outs) for outs in self.outputs)

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """Each buffer's multi-output children (empty unless it is a multi-output parent)."""
        kids: list[list[int]] = [[] for _ in range(self.num_buffers)]
        for b, p in enumerate(self.parent):
            if p is not None:
                kids[p].append(b)
        return tuple(tuple(k) for k in kids)

    @cached_property
    def members(self) -> tuple[tuple[int, ...], ...]:
        """For each buffer that is its own root, every buffer over its storage (itself and its aliases)."""
        groups: list[list[int]] = [[] for _ in range(self.num_buffers)]
        for b, r in enumerate(self.root):
            groups[r].append(b)
        return tuple(tuple(g) for g in groups)

    @cached_property
    def ancestors(self) -> tuple[int, ...]:
        """Each node's ancestors (every node that must run before it), as a bitmask over node ids.

        One pass in node order (the listing runs, so predecessors come first). The masks
        take up to ``N**2 / 8`` bytes (1.2 GiB at 100,000 nodes), so only searches that are
        limited to a few thousand nodes use them; :func:`~reorder.timeline.lower_bound` does not.
        """
        anc: list[int] = []
        for v in range(self.num_nodes):
            mask = 0
            for p in self.preds[v]:
                mask |= anc[p] | (1 << p)
            anc.append(mask)
        return tuple(anc)

    @cached_property
    def descendants(self) -> tuple[int, ...]:
        """Each node's descendants (every node that must run after it), as a bitmask over node ids
        (as large as :attr:`ancestors`)."""
        desc = [0] * self.num_nodes
        for v in range(self.num_nodes - 1, -1, -1):
            mask = 0
            for s in self.succs[v]:
                mask |= desc[s] | (1 << s)
            desc[v] = mask
        return tuple(desc)

    def node_id(self, name: str) -> int:
        try:
            return self.node_index[name]
        except (KeyError, TypeError):
            raise GraphError(f"graph {self.name!r} has no node named {name!r}") from None

    def order_from_names(self, names: Iterable[str]) -> list[int]:
        """Node ids for node names, checked to be a valid execution order."""
        order = [self.node_id(n) for n in names]
        self.check_order(order)
        return order

    def names_of(self, order: Iterable[int]) -> list[str]:
        return [self.node_names[i] for i in order]

    def check_order(self, order: Sequence[int]) -> None:
        """Raise :class:`OrderError` unless ``order`` runs every node once, after its predecessors."""
        n = self.num_nodes
        if len(order) != n:
            raise OrderError(f"order has {len(order)} nodes, graph {self.name!r} has {n}")
        step = [-1] * n
        for s, v in enumerate(order):
            if not isinstance(v, int) or not 0 <= v < n:
                raise OrderError(f"order names node id {v!r}, which graph {self.name!r} does not have")
            if step[v] != -1:
                raise OrderError(f"order runs node {self.node_names[v]!r} twice")
            step[v] = s
        for v in range(n):
            for p in self.preds[v]:
                if step[p] > step[v]:
                    raise OrderError(
                        f"order runs {self.node_names[v]!r} (step {step[v]}) before its "
                        f"predecessor {self.node_names[p]!r} (step {step[p]})"
                    )


class Kahn:
    """Kahn's bookkeeping over a graph's ordering constraints, apart from any choice of what runs next.

    As in ``graphlib.TopologicalSorter``: :meth:`initial` gives the nodes
    with no predecessors, :meth:`done` marks a node as run and returns the
    successors it made ready (in successor order). Every scheduler is a
    policy over these two calls.
    """

    __slots__ = ("indegree", "succs")

    def __init__(self, graph: Graph):
        self.indegree = [len(p) for p in graph.preds]
        self.succs = graph.succs

    def initial(self) -> list[int]:
        return [v for v, d in enumerate(self.indegree) if d == 0]

    def done(self, v: int) -> list[int]:
        indegree = self.indegree
        ready = []
        for s in self.succs[v]:
            indegree[s] -= 1
            if indegree[s] == 0:
                ready.append(s)
        return ready


def _unique_in_order(items: Iterable[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(items))


def implied_costs(
    size: Sequence[int], alias_of: Sequence[int | None], parent: Sequence[int | None]
) -> list[tuple[int, int]]:
    """``(size_alloc, size_free)`` that each computed buffer's kind implies, in one pass.

    An alias costs nothing; a multi-output parent allocates its children's
    bytes and frees none; a child allocates nothing and frees its own size;
    any other buffer allocates and frees its size. (Graph inputs are costed
    by :func:`build_graph` from ``freeable`` instead.)
    """
    children_bytes: dict[int, int] = {}
    for b, p in enumerate(parent):
        if p is not None:
            children_bytes[p] = children_bytes.get(p, 0) + size[b]
    costs = []
    for b, z in enumerate(size):
        if alias_of[b] is not None:
            costs.append((0, 0))
        elif b in children_bytes:
            costs.append((children_bytes[b], 0))
        elif parent[b] is not None:
            costs.append((0, z))
        else:
            costs.append((z, z))
    return costs


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise GraphError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _names(values: object, what: str) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        raise GraphError(f"{what} must be a list of names, got {values!r}")
    return [_name(v, f"{what} entry #{i}") for i, v in enumerate(values)]


def _index_nodes(nodes: Sequence[NodeSpec]) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if not isinstance(node, NodeSpec):
            raise GraphError(f"node #{i} must be a NodeSpec, got {type(node).__name__}")
        name = node.name
        if type(name) is not str or not name:  # the message is written only for an error
            _name(name, f"node #{i} field 'name'")
        if name in index:
            raise GraphError(f"duplicate node name {name!r} (nodes #{index[name]} and #{i})")
        index[name] = i
    return index


def _collect_buffers(
    nodes: Sequence[NodeSpec], inputs: Sequence[InputSpec], node_names: Sequence[str]
) -> tuple[list[BufferSpec | InputSpec], list[int | None], dict[str, int]]:
    """Every buffer spec (inputs first, then each node's outputs), its producer, and the name index."""
    specs: list[BufferSpec | InputSpec] = []
    producer: list[int | None] = []
    for i, spec in enumerate(inputs):
        if not isinstance(spec, InputSpec):
            raise GraphError(f"input #{i} must be an InputSpec, got {type(spec).__name__}")
        specs.append(spec)
        producer.append(None)
    for i, node in enumerate(nodes):
        if isinstance(node.outputs, (str, bytes)) or not isinstance(node.outputs, (list, tuple)):
            raise GraphError(f"node {node.name!r} field 'outputs' must be a list, got {node.outputs!r}")
        for j, out in enumerate(node.outputs):
            if not isinstance(out, BufferSpec):
                raise GraphError(f"node {node.name!r} output #{j} must be a BufferSpec, got {type(out).__name__}")
            specs.append(out)
            producer.append(i)
    index: dict[str, int] = {}
    for b, spec in enumerate(specs):
        name = spec.name
        if type(name) is not str or not name:
            where = f"input #{b}" if producer[b] is None else f"node {node_names[producer[b]]!r} output"
            _name(name, f"{where} field 'name'")
        if name in index:
            first = index[name]
            if producer[first] is not None and producer[b] is not None:
                raise GraphError(
                    f"buffer {name!r} has two producers: {node_names[producer[first]]!r} and {node_names[producer[b]]!r}"
                )
            raise GraphError(f"duplicate buffer name {name!r}")
        index[name] = b
    return specs, producer, index


def _lookup(index: Mapping[str, int], name: str, what: str) -> int:
    try:
        return index[name]
    except (KeyError, TypeError):
        raise GraphError(f"{what} names unknown buffer {name!r}") from None


def _links(specs: Sequence[BufferSpec | InputSpec], index: Mapping[str, int]):
    """``alias_of``, ``alias_kind`` and ``parent`` as buffer ids, checked."""
    nb = len(specs)
    alias_of: list[int | None] = [None] * nb
    alias_kind: list[str | None] = [None] * nb
    parent: list[int | None] = [None] * nb
    for b, spec in enumerate(specs):
        if isinstance(spec, InputSpec):
            continue
        what = f"buffer {spec.name!r}"
        if spec.alias_of is not None:
            if spec.alias_kind not in ALIAS_KINDS:
                raise GraphError(f"{what} field 'alias_kind' must be one of {ALIAS_KINDS}, got {spec.alias_kind!r}")
            alias_of[b] = _lookup(index, spec.alias_of, f"{what} field 'alias_of'")
            alias_kind[b] = spec.alias_kind
        if spec.parent is not None:
            if spec.alias_of is not None:
                raise GraphError(f"{what} cannot be both an alias and a multi-output child")
            parent[b] = _lookup(index, spec.parent, f"{what} field 'parent'")
            if isinstance(specs[parent[b]], InputSpec):
                raise GraphError(f"{what} field 'parent': {spec.parent!r} is a graph input")
    return alias_of, alias_kind, parent


def _alias_roots(alias_of: Sequence[int | None], names: Sequence[str]) -> list[int]:
    """The root of every alias chain, each buffer visited once (linear in the buffers)."""
    root: list[int | None] = [None] * len(alias_of)
    for b in range(len(alias_of)):
        chain = []
        on_chain = set()
        r = b
        while root[r] is None and alias_of[r] is not None:
            if r in on_chain:
                loop = chain[chain.index(r):] + [r]
                raise GraphError("alias chain loops: " + " -> ".join(names[x] for x in loop))
            chain.append(r)
            on_chain.add(r)
            r = alias_of[r]
        top = r if root[r] is None else root[r]
        for x in chain + [r]:
            root[x] = top
    return root  # type: ignore[return-value]


def _optional(tree: Expr | None, point: Mapping[str, int], what: str) -> int | None:
    return None if tree is None or type(tree) is int else evaluate_bytes(tree, point, what)


def _costs(size: Sequence[int], size_alloc: Sequence[int | None], size_free: Sequence[int | None],
           is_input: Sequence[bool], freeable: Sequence[bool], alias_of, parent) -> tuple[tuple[int, ...], ...]:
    """``(size_alloc, size_free)`` of every buffer: a freeable input allocates and frees its size, a
    non-freeable one nothing; a computed buffer what its kind implies (:func:`implied_costs`) unless given."""
    implied = implied_costs(size, alias_of, parent) if None in size_alloc or None in size_free else None
    alloc, free = [], []
    for b, z in enumerate(size):
        if is_input[b]:
            cost = z if freeable[b] else 0
            alloc.append(cost)
            free.append(cost)
            continue
        alloc.append(implied[b][0] if size_alloc[b] is None else size_alloc[b])
        free.append(implied[b][1] if size_free[b] is None else size_free[b])
    return tuple(alloc), tuple(free)


def _sizes(specs, nodes, producer, alias_of, parent, hints):
    """Every size as an expression and at the hints: ``(SizeExprs or None, size, symbolic text, size_alloc,
    size_free, freeable, workspace, unique_workspace)``."""
    size_tree, alloc_tree, free_tree, symbolic, freeable = [], [], [], [], []
    for b, spec in enumerate(specs):
        tree = _size_tree(spec.size, "buffer", spec.name, "size")
        size_tree.append(tree)
        symbolic.append(None if type(tree) is int else (spec.size.strip() if isinstance(spec.size, str)
                                                         else str(spec.size)))
        if producer[b] is None:
            if not isinstance(spec.freeable, bool):
                raise GraphError(f"input {spec.name!r} field 'freeable' must be true or false, got {spec.freeable!r}")
            freeable.append(spec.freeable)
            alloc_tree.append(None)
            free_tree.append(None)
            continue
        freeable.append(False)
        alloc_tree.append(None if spec.size_alloc is None else _size_tree(spec.size_alloc, "buffer", spec.name,
                                                                          "size_alloc"))
        free_tree.append(None if spec.size_free is None else _size_tree(spec.size_free, "buffer", spec.name,
                                                                        "size_free"))
    workspace = [_size_tree(nd.workspace, "node", nd.name, "workspace") for nd in nodes]
    unique = [_size_tree(nd.unique_workspace, "node", nd.name, "unique_workspace") for nd in nodes]
    exprs = SizeExprs(tuple(size_tree), tuple(alloc_tree), tuple(free_tree), tuple(workspace), tuple(unique))
    if not exprs.symbols:
        exprs = None
    if exprs is None:  # every size a constant: the trees are the bytes
        size_alloc, size_free = _costs(size_tree, alloc_tree, free_tree, [p is None for p in producer], freeable,
                                       alias_of, parent)
        return None, size_tree, symbolic, size_alloc, size_free, freeable, workspace, unique
    graph_at_hints = _at_point(exprs, hints, [spec.name for spec in specs], [nd.name for nd in nodes],
                               [p is None for p in producer], freeable, alias_of, parent)
    return (exprs, graph_at_hints[0], symbolic, *graph_at_hints[1:3], freeable, *graph_at_hints[3:])


def _size_tree(value, kind: str, name: str, field_name: str) -> Expr:
    """:func:`~reorder.sizes.size_expression` of one field of a buffer's or node's spec; a constant within range is
    itself, and the message naming the field is written only when there is an error to raise (a graph of
    thousands of buffers is built many times in one compile)."""
    if type(value) is int and 0 <= value <= MAX_BYTES:
        return value
    return size_expression(value, f"{kind} {name!r} field {field_name!r}")


def _at_point(e: SizeExprs, point: Mapping[str, int], names, node_names, is_input, freeable, alias_of, parent):
    """``(size, size_alloc, size_free, workspace, unique_workspace)`` of a symbolic graph at ``point``, each
    size checked (a :class:`GraphError` names the buffer or node and the field)."""
    size = tuple(t if type(t) is int else evaluate_bytes(t, point, f"buffer {names[b]!r} field 'size'")
                 for b, t in enumerate(e.size))
    alloc = [_optional(t, point, f"buffer {names[b]!r} field 'size_alloc'") for b, t in enumerate(e.size_alloc)]
    free = [_optional(t, point, f"buffer {names[b]!r} field 'size_free'") for b, t in enumerate(e.size_free)]
    size_alloc, size_free = _costs(size, alloc, free, is_input, freeable, alias_of, parent)
    workspace = tuple(evaluate_bytes(t, point, f"node {node_names[v]!r} field 'workspace'")
                      for v, t in enumerate(e.workspace))
    unique = tuple(evaluate_bytes(t, point, f"node {node_names[v]!r} field 'unique_workspace'")
                   for v, t in enumerate(e.unique_workspace))
    return size, size_alloc, size_free, workspace, unique


def _pred_order(is_input: Sequence[bool]):
    """The key of Inductor's pred_buffers order: a node lists the buffers it reads by producer, graph inputs last."""
    return [b + len(is_input) if is_input[b] else b for b in range(len(is_input))].__getitem__


def _in_order(items: tuple[int, ...], key) -> bool:
    """Whether ``items`` stand in ``key``'s order, each once."""
    keys = list(map(key, items))
    return all(a < b for a, b in zip(keys, keys[1:]))


def _forwarded(declared: tuple[int, ...], root: Sequence[int], pred_order) -> tuple[int, ...]:
    """A node's reads forwarded to alias roots, in pred_buffers order; ``declared`` itself where they agree (one
    tuple for both)."""
    if all(root[b] == b for b in declared) and _in_order(declared, pred_order):
        return declared  # no alias among them, listed in order already (every read of a fused list, mostly)
    forwarded = tuple(sorted(set(declared) | {root[b] for b in declared}, key=pred_order))
    return declared if forwarded == declared else forwarded


def _node_reads(nodes, node_index, buffer_index, names, producer, root, is_input):
    """Declared reads, reads forwarded to alias roots (Inductor's pred_buffers order), ordering-only preds."""
    declared, reads, after = [], [], []
    pred_order = _pred_order(is_input)
    for i, node in enumerate(nodes):
        try:  # names of buffers, every one known (the checks below write their messages only for an error)
            if type(node.reads) not in (list, tuple):
                raise TypeError
            d = tuple(dict.fromkeys([buffer_index[r] for r in node.reads]))
        except (KeyError, TypeError):
            what = f"node {node.name!r} field 'reads'"
            d = _unique_in_order(_lookup(buffer_index, r, what) for r in _names(node.reads, what))
        for b in d:
            if producer[b] == i:
                raise GraphError(f"node {node.name!r} reads its own output {names[b]!r}")
        declared.append(d)
        reads.append(_forwarded(d, root, pred_order))
        if type(node.after) in (list, tuple) and not node.after:
            after.append(())
            continue
        a = []
        for other in _names(node.after, f"node {node.name!r} field 'after'"):
            if other not in node_index:
                raise GraphError(f"node {node.name!r} must run after unknown node {other!r}")
            if node_index[other] == i:
                raise GraphError(f"node {node.name!r} must run after itself")
            a.append(node_index[other])
        after.append(_unique_in_order(a))
    return declared, reads, after


def _check_links(names, node_names, producer, alias_of, parent, root, reads) -> None:
    """An alias's producer reads what it renames or views; a child's producer reads its parent."""
    for b, base in enumerate(alias_of):
        if base is not None and root[b] not in reads[producer[b]]:
            raise GraphError(
                f"alias {names[b]!r} of {names[base]!r}: its producer {node_names[producer[b]]!r} "
                f"must read the buffer it renames or views"
            )
        p = parent[b]
        if p is not None and producer[p] != producer[b] and p not in reads[producer[b]]:
            raise GraphError(
                f"multi-output child {names[b]!r}: its producer {node_names[producer[b]]!r} "
                f"must read the parent {names[p]!r}"
            )


def _adjacency(n: int, producer, reads, after):
    """Per-buffer readers; per-node outputs, predecessors and successors (in Inductor's order)."""
    nb = len(producer)
    readers: list[list[int]] = [[] for _ in range(nb)]
    for i in range(n):
        for b in reads[i]:
            readers[b].append(i)
    outputs_of: list[list[int]] = [[] for _ in range(n)]
    for b in range(nb):
        if producer[b] is not None:
            outputs_of[producer[b]].append(b)
    preds = []
    for i in range(n):
        ps = [producer[b] for b in reads[i] if producer[b] is not None and producer[b] != i]
        preds.append(_unique_in_order(ps + list(after[i])))
    # Successors in Inductor's order: readers of each output buffer, then ordering-only ones.
    after_succ: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for p in after[i]:
            after_succ[p].append(i)
    succs = [
        _unique_in_order([r for b in outputs_of[i] for r in readers[b] if r != i] + after_succ[i]) for i in range(n)
    ]
    return readers, outputs_of, preds, succs


def build_graph(
    nodes: Sequence[NodeSpec],
    inputs: Sequence[InputSpec] = (),
    outputs: Iterable[str] = (),
    *,
    name: str = "graph",
    size_hints: Mapping[str, int] | None = None,
    size_ranges: Mapping[str, Sequence] | None = None,
) -> Graph:
    """Validate specs and build the :class:`Graph`; linear in nodes + edges.

    Parameters
    ----------
    nodes: the scheduler nodes in their original (baseline) order, which must run.
    inputs: graph inputs.
    outputs: names of graph-output buffers (never freed).
    name: a label for reports.
    size_hints: values for the symbols in symbolic sizes (the point the graph's integer sizes are at).
    size_ranges: each symbol's ``(lower, upper)`` range, inclusive, upper None for unbounded (default: from
        :data:`~reorder.sizes.DEFAULT_LOWER` up); the hint must lie inside it.

    Raises
    ------
    GraphError
        Wrong types, duplicate names, unknown buffers or nodes, two producers
        of a buffer, bad sizes, alias chains that loop, misused multi-output
        children, nodes listed before what they depend on.
    CycleError
        The dependencies form a cycle; the message prints it.
    """
    hints = check_size_hints(size_hints)
    ranges = check_size_ranges(size_ranges, hints)
    nodes = list(nodes)
    node_index = _index_nodes(nodes)
    node_names = tuple(node_index)
    specs, producer, buffer_index = _collect_buffers(nodes, list(inputs), node_names)
    names = tuple(buffer_index)
    is_input = [p is None for p in producer]
    alias_of, alias_kind, parent = _links(specs, buffer_index)
    root = _alias_roots(alias_of, names)
    exprs, size, symbolic, size_alloc, size_free, freeable, workspace, unique_workspace = _sizes(
        specs, nodes, producer, alias_of, parent, hints)
    declared, reads, after = _node_reads(nodes, node_index, buffer_index, names, producer, root, is_input)
    _check_links(names, node_names, producer, alias_of, parent, root, reads)
    readers, outputs_of, preds, succs = _adjacency(len(nodes), producer, reads, after)
    is_output = [False] * len(specs)
    for o in _names(list(outputs) if not isinstance(outputs, str) else outputs, "graph outputs"):
        is_output[_lookup(buffer_index, o, "graph outputs")] = True
    graph = Graph(
        name=name if isinstance(name, str) else str(name),
        size_hints=hints,
        node_names=node_names,
        buffer_names=names,
        size=tuple(size),
        symbolic_size=tuple(symbolic),
        size_alloc=tuple(size_alloc),
        size_free=tuple(size_free),
        producer=tuple(producer),
        freeable=tuple(freeable),
        is_output=tuple(is_output),
        alias_of=tuple(alias_of),
        alias_kind=tuple(alias_kind),
        root=tuple(root),
        parent=tuple(parent),
        readers=tuple(tuple(r) for r in readers),
        outputs=tuple(tuple(o) for o in outputs_of),
        reads=tuple(reads),
        declared_reads=tuple(declared),
        after=tuple(after),
        preds=tuple(preds),
        succs=tuple(succs),
        workspace=tuple(workspace),
        unique_workspace=tuple(unique_workspace),
        size_ranges={k: ranges[k] for k in exprs.symbols} if exprs is not None else {},
        size_exprs=exprs,
        _index=(node_index, buffer_index),
    )
    _check_listed_order(graph)
    return graph


def plain_graph(name: str, node_names: Sequence[str], buffer_names: Sequence[str], size: Sequence[int],
                size_alloc: Sequence[int | None], size_free: Sequence[int | None], producer: Sequence[int | None],
                freeable: Sequence[bool], is_output: Sequence[bool], declared_reads: Sequence[tuple[int, ...]],
                after: Sequence[tuple[int, ...]], alias_of: Sequence[int | None] | None = None,
                parent: Sequence[int | None] | None = None) -> Graph:
    """A graph of constant sizes from arrays another graph's checks already hold: what :func:`build_graph` makes
    of the same specs, without parsing and checking them again.

    For a graph derived from a built one many times over (the fusion guard's fused lists: hundreds per
    compile; a training step's forward and backward under each candidate partition). Buffers must be numbered
    as :func:`build_graph` numbers them (inputs first, then each node's outputs in node order), reads listed
    once each; ``size_alloc``/``size_free`` are the computed buffers' (None: what the buffer's kind implies; an
    input's are what ``freeable`` implies, as :func:`build_graph` costs them); ``alias_of``: each buffer's base
    where it is a view (None: no views), ``parent``: its multi-output parent (None: none), each read by its
    producer as :func:`build_graph` checks; the listed order is still checked to run.
    """
    nb = len(buffer_names)
    is_input = [p is None for p in producer]
    none_each = (None,) * nb  # no alias, parent, kind or symbolic size
    alias_of = none_each if alias_of is None else tuple(alias_of)
    parent = none_each if parent is None else tuple(parent)
    alias_kind = tuple(None if base is None else "view" for base in alias_of)
    size_alloc, size_free = _costs(size, size_alloc, size_free, is_input, freeable, alias_of, parent)
    pred_order = _pred_order(is_input)
    root = range(nb) if alias_of is none_each else _alias_roots(alias_of, buffer_names)
    reads = [_forwarded(d, root, pred_order) for d in declared_reads]
    readers, outputs_of, preds, succs = _adjacency(len(node_names), producer, reads, after)
    graph = Graph(
        name=name, size_hints={}, node_names=tuple(node_names), buffer_names=tuple(buffer_names),
        size=tuple(size), symbolic_size=none_each, size_alloc=size_alloc, size_free=size_free,
        producer=tuple(producer), freeable=tuple(freeable), is_output=tuple(is_output), alias_of=alias_of,
        alias_kind=alias_kind, root=tuple(root), parent=parent,
        readers=tuple(tuple(r) for r in readers), outputs=tuple(tuple(o) for o in outputs_of), reads=tuple(reads),
        declared_reads=tuple(declared_reads), after=tuple(after), preds=tuple(preds), succs=tuple(succs),
        workspace=(0,) * len(node_names), unique_workspace=(0,) * len(node_names),
        _index=({v: i for i, v in enumerate(node_names)}, {b: i for i, b in enumerate(buffer_names)}),
    )
    if len(graph.node_index) != len(node_names) or len(graph.buffer_index) != nb:
        raise GraphError(f"graph {name!r}: node or buffer names repeat")
    _check_listed_order(graph)
    return graph


def _check_listed_order(graph: Graph) -> None:
    """The baseline order must run: raise :class:`CycleError` with a cycle if there is one, else name the misplaced node."""
    for v in range(graph.num_nodes):
        late = [p for p in graph.preds[v] if p > v]
        if late:
            break
    else:
        return
    kahn = Kahn(graph)
    ready = kahn.initial()
    done = 0
    while ready:
        done += 1
        ready.extend(kahn.done(ready.pop()))
    indegree = kahn.indegree
    if done == graph.num_nodes:
        p = late[0]
        raise GraphError(
            f"node {graph.node_names[v]!r} (#{v}) is listed before {graph.node_names[p]!r} (#{p}), which it "
            f"depends on: list nodes in an order that runs"
        )
    stuck = next(x for x in range(graph.num_nodes) if indegree[x] > 0)
    position: dict[int, int] = {}
    walk: list[int] = []
    x = stuck
    while x not in position:
        position[x] = len(walk)
        walk.append(x)
        x = next(p for p in graph.preds[x] if indegree[p] > 0)
    loop = walk[position[x]:]  # each entry's successor in the walk is one of its predecessors
    loop.reverse()
    names = [graph.node_names[y] for y in loop]
    raise CycleError(names + [names[0]])
