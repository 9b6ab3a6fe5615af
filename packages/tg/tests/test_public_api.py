"""tg: the meta-package re-exports the public API."""

from __future__ import annotations

import tg


def test_public_names() -> None:
    for name in ("Tensor", "Device", "dtypes", "nn", "GlobalCounters", "Context", "getenv", "UOp", "Variable"):
        assert hasattr(tg, name), name
    t = tg.Tensor([1, 2, 3]) + tg.Tensor([4, 5, 6])
    assert t.tolist() == [5, 7, 9]
    assert tg.nn.Linear(2, 2).weight.shape == (2, 2)
