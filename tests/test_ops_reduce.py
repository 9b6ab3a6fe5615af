"""Reductions against numpy: axis int/tuple/None/negative, keepdim, non-contiguous, 0-d, size-0, ints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg import Tensor, dtypes

F = Callable[..., Any]


def _logsumexp(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    ret = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return ret if keepdims else np.squeeze(ret, axis=axis) if axis is not None else ret.reshape(())


# name: (tg method name, numpy function taking (x, axis, keepdims))
REDUCTIONS: dict[str, F] = {
    "sum": lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims),
    "prod": lambda x, axis, keepdims: np.prod(x, axis=axis, keepdims=keepdims),
    "max": lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims),
    "min": lambda x, axis, keepdims: np.min(x, axis=axis, keepdims=keepdims),
    "mean": lambda x, axis, keepdims: np.mean(x, axis=axis, keepdims=keepdims),
    "var": lambda x, axis, keepdims: np.var(x, axis=axis, keepdims=keepdims, ddof=1),
    "std": lambda x, axis, keepdims: np.std(x, axis=axis, keepdims=keepdims, ddof=1),
    "logsumexp": _logsumexp,
    "any": lambda x, axis, keepdims: np.any(x > 0, axis=axis, keepdims=keepdims),
    "all": lambda x, axis, keepdims: np.all(x > -1, axis=axis, keepdims=keepdims),
}
AXES = [None, 0, -1, (0, 2), (-1, 1)]


def _tg_reduce(name: str, t: Tensor, axis: Any, keepdim: bool) -> Tensor:
    if name == "any":
        return (t > 0).any(axis, keepdim)
    if name == "all":
        return (t > -1).all(axis, keepdim)
    return getattr(t, name)(axis, keepdim)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduce_float(device: str, name: str) -> None:
    rng = np.random.default_rng(sum(map(ord, name)))
    x = rng.uniform(-2, 2, (2, 3, 4)).astype(np.float32)
    t = Tensor(np.ascontiguousarray(x.transpose(2, 0, 1)), device=device).permute(1, 2, 0)  # non-contiguous
    for axis in AXES:
        for keepdim in (False, True):
            out = _tg_reduce(name, t, axis, keepdim)
            expected = REDUCTIONS[name](x, axis, keepdim)
            assert out.shape == np.shape(expected), (axis, keepdim)
            np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6, err_msg=f"{axis} {keepdim}")


def test_reduce_int_dtypes(device: str) -> None:
    x = np.array([[3, -1, 4], [1, -5, 9]], dtype=np.int32)
    t = Tensor(x, device=device)
    assert t.sum().item() == 11 and t.sum().dtype == dtypes.int32
    assert t.sum(axis=0).tolist() == [4, -6, 13]
    assert t.max(axis=1).tolist() == [4, 9] and t.min(axis=1).tolist() == [-1, -5]
    assert t.prod(axis=1).tolist() == [-12, -45]
    assert t.mean().dtype == dtypes.float32 and t.mean().item() == pytest.approx(11 / 6)
    small = Tensor([200, 100], dtype=dtypes.uint8, device=device)
    assert small.sum().item() == 300  # accumulates wider than uint8
    assert Tensor([True, True, False], device=device).sum().item() == 2
    u = Tensor([7, 2, 200], dtype=dtypes.uint8, device=device)
    assert u.min().item() == 2 and u.argmin().item() == 1


def test_reduce_0d_and_empty(device: str) -> None:
    s = Tensor(3.5, device=device)
    assert s.sum().item() == 3.5 and s.max().item() == 3.5 and s.mean().item() == 3.5
    e = Tensor(np.zeros((0, 3), np.float32), device=device)
    np.testing.assert_equal(e.sum(axis=0).numpy(), np.zeros(3))
    np.testing.assert_equal(e.prod(axis=0).numpy(), np.ones(3))
    assert e.sum(axis=1).shape == (0,)
    assert e.sum().item() == 0.0
    assert np.isnan(e.mean().item())
    with pytest.raises(ValueError, match="size-0"):
        e.max(axis=0)


def test_argmax_argmin(device: str) -> None:
    x = np.array([[1.0, 5.0, 5.0, -2.0], [7.0, 0.0, 7.0, 7.0], [-1.0, -3.0, -3.0, 2.0]], dtype=np.float32)
    t = Tensor(x, device=device)
    assert t.argmax().item() == int(np.argmax(x))
    np.testing.assert_equal(t.argmax(axis=1).numpy(), np.argmax(x, axis=1))  # first of ties
    np.testing.assert_equal(t.argmax(axis=0).numpy(), np.argmax(x, axis=0))
    np.testing.assert_equal(t.argmin(axis=-1).numpy(), np.argmin(x, axis=-1))
    assert t.argmax(axis=1, keepdim=True).shape == (3, 1)
    i = Tensor([[3, 9, 9], [-4, -8, 0]], device=device)
    assert i.argmax(axis=1).tolist() == [1, 2] and i.argmin(axis=1).tolist() == [0, 1]


def test_softmax_family(device: str) -> None:
    x = np.random.default_rng(0).uniform(-5, 5, (3, 5)).astype(np.float32)
    t = Tensor(x, device=device)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    sm = e / e.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(t.softmax().numpy(), sm, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(t.log_softmax().numpy(), np.log(sm), rtol=1e-5, atol=1e-6)
    e0 = np.exp(x - x.max(axis=0, keepdims=True))
    np.testing.assert_allclose(t.softmax(0).numpy(), e0 / e0.sum(axis=0, keepdims=True), rtol=1e-5, atol=1e-7)
    big = Tensor([1000.0, 1000.0], device=device)
    np.testing.assert_allclose(big.softmax().numpy(), [0.5, 0.5])
    np.testing.assert_allclose(big.logsumexp().item(), 1000 + np.log(2), rtol=1e-6)


def test_var_std_correction_and_pairs(device: str) -> None:
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    t = Tensor(x, device=device)
    np.testing.assert_allclose(t.var(axis=1, correction=0).numpy(), np.var(x, axis=1), rtol=1e-5)
    np.testing.assert_allclose(t.std(correction=2).numpy(), np.std(x, ddof=2), rtol=1e-5)
    v, m = t.var_mean(axis=0)
    np.testing.assert_allclose(v.numpy(), np.var(x, axis=0, ddof=1), rtol=1e-5)
    np.testing.assert_allclose(m.numpy(), np.mean(x, axis=0), rtol=1e-5, atol=1e-7)
    s, m2 = t.std_mean()
    np.testing.assert_allclose((s.item(), m2.item()), (np.std(x, ddof=1), np.mean(x)), rtol=1e-5, atol=1e-7)


def test_cumulative(device: str) -> None:
    x = np.array([[1.0, -2.0, 3.0, 0.5], [4.0, 1.0, -1.0, 2.0]], dtype=np.float32)
    t = Tensor(x, device=device)
    np.testing.assert_allclose(t.cumsum(1).numpy(), np.cumsum(x, axis=1), rtol=1e-6)
    np.testing.assert_allclose(t.cumsum(0).numpy(), np.cumsum(x, axis=0), rtol=1e-6)
    np.testing.assert_allclose(t.cummax(1)[0].numpy(), np.maximum.accumulate(x, axis=1))
    assert Tensor([1, 2, 3], device=device).cumsum().tolist() == [1, 3, 6]
    assert Tensor([3, 1, 4, 1, 5], device=device).cummax()[0].tolist() == [3, 3, 4, 4, 5]


def test_invalid_axis(device: str) -> None:
    t = Tensor.ones(2, 3, device=device)
    with pytest.raises(IndexError, match="axis 2 is out of range for a tensor of 2 dims"):
        t.sum(axis=2)
    with pytest.raises(IndexError, match="axis -3"):
        t.max(axis=-3)
    with pytest.raises(IndexError, match="axis 5"):
        t.softmax(5)
