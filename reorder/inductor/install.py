"""Switching the hook on for ``torch.compile``: :func:`install`, :func:`uninstall`, :func:`use`.

All three take one :class:`~reorder.inductor.session.HookOptions` (or its
fields as keywords) and give a :class:`~reorder.inductor.session.Session`,
into which every later compile records what it did.

:func:`install` composes with what the user already configured: a
post-fusion pass they set runs first and ours on its result; Inductor's own
``reorder_for_peak_memory`` is switched off (ours runs its three methods
already) unless ``keep_inductor_pass``, and becomes our fallback;
capturing turns Inductor's caches off, since a cache hit skips every
scheduler pass and would capture nothing. ``slab=True`` and ``memory_budget``
also patch the wrapper's memory passes (:mod:`~reorder.inductor.codegen_hook`):
intermediate buffers become views of pools at our offsets, and a budget is
checked on what the generated code allocates. The fusion guard
(``fusion_guard=True``, or a ``memory_budget`` with ``fusion_guard`` left None) sets
``config.inductor_choices_class`` to a factory of
:class:`~reorder.inductor.fusion_guard.FusionGuard`. ``memory_budget`` sets
``config.custom_partitioner_fn`` to a
:class:`~reorder.inductor.partitioner.BudgetPartitioner`. ``scalar_aliases``
(on by default) appends :class:`~reorder.inductor.scalar_aliases.ScalarAliases`
to the user's ``config.joint_custom_post_pass``, after theirs (once, when
installations nest). :func:`uninstall`
puts back exactly what the matching :func:`install` found.

Inductor's configuration is per thread (each value is a ``ContextVar``), so
installations are kept per context too: an :func:`uninstall` undoes the
latest :func:`install` of its own thread.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from dataclasses import dataclass
from typing import Iterator

from ..errors import ReorderError
from .adapter import fx_graph_cache_hits
from .codegen_hook import install_codegen, uninstall_codegen
from .fusion_guard import choices_factory, forget_cached_choices, guard_for, users_choices_handler
from .partitioner import BudgetPartitioner
from .releases import hook_refusal
from .reorder_pass import ReorderPass
from .scalar_aliases import ScalarAliases
from .session import FallbackRecord, HookOptions, Session, asks_for_stocks_step

__all__ = ["install", "uninstall", "use"]

log = logging.getLogger("reorder")

#: The Inductor settings an installation may change.
_KEYS = ("_post_fusion_custom_pass", "reorder_for_peak_memory", "force_disable_caches", "inductor_choices_class",
         "custom_partitioner_fn", "joint_custom_post_pass")


@dataclass(frozen=True)
class _Installation:
    """One :func:`install` not yet undone: its session, the settings it replaced (none where the hook stayed
    off under an unsupported torch release) and whether it patched Inductor's code generation."""

    session: Session
    config: dict
    hooked: bool = True
    codegen: bool = False


#: This context's installations, innermost last.
_installed: contextvars.ContextVar[tuple[_Installation, ...]] = contextvars.ContextVar("reorder_installed",
                                                                                     default=())


