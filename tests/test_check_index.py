"""Out-of-range tensor indices: tinygrad's result by default (nothing selected: 0), IndexError with CHECK_INDEX=1."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tg import Context, Tensor


def test_default_selects_nothing(device: str) -> None:
    """The default never reads indices back: an out-of-range index selects no element (0), as in tinygrad."""
    t = Tensor([1, 2, 3], device=device)
    assert t[Tensor([5, 1], device=device)].tolist() == [0, 2]
    g = Tensor([[1, 2], [3, 4]], device=device).gather(1, Tensor([[0, 2], [1, 0]], device=device))
    assert g.tolist() == [[1, 0], [4, 3]]
    assert Tensor([0, 4], device=device).one_hot(3).tolist() == [[1, 0, 0], [0, 0, 0]]


CASES = {
    "getitem": (lambda d: Tensor([1, 2, 3], device=d)[Tensor([5], device=d)], r"index 5 is out of range \[-3, 3\)"),
    "getitem_negative": (lambda d: Tensor([1, 2, 3], device=d)[Tensor([-4], device=d)], r"index -4 is out of range"),
    "gather": (
        lambda d: Tensor([[1, 2], [3, 4]], device=d).gather(1, Tensor([[0, 2], [1, 0]], device=d)),
        r"gather on dim 1 of size 2: index 2 is out of range \[0, 2\)",
    ),
    "gather_negative": (
        lambda d: Tensor([[1, 2]], device=d).gather(1, Tensor([[-1]], device=d)),
        r"index -1 is out of range \[0, 2\)",
    ),
    "scatter": (
        lambda d: Tensor([1, 2, 3], device=d).scatter(0, Tensor([3], device=d), 9),
        r"scatter on dim 0 of size 3: index 3",
    ),
    "one_hot": (lambda d: Tensor([0, 4], device=d).one_hot(3), r"one_hot with 3 classes: index 4 is out of range"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_checked_mode_raises_naming_the_index(device: str, case: str) -> None:
    fn, message = CASES[case]
    with Context(CHECK_INDEX=1), pytest.raises(IndexError, match=message):
        fn(device)


def test_checked_mode_keeps_valid_results(device: str) -> None:
    a = np.arange(12).reshape(3, 4)
    t = Tensor(a, device=device)
    with Context(CHECK_INDEX=1):
        assert t[Tensor([-3, 2], device=device)].tolist() == a[[-3, 2]].tolist()
        idx = np.array([[3, 0, 1, 2]])
        assert t.gather(0, Tensor(idx % 3, device=device)).tolist() == np.take_along_axis(a, idx % 3, 0).tolist()
        assert Tensor([2, 0], device=device).one_hot(3).tolist() == [[0, 0, 1], [1, 0, 0]]


def test_env_var_turns_it_on() -> None:
    code = "from tg import Tensor\ntry:\n    Tensor([1, 2])[Tensor([7])]\nexcept IndexError as e:\n    print(e)"
    env = {**os.environ, "CHECK_INDEX": "1", "DEV": "PYTHON"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "index 7 is out of range" in out.stdout, out.stderr[-2000:]
