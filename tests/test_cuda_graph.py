"""CUDA graphs (GPU only): two kernels recorded once replay with one launch and give the eager results."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Device, Tensor
from tg_runtime import get_runner
from tg_tensor.engine.realizer import current
from tg_tensor.engine.schedule import buffer_of


def _cuda_or_skip() -> None:
    try:
        Device["CUDA"]
    except Exception as e:
        pytest.skip(f"CUDA unavailable: {e}")


def test_recorded_graph_replays() -> None:
    _cuda_or_skip()
    from tg_runtime.ops_cuda import CUDADevice, CUDAGraph

    a = Tensor(np.arange(8, dtype=np.float32), device="CUDA")
    b = Tensor(np.full(8, 2.0, dtype=np.float32), device="CUDA")
    mid = (a + b).contiguous()
    out = (mid * mid).sum()
    items = out.schedule()
    assert len(items) == 2
    for item in items:  # this test launches them itself, through the graph
        current().unqueue(item)
    launches = []
    for item in items:
        for buf in item.bufs:
            buf.ensure_allocated()
        runner = get_runner("CUDA", item.ast)
        launches.append(
            (runner.program, [buf.opaque for buf in item.bufs], runner.spec.global_size, runner.spec.local_size, ())
        )
    dev = Device["CUDA"]
    assert isinstance(dev, CUDADevice)
    graph = CUDAGraph(dev.drv, launches)
    for _ in range(3):
        graph(wait=True)
    out_buf = buffer_of(out.uop.base)
    got = np.frombuffer(out_buf.as_bytes(), dtype=np.float32)[0]
    assert got == pytest.approx(float(((np.arange(8) + 2.0) ** 2).sum()))


def test_tinyjit_replays_through_one_cuda_graph() -> None:
    _cuda_or_skip()
    from tg import TinyJit

    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        return ((x + y).contiguous() * 2).sum(0)

    rng = np.random.default_rng(0)
    outs = []
    for i in range(5):
        a = rng.random((16, 8), dtype=np.float32)
        b = rng.random((16, 8), dtype=np.float32)
        out = f(Tensor(a, device="CUDA"), Tensor(b, device="CUDA"))
        outs.append((out, ((a + b) * 2).sum(0)))
        if i >= 2:
            assert f.recording is not None and f.recording.graph is not None  # replays are graph launches
    for out, want in outs:  # every call's result is its own (the graph's output buffer is swapped per call)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)
