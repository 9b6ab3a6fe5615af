"""tg_nn: Linear matches numpy and rejects bad shapes."""

from __future__ import annotations

import numpy as np
import pytest

from tg_nn import Linear
from tg_tensor import Tensor


def test_linear_matches_numpy() -> None:
    Tensor.manual_seed(1)
    layer = Linear(5, 3)
    x = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    assert layer.bias is not None
    ref = x @ layer.weight.numpy().T + layer.bias.numpy()
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-6)
    bound = 1 / np.sqrt(5)
    assert np.all(np.abs(layer.weight.numpy()) <= bound)


def test_linear_bad_input() -> None:
    with pytest.raises(ValueError, match="in_features=5"):
        Linear(5, 3)(Tensor.ones(2, 4))


def test_weight_and_bias_realized_together_draw_as_one_by_one() -> None:
    """A layer realizes its weight and bias in one schedule; the values are the draws made one at a time
    (weight first), every parameter has a buffer of its own, and the random stream moves on by two draws."""
    from tg_nn import Conv2d

    Tensor.manual_seed(5)
    conv, lin = Conv2d(2, 4, 3), Linear(6, 3)
    after = Tensor.rand(3).numpy()
    Tensor.manual_seed(5)
    w1 = Tensor.kaiming_uniform(4, 2, 3, 3, a=np.sqrt(5)).numpy()
    b1 = Tensor.uniform(4, low=-1 / np.sqrt(18), high=1 / np.sqrt(18)).numpy()
    w2 = Tensor.kaiming_uniform(3, 6, a=np.sqrt(5)).numpy()
    b2 = Tensor.uniform(3, low=-1 / np.sqrt(6), high=1 / np.sqrt(6)).numpy()
    assert conv.bias is not None and lin.bias is not None
    for got, want in [(conv.weight, w1), (conv.bias, b1), (lin.weight, w2), (lin.bias, b2)]:
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(Tensor.rand(3).numpy(), after)
    assert conv.weight.uop.base.op.name == "BUFFER" and conv.bias.uop.base.op.name == "BUFFER"  # realized
    _ = conv.bias.assign(conv.bias + 1).realize()
    np.testing.assert_array_equal(conv.weight.numpy(), w1)  # (no shared memory)
