"""Caches that grow with a program are bounded, and constants that change between realizes do not compile
new kernels: a family of ASTs equal up to constants compiles twice (as is, then with its constants as
inputs), whatever the number of constants."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg_runtime.runner import _runner_cache
from tg_uop.helpers import LRUCache


def test_changing_constants_compile_two_kernels_not_one_per_value(device: str) -> None:
    a_np = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    a = Tensor(a_np, device=device)
    before = 0
    for i in range(25):
        k = 0.37 * i - 3
        got = (a * k + 1).relu().sum(axis=1).numpy()
        np.testing.assert_allclose(got, np.maximum(a_np * np.float32(k) + 1, 0).sum(axis=1), rtol=1e-6, atol=1e-6)
        before = before or len(_runner_cache)  # after the first value: its kernel (and any copy out) compiled
    assert len(_runner_cache) - before <= 1  # then one more: the family with its constants as inputs


@pytest.mark.parametrize("k", [0.0, -0.0, 1.0, math.inf, -math.inf, math.nan, 1e-30, 3.5])
def test_lifted_float_constants_keep_their_value(k: float) -> None:
    a_np = np.array([1.0, -2.0, 0.0, 4.0], dtype=np.float32)
    a = Tensor(a_np)
    for shift in (1.0, 2.0, 3.0):  # the family is lifted from its second member on
        with np.errstate(all="ignore"):
            want = a_np * np.float32(k) + np.float32(shift)
            np.testing.assert_array_equal((a * k + shift).numpy(), want)
            want = np.float32(1) / (abs(a_np) * 0 + np.float32(k))
            np.testing.assert_array_equal((1 / (a.abs() * 0 + k)).numpy(), want)


def test_lifted_int_constants_and_padding(device: str) -> None:
    a_np = np.arange(5, dtype=np.int32)
    a = Tensor(a_np, device=device)
    for k in range(-3, 4):
        np.testing.assert_array_equal((a * k + 7).numpy(), a_np * k + 7)
        padded = (Tensor.full((3,), k, dtype=dtypes.int32, device=device).pad(((1, 1),)) + a).numpy()
        np.testing.assert_array_equal(padded, np.pad(np.full(3, k, np.int32), (1, 1)) + a_np)


def test_lru_cache_keeps_the_most_recently_used() -> None:
    c = LRUCache[int, int](3)
    for i in range(10):
        c[i] = i
        assert c.get(0) == 0  # used on every step: never the least recently used
    assert len(c) == 3 and sorted(c.keys()) == [0, 8, 9]
    with pytest.raises(ValueError, match="at least 1"):
        LRUCache[int, int](0)


def test_kernel_cache_is_bounded_by_its_variable() -> None:
    prog = (
        "import numpy as np\n"
        "from tg import Tensor\n"
        "from tg_runtime.runner import _runner_cache\n"
        "from tg_tensor.engine.realizer import current\n"
        "for n in range(1, 30):\n"
        "    a = np.arange(n, dtype=np.float32)\n"
        "    assert (Tensor(a) * 2 + 1).sum().item() == float((a * 2 + 1).sum())\n"
        "assert len(_runner_cache) <= 4, len(_runner_cache)\n"
        "assert len(current().recipes) <= 5, len(current().recipes)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "KERNEL_CACHE_MAX": "4", "SCHEDULE_CACHE_MAX": "5", "DEV": "CPU"}
    proc = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
