"""A kernel reading an old version of a buffer (kept by a copy) and a value computed after the buffer's
in-place write: ordering must use the copy, not keep the kernel before the write (that was a cycle:
"reads and in-place writes of one buffer form a cycle" on `randn` drawn twice followed by a backward),
and the kernel must then read the copy's buffer (reading the written one gave new values for `old`).
"""

from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor

DEVICES = ["PYTHON", "CPU"]


@pytest.mark.parametrize("device", DEVICES)
def test_two_random_draws_then_backward(device: str) -> None:
    Tensor.manual_seed(3)
    x = Tensor.randn(8, 4, device=device)
    w = Tensor.randn(4, 2, device=device, requires_grad=True)
    (x @ w).relu().sum().backward()
    xn, wn, g = x.numpy(), w.numpy(), w.grad.numpy()
    np.testing.assert_allclose(g, xn.T @ ((xn @ wn) > 0).astype(np.float32), rtol=1e-5, atol=1e-5)
    Tensor.manual_seed(3)  # the values kept by the copy are the draws themselves
    np.testing.assert_array_equal(Tensor.randn(8, 4, device=device).numpy(), xn)
    np.testing.assert_array_equal(Tensor.randn(4, 2, device=device).numpy(), wn)


@pytest.mark.parametrize("own_kernel", [True, False])
@pytest.mark.parametrize("device", DEVICES)
def test_kernel_reading_old_and_new_version(device: str, own_kernel: bool) -> None:
    a = Tensor(np.arange(4, dtype=np.float32), device=device).contiguous().realize()
    old = a * 2  # lazy: computes from the values before the write
    a.assign(a + 1)
    new = (a * 3).contiguous() if own_kernel else a * 3  # computes from the written values
    x = np.arange(4)
    np.testing.assert_allclose((old * new + old).numpy(), (x * 2) * ((x + 1) * 3) + x * 2)
    np.testing.assert_allclose(a.numpy(), np.arange(4) + 1)
