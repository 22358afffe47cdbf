"""Switching the pass on for ``torch.compile``: :func:`install`, :func:`uninstall`, :func:`use`.

:func:`install` composes with what the user already configured: a
post-fusion pass they set runs first and ours on its result; Inductor's own
``reorder_for_peak_memory`` is switched off (ours runs its three methods
already) unless ``keep_inductor_pass``, and becomes our fallback;
capturing turns Inductor's caches off, since a cache hit skips every
scheduler pass and would capture nothing. ``slab=True`` also patches the
wrapper's memory passes (:mod:`~reorder.inductor.slab`), so intermediate
buffers become views of pools at our offsets. ``fusion_guard=True`` sets
``config.inductor_choices_class`` to a
:class:`~reorder.inductor.fusion_guard.FusionGuard`. :func:`uninstall` puts
back exactly what the matching :func:`install` found.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterator, Sequence

from .fusion_guard import FusionGuard, choices_factory, forget_cached_choices, users_choices_handler
from .reorder_pass import ReorderPass
from .session import HookOptions, Session
from .slab import install_codegen, uninstall_codegen

__all__ = ["install", "uninstall", "use"]

log = logging.getLogger("reorder")

#: One entry per install() not yet undone: the configuration it replaced.
_saved: list[dict] = []

_KEYS = ("_post_fusion_custom_pass", "reorder_for_peak_memory", "force_disable_caches", "inductor_choices_class")


def install(methods: Sequence[str] | None = None, keep_inductor_pass: bool = False, compare: bool = False,
            capture_dir: str | Path | None = None, max_seconds: float = 60.0, slab: bool = False,
            poison: bool = False, fusion_guard: bool = False, fusion_slack_bytes: int = 0,
            fusion_slack_fraction: float = 0.01) -> Session:
    """Make every later ``torch.compile`` use our pass, until :func:`uninstall`; the :class:`Session` that records
    what the slab code generation did.

    ``methods``, ``compare``, ``capture_dir`` and ``max_seconds`` configure
    the :class:`~reorder.inductor.reorder_pass.ReorderPass`.
    ``keep_inductor_pass=True`` leaves Inductor's own peak-memory pass as the
    user had it (it then runs after ours, from our order).
    ``slab=True``: the Python wrapper allocates each graph's intermediate
    buffers from pools at the offsets we plan (:mod:`~reorder.inductor.slab`);
    ``poison=True`` adds its runtime checks (:mod:`~reorder.inductor.slab_check`).
    Both take part in the pass's ``uuid()``, so cached compiles agree.
    ``fusion_guard=True`` blocks fusions that raise the estimated peak by
    more than ``fusion_slack_bytes`` and ``fusion_slack_fraction`` of it
    (:class:`~reorder.inductor.fusion_guard.FusionGuard`); it refuses to
    replace a choices class the user already set (``ValueError``).
    """
    from torch._inductor import config

    saved = {key: getattr(config, key) for key in _KEYS}
    if fusion_guard and (saved["inductor_choices_class"] is not None or users_choices_handler() is not None):
        users = saved["inductor_choices_class"] or users_choices_handler()
        raise ValueError(f"fusion_guard: Inductor's choices are already set ({users!r}); the guard would replace them")
    guard = FusionGuard(fusion_slack_bytes, fusion_slack_fraction) if fusion_guard else None
    runs_inductors = bool(saved["reorder_for_peak_memory"])
    session = Session(HookOptions(methods, keep_inductor_pass, compare, capture_dir, max_seconds, slab, poison,
                                  fusion_guard, fusion_slack_bytes, fusion_slack_fraction))
    slab_options = session.options.uuid() if session.options.slab else None
    reorder_pass = ReorderPass(methods, compare, capture_dir, previous=saved["_post_fusion_custom_pass"],
                               inductor_fallback=runs_inductors and not keep_inductor_pass, max_seconds=max_seconds,
                               slab=slab_options)
    if slab_options is not None:
        saved["run_wrapper_ir_passes"] = install_codegen(session)
    _saved.append(saved)
    config._post_fusion_custom_pass = reorder_pass
    if not keep_inductor_pass:
        config.reorder_for_peak_memory = False
    if capture_dir is not None:
        if not saved["force_disable_caches"]:
            log.info("reorder: Inductor's caches are off while capturing (a cache hit would skip the pass)")
        config.force_disable_caches = True
    if guard is not None:
        config.inductor_choices_class = choices_factory(guard)
        forget_cached_choices()
    return session


def uninstall() -> None:
    """Restore exactly the configuration that the last :func:`install` replaced."""
    from torch._inductor import config

    if not _saved:
        return
    saved = _saved.pop()
    if "run_wrapper_ir_passes" in saved:
        uninstall_codegen(saved.pop("run_wrapper_ir_passes"))
    for key, value in saved.items():
        setattr(config, key, value)
    forget_cached_choices()


@contextlib.contextmanager
def use(methods: Sequence[str] | None = None, keep_inductor_pass: bool = False, compare: bool = False,
        capture_dir: str | Path | None = None, max_seconds: float = 60.0, slab: bool = False,
        poison: bool = False, fusion_guard: bool = False, fusion_slack_bytes: int = 0,
        fusion_slack_fraction: float = 0.01) -> Iterator[Session]:
    """Within the block, every ``torch.compile`` uses our pass (and our pools with ``slab=True``, our
    fusion guard with ``fusion_guard=True``, see :func:`install`); the previous configuration comes back on exit."""
    session = install(methods, keep_inductor_pass, compare, capture_dir, max_seconds, slab, poison,
                      fusion_guard, fusion_slack_bytes, fusion_slack_fraction)
    try:
        yield session
    finally:
        uninstall()
