"""A bound Variable used as a value (`x + v`, `triu(v + 1)`, `Tensor.full(shape, v)`), as tinygrad allows.

The value is a kernel argument, so one compiled kernel, and one TinyJit recording, serves every binding.
"""

from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, TinyJit, Variable


def test_variable_in_arithmetic_and_comparisons(device: str) -> None:
    for value in (0, 3, 7):
        v = Variable("i", 0, 10).bind(value)
        a = np.arange(5)
        np.testing.assert_array_equal((Tensor.arange(5, device=device) + v).numpy(), a + value)
        np.testing.assert_array_equal((Tensor.arange(5, device=device) * (v + 1) - 2).numpy(), a * (value + 1) - 2)
        np.testing.assert_array_equal((Tensor.arange(5, device=device) < v).numpy(), a < value)
        np.testing.assert_allclose((Tensor.ones(3, device=device) * v).numpy(), np.full(3, value, np.float32))
        assert (Tensor.ones(3, device=device) * v).dtype == Tensor.ones(3).dtype  # an int scalar keeps a float dtype
        np.testing.assert_array_equal(Tensor.full((2, 2), v, device=device).numpy(), np.full((2, 2), value))
        cond = Tensor.arange(3, device=device) > 1
        np.testing.assert_array_equal(cond.where(v, 0).numpy(), np.where(a[:3] > 1, value, 0))
        assert Tensor(v, device=device).item() == value


def test_variable_with_a_negative_lower_bound(device: str) -> None:
    for value in (-4, -1, 0, 2):
        v = Variable("k", -4, 4).bind(value)
        np.testing.assert_array_equal((Tensor.arange(3, device=device) + v).numpy(), np.arange(3) + value)


def test_triu_with_a_variable_diagonal(device: str) -> None:
    for value in (0, 1, 2):
        v = Variable("p", 0, 8).bind(value)
        got = Tensor.ones(4, 4, device=device).triu(v + 1).numpy()
        np.testing.assert_array_equal(got, np.triu(np.ones((4, 4), np.float32), value + 1))


def test_one_recording_serves_every_value(device: str) -> None:
    var = Variable("pos", 0, 20)

    @TinyJit
    def step(x: Tensor, pos: object) -> Tensor:
        return (x + Tensor.ones(4, 4, device=device).triu(pos + 1).sum(1) + pos).realize()

    for value in range(6):
        got = step(Tensor.zeros(4, device=device), var.bind(value))
        want = np.triu(np.ones((4, 4), np.float32), value + 1).sum(1) + value
        np.testing.assert_array_equal(got.numpy(), want)
    assert len(step.captures) == 1  # the recording is replayed with each new value, not made again


def test_unbound_variable_is_refused() -> None:
    with pytest.raises(ValueError, match="variable 'j' has no value"):
        Tensor.arange(3) + Variable("j", 0, 4)
