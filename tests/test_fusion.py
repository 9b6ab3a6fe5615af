"""Fusion and laziness, asserted by kernel counts (GlobalCounters) and schedule lengths."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Device, GlobalCounters, Tensor
from tg_runtime.runner import get_runner

RNG = np.random.default_rng(5)


def _kernels(*tensors: Tensor) -> int:
    GlobalCounters.reset()
    tensors[0].realize(*tensors[1:])
    return int(GlobalCounters.kernel_count)


def _t(*shape: int, device: str) -> Tensor:
    return Tensor(RNG.standard_normal(shape).astype(np.float32), device=device)


def test_elementwise_chain_and_reduce_is_one_kernel(device: str) -> None:
    a, b = _t(4, 5, device=device), _t(5, device=device)
    out = ((a * b + 1).relu().exp() - a.abs()).sum(axis=1)
    assert _kernels(out) == 1
    an, bn = a.numpy(), b.numpy()
    np.testing.assert_allclose(out.numpy(), (np.exp(np.maximum(an * bn + 1, 0)) - np.abs(an)).sum(1), rtol=1e-5)


def test_softmax_last_axis_at_most_three(device: str) -> None:
    x = _t(3, 6, device=device)
    assert _kernels(x.softmax(-1)) <= 3
    assert _kernels(x.log_softmax(-1)) <= 3


def test_matmul_is_one_kernel(device: str) -> None:
    a, b = _t(3, 4, device=device), _t(4, 5, device=device)
    assert _kernels(a @ b) == 1
    assert _kernels(_t(2, 3, 4, device=device) @ _t(4, 2, device=device)) == 1
    assert _kernels(a.linear(b, _t(5, device=device))) == 1


@pytest.mark.parametrize("padding,stride,groups", [(0, 1, 1), (1, 2, 1), (1, 1, 2)])
def test_conv2d_forward_is_one_kernel(device: str, padding: int, stride: int, groups: int) -> None:
    x, w = _t(1, 2, 5, 5, device=device), _t(2, 2 // groups, 3, 3, device=device)
    assert _kernels(x.conv2d(w, padding=padding, stride=stride, groups=groups)) == 1
    assert _kernels(x.conv2d(w, _t(2, device=device), padding=padding, stride=stride, groups=groups)) == 1


def test_pool_is_one_kernel(device: str) -> None:
    x = _t(1, 2, 4, 4, device=device)
    assert _kernels(x.max_pool2d()) == 1
    assert _kernels(x.relu().max_pool2d(3, stride=1)) == 1


def test_mean_and_std_together_at_most_two(device: str) -> None:
    x = _t(4, 6, device=device)
    m, s = x.mean(), x.std()
    assert _kernels(m, s) <= 2
    xn = x.numpy()
    assert m.item() == pytest.approx(float(xn.mean()), rel=1e-5, abs=1e-6)
    assert s.item() == pytest.approx(float(xn.std(ddof=1)), rel=1e-5)


def test_movement_ops_alone_are_free(device: str) -> None:
    x = _t(2, 3, 4, device=device).realize()
    GlobalCounters.reset()
    v = x.permute(2, 0, 1).reshape(4, 6)[1:3].expand(2, 2, 6).flip(0).T
    v.realize()
    assert GlobalCounters.kernel_count == 0
    np.testing.assert_equal(
        v.numpy(), np.broadcast_to(x.numpy().transpose(2, 0, 1).reshape(4, 6)[1:3], (2, 2, 6))[::-1].T
    )


def test_nothing_runs_before_realize(device: str) -> None:
    GlobalCounters.reset()
    x = Tensor.rand(3, 4, device=device)
    y = ((x @ x.T).softmax() * 2).sum() + x.mean()
    items = y.schedule()
    assert GlobalCounters.kernel_count == 0 and len(items) >= 1
    y.realize()
    assert GlobalCounters.kernel_count == len(items)
    assert _kernels(Tensor.ones(3, device=device).kernelize()) == 1  # kernelize groups; realize runs


def test_identical_graphs_are_deduplicated(device: str) -> None:
    t = Tensor([1, 2, 3, 4], device=device)
    assert (t * 4).uop is (t * 4).uop
    a, b = t * 4 + 1, t * 4 + 1
    assert _kernels(a, b) == 1 and a.tolist() == b.tolist() == [5, 9, 13, 17]


def test_constants_fold_in_generated_code() -> None:
    t = Tensor([1, 2, 3, 4], device="CPU")
    out = t + 3 + 4
    (item,) = out.schedule()
    src = get_runner("CPU", item.ast).spec.src
    assert "7" in src and "3" not in src.replace("data", "")
    from tg_tensor import run_schedule

    run_schedule([item])
    assert out.tolist() == [8, 9, 10, 11]


def test_default_device_and_copy() -> None:
    t = Tensor([1.0, 2.0])
    assert t.device == Device.DEFAULT
    other = "PYTHON" if Device.DEFAULT != "PYTHON" else "CPU"
    moved = (t * 2).to(other)
    assert moved.device == other and moved.tolist() == [2.0, 4.0]


def test_reading_values_realizes_in_place(device: str) -> None:
    w = Tensor([1.0, 2.0], device=device).realize()
    w.assign(w * 3)
    GlobalCounters.reset()
    assert w.tolist() == [3.0, 6.0]
    assert GlobalCounters.kernel_count == 1  # the assign itself, no extra copy
    lazy = Tensor([1.0, 2.0], device=device) + 1
    GlobalCounters.reset()
    assert lazy.tolist() == [2.0, 3.0]
    assert GlobalCounters.kernel_count == 1 and lazy.uop.base.op.name == "BUFFER"


def test_costly_operand_read_many_times_is_computed_once(device: str) -> None:
    # an operand of >= 4 ALU ops over 3 buffers, read 32 times per element by the matmul, gets its own kernel
    # (recomputing it per use is what made conv gradients slow); a cheap one (a relu) stays fused
    a, b, c, w = _t(16, 8, device=device), _t(16, 8, device=device), _t(16, 8, device=device), _t(8, 32, device=device)
    for t in (a, b, c, w):
        t.realize()
    costly = ((a * b + c).exp() * a - b) @ w
    assert _kernels(costly) == 2
    an, bn, cn, wn = a.numpy(), b.numpy(), c.numpy(), w.numpy()
    np.testing.assert_allclose(costly.numpy(), (np.exp(an * bn + cn) * an - bn) @ wn, rtol=1e-4, atol=1e-4)
    assert _kernels(a.relu() @ w) == 1
    assert _kernels((a * b - 1) @ w) == 1  # two ALU ops over two buffers: still fused
    assert _kernels((a * b + c) @ w) == 2  # three buffers: one load per use beats three


def test_a_dropped_result_frees_its_buffer_without_the_garbage_collector(device: str) -> None:
    import gc
    import weakref

    from tg_tensor.engine.schedule import buffer_of

    a = _t(64, device=device).realize()
    gc.disable()
    try:
        out = ((a + 1) * 2).sum().realize()
        buf = weakref.ref(buffer_of(out.uop.base))
        del out
        assert buf() is None  # nothing but reference counting was needed to free the result's memory
    finally:
        gc.enable()


def test_one_element_operand_is_not_a_buffer_to_repeat(device: str) -> None:
    # RMSNorm's scaling (x * 1/rms * weight) read by a matrix-vector product: the 1/rms factor is one element
    # (loaded once per thread), so the scaling stays fused like any two-buffer operand; with two rows there are two
    # factors: three buffers, computed once in a kernel of its own
    x, w, m = _t(1, 64, device=device), _t(64, device=device), _t(64, 48, device=device)
    x2 = _t(2, 64, device=device)
    for t in (x, x2, w, m):
        t.realize()
    s = (x.square().mean(-1, keepdim=True) + 1e-5).rsqrt().contiguous().realize()
    s2 = (x2.square().mean(-1, keepdim=True) + 1e-5).rsqrt().contiguous().realize()
    out, out2 = (x * s * w) @ m, (x2 * s2 * w) @ m
    assert _kernels(out) == 1
    assert _kernels(out2) == 2
    xn, x2n, wn, mn = x.numpy(), x2.numpy(), w.numpy(), m.numpy()
    for got, xs in ((out, xn), (out2, x2n)):
        ref = (xs / np.sqrt((xs**2).mean(-1, keepdims=True) + 1e-5) * wn) @ mn
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-4)
