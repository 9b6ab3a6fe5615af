"""Split reductions (split_reduce.py) against numpy on every device: the two-kernel forms give the same values.

The threshold is lowered here so small tensors take the split paths (PYTHON interprets every loop).
"""

from __future__ import annotations

import numpy as np
import pytest

import tg_tensor.split_reduce as sr
from tg import GlobalCounters, Tensor

CASES = [
    ((64, 8, 5, 5), (0, 2, 3)),  # a conv bias gradient: batch x height x width per channel
    ((32, 4, 3, 6, 6), (0, 3, 4)),  # a weight-gradient-like reduction: several outputs, batch first
    ((5, 16, 3, 7), (1, 3)),  # the cut axis is not the first
    ((3, 96), (1,)),  # few outputs: the flattened chunk form
]


@pytest.fixture
def low_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sr, "SPLIT_REDUCE_MIN", 64)
    monkeypatch.setattr(sr, "SPLIT_AXIS_PARTS", (16, 2))


@pytest.mark.parametrize("shape,axes", CASES)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_split_reduce_matches_numpy(
    device: str, low_threshold: None, shape: tuple[int, ...], axes: tuple[int, ...], op: str
) -> None:
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    t = Tensor(x, device=device)
    GlobalCounters.reset()
    got = getattr(t, op)(axis=axes).realize()
    assert GlobalCounters.kernel_count == 2, "the reduction should run as two kernels"
    np.testing.assert_allclose(got.numpy(), getattr(x, op)(axis=axes), rtol=1e-5, atol=1e-5)


def test_split_axis_gradient_matches_numpy(device: str, low_threshold: None) -> None:
    x = np.random.default_rng(0).standard_normal((16, 3, 6, 6)).astype(np.float32)
    w = Tensor(
        np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32), device=device, requires_grad=True
    )
    out = Tensor(x, device=device).conv2d(w)
    out.sum().backward()
    # d(sum conv)/dw[o, c, i, j] = sum over batch and output positions of x[b, c, y+i, x+j]
    ref = np.array([[[x[:, c, i : i + 4, j : j + 4].sum() for j in range(3)] for i in range(3)] for c in range(3)])
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), np.broadcast_to(ref, (4, 3, 3, 3)), rtol=1e-4, atol=1e-4)


def test_no_split_without_a_divisor() -> None:
    node = Tensor(np.ones((7, 1 << 15), np.float32)).uop.r(sr.Ops.ADD, (1,))
    assert sr.split_reduce(node) is not None  # 7 outputs: the chunk form
    prime = Tensor(np.ones((40, 32771), np.float32)).uop.r(sr.Ops.ADD, (1,))
    assert sr.split_axis(prime) is None and sr.split_reduce(prime) is None
