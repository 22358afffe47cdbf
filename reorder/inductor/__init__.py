"""Inductor integration: the only package that touches Inductor's internals, one module per concern.

* :mod:`~reorder.inductor.session`: :class:`HookOptions` (what the hook is asked for) and
  :class:`Session` with its typed records (what its compiles did).
* :mod:`~reorder.inductor.install`: :func:`use`, :func:`install`, :func:`uninstall`.
* :mod:`~reorder.inductor.adapter`: scheduler nodes -> our :class:`~reorder.graph.Graph`.
* :mod:`~reorder.inductor.reorder_pass`: the post-fusion pass (:class:`ReorderPass`).
* :mod:`~reorder.inductor.fusion_guard`: :class:`FusionGuard`, the ``InductorChoices`` that blocks
  fusions raising the peak (``use(fusion_guard=True)``).
* :mod:`~reorder.inductor.partitioner`: :class:`BudgetPartitioner`, what the backward recomputes for a
  budget on a training step's peak (``use(memory_budget=...)``; 1.0 by default: stock's partition, its two
  graphs ordered by the code Inductor generates and guarded); :mod:`~reorder.inductor.joint_adapter`,
  AOTAutograd's joint graph -> :class:`~reorder.budget.step_graph.StepGraph`.
* :mod:`~reorder.inductor.figures`: Inductor's own figures (torch's ``memory.py`` on our graphs or on real nodes).
* :mod:`~reorder.inductor.capture`: writing compiled graphs and Inductor's figures to files.
* :mod:`~reorder.inductor.slab`: ``use(slab=True)``, the wrapper's buffers in pools at our offsets;
  :mod:`~reorder.inductor.slab_check`, its poison mode's run-time checks.

Typical use::

    with reorder.inductor.use() as session:
        compiled = torch.compile(model)
        compiled(x).sum().backward()
    print(session.summary())
"""

import logging

from .adapter import graph_from_scheduler
from .fusion_guard import FusionGuard
from .install import install, uninstall, use
from .partitioner import BudgetPartitioner
from .releases import SUPPORTED_RELEASES, hook_refusal
from .reorder_pass import ReorderPass
from .session import (CacheHitRecord, FallbackRecord, GuardRecord, HookOptions, OrderRecord, PartitionRecord, Session,
                      SlabRecord)

__all__ = ["SUPPORTED_RELEASES", "BudgetPartitioner", "CacheHitRecord", "FallbackRecord", "FusionGuard", "GuardRecord", "HookOptions",
           "OrderRecord", "PartitionRecord", "ReorderPass", "Session", "SlabRecord", "graph_from_scheduler", "install",
           "uninstall", "use"]

if (_refusal := hook_refusal()) is not None:  # said once at import, and again at each use()
    logging.getLogger("reorder").warning("reorder: %s", _refusal)
