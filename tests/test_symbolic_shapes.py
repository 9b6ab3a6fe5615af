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


def test_symbolic_intermediate_buffer_is_a_clear_error():
    v = Variable("rows", 1, 6).bind(3)
    part = Tensor.ones(6, 4).shrink(((0, v), None)).sum(axis=1)  # (rows,): would need a buffer of symbolic size
    with pytest.raises(NotImplementedError, match="symbolic shape"):
        part.sum().item()


def test_variable_out_of_range_names_the_value():
    with pytest.raises(ValueError, match="n"):
        Variable("n", 1, 16).bind(17)
