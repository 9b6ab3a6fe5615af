"""tg: the meta-package re-exports the public API."""

from __future__ import annotations

import tg


def test_public_names() -> None:
    for name in ("Tensor", "Device", "dtypes", "nn", "GlobalCounters", "Context", "getenv", "UOp", "Variable"):
        assert hasattr(tg, name), name
    t = tg.Tensor([1, 2, 3]) + tg.Tensor([4, 5, 6])
    assert t.tolist() == [5, 7, 9]
    assert tg.nn.Linear(2, 2).weight.shape == (2, 2)


def test_tinygrad_import_paths() -> None:
    from tg.nn.datasets import mnist
    from tg.nn.optim import SGD, Adam
    from tg.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save

    assert all(
        callable(f) for f in (mnist, SGD, Adam, get_parameters, get_state_dict, load_state_dict, safe_load, safe_save)
    )
    assert tg.nn.Conv2d is not None and tg.nn.optim.Adam is Adam
