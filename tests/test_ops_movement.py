"""Movement and indexing ops against numpy, and their error messages."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tg import Tensor, dtypes


def _t(x: np.ndarray, device: str) -> Tensor:
    return Tensor(x, device=device)


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def test_reshape_permute_expand(device: str) -> None:
    t = _t(X, device)
    np.testing.assert_equal(t.reshape(4, -1).numpy(), X.reshape(4, -1))
    np.testing.assert_equal(t.view(6, 4).numpy(), X.reshape(6, 4))
    np.testing.assert_equal(t.permute(2, 0, 1).numpy(), X.transpose(2, 0, 1))
    np.testing.assert_equal(t.transpose(0, 2).numpy(), X.swapaxes(0, 2))
    np.testing.assert_equal(t.T.numpy(), X.T)
    np.testing.assert_equal(t[:, :1].expand(2, 5, 4).numpy(), np.broadcast_to(X[:, :1], (2, 5, 4)))
    np.testing.assert_equal(_t(X[0, 0], device).expand(3, -1).numpy(), np.broadcast_to(X[0, 0], (3, 4)))
    np.testing.assert_equal(t.flatten().numpy(), X.flatten())
    np.testing.assert_equal(t.flatten(1).numpy(), X.reshape(2, 12))
    np.testing.assert_equal(t.unflatten(2, (2, 2)).numpy(), X.reshape(2, 3, 2, 2))
    np.testing.assert_equal(t.unsqueeze(1).numpy(), X[:, None])
    np.testing.assert_equal(t.unsqueeze(-1).numpy(), X[..., None])
    np.testing.assert_equal(t[:, :1].squeeze(1).numpy(), X[:, 0])
    assert t[:1, :1, :1].squeeze().shape == ()
    assert Tensor(5, device=device).reshape(1, 1).shape == (1, 1)


def test_pad_shrink_flip(device: str) -> None:
    t = _t(X, device)
    np.testing.assert_equal(t.pad(((0, 0), (1, 2), (2, 0))).numpy(), np.pad(X, ((0, 0), (1, 2), (2, 0))))
    np.testing.assert_equal(t.pad((1, 1)).numpy(), np.pad(X, ((0, 0), (0, 0), (1, 1))))  # torch's flat order
    np.testing.assert_equal(
        t.pad((1, 0, 0, 2), value=-1.0).numpy(), np.pad(X, ((0, 0), (0, 2), (1, 0)), constant_values=-1)
    )
    np.testing.assert_equal(t.pad(((0, 0), (-1, 0), (0, -2))).numpy(), X[:, 1:, :2])
    np.testing.assert_equal(t.pad((2, 1), mode="reflect").numpy(), np.pad(X, ((0, 0), (0, 0), (2, 1)), mode="reflect"))
    np.testing.assert_equal(t.pad((2, 3), mode="replicate").numpy(), np.pad(X, ((0, 0), (0, 0), (2, 3)), mode="edge"))
    np.testing.assert_equal(t.shrink(((0, 1), None, (1, 3))).numpy(), X[0:1, :, 1:3])
    np.testing.assert_equal(t.flip(0, 2).numpy(), X[::-1, :, ::-1])
    np.testing.assert_equal(t.flip(-1).numpy(), X[..., ::-1])


def test_repeat_cat_stack_split(device: str) -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = _t(a, device)
    np.testing.assert_equal(t.repeat(2, 1).numpy(), np.tile(a, (2, 1)))
    np.testing.assert_equal(t.repeat(2, 1, 2).numpy(), np.tile(a, (2, 1, 2)))
    np.testing.assert_equal(t.repeat_interleave(2).numpy(), np.repeat(a, 2))
    np.testing.assert_equal(t.repeat_interleave(3, dim=1).numpy(), np.repeat(a, 3, axis=1))
    b = np.arange(9, dtype=np.int32).reshape(3, 3) * 10
    np.testing.assert_equal(t.cat(_t(b, device)).numpy(), np.concatenate([a, b]))
    np.testing.assert_equal(t.cat(t, t, dim=1).numpy(), np.concatenate([a, a, a], axis=1))
    np.testing.assert_equal(t.cat(_t(b[:2].astype(np.float32), device), dim=-1).numpy(), np.concatenate([a, b[:2]], 1))
    np.testing.assert_equal(Tensor.stack(t, t * 2, dim=1).numpy(), np.stack([a, a * 2], axis=1))
    np.testing.assert_equal(t.stack(t).numpy(), np.stack([a, a]))
    parts = t.split(2, dim=1)
    assert [p.shape for p in parts] == [(2, 2), (2, 1)]
    np.testing.assert_equal(parts[1].numpy(), a[:, 2:])
    assert [p.tolist() for p in t.split([1, 2], dim=1)] == [a[:, :1].tolist(), a[:, 1:].tolist()]
    assert [p.shape for p in _t(np.arange(7), device).chunk(3)] == [(3,), (3,), (1,)]


def test_roll_triu_tril(device: str) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = _t(a, device)
    np.testing.assert_equal(t.roll(1, 1).numpy(), np.roll(a, 1, 1))
    np.testing.assert_equal(t.roll((-1, 2), (0, 1)).numpy(), np.roll(a, (-1, 2), (0, 1)))
    np.testing.assert_equal(t.roll(5).numpy(), np.roll(a, 5))
    for k in (-1, 0, 2):
        np.testing.assert_equal(t.triu(k).numpy(), np.triu(a, k))
        np.testing.assert_equal(t.tril(k).numpy(), np.tril(a, k))


@pytest.mark.parametrize(
    "index",
    [
        1,
        -1,
        (1, 2),
        (slice(None), 1),
        (..., 2),
        (None, 0, ..., None),
        slice(None, None, -1),
        (slice(1, None), slice(None, None, 2), slice(3, 0, -2)),
        (slice(None), slice(-1, -4, -1), -2),
        (0, slice(0, 0)),
        [1, 0, 1],
        (slice(None), [2, 0]),
        ([0, 1, 1], [2, 0, 1]),
        ([[0], [1]], slice(None), [1, 3]),
        (0, [1, 2], [[0, 1], [2, 3]]),
        ([1, 0], ..., [-1, 0]),
    ],
)
def test_getitem(device: str, index: Any) -> None:
    np.testing.assert_equal(_t(X, device)[index].numpy(), X[index])


def test_getitem_tensor_index_and_int_data(device: str) -> None:
    a = np.arange(10, dtype=np.int32) * 3
    t = _t(a, device)
    idx = np.array([[9, 0], [-1, 4]], dtype=np.int32)
    np.testing.assert_equal(t[_t(idx, device)].numpy(), a[idx])
    assert t[2:8:3].tolist() == a[2:8:3].tolist()
    assert Tensor([True, False, True], device=device)[[2, 1]].tolist() == [True, False]


def test_getitem_errors(device: str) -> None:
    t = _t(X, device)
    with pytest.raises(IndexError, match="index 5 is out of bounds for dim 1 of size 3"):
        t[:, 5]
    with pytest.raises(IndexError, match="index -3"):
        t[-3]
    with pytest.raises(IndexError, match="too many indices: 4 for a tensor of 3 dims"):
        t[0, 0, 0, 0]
    with pytest.raises(IndexError, match="index 7 is out of bounds"):
        t[:, [0, 7]]
    with pytest.raises(TypeError, match="expected int, slice"):
        t["a"]


def test_setitem(device: str) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = _t(a.copy(), device).realize()
    t[1] = 0.0
    t[:, 3] = Tensor([7.0, 8.0, 9.0], device=device)
    t[0, :2] = Tensor([-1.0, -2.0], device=device)
    a[1] = 0.0
    a[:, 3] = [7.0, 8.0, 9.0]
    a[0, :2] = [-1.0, -2.0]
    np.testing.assert_equal(t.numpy(), a)


def test_gather_scatter_masked_fill_one_hot(device: str) -> None:
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    t = _t(a, device)
    idx = np.array([[2, 0], [1, 1]], dtype=np.int32)
    np.testing.assert_equal(t.gather(1, _t(idx, device)).numpy(), np.take_along_axis(a, idx, 1))
    idx0 = np.array([[1, 0, 1]], dtype=np.int32)
    np.testing.assert_equal(t.gather(0, _t(idx0, device)).numpy(), np.take_along_axis(a, idx0, 0))
    src = np.array([[10.0, 20.0], [30.0, 40.0]], dtype=np.float32)
    out = t.scatter(1, _t(np.array([[2, 0], [0, 1]], np.int32), device), _t(src, device)).numpy()
    np.testing.assert_equal(out, [[20.0, 2.0, 10.0], [30.0, 40.0, 6.0]])
    added = t.scatter(1, _t(np.array([[2, 2]], np.int32), device), _t(src[:1], device), reduce="add").numpy()
    np.testing.assert_equal(added, [[1.0, 2.0, 33.0], [4.0, 5.0, 6.0]])
    np.testing.assert_equal(t.masked_fill(t > 3, -1.0).numpy(), np.where(a > 3, -1, a))
    labels = Tensor([0, 2, 1], device=device)
    assert labels.one_hot(3).tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
    assert labels.one_hot().shape == (3, 3)


def test_movement_errors(device: str) -> None:
    t = Tensor.ones(2, 3, device=device)
    with pytest.raises(ValueError, match=r"cannot reshape \(2, 3\) \(size 6\) to \(4, 2\)"):
        t.reshape(4, 2)
    with pytest.raises(ValueError, match="only one dimension can be -1"):
        t.reshape(-1, -1)
    with pytest.raises(ValueError, match=r"cannot expand shape \(2, 3\) to \(2, 4\)"):
        t.expand(2, 4)
    with pytest.raises(ValueError, match=r"cat: shapes \[\(2, 3\), \(2, 4\)\] do not match outside dim 0"):
        t.cat(Tensor.ones(2, 4, device=device))
    with pytest.raises(ValueError, match=r"stack: shapes"):
        Tensor.stack(t, Tensor.ones(3, 2, device=device))
    with pytest.raises(ValueError, match="not a permutation"):
        t.permute(0, 0)
    with pytest.raises(ValueError, match="reflect padding"):
        t.pad((3, 0), mode="reflect")


def test_size_zero_and_dtypes(device: str) -> None:
    e = Tensor(np.zeros((0, 4), np.float32), device=device)
    assert e.reshape(4, 0).shape == (4, 0) and e.T.shape == (4, 0)
    assert e.cat(Tensor.ones(2, 4, device=device)).tolist() == [[1.0] * 4] * 2
    assert Tensor([1, 2], dtype=dtypes.int16, device=device).repeat(2).dtype == dtypes.int16
