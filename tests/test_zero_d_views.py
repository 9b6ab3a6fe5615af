"""Indexing single elements out of pad and cat results: 0-d views of padding read the pad value, never memory."""

from __future__ import annotations

import numpy as np

from tg import Tensor


def test_zero_d_views_of_padding(device: str) -> None:
    a = np.array([1, -3, -1], dtype=np.int32)
    padded = Tensor(a, device=device).pad(((3, 1),))
    want = np.pad(a, (3, 1))
    for i in range(7):
        assert padded[i].numpy() == want[i], i
        assert (padded[i] + 0).numpy() == want[i], i
    x, y = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)
    cat = Tensor(x, device=device).cat(Tensor(y, device=device))
    for i, v in enumerate(np.concatenate([x, y])):
        assert (cat[i] + 0).numpy() == v, i
    valued = Tensor(x, device=device).pad(((0, 1),), value=5.0)
    assert (valued[2] + 0).numpy() == 5.0
    assert (valued[2].reshape(1, 1).pad(((1, 0), (0, 1))) + 0).numpy().tolist() == [[0, 0], [5, 0]]


def test_zero_d_views_of_2d_padding(device: str) -> None:
    a = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    t = Tensor(a, device=device).pad(((1, 1), (2, 0)), value=-1.0)
    want = np.pad(a, ((1, 1), (2, 0)), constant_values=-1.0)
    for i, j in ((0, 0), (1, 1), (1, 2), (2, 4), (3, 3)):  # padding corners, the left pad, real elements
        assert float((t[i, j] * 1).numpy()) == want[i, j], (i, j)
