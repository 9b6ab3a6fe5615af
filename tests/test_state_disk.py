"""The DISK device: read-only windows into a memory-mapped file."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg_runtime.ops_disk import DiskError, disk_buffers


@pytest.fixture
def data_file(tmp_path: os.PathLike[str]) -> str:
    path = os.path.join(tmp_path, "data.bin")
    with open(path, "wb") as f:
        f.write(np.arange(16, dtype=np.float32).tobytes())
    return path


def test_windows_read_the_file_and_copy_to_compute_devices(data_file: str, device: str) -> None:
    a, b = disk_buffers(data_file, [(0, 4, dtypes.float32), (32, 8, dtypes.float32)])
    assert a.device == Device.canonicalize(f"DISK:{data_file}")
    np.testing.assert_array_equal(np.frombuffer(b.as_bytes(), np.float32), np.arange(8, 16, dtype=np.float32))
    t = Tensor.from_buffer(b, (2, 4))
    np.testing.assert_array_equal((t.to(device) * 2).numpy(), np.arange(8, 16, dtype=np.float32).reshape(2, 4) * 2)


def test_disk_refuses_kernels_writes_and_windows_outside_the_file(data_file: str) -> None:
    [buf] = disk_buffers(data_file, [(0, 4, dtypes.float32)])
    with pytest.raises(DiskError, match="DISK runs no kernels"):
        (Tensor.from_buffer(buf, (4,)) + 1).realize()
    with pytest.raises(DiskError, match="read-only"):
        buf.copyin(memoryview(bytes(16)))
    with pytest.raises(DiskError, match=r"window \[60, 68\) of 2 x dtypes.float is outside the file of 64 bytes"):
        disk_buffers(data_file, [(60, 2, dtypes.float32)])
    # Tensor.empty on DISK maps the file's first bytes (tinygrad's way to open a raw file)
    np.testing.assert_array_equal(
        Tensor.empty(4, device=f"DISK:{data_file}").to("CPU").numpy(), np.fromfile(data_file, np.float32)[:4]
    )
    with pytest.raises(ValueError, match="DISK:<path to a file>"):
        Device["DISK"]
