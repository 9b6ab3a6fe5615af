"""A failed realize leaves nothing behind: the next, unrelated realize succeeds; what the failed one should
have computed raises when read (never garbage); a graph using the same nodes computes them again.
Ops mixing devices raise a clear error before anything reaches a driver."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from tg import Tensor
from tg_runtime.ops_disk import DiskError
from tg_tensor.engine.realizer import current


def _disk_file(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "data.bin"
    path.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    return str(path)


def test_failed_realize_does_not_poison_the_next_one(tmp_path: pathlib.Path) -> None:
    bad = ((Tensor.empty(4, device=f"DISK:{_disk_file(tmp_path)}") + 1).to("CPU") * 2).contiguous()
    with pytest.raises(DiskError):
        bad.realize()  # the DISK kernel fails; the copy and the CPU kernel after it must not stay pending
    assert not current().pending
    np.testing.assert_array_equal((Tensor([1.0, 2.0]) + 1).numpy(), [2.0, 3.0])
    with pytest.raises(RuntimeError, match="never computed.*DiskError"):
        bad.numpy()
    with pytest.raises(RuntimeError, match="never computed"):
        (bad + 1).numpy()


def test_failed_kernelize_then_realize_of_another_tensor(tmp_path: pathlib.Path) -> None:
    bad = (Tensor.empty(4, device=f"DISK:{_disk_file(tmp_path)}") + 1).to("CPU").kernelize()
    good = (Tensor([3.0]) * 2).kernelize()
    with pytest.raises(DiskError):
        Tensor([0.0]).realize()  # runs what kernelize left pending: it fails with DISK's error
    assert not current().pending
    assert (Tensor([1.0]) + 1).tolist() == [2.0]
    with pytest.raises(RuntimeError, match="never computed"):
        good.numpy()  # it was pending behind the failure: an error, never uninitialized memory
    with pytest.raises(RuntimeError, match="never computed"):
        bad.numpy()
    assert ((Tensor([3.0]) * 2) + 0).tolist() == [6.0]  # the same graph built again computes again


def test_a_disk_read_of_a_real_window_still_works(tmp_path: pathlib.Path) -> None:
    from tg_nn.state import safe_load, safe_save

    path = str(tmp_path / "w.safetensors")
    safe_save({"w": Tensor([1.0, 2.0])}, path)
    with pytest.raises(DiskError):
        (Tensor.empty(2, device=f"DISK:{path}") * 2).realize()
    assert safe_load(path)["w"].to("CPU").tolist() == [1.0, 2.0]


@pytest.mark.parametrize("other", ["PYTHON", "CL"])
def test_mixed_devices_raise_naming_both(other: str) -> None:
    from tg import Device

    try:
        Device[other]
    except Exception as e:
        pytest.skip(f"{other} unavailable: {e}")
    a, b = Tensor([1.0, 2.0], device=other), Tensor([1.0, 2.0], device="CPU")
    with pytest.raises(ValueError, match=f"different devices: {other} .* and CPU"):
        a + b
    with pytest.raises(ValueError, match=f"different devices: CPU .* and {other}"):
        b.reshape(1, 2) @ a.reshape(2, 1)
    with pytest.raises(ValueError, match="different devices"):
        (a > 1).where(b, 0)
    with pytest.raises(ValueError, match="different devices"):
        Tensor.cat(a, b)
    assert (a + b.to(other)).tolist() == [2.0, 4.0]  # moving one operand is the way


def test_unusable_cc_is_an_error_not_a_fallback() -> None:
    import os
    import subprocess
    import sys

    prog = "from tg import Tensor\nprint((Tensor([1.0]) + 1).tolist())\n"
    env = {k: v for k, v in os.environ.items() if k not in ("DEV", "CPU", "CL", "PYTHON", "CUDA")}
    env["CC"] = "no-such-compiler-tg"
    proc = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1 and "CC='no-such-compiler-tg' is not an executable" in proc.stderr, proc.stderr[-2000:]
    env["DEV"] = "PYTHON"  # a run that does not use the CPU device is not affected
    proc = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "[2.0]", proc.stderr[-2000:]
