"""Boolean-mask indexing, x[mask] and x[mask] = v, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tg import GlobalCounters, Tensor, TinyJit
from tg_tensor.jit import JitError


def _data() -> np.ndarray:
    return np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7


def test_mask_selects_elements_and_rows(device: str) -> None:
    a = _data()
    x = Tensor(a, device=device)
    for mask in (a > 3, a.sum(2) > 0, np.array([True, False]), np.zeros((2, 3), bool)):
        np.testing.assert_array_equal(x[Tensor(mask, device=device)].numpy(), a[mask])
    np.testing.assert_array_equal(x[a % 2 == 0].numpy(), a[a % 2 == 0])  # a numpy mask works too
    cols = np.array([True, False, True])
    np.testing.assert_array_equal(x[:, Tensor(cols, device=device)].numpy(), a[:, cols])
    np.testing.assert_array_equal(x[..., Tensor(cols[:2].repeat(2), device=device)].numpy(), a[..., cols[:2].repeat(2)])
    rows = a.sum(2) > 0
    np.testing.assert_array_equal(x[Tensor(rows, device=device), 1:3].numpy(), a[rows, 1:3])
    lazy_mask = Tensor(a, device=device) > 0  # a lazy mask is realized for its shape
    np.testing.assert_array_equal(x[lazy_mask].numpy(), a[a > 0])


def test_mask_errors_name_both_shapes(device: str) -> None:
    x = Tensor(_data(), device=device)
    with pytest.raises(IndexError, match=r"mask of shape \(3,\) does not match the indexed dims \(2,\)"):
        x[Tensor(np.ones(3, bool), device=device)]
    with pytest.raises(IndexError, match=r"mask of shape \(2, 4\) does not match the indexed dims \(2, 3\)"):
        x[Tensor(np.ones((2, 4), bool), device=device)]
    with pytest.raises(IndexError, match="0-d boolean mask"):
        x[Tensor(True, device=device)]


def test_mask_setitem(device: str) -> None:
    a = _data()
    x = Tensor(a.copy(), device=device).realize()
    GlobalCounters.reset()
    x[Tensor(a > 0, device=device)] = 0.5  # one value: a lazy where, one kernel
    expected = a.copy()
    expected[a > 0] = 0.5
    np.testing.assert_array_equal(x.numpy(), expected)
    assert GlobalCounters.kernel_count == 1
    rows = a.sum(2) > 0
    vals = np.arange(int(rows.sum()) * 4, dtype=np.float32).reshape(-1, 4)
    x[Tensor(rows, device=device)] = Tensor(vals, device=device)
    expected[rows] = vals
    np.testing.assert_array_equal(x.numpy(), expected)


def test_mask_index_inside_the_jit_is_refused() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x[x > 0] * 1

    with pytest.raises(JitError, match="reading values"):
        f(Tensor([1.0, -1.0]))


def test_basic_setitem_writes_through_a_view(device: str) -> None:
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    x = Tensor(a.copy(), device=device).realize()
    kept = x * 1  # built before the writes: keeps the old values
    expected = a.copy()
    for index, value in [
        ((1,), 7.0),
        ((slice(None), 2), -1.0),
        ((slice(None, None, 2), slice(1, 4)), 3.0),
        ((slice(None, None, -1), 0), np.arange(4, dtype=np.float32)),
        ((..., -1), 9.0),
        ((slice(1, None), slice(None, None, 3)), 5.0),
    ]:
        x[index] = Tensor(value, device=device) if isinstance(value, np.ndarray) else value
        expected[index] = value
        np.testing.assert_array_equal(x.numpy(), expected, err_msg=str(index))
    x[1:, :] = x[:-1, :]  # reads what it writes: computed first
    expected[1:, :] = expected[:-1, :].copy()
    np.testing.assert_array_equal(x.numpy(), expected)
    np.testing.assert_array_equal(kept.numpy(), a)
    GlobalCounters.reset()
    x[2] = 0.0
    x.realize()
    assert GlobalCounters.kernel_count == 1  # one small kernel writing the row, no scatter over the tensor
