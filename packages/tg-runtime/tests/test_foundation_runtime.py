"""tg_runtime alone: buffers round-trip and a kernel AST runs on CPU and PYTHON."""

from __future__ import annotations

import numpy as np
import pytest

from tg_runtime import Buffer, Device, get_runner
from tg_shape import ShapeTracker
from tg_uop import Ops, UOp, dtypes

F32 = dtypes.float32


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_buffer_roundtrip(dev: str) -> None:
    data = np.arange(10, dtype=np.float32)
    buf = Buffer(dev, 10, F32).copyin(memoryview(data.tobytes()))
    np.testing.assert_equal(np.frombuffer(buf.as_bytes(), dtype=np.float32), data)
    with pytest.raises(ValueError, match="40 bytes"):
        buf.copyin(memoryview(bytes(8)))


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_transposed_max_kernel(dev: str) -> None:
    g0 = UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), 0)
    g1 = UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), 1)
    st = ShapeTracker.from_shape((4, 6)).permute((1, 0))
    load = UOp(Ops.LOAD, F32, (g1, UOp(Ops.VIEW, arg=st)))
    red = UOp(Ops.REDUCE_AXIS, F32, (load * UOp(Ops.CONST, F32, (UOp(Ops.VIEW, arg=st),), 2.0),), (Ops.MAX, (0,)))
    store = UOp(Ops.STORE, dtypes.void, (g0, UOp(Ops.VIEW, arg=ShapeTracker.from_shape((1, 4))), red))
    ast = UOp(Ops.SINK, dtypes.void, (store,))
    data = np.random.default_rng(0).standard_normal(24).astype(np.float32)
    inp = Buffer(dev, 24, F32).copyin(memoryview(data.tobytes()))
    out = Buffer(dev, 4, F32)
    get_runner(dev, ast)([out, inp])
    np.testing.assert_allclose(np.frombuffer(out.as_bytes(), np.float32), (data.reshape(4, 6) * 2).max(axis=1))


def test_unknown_device() -> None:
    with pytest.raises(KeyError, match="known devices"):
        Device["NOT_A_DEVICE"]
    assert Device.canonicalize("cpu:0") == "CPU"


def test_cpu_vector_width_follows_the_host() -> None:
    """64-byte vectors where the CPU has AVX-512 (F and VL), else 32; the renderer refuses other widths."""
    import platform

    from tg_codegen.renderer.cstyle import ClangRenderer
    from tg_runtime.ops_cpu import host_vector_bytes

    flags: list[str] = []
    if platform.machine() in ("x86_64", "AMD64"):
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    assert host_vector_bytes() == (64 if {"avx512f", "avx512vl"} <= set(flags) else 32)
    assert ClangRenderer(2, 64).vector_bytes == 64 and ClangRenderer().vector_bytes == 32
    with pytest.raises(ValueError, match="vector_bytes must be 16, 32 or 64, got 48"):
        ClangRenderer(1, 48)
