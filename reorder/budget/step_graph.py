"""A training step's joint forward-backward graph as plain data: what may be saved, recomputed, fused.

AOTAutograd traces a training step as one *joint* graph: the forward, then
the backward that reads the tangents (the gradients of the forward's
outputs). A partitioner cuts it in two graphs: which forward values the
forward saves for the backward, and which the backward computes again.
:class:`StepGraph` is that joint graph with everything the decision needs and
nothing of torch: nodes in the joint graph's order, each with

* its ``role``: ``"primal"`` (an input of the forward: parameters and the
  batch, live before the step, so saving one costs nothing), ``"tangent"`` (an
  input of the backward), ``"forward"`` (the forward's outputs need it),
  ``"backward"`` (it reads a tangent, so only the backward can run it) or
  ``"either"`` (the backward needs it but it reads no tangent: it runs in the
  forward and is saved, or in the backward);
* the bytes of the storage it allocates, and the node whose storage it shares
  when it is a view (``view_of``) or an element of a multi-output node
  (``element_of``);
* how Inductor's fusion treats it: a ``pointwise`` node gets no buffer of its
  own when every reader is ``fusible`` (it is computed inside their kernels);
  matrix products, convolutions and attention are not fusible, so what they
  read is materialised; ``heavy``: its code calls an op Inductor counts as
  heavy on the CPU (``exp``, ``log``, ``sigmoid``, ``tanh``, ...), so that
  Inductor stores a value whose code calls one (its own, or that of a
  pointwise node computed inside it) once two nodes read it, rather than
  compute it again in each reader's kernel; the graph's ``realize_reads``
  does the same for a value whose code reads more stored values than it
  (a batch normalisation's output reads the convolution, its mean, variance,
  weight and bias: five); ``reduction``: a reduction (a sum,
  a mean), whose value Inductor stores for its readers to load;
* whether it may be recomputed (``recomputable``: not random, not a
  collective, no side effect, not pinned by a checkpoint policy), whether it
  may be saved (``saveable``), and what recomputing it costs (``cost``:
  floating-point operations for matrix products, convolutions and attention,
  one per element written for the others);
* ``available_to_backward``: Inductor requires the backward to have it
  (a backward output that reads no tangent), computed in either graph;
* ``size_symbol``: its value is a symbolic size (a ``SymInt`` under dynamic
  shapes: a primal such as a batch size, or an op on such sizes), which the
  backward may read at no cost: Inductor hands every size the backward needs
  to it beside the saved tensors, whatever the partition;
* ``owned`` (primals only): the step holds this input's bytes itself: a
  copy Inductor makes in another layout before using it (channels-last for
  convolutions), or an activation an earlier compiled region of the step
  handed over. The forward allocates (or receives) it at its start and frees
  it after its last reader unless it saves it;
* ``scratch``: bytes the node's kernel allocates and frees while it runs (an
  extern kernel's workspace), and ``scratch_channels_last`` the same when its
  program runs in channels-last, which a node that ``sets_channels_last``
  (a convolution, where Inductor's layout optimisation applies; under torch
  2.15 a convolution's backward too) turns on for
  the program that runs it; ``copied``: the arguments Inductor's lowering
  copies into another stride order before the kernel runs, in a program
  that is not channels-last, each with the copy's bytes. Only an argument
  that reaches the kernel in a fixed layout is copied (an input of the
  program, an extern kernel's output, a view): a value the program's own
  pointwise code computes is laid out as the kernel asks, for nothing.

Built once from :class:`StepNodeSpec` values by :func:`build_step_graph`,
validated, never changed; every fact is a tuple indexed by node id.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Sequence

from ..errors import GraphError

__all__ = ["ROLES", "StepGraph", "StepNodeSpec", "build_step_graph"]

ROLES = ("primal", "tangent", "forward", "backward", "either")


@dataclass(frozen=True, slots=True)
class StepNodeSpec:
    """One node of the joint graph (see the module docstring for each field)."""

    name: str
    role: str
    args: Sequence[str] = ()
    bytes: int = 0
    view_of: str | None = None
    element_of: str | None = None
    pointwise: bool = False
    fusible: bool = False
    heavy: bool = False
    reduction: bool = False
    recomputable: bool = True
    saveable: bool = True
    cost: int = 0
    available_to_backward: bool = False
    size_symbol: bool = False
    owned: bool = False
    scratch: int = 0
    scratch_channels_last: int = 0
    sets_channels_last: bool = False
    copied: Sequence[tuple[str, int]] = ()


@dataclass(frozen=True, eq=False)
class StepGraph:
    """The joint graph of a training step as arrays indexed by node id (build it with :func:`build_step_graph`).

    ``forward_outputs`` and ``backward_outputs`` are node ids (the forward's
    results, the gradients), in the graph's output order. ``realize_reads``:
    a pointwise value whose code reads more than this many stored values (its
    own reads and those of the pointwise values computed inside it, each
    storage once) is stored once two nodes read it, as Inductor stores it
    (``config.realize_reads_threshold``); None: no such rule.
    """

    name: str
    node_names: tuple[str, ...]
    role: tuple[str, ...]
    args: tuple[tuple[int, ...], ...]
    bytes: tuple[int, ...]
    view_of: tuple[int | None, ...]
    element_of: tuple[int | None, ...]
    pointwise: tuple[bool, ...]
    fusible: tuple[bool, ...]
    heavy: tuple[bool, ...]
    reduction: tuple[bool, ...]
    recomputable: tuple[bool, ...]
    saveable: tuple[bool, ...]
    cost: tuple[int, ...]
    available_to_backward: tuple[bool, ...]
    size_symbol: tuple[bool, ...]
    owned: tuple[bool, ...]
    scratch: tuple[int, ...]
    scratch_channels_last: tuple[int, ...]
    sets_channels_last: tuple[bool, ...]
    copied: tuple[tuple[tuple[int, int], ...], ...]
    forward_outputs: tuple[int, ...]
    backward_outputs: tuple[int, ...]
    realize_reads: int | None = None

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @cached_property
    def index(self) -> dict[str, int]:
        return {name: v for v, name in enumerate(self.node_names)}

    @cached_property
    def users(self) -> tuple[tuple[int, ...], ...]:
        """Each node's readers, in node order."""
        users: list[list[int]] = [[] for _ in range(self.num_nodes)]
        for v, args in enumerate(self.args):
            for a in args:
                users[a].append(v)
        return tuple(tuple(u) for u in users)

    @cached_property
    def storage(self) -> tuple[int, ...]:
        """The node whose allocation each node's value lives in: itself, or the root of its view chain."""
        root = list(range(self.num_nodes))
        for v in range(self.num_nodes):  # a view comes after its base
            if self.view_of[v] is not None:
                root[v] = root[self.view_of[v]]
        return tuple(root)

    @cached_property
    def saved_bytes(self) -> tuple[int, ...]:
        """What keeping each node's value for the backward holds: its storage's bytes, 0 for a primal the step does
        not own."""
        return tuple(0 if self.costs_nothing[self.storage[v]] else self.bytes[self.storage[v]]
                     for v in range(self.num_nodes))

    @cached_property
    def costs_nothing(self) -> tuple[bool, ...]:
        """Values that live before the step and that it does not own: primals, but ``owned`` ones."""
        return tuple(r == "primal" and not o for r, o in zip(self.role, self.owned))

    def ids(self, names: Iterable[str]) -> list[int]:
        """Node ids of ``names``; a name the graph lacks raises :class:`~reorder.errors.GraphError`."""
        try:
            return [self.index[n] for n in names]
        except KeyError as exc:
            raise GraphError(f"step graph {self.name!r} has no node named {exc.args[0]!r}") from None


