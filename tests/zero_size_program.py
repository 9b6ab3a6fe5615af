"""Allocate, view, copy, reduce and free zero-size tensors N times on one device (run in a subprocess by
tests/test_zero_size.py, which checks the exit code: a crash in any allocator or device kills this process).

usage: python zero_size_program.py DEVICE N [TMPDIR]
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np

from tg import Tensor, dtypes
from tg_runtime.ops_disk import disk_buffers


def one_round(device: str, i: int, tmp: str) -> None:
    shape = [(0,), (0, 3), (3, 0), (2, 0, 4)][i % 4]
    if device.startswith("DISK"):
        path = os.path.join(tmp, f"z{i % 3}.bin")
        with open(path, "wb") as f:
            f.write(b"" if i % 2 else bytes(8))  # an empty file, or one with a zero-length window in it
        (buf,) = disk_buffers(path, [(0, 0, dtypes.float32)])
        t = Tensor.empty(0, device=f"DISK:{path}")
        del t

        d = Tensor.from_buffer(buf, (0,))
        c = d.to("CPU")
        assert c.numpy().shape == (0,)
        assert c.sum().item() == 0.0
        return
    a = Tensor.zeros(*shape, device=device).contiguous().realize()
    b = Tensor(np.ones(shape, np.float32), device=device)
    v = (a + b).reshape(shape[::-1]).permute(*reversed(range(len(shape)))) * 2  # view of a view
    assert v.numpy().shape == shape
    assert v.sum().item() == 0.0
    axis = next((ax for ax, n in enumerate(shape) if n), None)  # max over a size-0 axis has no value (numpy: error)
    if axis is not None:
        assert v.max(axis=axis).numpy().shape == shape[:axis] + shape[axis + 1 :]
    try:
        v.max().numpy()
        raise AssertionError("max of an empty tensor must raise")
    except ValueError:
        pass
    assert np.isnan(v.mean().item())
    s = v.sum(axis=0).numpy()
    assert s.shape == shape[1:] and (s == 0).all()
    cpu = v.to("CPU").realize()
    back = cpu.to(device).pad(((1, 1),) + ((0, 0),) * (len(shape) - 1))
    assert back.numpy().shape == (shape[0] + 2,) + shape[1:]
    assert Tensor.empty(*shape, device=device).cat(b, dim=0).numpy().shape[0] == 2 * shape[0]
    del a, b, v, cpu, back
    if i % 64 == 0:
        gc.collect()


def main() -> None:
    device, n = sys.argv[1], int(sys.argv[2])
    tmp = sys.argv[3] if len(sys.argv) > 3 else "/tmp"
    for i in range(n):
        one_round(device, i, tmp)
    gc.collect()
    print(f"ok {device} {n}")


if __name__ == "__main__":
    main()
