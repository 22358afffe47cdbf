"""Inductor integration: the only package that touches Inductor's internals, one module per concern.

* :mod:`~reorder.inductor.adapter`: scheduler nodes -> our :class:`~reorder.graph.Graph`.
* :mod:`~reorder.inductor.reorder_pass`: the post-fusion pass (:class:`ReorderPass`) and its :data:`reports`.
* :mod:`~reorder.inductor.fusion_guard`: :class:`FusionGuard`, the ``InductorChoices`` that blocks
  fusions raising the peak (``use(fusion_guard=True)``).
* :mod:`~reorder.inductor.install`: :func:`use`, :func:`install`, :func:`uninstall`.
* :mod:`~reorder.inductor.figures`: Inductor's own figures (torch's ``memory.py`` on our graphs or on real nodes).
* :mod:`~reorder.inductor.capture`: writing compiled graphs and Inductor's figures to files.
* :mod:`~reorder.inductor.slab`: ``use(slab=True)``, the wrapper's buffers in pools at our offsets;
  :mod:`~reorder.inductor.slab_check`, its poison mode's run-time checks.

Typical use::

    with reorder.inductor.use():
        compiled = torch.compile(model)
        compiled(x).sum().backward()
    print(reorder.inductor.reports)
"""

from .adapter import graph_from_scheduler
from .fusion_guard import FusionGuard
from .install import install, uninstall, use
from .reorder_pass import ReorderPass, reports

__all__ = ["FusionGuard", "ReorderPass", "graph_from_scheduler", "install", "reports", "uninstall", "use"]
