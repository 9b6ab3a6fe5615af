"""`Context(TRAINING=1)` (tinygrad 0.14's switch) and `Tensor.training` / `Tensor.train()` are one setting."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Context, Tensor, nn
from tg_nn.datasets import DatasetError, mnist


def test_context_training_turns_on_dropout_and_batch_statistics() -> None:
    assert not Tensor.training
    x = Tensor.ones(1000)
    np.testing.assert_array_equal(x.dropout(0.5).numpy(), np.ones(1000, np.float32))  # eval: a no-op
    with Context(TRAINING=1):
        assert Tensor.training
        kept = x.dropout(0.5).numpy()
        assert 300 < (kept == 0).sum() < 700 and set(np.unique(kept)) <= {0.0, 2.0}
        bn = nn.BatchNorm(3)
        data = np.random.default_rng(0).standard_normal((8, 3, 2, 2)).astype(np.float32) * 3 + 1
        out = bn(Tensor(data)).numpy()
        assert abs(out.mean()) < 1e-4  # normalized with the batch's statistics
    assert not Tensor.training


def test_tensor_train_sets_the_context_variable() -> None:
    from tg_uop.helpers import TRAINING

    with Tensor.train():
        assert TRAINING.value == 1
        with Tensor.test():
            assert TRAINING.value == 0 and not Tensor.training
    assert TRAINING.value == 0


def test_fashion_mnist_missing_names_the_variable(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FASHION_MNIST_DIR", raising=False)
    with pytest.raises(DatasetError, match="FASHION_MNIST_DIR"):
        mnist(fashion=True)