def build_step_graph(nodes: Sequence[StepNodeSpec], forward_outputs: Iterable[str],
                     backward_outputs: Iterable[str], name: str = "step",
                     realize_reads: int | None = None) -> StepGraph:
    """Check the specs and build the :class:`StepGraph` (``realize_reads``: see there).

    Raises :class:`~reorder.errors.GraphError` for an unknown role, a
    duplicate name, an argument, base or parent that is not an earlier node,
    a base or parent that is not among the node's arguments (a view reads its
    base, an element its multi-output node: the programs' graphs are built on
    that), negative bytes, cost or scratch, a copied argument that is not one
    of the node's arguments or has negative bytes, an output that is not a node, or a
    ``realize_reads`` that is not a whole number >= 0.
    """
    if realize_reads is not None and (not isinstance(realize_reads, int) or isinstance(realize_reads, bool)
                                      or realize_reads < 0):
        raise GraphError(f"step graph {name!r}: realize_reads={realize_reads!r}: expected None or an int >= 0")
    index: dict[str, int] = {}
    for v, spec in enumerate(nodes):
        if not isinstance(spec, StepNodeSpec):
            raise GraphError(f"step node #{v} must be a StepNodeSpec, got {type(spec).__name__}")
        if spec.name in index:
            raise GraphError(f"step graph {name!r}: duplicate node name {spec.name!r}")
        if spec.role not in ROLES:
            raise GraphError(f"step node {spec.name!r}: role {spec.role!r} is not one of {', '.join(ROLES)}")
        if min(spec.bytes, spec.cost, spec.scratch, spec.scratch_channels_last) < 0:
            raise GraphError(f"step node {spec.name!r}: bytes, cost and scratch must be >= 0")
        for argument, copy_bytes in spec.copied:
            if argument not in spec.args or not isinstance(copy_bytes, int) or copy_bytes < 0:
                raise GraphError(f"step node {spec.name!r}: copied argument {argument!r} ({copy_bytes!r} B) must be "
                                 f"one of its arguments, with bytes >= 0")
        index[spec.name] = v

    def earlier(v: int, other: str | None, what: str) -> int | None:
        if other is None:
            return None
        if index.get(other, v) >= v:
            raise GraphError(f"step node {nodes[v].name!r}: {what} {other!r} is not an earlier node")
        return index[other]

    args = tuple(tuple(dict.fromkeys(earlier(v, a, "argument") for a in spec.args)) for v, spec in enumerate(nodes))
    view_of = tuple(earlier(v, spec.view_of, "base") for v, spec in enumerate(nodes))
    element_of = tuple(earlier(v, spec.element_of, "multi-output parent") for v, spec in enumerate(nodes))
    for v, spec in enumerate(nodes):
        for what, other in (("base", view_of[v]), ("multi-output parent", element_of[v])):
            if other is not None and other not in args[v]:
                raise GraphError(f"step node {spec.name!r}: its {what} {nodes[other].name!r} is not one of its "
                                 f"arguments")

    def outputs(names: Iterable[str], what: str) -> tuple[int, ...]:
        found = []
        for n in names:
            if n not in index:
                raise GraphError(f"step graph {name!r}: {what} output {n!r} is not a node")
            found.append(index[n])
        return tuple(found)

    return StepGraph(
        name=name,
        node_names=tuple(index),
        role=tuple(s.role for s in nodes),
        args=args,
        bytes=tuple(int(s.bytes) for s in nodes),
        view_of=view_of,
        element_of=element_of,
        pointwise=tuple(bool(s.pointwise) for s in nodes),
        fusible=tuple(bool(s.fusible) for s in nodes),
        heavy=tuple(bool(s.heavy) for s in nodes),
        reduction=tuple(bool(s.reduction) for s in nodes),
        recomputable=tuple(bool(s.recomputable) for s in nodes),
        saveable=tuple(bool(s.saveable) for s in nodes),
        cost=tuple(int(s.cost) for s in nodes),
        available_to_backward=tuple(bool(s.available_to_backward) for s in nodes),
        size_symbol=tuple(bool(s.size_symbol) for s in nodes),
        owned=tuple(bool(s.owned) for s in nodes),
        scratch=tuple(int(s.scratch) for s in nodes),
        scratch_channels_last=tuple(int(s.scratch_channels_last) for s in nodes),
        sets_channels_last=tuple(bool(s.sets_channels_last) for s in nodes),
        copied=tuple(tuple((index[a], int(b)) for a, b in s.copied) for s in nodes),
        forward_outputs=outputs(forward_outputs, "forward"),
        backward_outputs=outputs(backward_outputs, "backward"),
        realize_reads=realize_reads,
    )
