"""tg-tensor on its own (no tg meta-package): module layout, autograd rules, scheduling of special nodes."""

from __future__ import annotations

import numpy as np
import pytest

from tg_tensor import Tensor, gradient
from tg_tensor.engine.schedule import buffer_of
from tg_uop import GlobalCounters, GroupOp, Ops, dtypes

DEVICES = ["PYTHON", "CPU"]


def test_every_float_producing_alu_op_has_a_gradient_rule() -> None:
    handled = set(gradient.GRAD_RULES) | gradient.NO_GRAD_OPS
    # ops the Tensor layer can emit in a float graph
    emitted = (GroupOp.ALU - {Ops.MULACC}) | GroupOp.Movement | {Ops.CAST, Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.COPY}
    assert sorted(op.name for op in emitted - handled) == []


@pytest.mark.parametrize("device", DEVICES)
def test_mixins_share_one_tensor_class(device: str) -> None:
    x = Tensor([[1.0, -2.0]], device=device)
    y = x.relu().sum(1).unsqueeze(0) @ Tensor([[3.0]], device=device)
    assert type(y) is Tensor and y.tolist() == [[3.0]]


@pytest.mark.parametrize("device", DEVICES)
def test_inference_mode_detaches_results(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    with Tensor.inference_mode():
        y = x * 3
    assert y.uop.op is Ops.DETACH
    assert (x * 3).uop.op is Ops.MUL


@pytest.mark.parametrize("device", DEVICES)
def test_reshaped_root_realizes_its_base(device: str) -> None:
    x = Tensor(np.arange(6, dtype=np.float32), device=device)
    mean_kd = x.mean(keepdim=True)
    m = x.mean()
    assert m.uop.op is Ops.RESHAPE and m.uop.src[0] is mean_kd.uop
    GlobalCounters.reset()
    m.realize(mean_kd)
    assert GlobalCounters.kernel_count == 1 and m.item() == 2.5 and mean_kd.tolist() == [2.5]


@pytest.mark.parametrize("device", DEVICES)
def test_assign_schedules_into_the_target_buffer(device: str) -> None:
    w = Tensor([1, 2, 3], device=device, dtype=dtypes.int32).realize()
    target = buffer_of(w.uop.base)
    w.assign(w * 10)
    assert w.uop.op is Ops.ASSIGN
    (item,) = w.schedule()
    assert item.bufs[0] is target
    w.realize()
    assert w.tolist() == [10, 20, 30]
