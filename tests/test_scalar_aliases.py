"""The joint-graph pass that keeps Dynamo's unspecialized floats from changing what the forward saves."""

import math

import pytest
import torch
from torch._functorch.compile_utils import fx_graph_cse
from torch.fx.experimental.proxy_tensor import make_fx

from reorder import inductor as hook
from reorder.inductor.scalar_aliases import ScalarAliases

aten = torch.ops.aten


def gelu_factor(pi):
    """``sqrt(2 / pi)`` as Dynamo leaves it when ``pi`` is an unspecialized float: a float64 input, cast down."""
    return aten._to_copy.default(aten.sqrt.default(aten.div.Tensor(aten.full.default([], 2.0, dtype=torch.float64),
                                                                   pi)), dtype=torch.float32)


def joint(primals_1, primals_2, tangents_1):
    """Two blocks reading the factor (computed twice, as before common-subexpression elimination) and a
    backward reading it once more."""
    a = aten.tanh.default(aten.mul.Tensor(primals_1, gelu_factor(primals_2)))
    b = aten.tanh.default(aten.mul.Tensor(a, gelu_factor(primals_2)))
    return b, aten.mul.Tensor(tangents_1, gelu_factor(primals_2))


def traced(function, scalar_dtype=torch.float64):
    return make_fx(function, tracing_mode="fake")(torch.randn(4, 8), torch.tensor(math.pi, dtype=scalar_dtype),
                                                  torch.randn(4, 8))


def scalar_readers(graph):
    """For each ``mul``, the node it reads as its scalar operand."""
    return [node.args[1] for node in graph.nodes if node.target == aten.mul.Tensor]


def test_later_readers_of_a_float_inputs_scalar_read_their_own_alias_which_cse_keeps_apart():
    gm = traced(joint)
    ScalarAliases()(gm.graph)
    gm.graph.lint()
    gm.recompile()
    assert sum(node.target == aten.sqrt.default for node in gm.graph.nodes) == 1  # the three copies merged
    first, second, third = scalar_readers(gm.graph)
    assert first.target == aten._to_copy.default
    assert second.target == aten.alias.default and second.args[0] is first
    assert third.target == aten.alias.default and third.args[0] is second
    partitioned = fx_graph_cse(gm.graph)  # what Inductor's partitioner does first: the readers stay apart
    assert len(set(scalar_readers(partitioned))) == 3
    inputs = (torch.randn(4, 8), torch.tensor(math.pi, dtype=torch.float64), torch.randn(4, 8))
    for got, expected in zip(gm(*inputs), joint(*inputs), strict=True):
        assert torch.equal(got, expected)


def test_a_scalar_the_graph_returns_is_not_merged_with_the_others():
    def returning(primals_1, primals_2, tangents_1):
        return (*joint(primals_1, primals_2, tangents_1), gelu_factor(primals_2))

    gm = traced(returning)
    ScalarAliases()(gm.graph)
    gm.recompile()
    returned = next(node for node in gm.graph.nodes if node.op == "output").args[0][-1]
    assert returned.target == aten._to_copy.default and returned not in scalar_readers(gm.graph)
    assert sum(node.target == aten._to_copy.default for node in gm.graph.nodes) == 2  # its own storage
    inputs = (torch.randn(4, 8), torch.tensor(math.pi, dtype=torch.float64), torch.randn(4, 8))
    for got, expected in zip(gm(*inputs), returning(*inputs), strict=True):
        assert torch.equal(got, expected)


def test_constants_equal_in_python_but_not_to_an_op_are_not_merged():
    def typed(primals_1, primals_2, tangents_1):
        positive = aten.gt.Scalar(primals_2, 0)
        once = aten.add.Tensor(positive, True)  # a bool: True
        twice = aten.add.Tensor(aten.gt.Scalar(primals_2, 0), 1)  # an int: 2 (True == 1 in Python)
        return aten.mul.Tensor(primals_1, once), aten.mul.Tensor(tangents_1, twice)

    gm = traced(typed)
    ScalarAliases()(gm.graph)
    gm.recompile()
    assert sum(node.target == aten.gt.Scalar for node in gm.graph.nodes) == 1  # the same: merged
    assert sum(node.target == aten.add.Tensor for node in gm.graph.nodes) == 2
    inputs = (torch.randn(4, 8), torch.tensor(math.pi, dtype=torch.float64), torch.randn(4, 8))
    for got, expected in zip(gm(*inputs), typed(*inputs), strict=True):
        assert torch.equal(got, expected)


def test_forward_graphs_and_scalars_not_from_float_inputs_are_left_alone():
    def forward(primals_1, primals_2, other):
        return joint(primals_1, primals_2, other)

    for gm in (traced(forward), traced(joint, scalar_dtype=torch.float32)):
        code = gm.code
        ScalarAliases()(gm.graph)
        gm.recompile()
        assert gm.code == code
        assert len(set(scalar_readers(gm.graph))) == 3  # three separate copies, untouched


def test_install_appends_the_pass_after_the_users_once_and_uninstall_restores_it(config_patch):
    import torch._inductor.config as config

    def users_pass(graph):
        pass

    config_patch(config, joint_custom_post_pass=users_pass)
    with hook.use():
        passes = config.joint_custom_post_pass
        assert passes[0] is users_pass and isinstance(passes[1], ScalarAliases) and len(passes) == 2
        with hook.use(slab=True):
            assert config.joint_custom_post_pass == passes  # nested: not twice
        with hook.use(scalar_aliases=False):
            assert config.joint_custom_post_pass == passes  # what the outer installation set
    assert config.joint_custom_post_pass is users_pass
    with hook.use(scalar_aliases=False):
        assert config.joint_custom_post_pass is users_pass


class GeluBlock(torch.nn.Module):
    """GPT-2's MLP: the tanh GELU written with ``math.sqrt(2.0 / math.pi)``, which ``dynamic=True`` leaves as a
    computation on a float input."""

    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)

    def forward(self, x):
        h = self.up(x)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.down(h)


@pytest.mark.slow
def test_compiled_once_with_dynamic_shapes_the_step_saves_what_the_static_compile_saves(fresh_compiles):
    """Three blocks: without the pass, the dynamic compile saves the 2nd and 3rd block's tanh (2 x 8 KB) that the
    static compile recomputes; with it, the step's real peak is the static one's plus the 4-byte scalar, and the
    gradients are bitwise stock's."""
    from reorder.measure import measure

    torch.manual_seed(0)
    model = torch.nn.Sequential(GeluBlock(), GeluBlock(), GeluBlock())
    x = torch.randn(4, 32, 16)

    def step(compiled):
        model.zero_grad(set_to_none=True)
        compiled(x).sum().backward()
        return [p.grad for p in model.parameters()]

    def peak_and_gradients(dynamic, **options):
        torch._dynamo.reset()
        with hook.use(**options):
            compiled = torch.compile(model, dynamic=dynamic)
            gradients = step(compiled)
            return measure(lambda: step(compiled), "cpu").peak, gradients

    static, _ = peak_and_gradients(False)
    with_aliases, gradients = peak_and_gradients(True)
    without, stock_gradients = peak_and_gradients(True, scalar_aliases=False)
    assert static <= with_aliases <= static + 64
    assert without >= with_aliases + 2 * 4 * 32 * 64 * 4
    for got, expected in zip(gradients, stock_gradients, strict=True):
        assert torch.equal(got, expected)
