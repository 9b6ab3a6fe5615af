"""What makes an LLM decode step fast on a GPU, checked without one: a jitted step whose inputs are the same
tensors refilled in place rebinds none of its kernels, and a short matmul-like reduction whose register tile would
leave most SMs idle (decode attention scores) is spread over many workgroups instead."""

from __future__ import annotations

import numpy as np
import pytest

import tg_tensor.jit as jit
from tg import Tensor, TinyJit
from tg_codegen import get_program
from tg_codegen.renderer.cuda import CUDARenderer
from tg_runtime.cpu_graph import CPUGraph
from tg_tensor.engine.realizer import current
from tg_tensor.engine.schedule import buffer_of
from tg_uop import dtypes
from tg_uop.helpers import Context, prod


def test_refilled_inputs_rebind_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    step = TinyJit(lambda x, p: ((x * 2).sum(-1, keepdim=True) + p).contiguous())
    x, p = Tensor.empty(1, 16).realize(), Tensor.empty(1, 1).realize()
    rebinds: list[int] = []  # launches rebound: a call prepared again, or a graph's launch updated (the CPU's)
    real_bind, real_update = jit._bind, CPUGraph.update
    monkeypatch.setattr(jit, "_bind", lambda launch: rebinds.append(1) or real_bind(launch))
    monkeypatch.setattr(CPUGraph, "update", lambda g, *a: rebinds.append(1) or real_update(g, *a))
    rng = np.random.default_rng(0)
    for i in range(5):
        xs, ps = rng.standard_normal((1, 16)).astype(np.float32), np.array([[float(i)]], np.float32)
        buffer_of(x.uop.base).copyin(xs.data)
        buffer_of(p.uop.base).copyin(ps.data)
        before = len(rebinds)
        got = step(x, p).numpy()
        np.testing.assert_allclose(got, (xs * 2).sum(-1, keepdims=True) + ps, rtol=1e-5)
        if i >= 3:  # replays: only the launch writing the fresh output is rebound, none of those reading x, p
            assert len(rebinds) - before == 1
    before = len(rebinds)
    xs2 = rng.standard_normal((1, 16)).astype(np.float32)
    got = step(Tensor(xs2), Tensor([[1.0]])).numpy()  # other tensors: their launches are rebound
    np.testing.assert_allclose(got, (xs2 * 2).sum(-1, keepdims=True) + 1.0, rtol=1e-5)
    assert len(rebinds) - before >= 2


def _scores(device: str, q: np.ndarray, k: np.ndarray) -> Tensor:
    return Tensor(q, device=device).cast(dtypes.float16).float() @ Tensor(k, device=device).cast(dtypes.float16).float()


def test_short_matmul_with_few_tiles_fills_the_gpu(device: str) -> None:
    """Decode attention scores: (8 kv heads, 4 queries, 64) @ (8, 64, 1024 slots); the 4x4 register tile gave 8
    workgroups for 132 SMs, so the CUDA heuristics use threads along the outputs instead; values vs numpy."""
    if device != "CL":
        pytest.skip("the GPU heuristics run on the CL device here (CUDA: bench/bench_llm.py on the GPU)")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((8, 4, 64)).astype(np.float32)
    k = rng.standard_normal((8, 64, 1024)).astype(np.float32)
    items = [it for it in _scores(device, q, k).schedule() if it.ast.op.name == "SINK"]
    for item in items:
        current().unqueue(item)
    spec = get_program(items[-1].ast, CUDARenderer("sm_90"))
    assert spec.global_size is not None and prod(spec.global_size) >= 16, (spec.global_size, spec.applied_opts)
    ref = q.astype(np.float16).astype(np.float32) @ k.astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(_scores(device, q, k).numpy(), ref, rtol=1e-4, atol=1e-4)


def test_a_debug_replay_rebinds_for_the_next_one() -> None:
    """A replay under DEBUG=2 (kernels one by one) with new input tensors leaves the launches bound to them, so
    the next plain replay with the same tensors reads them, not the earlier ones."""

    step = TinyJit(lambda x: (x + 1).contiguous())
    for v in (1.0, 2.0, 3.0):
        step(Tensor([v, v]))
    y = Tensor([10.0, 20.0])
    with Context(DEBUG=2):
        np.testing.assert_array_equal(step(y).numpy(), [11.0, 21.0])
    np.testing.assert_array_equal(step(y).numpy(), [11.0, 21.0])
