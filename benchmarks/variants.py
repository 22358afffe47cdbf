"""Variants: how a benchmark compiles its workload, as values; and the records their compiles leave.

A :class:`Variant` is one column of a benchmark (eager, stock ``torch.compile``,
our hook with some :class:`~reorder.inductor.session.HookOptions`, stock with
an Inductor config change, ...): its name, the factory of the context its
compile runs in, and the config that factory takes. The real-model benchmark
(:mod:`benchmarks.real`), the slab benchmark (:mod:`benchmarks.slab`), the
fusion-guard benchmark (:mod:`benchmarks.fusion_guard`) and the compile-time
benchmark (:mod:`benchmarks.compile_overhead`) all run the same values::

    compiled = variant.compile(fn)              # torch.compile, or fn itself for eager
    with variant.enter(training) as session:    # the hook's Session, or None without the hook
        compiled(x)
    result["records"] = records_json(session)   # every record's to_dict(), with its "kind"

Results written before the hook had sessions hold the same facts under other
keys; :func:`load_records` reads both shapes into the typed records.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

from reorder.inductor.session import (FallbackRecord, GuardRecord, HookOptions, OrderRecord, Record, Session,
                                      SlabRecord, record_from_dict)

__all__ = ["ContextFactory", "Variant", "eager", "functorch", "hooked", "load_records", "own_inductor",
           "record_from_dict", "records_json", "stock"]

#: ``factory(config, training)`` -> the context a variant's compile (its first call) runs in. What the context
#: yields is what the compile recorded: the hook's :class:`Session`, or None where nothing records.
ContextFactory = Callable[[Any, bool], ContextManager]


@dataclass(frozen=True)
class Variant:
    """One way to run a workload, as a value.

    name: the variant's key in results and its column in reports.
    description: one line for a report's legend.
    context: the :data:`ContextFactory` its compile runs in; None: eager (no ``torch.compile``).
    config: what ``context`` is given: :class:`HookOptions` for the hook
        (:func:`hooked`), a tuple of ``(name, value)`` Inductor config changes
        for stock (:func:`stock`) or AOTAutograd config changes
        (:func:`functorch`); each benchmark's own factories document theirs.
    training: whether the variant applies to a training step.
    """

    name: str
    description: str
    context: ContextFactory | None
    config: Any = None
    training: bool = True

    @property
    def compiled(self) -> bool:
        return self.context is not None

    def compile(self, fn: Callable, own_cache: bool = False) -> Callable:
        """``torch.compile(fn)``, or ``fn`` itself for eager (compiling is lazy: the first call compiles).

        ``own_cache``: compile with an Inductor backend of this call's own identity. Dynamo keeps compiled code
        per function and backend, and two ``torch.compile`` calls with the default backend count as one: a
        variant compiled after another, in the same process and without ``torch._dynamo.reset()``, would run
        the first one's code. Variants kept side by side (timed in alternation) need their own.
        """
        if not self.compiled:
            return fn
        import torch

        return torch.compile(fn, backend=own_inductor()) if own_cache else torch.compile(fn)

    def enter(self, training: bool) -> ContextManager:
        """The context the first call (the compile) runs in; it yields what the compile recorded (None for eager)."""
        if self.context is None:
            return contextlib.nullcontext()
        return self.context(self.config, training)

    def with_hook(self, **fields) -> Variant:
        """This hook variant with some :class:`HookOptions` fields changed (say ``capture_dir``)."""
        if not isinstance(self.config, HookOptions):
            raise ValueError(f"variant {self.name!r}: with_hook needs a hook variant, its config is {self.config!r}")
        return dataclasses.replace(self, config=dataclasses.replace(self.config, **fields))


def own_inductor() -> Callable:
    """Inductor as a ``torch.compile`` backend that equals no other (see :meth:`Variant.compile`): compiled code
    is kept per backend, so variants compiled with one each never run each other's code."""
    return _OwnInductor()


