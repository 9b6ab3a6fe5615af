"""Reading a result costs no extra kernel: a reduction read with .numpy()/.item() runs one kernel, and a view
of a realized buffer (a reshape, a permute, a slice, an expand of a 0-d result) is read without one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg import GlobalCounters, Tensor

rng = np.random.default_rng(16)
A, B, C = (rng.standard_normal(33).astype(np.float32) for _ in range(3))
X = rng.standard_normal((3, 4, 5)).astype(np.float32)


def kernels_of(fn: Callable[[], Any]) -> tuple[Any, int]:
    GlobalCounters.reset()
    out = fn()
    return out, GlobalCounters.kernel_count


def inputs() -> tuple[Tensor, Tensor, Tensor]:
    return Tensor(A).realize(), Tensor(B).realize(), Tensor(C).realize()


def test_reduction_numpy_is_one_kernel() -> None:
    a, b, c = inputs()
    out, n = kernels_of(lambda: ((a + b) * c).relu().sum().numpy())
    assert n == 1
    np.testing.assert_allclose(out, np.maximum((A + B) * C, 0).sum(), rtol=1e-5)
    assert out.shape == ()


def test_reduction_item_is_one_kernel() -> None:
    a, b, c = inputs()
    out, n = kernels_of(lambda: ((a + b) * c).relu().sum().item())
    assert n == 1 and isinstance(out, float)
    assert out == pytest.approx(float(np.maximum((A + B) * C, 0).sum()), rel=1e-5)
    out, n = kernels_of(lambda: (a * b).max().item())
    assert n == 1 and out == pytest.approx(float((A * B).max()))


VIEWS: list[tuple[str, Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = [
    ("reshape of a 0-d result", lambda t: t.sum().reshape(1, 1), lambda x: x.sum().reshape(1, 1)),
    ("expand of a 0-d result", lambda t: t.sum().reshape(1, 1).expand(3, 4), lambda x: np.full((3, 4), x.sum())),
    ("permute", lambda t: t.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
    ("slice with steps", lambda t: t[1:, ::2, 3], lambda x: x[1:, ::2, 3]),
    ("flip", lambda t: t.flip(1), lambda x: x[:, ::-1]),
    ("reshape, shrink, transpose", lambda t: t.reshape(12, 5)[3:7].T, lambda x: x.reshape(12, 5)[3:7].T),
    ("expand of an axis", lambda t: t[..., None].expand(3, 4, 5, 2), lambda x: np.repeat(x[..., None], 2, -1)),
]


@pytest.mark.parametrize("name,view,ref", VIEWS, ids=[v[0] for v in VIEWS])
def test_view_of_a_realized_buffer_reads_without_a_kernel(
    name: str, view: Callable[[Tensor], Tensor], ref: Callable[[np.ndarray], np.ndarray]
) -> None:
    t = view(Tensor(X).realize()).realize()  # the realize computes what the view reads (a sum: one kernel)
    out, n = kernels_of(t.numpy)
    assert n == 0, name
    np.testing.assert_allclose(out, ref(X), rtol=1e-5)
    assert out.flags.c_contiguous and out.flags.writeable


def test_padded_view_still_gathers_with_a_kernel() -> None:
    t = Tensor(X).realize().pad(((1, 0), (0, 0), (0, 0)))
    out, n = kernels_of(t.numpy)
    assert n == 1
    np.testing.assert_array_equal(out, np.pad(X, ((1, 0), (0, 0), (0, 0))))


def test_view_read_sees_later_writes_of_the_buffer() -> None:
    """The bytes are read when asked, not remembered: an assign to the base shows in a view read after it."""
    base = Tensor(X.copy()).realize()
    view = base.permute(2, 0, 1)
    base.assign(Tensor(X * 2)).realize()
    np.testing.assert_allclose(view.numpy(), (X * 2).transpose(2, 0, 1))
