"""The Inductor rewrites our models mirror, as one ordered list: what each does, where in torch it lives, for which
releases it is checked, and how to switch it off.

A choice made before Inductor's code exists (which partition a memory budget
keeps, which order a budgeted graph runs in) rests on a model of what
Inductor will make of the graph. Where Inductor rewrites the graph in a way
that changes memory, the model must rewrite it the same way; each such rule
is one entry of :data:`REWRITES`, applied in this order by
:func:`~reorder.inductor.joint_adapter.step_graph_from_joint` (the step
model) and :mod:`~reorder.inductor.compiled_budget` (the model of a
budgeted graph's code). Each entry is checked against Inductor's own code in
the tests named by ``tested_by``: a rule that a torch release changes fails
there, not in a user's partition.

``HookOptions(model_rewrites=(...))`` keeps only the rules named (None, the
default: all of them); a rule switched off is a model that knows less of
Inductor, for diagnosis (which rule decides a partition), never for speed.
The scalar aliases are a rewrite of ours, not a mirror: the hook applies
them to the joint graph itself, and ``HookOptions.scalar_aliases`` switches
them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MIRRORED", "REWRITES", "Rewrite", "applies"]


@dataclass(frozen=True)
class Rewrite:
    """One rule: ``name`` (what ``model_rewrites`` names), ``what`` it does to the model, the torch source it
    ``mirrors`` (file and function), the ``releases`` it is checked for, and the test that checks it against
    Inductor's own code (``tested_by``)."""

    name: str
    what: str
    mirrors: str
    releases: tuple[str, ...]
    tested_by: str


#: The releases a rule that none of them changed holds for.
THROUGH_2_15 = ("2.13", "2.14", "2.15")

