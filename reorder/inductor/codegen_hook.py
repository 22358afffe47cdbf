"""The one point where our code generation meets Inductor's: ``PythonWrapperCodegen.run_wrapper_ir_passes``.

Inductor runs the wrapper's memory passes once per compiled graph, after its
kernels are generated and before the wrapper's text is written. The hook
runs there, for the compile's own session
(:func:`~reorder.inductor.reorder_pass.compiling_session`):

0. the fusion guard's record of the graph is closed (its fusions and our
   order are done: :func:`~reorder.inductor.fusion_guard.finish_guard`);
1. the memory planning: our pools with ``slab=True``
   (:func:`~reorder.inductor.slab.plan_slab`), else Inductor's own;
2. then what the planned code allocates is read
   (:func:`~reorder.inductor.generated_code.read_generated`), kept in the
   session (``session.generated_code(graph)``) and, for a graph of a
   budgeted region, checked against its budget
   (:func:`~reorder.inductor.compiled_budget.check_generated`).

A compile of no session of ours, or of a session that asked for none of
the slab, the budget and the guard, runs Inductor's passes untouched. The
class is shared by every thread, so the patch is process-wide and
counted: the last :func:`uninstall_codegen` puts back exactly the method
the first :func:`install_codegen` replaced.
"""

from __future__ import annotations

import logging
import threading

from .compiled_budget import check_generated
from .fusion_guard import finish_guard
from .generated_code import read_generated
from .reorder_pass import compiling_session, graph_being_compiled
from .slab import plan_slab

__all__ = ["install_codegen", "uninstall_codegen", "wrapper_passes"]

log = logging.getLogger("reorder")

#: The process-wide patch: the method it replaced and how many installations use it.
_patch_lock = threading.Lock()
_patch: dict = {"original": None, "users": 0}


def wrapper_passes(wrapper, previous, is_inference: bool) -> None:
    """``run_wrapper_ir_passes`` for the compiling session (see the module docstring); ``previous`` is
    Inductor's own."""
    session = compiling_session()
    if session is not None:
        finish_guard(session.token, graph_being_compiled())  # fusion and our order are done: the guard's record
    if session is not None and session.options.slab:
        plan_slab(wrapper, previous, is_inference, session)
    else:
        previous(wrapper, is_inference)
    if session is None:
        return
    name = graph_being_compiled()
    try:
        code = read_generated(wrapper.lines, name)
    except Exception as exc:  # noqa: BLE001 - the user's compile must go on
        log.warning("reorder: could not read what the compiled %s allocates: %s: %s", name, type(exc).__name__, exc)
        return
    session.note_generated(code.plain())
    check_generated(session, name, code)


def install_codegen() -> None:
    """Patch ``PythonWrapperCodegen.run_wrapper_ir_passes`` (once per process, counted) with :func:`wrapper_passes`."""
    from torch._inductor.codegen import wrapper as wrapper_codegen

    cls = wrapper_codegen.PythonWrapperCodegen
    with _patch_lock:
        if _patch["users"] == 0:
            original = vars(cls)["run_wrapper_ir_passes"]

            def run_wrapper_ir_passes(self, is_inference: bool):
                return wrapper_passes(self, original, is_inference)

            run_wrapper_ir_passes.__wrapped__ = original
            _patch["original"] = original
            cls.run_wrapper_ir_passes = run_wrapper_ir_passes
        _patch["users"] += 1


def uninstall_codegen() -> None:
    """Undo one :func:`install_codegen`; the last one puts back exactly the method the first replaced."""
    from torch._inductor.codegen import wrapper as wrapper_codegen

    with _patch_lock:
        if _patch["users"] == 0:
            return
        _patch["users"] -= 1
        if _patch["users"] == 0:
            wrapper_codegen.PythonWrapperCodegen.run_wrapper_ir_passes = _patch["original"]
            _patch["original"] = None
