"""tg_tensor: the first op set against numpy on PYTHON and CPU, including size-1 dims, 0-d and views."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg_tensor import GlobalCounters, Tensor
from tg_uop import dtypes

DEVICES = ["PYTHON", "CPU"]
SHAPES = [(), (1,), (3,), (2, 1, 3), (1, 4), (2, 3, 4)]
rng = np.random.default_rng(0)


def rand(shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def check(fn_tg: Callable[..., Tensor], fn_np: Callable[..., Any], *arrays: np.ndarray, device: str) -> None:
    got = fn_tg(*(Tensor(a, device=device) for a in arrays)).numpy()
    ref = np.asarray(fn_np(*arrays))
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
def test_binary_and_unary(device: str, shape: tuple[int, ...]) -> None:
    a, b = rand(shape), rand(shape) + 3.0
    check(lambda x, y: x + y, np.add, a, b, device=device)
    check(lambda x, y: x - y, np.subtract, a, b, device=device)
    check(lambda x, y: x * y, np.multiply, a, b, device=device)
    check(lambda x, y: x / y, np.divide, a, b, device=device)
    check(lambda x: -x, np.negative, a, device=device)
    check(lambda x: x.relu(), lambda x: np.maximum(x, 0), a, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_broadcast_and_scalars(device: str) -> None:
    a, b = rand((2, 1, 3)), rand((4, 1))
    check(lambda x, y: x * y + 1.5, lambda x, y: x * y + 1.5, a, b, device=device)
    check(lambda x: 2 - x, lambda x: 2 - x, a, device=device)
    check(lambda x: 1 / (x + 10), lambda x: 1 / (x + 10), a, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
def test_sum_max(device: str, axis: Any) -> None:
    a = rand((3, 4, 5))
    check(lambda x: x.sum(axis=axis), lambda x: x.sum(axis=axis), a, device=device)
    check(lambda x: x.max(axis=axis), lambda x: x.max(axis=axis), a, device=device)
    check(lambda x: x.sum(axis=axis, keepdim=True), lambda x: x.sum(axis=axis, keepdims=True), a, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs(device: str) -> None:
    a, b = rand((3, 4)), rand((4, 3))
    check(lambda x, y: x.permute(1, 0) + y, lambda x, y: x.T + y, a, b, device=device)
    check(
        lambda x: x.reshape(1, 3, 4).expand(2, 3, 4).sum(0),
        lambda x: np.broadcast_to(x, (2, 3, 4)).sum(0),
        a,
        device=device,
    )
    check(lambda x: x.T.sum(1) * 2, lambda x: x.T.sum(1) * 2, a, device=device)
    check(
        lambda x: (x - x.max(axis=1, keepdim=True)).relu().sum(),
        lambda x: np.maximum(x - x.max(1, keepdims=True), 0).sum(),
        a,
        device=device,
    )


@pytest.mark.parametrize("device", DEVICES)
def test_int_and_creation(device: str) -> None:
    t = Tensor([[1, 2, 3], [4, 5, 6]], device=device)
    assert t.dtype == dtypes.int32
    assert (t * 2 - 1).tolist() == [[1, 3, 5], [7, 9, 11]]
    assert t.sum().item() == 21 and t.max(axis=0).tolist() == [4, 5, 6]
    assert Tensor.arange(2, 10, 3, device=device).tolist() == [2, 5, 8]
    assert Tensor.zeros(2, 2, device=device).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert Tensor.ones(3, device=device).sum().item() == 3.0
    assert Tensor.full((2,), 7, device=device).tolist() == [7, 7]
    assert Tensor(2.5, device=device).item() == 2.5 and Tensor(2.5).shape == ()
    assert (Tensor([1, 2], device=device) / 2).tolist() == [0.5, 1.0]


def test_laziness_and_schedule() -> None:
    a = Tensor([1.0, 2.0])
    GlobalCounters.reset()
    b = (a + 1) * 2
    assert GlobalCounters.kernel_count == 0
    items = b.schedule()
    assert len(items) == 1 and GlobalCounters.kernel_count == 0
    assert b.tolist() == [4.0, 6.0] and GlobalCounters.kernel_count == 1


def test_item_and_bad_input() -> None:
    with pytest.raises(ValueError, match="3 elements"):
        Tensor([1, 2, 3]).item()
    with pytest.raises(ValueError, match="ragged"):
        Tensor([[1, 2], [3]])
    with pytest.raises(IndexError, match="axis 3"):
        Tensor.ones(2, 2).sum(axis=3)
    with pytest.raises(ValueError, match="permutation"):
        Tensor.ones(2, 2).permute(0, 0)
