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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from .errors import CycleError, GraphError, OrderError
from .sizes import Size, resolve_size

__all__ = ["BufferSpec", "InputSpec", "NodeSpec", "Graph", "build_graph", "implied_costs"]

ALIAS_KINDS = ("mutation", "view")


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class InputSpec:
    """A graph input: freeable ones are live from step 0 until their last reader."""

    name: str
    size: Size = 0
    freeable: bool = True


@dataclass(frozen=True)
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


@dataclass(frozen=True, eq=False)
class Graph:
    """An immutable scheduler graph. Build it with :func:`build_graph`.

    Buffer arrays (indexed by buffer id): ``buffer_names``, ``size`` (storage
    bytes), ``symbolic_size`` (expression text or None), ``size_alloc``,
    ``size_free``, ``producer`` (node id, None for graph inputs), ``is_input``,
    ``freeable``, ``is_output``, ``alias_of`` (immediate base or None),
    ``alias_kind``, ``root`` (the buffer whose storage this one uses, itself
    when not an alias), ``parent`` (multi-output parent or None), ``readers``
    (nodes whose execution keeps it alive, in node order, aliases forwarded).

    Node arrays (indexed by node id): ``node_names``, ``outputs``, ``reads``
    (buffers kept alive until the node runs, aliases forwarded to roots),
    ``declared_reads`` (as written, which Inductor's DFS walks), ``after``
    (ordering-only predecessors), ``preds`` and ``succs`` (all ordering
    constraints), ``alloc_size`` (sum of ``size_alloc`` over outputs),
    ``workspace`` and ``unique_workspace`` (scratch bytes, see :class:`NodeSpec`).
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
    is_input: tuple[bool, ...]
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
    alloc_size: tuple[int, ...]
    workspace: tuple[int, ...]
    unique_workspace: tuple[int, ...]
    node_index: Mapping[str, int] = field(repr=False)
    buffer_index: Mapping[str, int] = field(repr=False)

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def num_buffers(self) -> int:
        return len(self.buffer_names)

    @property
    def num_edges(self) -> int:
        return sum(len(s) for s in self.succs)

    def node_id(self, name: str) -> int:
        try:
            return self.node_index[name]
        except KeyError:
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
            if not 0 <= v < n:
                raise OrderError(f"order names node id {v}, which graph {self.name!r} does not have")
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


def build_graph(
    nodes: Sequence[NodeSpec],
    inputs: Sequence[InputSpec] = (),
    outputs: Iterable[str] = (),
    *,
    name: str = "graph",
    size_hints: Mapping[str, int] | None = None,
) -> Graph:
    """Validate specs and build the :class:`Graph`; linear in nodes + edges.

    Parameters
    ----------
    nodes: the scheduler nodes in their original (baseline) order.
    inputs: graph inputs.
    outputs: names of graph-output buffers (never freed).
    name: a label for reports.
    size_hints: values for the symbols in symbolic sizes.

    Raises
    ------
    GraphError
        Duplicate names, unknown buffers or nodes, two producers of a buffer,
        bad sizes, alias chains that loop, misused multi-output children.
    CycleError
        The dependencies form a cycle; the message prints it.
    """
    hints = dict(size_hints or {})
    node_names = tuple(n.name for n in nodes)
    node_index: dict[str, int] = {}
    for i, nm in enumerate(node_names):
        if not isinstance(nm, str) or not nm:
            raise GraphError(f"node #{i} has no name")
        if nm in node_index:
            raise GraphError(f"duplicate node name {nm!r} (nodes #{node_index[nm]} and #{i})")
        node_index[nm] = i

    # Buffers: inputs first, then each node's outputs in node order.
    specs: list[BufferSpec | InputSpec] = list(inputs)
    producer: list[int | None] = [None] * len(specs)
    for i, node in enumerate(nodes):
        for out in node.outputs:
            specs.append(out)
            producer.append(i)
    buffer_index: dict[str, int] = {}
    for b, spec in enumerate(specs):
        if not isinstance(spec.name, str) or not spec.name:
            raise GraphError(f"buffer #{b} has no name")
        if spec.name in buffer_index:
            first = buffer_index[spec.name]
            if producer[first] is not None and producer[b] is not None:
                raise GraphError(
                    f"buffer {spec.name!r} has two producers: "
                    f"{node_names[producer[first]]!r} and {node_names[producer[b]]!r}"
                )
            raise GraphError(f"duplicate buffer name {spec.name!r}")
        buffer_index[spec.name] = b

    def lookup(name: str, what: str) -> int:
        try:
            return buffer_index[name]
        except (KeyError, TypeError):
            raise GraphError(f"{what} names unknown buffer {name!r}") from None

    nb = len(specs)
    is_input = tuple(isinstance(s, InputSpec) for s in specs)
    freeable = tuple(isinstance(s, InputSpec) and bool(s.freeable) for s in specs)
    size: list[int] = []
    symbolic: list[str | None] = []
    for spec in specs:
        value, text = resolve_size(spec.size, hints, f"buffer {spec.name!r}")
        size.append(value)
        symbolic.append(text)

    alias_of: list[int | None] = [None] * nb
    alias_kind: list[str | None] = [None] * nb
    parent: list[int | None] = [None] * nb
    for b, spec in enumerate(specs):
        if isinstance(spec, InputSpec):
            continue
        if spec.alias_of is not None:
            if spec.alias_kind not in ALIAS_KINDS:
                raise GraphError(f"buffer {spec.name!r}: alias_kind must be one of {ALIAS_KINDS}, got {spec.alias_kind!r}")
            alias_of[b] = lookup(spec.alias_of, f"alias {spec.name!r}")
            alias_kind[b] = spec.alias_kind
        if spec.parent is not None:
            if spec.alias_of is not None:
                raise GraphError(f"buffer {spec.name!r} cannot be both an alias and a multi-output child")
            parent[b] = lookup(spec.parent, f"multi-output child {spec.name!r}")
            if is_input[parent[b]]:
                raise GraphError(f"multi-output child {spec.name!r}: parent {spec.parent!r} is a graph input")

    root = list(range(nb))
    for b in range(nb):
        seen = [b]
        r = b
        while alias_of[r] is not None:
            r = alias_of[r]
            if r in seen:
                loop = " -> ".join(specs[x].name for x in seen[seen.index(r):] + [r])
                raise GraphError(f"alias chain loops: {loop}")
            seen.append(r)
        root[b] = r

    implied = implied_costs(size, alias_of, parent)
    size_alloc: list[int] = [0] * nb
    size_free: list[int] = [0] * nb
    for b, spec in enumerate(specs):
        what = f"buffer {spec.name!r}"
        if isinstance(spec, InputSpec):
            cost = size[b] if spec.freeable else 0
            size_alloc[b] = size_free[b] = cost
            continue
        size_alloc[b] = implied[b][0] if spec.size_alloc is None else resolve_size(spec.size_alloc, hints, what + " size_alloc")[0]
        size_free[b] = implied[b][1] if spec.size_free is None else resolve_size(spec.size_free, hints, what + " size_free")[0]

    # Node reads: declared, then forwarded to alias roots.
    n = len(nodes)
    declared: list[tuple[int, ...]] = []
    reads: list[tuple[int, ...]] = []
    after: list[tuple[int, ...]] = []
    for i, node in enumerate(nodes):
        if isinstance(node.reads, str) or isinstance(node.after, str):
            raise GraphError(f"node {node.name!r}: reads and after must be lists of names, not a string")
        d = _unique_in_order(lookup(r, f"node {node.name!r}") for r in node.reads)
        for b in d:
            if producer[b] == i:
                raise GraphError(f"node {node.name!r} reads its own output {specs[b].name!r}")
        declared.append(d)
        # Inductor lists a node's pred_buffers by producer, graph inputs last.
        forwarded = set(d) | {root[b] for b in d}
        reads.append(tuple(sorted(forwarded, key=lambda b: (is_input[b], b))))
        a = []
        for other in node.after:
            if other not in node_index:
                raise GraphError(f"node {node.name!r} must run after unknown node {other!r}")
            if node_index[other] == i:
                raise GraphError(f"node {node.name!r} must run after itself")
            a.append(node_index[other])
        after.append(_unique_in_order(a))

    for b in range(nb):
        if alias_of[b] is not None and root[b] not in reads[producer[b]]:
            raise GraphError(
                f"alias {specs[b].name!r} of {specs[alias_of[b]].name!r}: its producer "
                f"{node_names[producer[b]]!r} must read the buffer it renames or views"
            )
        p = parent[b]
        if p is not None and producer[p] != producer[b] and p not in reads[producer[b]]:
            raise GraphError(
                f"multi-output child {specs[b].name!r}: its producer {node_names[producer[b]]!r} "
                f"must read the parent {specs[p].name!r}"
            )

    readers: list[list[int]] = [[] for _ in range(nb)]
    for i in range(n):
        for b in reads[i]:
            readers[b].append(i)

    preds: list[tuple[int, ...]] = []
    for i in range(n):
        ps = [producer[b] for b in reads[i] if producer[b] is not None and producer[b] != i]
        preds.append(_unique_in_order(ps + list(after[i])))
    succ_lists: list[list[int]] = [[] for _ in range(n)]
    outputs_of: list[list[int]] = [[] for _ in range(n)]
    for b in range(nb):
        if producer[b] is not None:
            outputs_of[producer[b]].append(b)
    # Successors in Inductor's order: readers of each output buffer, then ordering-only ones.
    after_succ: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for p in after[i]:
            after_succ[p].append(i)
    for i in range(n):
        seq = [r for b in outputs_of[i] for r in readers[b] if r != i] + after_succ[i]
        succ_lists[i] = list(_unique_in_order(seq))

    is_output = [False] * nb
    for o in outputs:
        is_output[lookup(o, "graph outputs")] = True

    graph = Graph(
        name=name,
        size_hints=hints,
        node_names=node_names,
        buffer_names=tuple(s.name for s in specs),
        size=tuple(size),
        symbolic_size=tuple(symbolic),
        size_alloc=tuple(size_alloc),
        size_free=tuple(size_free),
        producer=tuple(producer),
        is_input=is_input,
        freeable=freeable,
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
        succs=tuple(tuple(s) for s in succ_lists),
        alloc_size=tuple(sum(size_alloc[b] for b in outputs_of[i]) for i in range(n)),
        workspace=tuple(resolve_size(nd.workspace, hints, f"node {nd.name!r} workspace")[0] for nd in nodes),
        unique_workspace=tuple(
            resolve_size(nd.unique_workspace, hints, f"node {nd.name!r} unique_workspace")[0] for nd in nodes
        ),
        node_index=node_index,
        buffer_index=buffer_index,
    )
    _check_acyclic(graph)
    return graph


def _check_acyclic(graph: Graph) -> None:
    """Kahn's algorithm; on failure walk predecessors among the unscheduled to print a cycle."""
    n = graph.num_nodes
    indegree = [len(p) for p in graph.preds]
    ready = [v for v in range(n) if indegree[v] == 0]
    done = 0
    while ready:
        v = ready.pop()
        done += 1
        for s in graph.succs[v]:
            indegree[s] -= 1
            if indegree[s] == 0:
                ready.append(s)
    if done == n:
        return
    stuck = next(v for v in range(n) if indegree[v] > 0)
    position: dict[int, int] = {}
    walk: list[int] = []
    v = stuck
    while v not in position:
        position[v] = len(walk)
        walk.append(v)
        v = next(p for p in graph.preds[v] if indegree[p] > 0)
    loop = walk[position[v]:]  # each entry's successor in the walk is one of its predecessors
    loop.reverse()
    names = [graph.node_names[x] for x in loop]
    raise CycleError(names + [names[0]])