def install(options: HookOptions | None = None, **fields) -> Session:
    """Make every later ``torch.compile`` use our pass, until :func:`uninstall`; return the new session.

    ``options`` is a :class:`~reorder.inductor.session.HookOptions` and
    ``fields`` replace its fields by name (``install(slab=True)``); an unknown
    name raises :class:`~reorder.errors.ReorderError` listing the valid ones.
    ``fusion_guard=True`` refuses (:class:`~reorder.errors.ReorderError`) to
    replace a choices class the user already set (the guard a memory budget
    turns on by itself gives way to it, with a warning), and a ``memory_budget``
    below 1.0 or in bytes a partitioner (``config.custom_partitioner_fn``) the
    user already set; at 1.0 (the default), which asks for the partition the
    compile makes without us, the user's partitioner stays, no region is
    budgeted, and the session holds a :class:`FallbackRecord` (stage
    ``"partition"``) that says so.

    Under a torch release the hook is not tested with
    (:mod:`~reorder.inductor.releases`) it changes nothing: it logs one
    warning, and the session holds one :class:`FallbackRecord` (stage
    ``"install"``) that says why.
    """
    options = HookOptions.build(options, **fields)
    refusal = hook_refusal()
    if refusal is not None:
        log.warning("reorder: %s", refusal)
        session = Session(options)
        session.add(FallbackRecord(graph="every graph", stage="install", reason=refusal))
        _installed.set((*_installed.get(), _Installation(session, {}, hooked=False)))
        return session

    from torch._inductor import config
    from torch._inductor.custom_graph_pass import get_custom_graph_passes

    saved = {key: getattr(config, key) for key in _KEYS}
    users_partitioner = _users(saved["custom_partitioner_fn"])
    partitions = options.memory_budget is not None
    kept_partitioner = None
    if partitions and users_partitioner is not None:
        if not asks_for_stocks_step(options.memory_budget):
            raise ReorderError(f"hook option memory_budget={options.memory_budget!r}: Inductor's partitioner is "
                               f"already set (config.custom_partitioner_fn={users_partitioner!r}); the budget "
                               f"partitioner would replace it")
        partitions = False
        kept_partitioner = (f"a partitioner is already set (config.custom_partitioner_fn={users_partitioner!r}), "
                            f"and memory_budget=1.0 asks for the partition the compile makes without us: it stays, "
                            f"and no region is budgeted")
        log.info("reorder: %s", kept_partitioner)
    users_choices = _users(saved["inductor_choices_class"]) or users_choices_handler()
    guard = options.guards_fusions and (partitions or bool(options.fusion_guard))
    if guard and users_choices is not None:
        if options.fusion_guard:
            raise ReorderError(f"hook option fusion_guard=True: Inductor's choices are already set "
                               f"({users_choices!r}); the guard would replace them")
        # at 1.0 (the default) the verdict does not rest on the guard: nothing to warn about
        log.log(logging.INFO if asks_for_stocks_step(options.memory_budget) else logging.WARNING,
                "reorder: the fusion guard that a memory budget turns on is off: Inductor's choices are already set "
                "(%r); real peaks may then exceed the budget's estimate", users_choices)
        guard = False
    session = Session(options)
    session.note_cache_hits(fx_graph_cache_hits())
    if kept_partitioner is not None:
        session.add(FallbackRecord(graph="every region", stage="partition", reason=kept_partitioner))
    runs_inductors = bool(saved["reorder_for_peak_memory"])
    reorder_pass = ReorderPass(session, previous=saved["_post_fusion_custom_pass"],
                               inductor_fallback=runs_inductors and not options.keep_inductor_pass)
    codegen = bool(options.slab or partitions or guard)
    if codegen:
        install_codegen()
    _installed.set((*_installed.get(), _Installation(session, saved, codegen=codegen)))
    config._post_fusion_custom_pass = reorder_pass
    if not options.keep_inductor_pass:
        config.reorder_for_peak_memory = False
    if options.capture_dir is not None:
        if not saved["force_disable_caches"]:
            log.info("reorder: Inductor's caches are off while capturing (a cache hit would skip the pass)")
        config.force_disable_caches = True
    if guard or _enclosing(saved["inductor_choices_class"]):  # ours, or none for the block: not the outer one's
        config.inductor_choices_class = choices_factory(session) if guard else None
        forget_cached_choices()
    if partitions or _enclosing(saved["custom_partitioner_fn"]):
        config.custom_partitioner_fn = BudgetPartitioner(session) if partitions else None
    joint_passes = get_custom_graph_passes(saved["joint_custom_post_pass"])
    if options.scalar_aliases and not any(isinstance(p, ScalarAliases) for p in joint_passes):
        config.joint_custom_post_pass = [*joint_passes, ScalarAliases()]
    return session


def _users(value):
    """A configuration value as the user set it: None where it is unset or an enclosing installation's."""
    return None if _enclosing(value) else value


def _enclosing(value) -> bool:
    """Whether a configuration value is an enclosing installation's of ours (its budget partitioner or its guard's
    factory), which an installation inside it replaces for its block (and uninstall puts back), not the user's."""
    return isinstance(value, BudgetPartitioner) or getattr(value, "func", None) is guard_for


def uninstall() -> Session | None:
    """Restore exactly the configuration that this thread's latest :func:`install` replaced; return its session.

    The session records the FX graph cache hits of its compiles and then
    takes no more records. Without an installation this does nothing.
    """
    installed = _installed.get()
    if not installed:
        return None
    last = installed[-1]
    _installed.set(installed[:-1])
    if last.hooked:
        from torch._inductor import config

        if last.codegen:
            uninstall_codegen()
        for key, value in last.config.items():
            setattr(config, key, value)
        forget_cached_choices()
        last.session.note_cache_hits(fx_graph_cache_hits())
    last.session.close()
    return last.session


@contextlib.contextmanager
def use(options: HookOptions | None = None, **fields) -> Iterator[Session]:
    """Within the block, every ``torch.compile`` uses our pass (and our pools with ``slab=True``, our fusion guard
    with ``fusion_guard=True``, our partitioner with ``memory_budget``; see :func:`install`); yields the session,
    and restores the configuration on exit."""
    session = install(options, **fields)
    try:
        yield session
    finally:
        uninstall()
