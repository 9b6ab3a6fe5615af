"""DISK tensors: Tensor.empty on a file, slices and views moved to a device, writes into the file."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg_runtime.ops_disk import DiskError


def test_empty_maps_an_existing_file(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "x.bin")
    data = np.arange(24, dtype=np.float32)
    data.tofile(path)
    t = Tensor.empty(24, dtype=dtypes.float32, device=f"DISK:{path}")
    np.testing.assert_array_equal(t.to("CPU").numpy(), data)
    np.testing.assert_array_equal(t[2:5].to("CPU").numpy(), data[2:5])
    grid = t.reshape(4, 6)
    np.testing.assert_array_equal(grid[1].to("CPU").numpy(), data.reshape(4, 6)[1])
    np.testing.assert_array_equal(grid[:, 2].to("CPU").numpy(), data.reshape(4, 6)[:, 2])  # not one range
    np.testing.assert_array_equal(grid.T[1:3].to("CPU").numpy(), data.reshape(4, 6).T[1:3])
    np.testing.assert_array_equal((t[3:9].to("CPU") + 1).numpy(), data[3:9] + 1)


def test_writes_go_to_the_file(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "new.bin")  # created, and grown to the tensor's size
    t = Tensor.empty(3, 4, dtype=dtypes.int32, device=f"DISK:{path}")
    t.assign(Tensor(np.arange(12, dtype=np.int32).reshape(3, 4)))
    assert os.path.getsize(path) == 48
    t[1].assign(Tensor([-1, -2, -3, -4], dtype=dtypes.int32))
    t[2, 1:3] = [70, 80]
    want = np.arange(12, dtype=np.int32).reshape(3, 4)
    want[1] = [-1, -2, -3, -4]
    want[2, 1:3] = [70, 80]
    np.testing.assert_array_equal(np.fromfile(path, np.int32).reshape(3, 4), want)
    np.testing.assert_array_equal(t.to("CPU").numpy(), want)
    t[0, :2].assign(Tensor([5, 6], dtype=dtypes.int32).to(f"DISK:{path}"))  # a value sent to the same file
    assert np.fromfile(path, np.int32)[:2].tolist() == [5, 6]


def test_disk_errors_say_what_to_do(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "e.bin")
    t = Tensor.empty(4, 4, dtype=dtypes.float32, device=f"DISK:{path}")
    with pytest.raises(DiskError, match=r"DISK runs no kernels: compute on a device, e.g. t.to\('CPU'\)"):
        (t + 1).realize()
    with pytest.raises(DiskError, match="only a contiguous range"):
        t[:, 1].assign(Tensor([1.0, 2.0, 3.0, 4.0]))
    with pytest.raises(ValueError, match="does not match"):
        t[0].assign(Tensor([1.0, 2.0]))
