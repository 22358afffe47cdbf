"""A memory budget for training steps: which forward values to save, which the backward recomputes.

Plain data and passes over it, no torch (the Inductor glue lives in :mod:`reorder.inductor.partitioner`):

* :mod:`~reorder.budget.step_graph`: the joint forward-backward graph (:class:`StepGraph`);
* :mod:`~reorder.budget.mincut`: a minimum s-t cut (Dinic);
* :mod:`~reorder.budget.partition`: a partition from what is saved (:func:`partition_of`), and the cheapest one
  for a price of recomputation (:func:`cheapest_partition`);
* :mod:`~reorder.budget.step_peak`: the step's estimated peak under a partition, its forward and backward as
  scheduler graphs of fused kernels;
* :mod:`~reorder.budget.allocation_model`: what Inductor's generated code allocates for an order, before it exists
  (:class:`AllocationModel`: in-place updates, its reuse pool, kernel groups, scratch);
* :mod:`~reorder.budget.allocation_search`: node moves that lower it;
* :mod:`~reorder.budget.segments`: where to cut the forward into segments recomputed one at a time;
* :mod:`~reorder.budget.frontier`: the candidates, their frontier (cost up, peak down) and the choice under a
  budget.
"""

from .allocation_model import AllocationModel
from .frontier import Candidate, Choice, Frontier, candidate_of, frontier
from .mincut import min_cut_source_side
from .partition import Partition, cheapest_partition, partition_of
from .segments import segment_boundaries
from .step_graph import StepGraph, StepNodeSpec, build_step_graph
from .step_peak import Held, StepPeak, step_peak

__all__ = ["AllocationModel", "Candidate", "Choice", "Frontier", "Held", "Partition", "StepGraph", "StepNodeSpec",
           "StepPeak", "build_step_graph", "candidate_of", "cheapest_partition", "frontier", "min_cut_source_side",
           "partition_of", "segment_boundaries", "step_peak"]
