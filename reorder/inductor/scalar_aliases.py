"""Keep Dynamo's unspecialized floats from changing what the forward saves: :class:`ScalarAliases`.

Under ``dynamic=True`` Dynamo does not specialize Python floats: a constant
such as GPT-2's GELU factor ``sqrt(2 / pi)`` becomes a computation on a
one-element float64 graph input, and common-subexpression elimination
leaves one scalar node that every block's forward reads. Inductor's
partitioner bans recomputing any fusible user of a node that is read far
apart in the forward (``ban_recompute_used_far_apart``: recomputing the late
user would stretch the node's life); it cannot tell that stretching a
scalar's life costs nothing. So every block after the first saves an
activation that the static compile recomputes (GPT-2's training step at
sequence 32: one more tensor of batch x sequence x 512 floats, 3.5% of the
step's peak at every size).

This joint-graph pass gives each later reader of such a scalar its own
``aten.alias`` of it (a chain, so that common-subexpression elimination
cannot merge them back): the partitioner never bans a view, so each block
decides what to save as the static compile does. It touches only joint
graphs (those with tangents), and in them only one-element tensors computed
from one-element float64 graph inputs; values and kernels are unchanged (an
alias is a view).
"""

from __future__ import annotations

import logging

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from .session import source_hash

__all__ = ["ScalarAliases", "merge_identical_scalars", "scalar_inputs_derived"]

log = logging.getLogger("reorder")


def _scalar(node: torch.fx.Node) -> bool:
    """A tensor of one element, known without a guard: every dimension a plain 1 (a symbolic size is not asked
    about, which would add a guard to the shape environment, or fail on a data-dependent one)."""
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and all(type(d) is int and d == 1 for d in value.shape)


def _reads_only(node: torch.fx.Node) -> bool:
    """An operator call that writes none of its inputs."""
    return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and not node.target._schema.is_mutable)


def _pure(node: torch.fx.Node) -> bool:
    """An op whose result depends on its arguments only: neither random nor writing its inputs."""
    return _reads_only(node) and torch.Tag.nondeterministic_seeded not in node.target.tags


def scalar_inputs_derived(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The one-element tensors of ``graph`` that are float64 graph inputs (what Dynamo makes of an unspecialized
    Python float) or are computed from them and other one-element tensors only, in graph order."""
    derived: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if not _scalar(node):
            continue
        if node.op == "placeholder":
            if node.meta["val"].dtype == torch.float64:
                derived.add(node)
        elif _pure(node) and any(i in derived for i in node.all_input_nodes) \
                and all(_scalar(i) for i in node.all_input_nodes):
            derived.add(node)
    return [node for node in graph.nodes if node in derived]


def merge_identical_scalars(graph: torch.fx.Graph, scalars: list[torch.fx.Node]) -> list[torch.fx.Node]:
    """Merge pure one-element computations of the float inputs' ``scalars`` (:func:`scalar_inputs_derived`)
    that repeat one another (the same op on the same inputs), and the constants that feed them, as Inductor's
    partitioner will before it partitions (``fx_graph_cse``), so that the readers :class:`ScalarAliases` sees are
    those the partitioner will see.

    Nothing returned by the graph or written in place is merged, and no uninitialised tensor (``empty``): two
    of those are two storages. Returns the scalars left, in graph order."""
    derived = set(scalars)
    first: dict[tuple, torch.fx.Node] = {}
    merged: set[torch.fx.Node] = set()
    for node in list(graph.nodes):
        if not (_scalar(node) and _pure(node) and "empty" not in node.target.__name__
                and all(_scalar(i) for i in node.all_input_nodes)
                and (node in derived or any(user in derived for user in node.users))
                and all(_keeps_its_own_storage(user) for user in node.users)):
            continue
        value = node.meta["val"]
        key = (node.target, _hashable(node.args), _hashable(sorted(node.kwargs.items())),
               value.dtype, value.device, tuple(value.shape))
        if key in first:
            node.replace_all_uses_with(first[key])
            graph.erase_node(node)
            merged.add(node)
        else:
            first[key] = node
    return [node for node in scalars if node not in merged]


def _keeps_its_own_storage(user: torch.fx.Node) -> bool:
    """A reader after which two merged nodes are indistinguishable: an op that neither writes its inputs nor
    returns a view of them, and not the graph's output (two returned tensors are two storages)."""
    return _reads_only(user) and all(r.alias_info is None for r in user.target._schema.returns)


def _hashable(value):
    """``value`` (an op's arguments) as a dict key: lists as tuples, each constant with its type (``2`` and
    ``2.0``, ``1`` and ``True`` are equal in Python, not to an op); nodes stay nodes."""
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, torch.fx.Node):
        return value
    return type(value), value


class ScalarAliases(CustomGraphPass):
    """Inductor's ``joint_custom_post_pass``: every reader of a scalar derived from a float input, after the first,
    reads its own alias of it (see the module docstring). Returns nothing; edits the graph in place."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        if not any(node.op == "placeholder" and node.name.startswith("tangents") for node in graph.nodes):
            return  # not a joint graph: nothing is partitioned
        try:
            scalars = scalar_inputs_derived(graph)
            if not scalars:
                return
            readers = self.readers(graph, merge_identical_scalars(graph, scalars))
        except Exception as error:  # never fail the user's compile: the partition is then Inductor's own
            log.warning("reorder: scalar aliases skipped (%s: %s)", type(error).__name__, error)
            return
        aliased = 0
        for scalar, later in readers.items():
            source = scalar
            for reader in later:
                with graph.inserting_before(reader):
                    alias = graph.call_function(torch.ops.aten.alias.default, (source,))
                alias.meta.update({key: scalar.meta[key] for key in _CARRIED_META if key in scalar.meta})
                alias.meta["val"] = _alias_value(source.meta["val"])
                reader.replace_input_with(scalar, alias)
                source = alias
                aliased += 1
        if aliased:
            log.info("reorder: %d readers of %d scalars derived from float inputs read their own alias",
                     aliased, len(readers))

    @staticmethod
    def readers(graph: torch.fx.Graph, scalars: list[torch.fx.Node]) -> dict[torch.fx.Node, list[torch.fx.Node]]:
        """For each of the ``scalars`` derived from float inputs, the readers that get an alias: every reader that
        is not itself such a scalar, after the first in graph order (ops that write their inputs keep the node)."""
        inner = set(scalars)
        position = {node: i for i, node in enumerate(graph.nodes)}
        readers = {}
        for scalar in scalars:
            ordered = sorted((user for user in scalar.users if user not in inner and _reads_only(user)),
                             key=position.__getitem__)
            if len(ordered) > 1:
                readers[scalar] = ordered[1:]
        return readers

    def uuid(self) -> str:
        """Our sources: Inductor's caches key compiled graphs by the passes that made them."""
        return f"reorder-scalar-aliases-{source_hash()}"


#: What an alias carries over from its scalar's meta besides its value: its checkpoint tags and provenance.
_CARRIED_META = ("recompute", "ac_graph_id", "seq_nr", "stack_trace", "original_aten")


def _alias_value(value: torch.Tensor) -> torch.Tensor:
    """The fake value of an alias of ``value``: a view of the same storage, made under its fake mode."""
    mode = getattr(value, "fake_mode", None)
    if mode is None:
        return value
    with mode:
        return torch.ops.aten.alias.default(value)
