"""tinygrad's `@function` decorator: the decorated function computes what the plain one does."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, TinyJit, function, nn


class _Model:
    def __init__(self) -> None:
        self.l1, self.l2 = nn.Linear(4, 8), nn.Linear(8, 3)

    @function
    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())

    def plain(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


def test_method_values_and_gradients_match_the_plain_function() -> None:
    m = _Model()
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    a, b = m(Tensor(x)), m.plain(Tensor(x))
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    ga = m(Tensor(x)).sum().gradient(m.l1.weight)[0].numpy()
    gb = m.plain(Tensor(x)).sum().gradient(m.l1.weight)[0].numpy()
    np.testing.assert_allclose(ga, gb, rtol=1e-6)


def test_keywords_tuples_and_tinyjit() -> None:
    @function(precompile=True, allow_implicit=True)
    def both(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        return x + y, x * y

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        s, p = both(x, y)
        return (s - p).realize()

    for i in range(4):
        x, y = np.full(3, i, np.float32), np.arange(3, dtype=np.float32)
        np.testing.assert_allclose(step(Tensor(x), Tensor(y)).numpy(), (x + y) - x * y)


def test_bad_use_is_refused() -> None:
    @function
    def not_tensors(x: Tensor) -> int:
        return 3

    with pytest.raises(RuntimeError, match="must return a Tensor or a tuple of Tensors, got int"):
        not_tensors(Tensor([1.0]))
    with pytest.raises(NotImplementedError, match="grad_fxn"):
        function(lambda x: x, grad_fxn=lambda *a: a)
