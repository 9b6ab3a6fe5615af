"""A device that is absent here raises one clear DeviceUnavailableError saying what is missing and how to install it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tg_runtime import Device, DeviceUnavailableError

OPEN_CL = """
from tg_runtime import Device, DeviceUnavailableError
try:
    Device["CL"]
except DeviceUnavailableError as e:
    print("UNAVAILABLE:", e)
else:
    print("OPENED")
"""


def test_cl_without_a_platform_says_what_to_install(tmp_path: Path) -> None:
    """No OpenCL driver registered (an empty vendors folder): not pyopencl's raw PLATFORM_NOT_FOUND_KHR."""
    pytest.importorskip("pyopencl", reason="pyopencl is not installed (tg-runtime[opencl])")
    env = {**os.environ, "OCL_ICD_VENDORS": str(tmp_path)}  # the ICD loader looks for drivers there only
    out = subprocess.run([sys.executable, "-c", OPEN_CL], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("UNAVAILABLE: the CL device is unavailable: no OpenCL platform"), out.stdout
    assert "apt-get install pocl-opencl-icd ocl-icd-libopencl1" in out.stdout


def test_cuda_without_a_driver_says_so() -> None:
    try:
        Device["CUDA"]
    except DeviceUnavailableError as e:
        assert "the CUDA device is unavailable" in str(e) or "CUDA:" in str(e)
        assert "driver" in str(e) or "GPU" in str(e)
    else:
        pytest.skip("this machine has a GPU and its driver")


def test_a_device_index_past_the_last_gpu_is_unavailable() -> None:
    from tg_runtime.ops_cuda import device_count

    if device_count() == 0:
        pytest.skip("no GPU here: the index check needs a driver")
    with pytest.raises(DeviceUnavailableError, match=r"CUDA:99 is unavailable: this machine has \d+ GPU"):
        Device["CUDA:99"]