class _OwnInductor:
    """Inductor as a ``torch.compile`` backend of its own identity (:func:`own_inductor`)."""

    def __call__(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs)


def hook_session(options: HookOptions, training: bool = False) -> ContextManager[Session]:
    """``reorder.inductor.use(options)``: our hook installed for the block, yielding its :class:`Session`."""
    from reorder import inductor

    return inductor.use(options)


def _inductor_config(changes: tuple[tuple[str, Any], ...], training: bool = False) -> ContextManager[None]:
    """Stock Inductor with ``changes`` to ``torch._inductor.config`` for the block (none: stock as configured)."""
    if not changes:
        return contextlib.nullcontext()
    from torch._inductor import config

    return config.patch(dict(changes))


def _functorch_config(changes: tuple[tuple[str, Any], ...], training: bool = False) -> ContextManager[None]:
    """Stock Inductor with ``changes`` to ``torch._functorch.config`` (AOTAutograd's partitioner) for the block."""
    from torch._functorch import config

    return config.patch(dict(changes))


def eager(description: str = "no compile") -> Variant:
    return Variant("eager", description, None)


def stock(name: str = "stock", description: str = "torch.compile, Inductor as configured by default",
          training: bool = True, **changes) -> Variant:
    """Stock ``torch.compile``; ``changes`` to Inductor's config (say ``memory_planning=True``) for its compile."""
    return Variant(name, description, _inductor_config, tuple(sorted(changes.items())), training)


def functorch(name: str, description: str, **changes) -> Variant:
    """Stock ``torch.compile`` with ``changes`` to ``torch._functorch.config`` (say
    ``activation_memory_budget=0.5``) for its compile."""
    return Variant(name, description, _functorch_config, tuple(sorted(changes.items())))


def hooked(name: str, description: str, training: bool = True, **fields) -> Variant:
    """``torch.compile`` under ``reorder.inductor.use(HookOptions(**fields))``, without a memory budget unless
    ``fields`` name one: the benchmarks' columns of our order, pools and guard were measured so (``use()``'s own
    default on a training step, a budget of 1.0, is the budget benchmark's point at 1.0)."""
    return Variant(name, description, hook_session, HookOptions(**{"memory_budget": None, **fields}), training)


def records_json(session: Session | None) -> list[dict]:
    """What a result file keeps of a session: every record's ``to_dict()`` (none without the hook)."""
    return session.to_json() if session is not None else []


def load_records(result: dict) -> tuple[Record, ...]:
    """The records of one variant's result dict, whichever shape it was written in.

    Current results hold ``"records"``: each record's ``to_dict()``. Results
    written before sessions hold the hook's module-level entries instead:
    ``"graphs"`` (the pass's report dicts, ``{"graph", "fallback"}`` where it
    fell back), ``"fusion_guard"`` (``{"graph", "fusion_guard": {...}}``, with
    ``"failed"`` inside where the guard turned itself off) and ``"slab_plans"``
    (``"plans"`` in the slab benchmark's cache: pool dicts, or
    ``{"graph", "fallback"}``). Those become the same records, graphs first,
    then guards, then slabs.
    """
    if "records" in result:
        return tuple(record_from_dict(d) for d in result["records"])
    converted = []
    for entry in result.get("graphs", []):
        converted.append({"kind": FallbackRecord.kind, "graph": entry["graph"], "stage": "order",
                          "reason": entry["fallback"]} if "fallback" in entry else {"kind": OrderRecord.kind, **entry})
    for entry in result.get("fusion_guard", []):
        converted.append({"kind": GuardRecord.kind, "graph": entry["graph"], **entry["fusion_guard"]})
    for entry in result.get("slab_plans", result.get("plans", [])):
        converted.append({"kind": FallbackRecord.kind, "graph": entry["graph"], "stage": "slab",
                          "reason": entry["fallback"]} if "fallback" in entry else {"kind": SlabRecord.kind, **entry})
    return tuple(record_from_dict(d) for d in converted)