#: Every rule, in the order the models apply them.
REWRITES: tuple[Rewrite, ...] = (
    Rewrite("layout_optimisation",
            "a program of a step with a convolution runs channels-last: its scratch and copies follow that layout",
            "torch/_inductor/graph.py: GraphLowering.decide_layout_opt", THROUGH_2_15,
            "tests/test_generated_code.py (the residual CNN's compiled convolutions run channels-last: their "
            "measured scratch in that layout makes the replay the allocator's peak)"),
    Rewrite("backward_layout_optimisation",
            "a backward that runs a convolution's backward runs channels-last too, recomputing no convolution: its "
            "scratch follows that layout and its lowering copies nothing",
            "torch/_inductor/graph.py: GraphLowering.decide_layout_opt (counts convolution_backward nodes)",
            ("2.15",), "tests/test_scratch.py::test_a_plain_backward_copies_a_saved_operand_into_the_kernels_order_"
            "and_frees_it_before_the_kernel (under 2.15 the same backward runs channels-last and copies nothing)"),
    Rewrite("layout_copies",
            "graph inputs a convolution reads are copied to channels-last: the step owns the copies",
            "torch/_inductor/graph.py: GraphLowering.placeholder (layout_opt) and kernel/conv.py: convolution",
            THROUGH_2_15, "tests/test_generated_code.py (the CNN's backward frees the forward's channels-last copies "
            "of its weights and input, which the partition counts as owned: the replay ends where the allocator "
            "does)"),
    Rewrite("convolution_scratch",
            "a convolution's own allocations while it runs, measured by running it once (oneDNN's reorders)",
            "torch/_inductor/kernel/conv.py: convolution lowering (operands' stride orders); ATen's oneDNN kernels",
            THROUGH_2_15, "tests/test_scratch.py::test_a_plain_programs_operands_are_laid_out_and_copied_as_inductor_"
            "lowers_them (strides against the generated code's)"),
    Rewrite("attention_scratch",
            "the CPU's flash attention, forward and backward, allocates per-thread blocks of the attention matrix "
            "while it runs, measured by running it once",
            "torch/_inductor/lowering.py: _scaled_dot_product_flash_attention_for_cpu(_backward), extern "
            "fallbacks; ATen's native/cpu/FlashAttentionKernel.cpp", THROUGH_2_15,
            "tests/test_scratch.py::test_the_flash_attention_backwards_scratch_is_what_running_it_allocates"),
    Rewrite("product_scratch",
            "a matrix product in bfloat16 or float16 (mm, addmm, bmm, baddbmm: autocast's linear layers) packs its "
            "operands into blocked buffers while it runs, measured by running it once; float32 packs outside the "
            "allocator",
            "torch/_inductor/kernel/mm.py, bmm.py: tuned_mm, tuned_addmm, tuned_bmm, tuned_baddbmm (extern ATen "
            "kernels on the CPU); ATen's oneDNN matmul (native/mkldnn/Matmul.cpp)", THROUGH_2_15,
            "tests/test_scratch.py::test_a_reduced_precision_products_scratch_is_what_running_it_allocates"),
    Rewrite("heavy_on_reuse",
            "on the CPU, a pointwise value whose code calls a heavy op (exp, log, sigmoid, tanh, ...; its own or that "
            "of a pointwise value computed inside it) is stored once two nodes read it, not computed again inside "
            "each reader's kernel; it is allocated where a reader runs after a node that cannot fuse and that "
            "depends on it (readers that all fuse into its kernel allocate nothing)",
            "torch/_inductor/ir.py: StorageBox.should_realize_on_reuse; graph.py: GraphLowering.run_node "
            "(mark_reuse)", THROUGH_2_15,
            "tests/test_budget_inductor.py::test_a_heavy_value_two_nodes_read_is_stored_as_inductor_stores_it"),
    Rewrite("reads_on_reuse",
            "a pointwise value whose code reads more buffers than config.realize_reads_threshold (its own reads and "
            "those of the pointwise values computed inside it; a batch normalisation's output reads five) is stored "
            "once two nodes read it, as a heavy one is, and allocated where a reader runs after a node that cannot "
            "fuse and that depends on it",
            "torch/_inductor/ir.py: StorageBox.should_realize_on_reuse (num_reads); graph.py: GraphLowering.run_node "
            "(mark_reuse)", THROUGH_2_15,
            "tests/test_budget_inductor.py::"
            "test_a_value_whose_code_reads_many_buffers_is_stored_once_two_nodes_read_it"),
    Rewrite("backward_addmm",
            "a backward add(mm(a, b), c) is one addmm that runs where the addition runs; of two products added, "
            "the second argument's is folded",
            "torch/_inductor/fx_passes/post_grad.py: the addmm patterns (add(c, mm) registered first)", THROUGH_2_15,
            "tests/test_budget_inductor.py::test_an_addition_of_two_products_folds_the_product_inductor_folds"),
    Rewrite("in_place_reads",
            "a generated kernel writes its output into a buffer that dies there only where Inductor's scheduler "
            "marked the read can_inplace (read at the index it writes: not across a layout change) and the buffer "
            "has the output's device and dtype and is at most 5% larger; into the first such read of the member, "
            "in its order of reads, which a local buffer then stays allocated for",
            "torch/_inductor/scheduler.py: SchedulerNode.can_inplace, BaseSchedulerNode.decide_inplace_update; "
            "codegen/wrapper.py: can_match_buffer_size",
            THROUGH_2_15, "tests/test_generated_code.py::test_the_replay_of_each_compiled_graph_is_the_allocators_"
                          "peak_of_its_call_and_the_models_promise (the residual CNN's forward writes no output "
                          "into a channels-last convolution's)"),
    Rewrite("reuse_keys",
            "a dead buffer's storage goes only to a buffer of the same device, dtype and storage size (not of as "
            "many bytes)",
            "torch/_inductor/codegen/wrapper.py: buffer_reuse_key, AllocateLine.plan",
            THROUGH_2_15, "tests/test_wild.py::test_under_autocast_the_model_of_the_compiled_code_pools_storage_by_"
                          "inductors_reuse_key (a decoder's bfloat16 and float32 buffers of as many bytes)"),
    Rewrite("unaligned_in_place",
            "an output written in place into an unaligned buffer is unaligned too (on the CPU every graph input is "
            "unaligned, and a backward writes into its donated saved values), and the key it is pooled by when it "
            "dies says so: its storage goes to no aligned buffer of its size (with reuse_keys only)",
            "torch/_inductor/codegen/common.py: KernelArgs.make_inplace; codegen/wrapper.py: buffer_reuse_key; "
            "graph.py: GraphLowering.placeholder (should_assume_input_aligned)",
            THROUGH_2_15, "tests/test_compiled_budget.py::test_an_output_written_into_an_unaligned_input_is_"
                          "unaligned_as_inductors_code_generation_makes_it (the model's reuses are the wrapper's "
                          "reuse lines; the keys read as test_unaligned_keys_are_inductors_and_leave_its_set_as_"
                          "it_was)"),
    Rewrite("element_reuse",
            "a multi-output kernel's element (a CPU attention's gradient) goes into the reuse pool when it dies, "
            "unless its kernel returns an input as an output; the step's programs pool none",
            "torch/_inductor/codegen/wrapper.py: FreeIfNotReusedLine.plan; ir.py: "
            "MultiOutput.get_inputs_that_alias_output", THROUGH_2_15,
            "tests/test_wild.py::"
            "test_under_autocast_the_model_of_the_compiled_code_pools_storage_by_inductors_reuse_key"),
    Rewrite("concat_views",
            "on the CPU, a cat's inputs are computed straight into slices of its output where they can: each is a "
            "view that allocates nothing and takes or gives no storage through the pool, and the output is "
            "allocated when its first view is made, though Inductor's estimate counts every view as a buffer",
            "torch/_inductor/lowering.py: cat (a ConcatKernel on the CPU); ir.py: ConcatKernel.realize_into, "
            "NonOwningLayout; codegen/wrapper.py: codegen_allocation (ReinterpretLine), FreeIfNotReusedLine.plan",
            THROUGH_2_15, "tests/test_compiled_budget.py::test_a_cats_views_are_the_aliases_the_generated_code_writes "
                          "(the views read from the scheduler are the wrapper's # alias lines; the model of the "
                          "code with them is its peak)"),
    Rewrite("kernel_local_buffers",
            "a buffer a fused kernel makes and uses up inside itself (no reader elsewhere, not an output) is never "
            "allocated, though Inductor's estimate counts it",
            "torch/_inductor/codegen/common.py: Kernel.remove_kernel_local_buffers; scheduler.py: "
            "Scheduler.can_buffer_be_removed_through_fusion", THROUGH_2_15,
            "tests/test_generated_code.py::test_the_replay_of_each_compiled_graph_is_the_allocators_peak_of_its_call_"
            "and_the_models_promise (the residual CNN's backward: a fused kernel's first member's output)"),
    Rewrite("outer_loop_local_buffers",
            "on the CPU, a kernel fused at its outer loops (a softmax's backward) keeps a pointwise value that only "
            "the kernel reads in a row-sized local buffer: it is never allocated",
            "torch/_inductor/codegen/cpp.py: CppScheduling.codegen_outer_loop_node "
            "(try_outer_loop_fusion_with_local_buf)", THROUGH_2_15,
            "tests/test_compiled_budget.py::test_a_kernel_fused_at_its_outer_loops_allocates_no_local_buffer"),
    Rewrite("kernel_groups",
            "on the CPU, buffers that die inside a group of generated kernels are freed when the group is flushed",
            "torch/_inductor/scheduler.py: Scheduler._codegen; codegen/cpp.py: CppScheduling.flush", THROUGH_2_15,
            "tests/test_compiled_budget.py::test_kernel_groups_free_where_the_generated_code_frees"),
)

#: The names ``HookOptions.model_rewrites`` may list.
MIRRORED: tuple[str, ...] = tuple(r.name for r in REWRITES)


def applies(name: str, model_rewrites: tuple[str, ...] | None, release: str | None = None) -> bool:
    """Whether the rule ``name`` is on under ``HookOptions.model_rewrites`` (None: every rule) and the torch
    ``release`` (default: the running one's major.minor).

    A rule is on under the supported releases it names: where a release changes
    what Inductor does, its rule names the releases it still holds for, and a
    new rule the others. Under a release outside
    :data:`~reorder.inductor.releases.SUPPORTED_RELEASES` (the hook forced on
    with ``REORDER_ANY_TORCH=1``) the rules of the newest supported release
    apply.
    """
    from .releases import SUPPORTED_RELEASES, running_release

    rule = next((r for r in REWRITES if r.name == name), None)
    if rule is None:
        raise KeyError(f"no rewrite named {name!r}; known: {', '.join(MIRRORED)}")
    release = running_release() if release is None else release
    if release not in SUPPORTED_RELEASES:
        release = SUPPORTED_RELEASES[-1]
    return release in rule.releases and (model_rewrites is None or name in model_rewrites)
