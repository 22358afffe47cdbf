"""Run real programs inside one planned allocation (see :func:`slab_module`)."""

from .capture import Captured, capture
from .executor import SlabModule, out_variant, slab_module
from .verifier import LifecycleVerifier

__all__ = ["Captured", "LifecycleVerifier", "SlabModule", "capture", "out_variant", "slab_module"]
