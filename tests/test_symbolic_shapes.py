"""Symbolic shapes, eager: a tensor shrunk by a bound Variable runs the same kernels for every value."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, Variable
from tg_runtime.runner import _runner_cache


def test_shrink_by_bound_variable_one_kernel_for_every_value():
    a = np.arange(1, 17, dtype=np.float32)
    t = Tensor(a)
    kernels = []
    for n in (3, 5, 9, 16, 1):
        v = Variable("n", 1, 16).bind(n)
        s = t.shrink(((0, v),))
        assert s.shape[0] is v  # the shape is the bound variable itself
        assert (s * 2 + 1).sum().item() == pytest.approx(float((a[:n] * 2 + 1).sum()))
        assert ((s * s).max().item()) == pytest.approx(float((a[:n] ** 2).max()))
        kernels.append(len(_runner_cache))
    assert kernels[1:] == [kernels[0]] * 4, kernels  # no kernel compiled after the first value


def test_shrink_of_2d_with_variable_and_offset():
    a = np.arange(48, dtype=np.float32).reshape(6, 8)
    t = Tensor(a)
    for n in (2, 4, 6):
        v = Variable("rows", 1, 6).bind(n)
        got = t.shrink(((0, v), (2, 6)))
        np.testing.assert_allclose((got * 3).sum().item(), 3 * a[:n, 2:6].sum())
        np.testing.assert_allclose(got.max().item(), a[:n, 2:6].max())


def test_symbolic_intermediate_buffer_holds_the_bound_part(device: str):
    # (rows,) realized on its own: a buffer of the largest size, the kernel writes the bound part
    a = np.arange(24, dtype=np.float32).reshape(6, 4)
    for n in (1, 3, 6):
        v = Variable("rows", 1, 6).bind(n)
        part = Tensor(a, device=device).shrink(((0, v), None)).sum(axis=1)
        np.testing.assert_allclose(part.contiguous().numpy(), a[:n].sum(axis=1))
        np.testing.assert_allclose((part.exp() / part.exp().sum()).sum().item(), 1.0, rtol=1e-6)


def test_variable_out_of_range_names_the_value_and_range():
    with pytest.raises(ValueError, match=r"'n'.*17.*\[1, 16\]"):
        Variable("n", 1, 16).bind(17)
    with pytest.raises(ValueError, match=r"'n'.*0.*\[1, 16\]"):
        Variable("n", 1, 16).bind(0)


def test_unbound_variable_in_a_realized_shape_is_a_clear_error():
    n = Variable("n", 1, 8)
    with pytest.raises(ValueError, match=r"variable 'n' is used in a shape but not bound.*bind"):
        Tensor.ones(n).sum().item()
    with pytest.raises(ValueError, match=r"variable 'n' is not bound"):
        Tensor.ones(n).numpy()


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_symbolic_ops_match_numpy(device: str):
    rng = np.random.default_rng(0)
    k = rng.standard_normal((12, 8)).astype(np.float32)
    q = rng.standard_normal((2, 8)).astype(np.float32)
    x = rng.standard_normal((4, 12)).astype(np.float32)
    for n in (1, 5, 12):
        v = Variable("len", 1, 12).bind(n)
        kt, xt = Tensor(k, device=device), Tensor(x, device=device)
        assert Tensor.ones(v, device=device).sum().item() == n
        np.testing.assert_allclose(xt.shrink((None, (0, v))).numpy(), x[:, :n])  # a symbolic shape reads back bound
        np.testing.assert_allclose(xt[:, :v].reshape(4, 1, v).sum(axis=(0, 1)).numpy(), x[:, :n].sum(0), rtol=1e-5)
        np.testing.assert_allclose(xt[:, :v].max(axis=1).numpy(), x[:, :n].max(1))
        scores = Tensor(q, device=device) @ kt[:v].T  # (2, len)
        assert scores.shape[1] is v
        np.testing.assert_allclose(scores.numpy(), q @ k[:n].T, rtol=1e-5, atol=1e-5)
        out = scores.softmax(-1) @ kt[:v]
        np.testing.assert_allclose(out.numpy(), _softmax(q @ k[:n].T) @ k[:n], rtol=1e-5, atol=1e-5)
        # a window [v, v + 1) and a shape expression (v + 1)
        np.testing.assert_allclose(xt[:, v - 1 : v].numpy(), x[:, n - 1 : n])
        w = Variable("w", 1, 11).bind(n - 1) if n > 1 else None
        if w is not None:
            np.testing.assert_allclose(xt[:, : w + 1].sum(1).numpy(), x[:, :n].sum(1), rtol=1e-5)


def test_symbolic_slice_refuses_negative_bounds_and_steps():
    v = Variable("n", 1, 8).bind(3)
    t = Tensor.ones(8)
    with pytest.raises(IndexError, match="step 1"):
        t[:v:2]
    with pytest.raises(IndexError, match="non-negative"):
        t[:v][-1:]


def test_any_variable_name_compiles_and_same_names_with_other_ranges_stay_apart(device: str):
    a = np.arange(10, dtype=np.float32)
    for name in ("int", "start pos", "alu0", "data0"):
        v, w = Variable(name, 1, 10).bind(4), Variable(name, 1, 9).bind(3)  # two variables, one name
        t = Tensor(a, device=device)
        assert (t[:v].sum() + t[:w].sum()).item() == a[:4].sum() + a[:3].sum()
