"""Tensors past 2^31 elements: 64-bit loop counters and index maths, decided per kernel from its sizes.

The big cases here allocate nothing (constants seen through pad/expand are computed, not stored); the one
that needs a 2^31-element buffer (2 GiB) runs only with TG_TEST_BIG=1.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg_codegen.program import get_program
from tg_runtime import Device
from tg_tensor.engine.schedule import create_schedule

BIG = 2**31 + 5
BIG_TESTS = os.getenv("TG_TEST_BIG") == "1"


def _source(t: Tensor) -> str:
    items, _ = create_schedule([t.uop])
    return "\n".join(get_program(it.ast, Device["CPU"].renderer).src for it in items if it.ast.op.name == "SINK")


def test_issue_reproducers(device: str) -> None:
    """Sums of constants over 2^31 and 10^12 elements are exact (and computed without a loop or a buffer)."""
    assert Tensor.ones(10**6, 10**6, device=device).sum().item() == float(np.float32(1e12))
    full = Tensor.full((BIG,), 1, dtype=dtypes.int32, device=device)
    assert full.sum(dtype=dtypes.int64).item() == BIG
    assert full.sum().item() == int(np.array([BIG], np.int64).astype(np.int32)[0])  # int32 sums wrap, as in C
    assert Tensor.full((3, BIG), 2.5, device=device).max().item() == 2.5


def test_index_width_is_decided_per_kernel() -> None:
    """Small kernels keep int32 loops and indexes; a kernel that spans 2^31 elements counts in int64."""
    small = _source(Tensor.ones(1000).pad(((2, 3),)) + Tensor.arange(1005, dtype=dtypes.float32))
    assert "for (int " in small or "int ridx" in small or "ridx" not in small
    assert "long" not in small
    big = _source(Tensor.full((BIG,), 1, dtype=dtypes.int32).pad(((0, 3),)).sum(dtype=dtypes.int64))
    assert "for (long ridx" in big


def test_loop_past_2_31_on_cpu() -> None:
    """A reduction whose loop counter passes 2^31 (pad keeps it from folding): int32 counters gave 0."""
    padded = Tensor.full((BIG,), 1, dtype=dtypes.int32, device="CPU").pad(((0, 3),))
    assert padded.sum(dtype=dtypes.int64).item() == BIG


@pytest.mark.skipif(not BIG_TESTS, reason="opt-in (TG_TEST_BIG=1): minutes on PoCL, and 2 GiB for the buffer case")
@pytest.mark.parametrize("dev", ["CPU", "CL"])
def test_big_opt_in(dev: str) -> None:
    padded = Tensor.full((BIG,), 1, dtype=dtypes.int32, device=dev).pad(((0, 3),))
    assert padded.sum(dtype=dtypes.int64).item() == BIG
    two_d = Tensor.full((2**16 + 1, 2**15 + 1), 2, dtype=dtypes.int8, device=dev).pad(((0, 1), (1, 0)))
    assert (two_d * 1).sum(dtype=dtypes.int64).item() == 2 * (2**16 + 1) * (2**15 + 1)
    stored = Tensor.full((BIG,), 1, dtype=dtypes.int8, device=dev).contiguous().realize()  # a real 2 GiB buffer
    assert stored.sum(dtype=dtypes.int64).item() == BIG
    assert stored[BIG - 1].item() == 1 and stored[-3:].tolist() == [1, 1, 1]
