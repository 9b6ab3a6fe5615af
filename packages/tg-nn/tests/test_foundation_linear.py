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
