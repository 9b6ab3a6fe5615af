"""The public buffer API of Tensor (issue 37): from_buffer, from_file, is_realized, copyin, tobytes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tg import Tensor, TinyJit, dtypes
from tg_runtime import Buffer, DiskError


def test_from_buffer_wraps_memory_without_copy(device: str) -> None:
    buf = Buffer(device, 6, dtypes.int32).copyin(memoryview(np.arange(6, dtype=np.int32).tobytes()))
    t = Tensor.from_buffer(buf, (2, 3))
    assert t.is_realized and t.shape == (2, 3) and t.tolist() == [[0, 1, 2], [3, 4, 5]]
    buf.copyin(memoryview(np.arange(6, 12, dtype=np.int32).tobytes()))
    assert Tensor.from_buffer(buf).tolist() == list(range(6, 12)) == t.reshape(6).tolist()
    with pytest.raises(ValueError, match=r"from_buffer: shape \(4,\) does not hold the buffer's 6"):
        Tensor.from_buffer(buf, (4,))


def test_is_realized_copyin_and_tobytes(device: str) -> None:
    t = Tensor([1.0, 2.0], device=device) * 3
    assert not t.is_realized
    with pytest.raises(ValueError, match="copyin: .* is not a realized buffer"):
        t.copyin(bytes(8))
    assert t.realize().is_realized and not t[1:].is_realized
    assert t.copyin(np.array([5.0, 7.0], np.float32).data).tolist() == [5.0, 7.0]
    with pytest.raises(ValueError, match="got 4 bytes for a buffer of 8 bytes"):
        t.copyin(bytes(4))
    assert (t + 1).tobytes() == np.array([6.0, 8.0], np.float32).tobytes()
    assert Tensor([1.5], dtype=dtypes.bfloat16, device=device).tobytes() == bytes([0xC0, 0x3F])


def test_copyin_refills_a_jit_input(device: str) -> None:
    x = Tensor([0, 0, 0], dtype=dtypes.int32, device=device).realize()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        return (x * 2).realize()

    for i in range(4):
        assert step(x.copyin(np.full(3, i, np.int32).data)).tolist() == [2 * i] * 3


def test_from_file_maps_a_window_read_only(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "f.bin")
    with open(path, "wb") as f:
        f.write(np.arange(8, dtype=np.float32).tobytes())
    whole = Tensor.from_file(path)
    assert whole.device.startswith("DISK:") and whole.shape == (32,) and whole.is_realized
    part = Tensor.from_file(path, dtypes.float32, offset=8, shape=(2, 3))
    assert part.to("CPU").tolist() == [[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]]
    with pytest.raises(DiskError, match="read-only"):
        part.copyin(bytes(24))
    with pytest.raises(DiskError, match="outside the file"):
        Tensor.from_file(path, dtypes.float32, offset=8, shape=(7,))
