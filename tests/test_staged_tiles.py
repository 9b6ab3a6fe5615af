"""STAGE (operand tiles in shared memory) end to end on CL (PoCL): real kernels from the Tensor API, against numpy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg import Device, Tensor
from tg_codegen import Kernel, Opt, OptOps, get_program
from tg_codegen.axes import AxisType
from tg_codegen.heuristic import hand_coded_optimizations
from tg_codegen.renderer.cuda import CUDARenderer
from tg_codegen.tc.stage import staged_loads, tile_of
from tg_runtime import CompiledRunner
from tg_tensor.engine.realizer import current


@pytest.fixture(params=["CL", "CUDA"])
def cl(request: pytest.FixtureRequest) -> str:
    """A device with workgroups and shared memory: CL (PoCL here and in CI), CUDA on the GPU machine."""
    try:
        Device[request.param]
    except Exception as e:
        pytest.skip(f"no {request.param} device here: {e}")
    return str(request.param)


def _run_last_kernel(t: Tensor, opts: Callable[[Kernel], list[Opt]]) -> np.ndarray:
    """`t`'s (one) kernel compiled with `opts(kernel)` + STAGE and launched; the result as numpy."""
    items = t.schedule()
    for item in items:
        current().unqueue(item)
    item = items[-1]
    k = Kernel(item.ast, Device[t.device].renderer)
    k.apply_opts(opts(k) + [Opt(OptOps.STAGE)])
    assert k.staged
    for buf in item.bufs:
        buf.ensure_allocated()
    CompiledRunner(get_program(item.ast, Device[t.device].renderer, opts=k.applied_opts))(item.bufs)
    return np.frombuffer(item.bufs[0].as_bytes(), np.float32)


def test_padded_conv(cl: str) -> None:
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 4, 9, 9)).astype(np.float32), rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    out = Tensor(x, device=cl).realize().conv2d(Tensor(w, device=cl).realize(), padding=1)

    def opts(k: Kernel) -> list[Opt]:  # 4 output channels x 3 output columns per workgroup
        last = len(k.axes_of(AxisType.GLOBAL)) - 1
        return [Opt(OptOps.LOCAL, 2, 4), Opt(OptOps.LOCAL, last, 3), Opt(OptOps.UNROLL, 0, 2)]

    got = _run_last_kernel(out, opts)
    want = np.zeros((2, 8, 9, 9), np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for i in range(3):
        for j in range(3):
            want += np.einsum("nchw,oc->nohw", xp[:, :, i : i + 9, j : j + 9], w[:, :, i, j])
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def test_conv_window_tile(cl: str) -> None:
    """The GPU heuristic's tile for a stride-1 3x3 conv (two output rows per thread, the taps unrolled; see
    heuristic._window), padded, against numpy."""
    rng = np.random.default_rng(4)
    # (56 = 8 x 7 columns: the workgroup's rows and columns leave no inner tile, so the window rule decides)
    x, w = rng.standard_normal((2, 4, 56, 56)).astype(np.float32), rng.standard_normal((16, 4, 3, 3)).astype(np.float32)
    out = Tensor(x, device=cl).realize().conv2d(Tensor(w, device=cl).realize(), padding=1)
    items = out.schedule()
    for item in items:
        current().unqueue(item)
    item = items[-1]
    opts = hand_coded_optimizations(Kernel(item.ast, Device[cl].renderer))
    assert any(o.op is OptOps.UNROLL and o.arg == 0 for o in opts), opts  # the window rule chose this tile
    for buf in item.bufs:
        buf.ensure_allocated()
    CompiledRunner(get_program(item.ast, Device[cl].renderer, opts=opts))(item.bufs)
    got = np.frombuffer(item.bufs[0].as_bytes(), np.float32).reshape(2, 16, 56, 56)
    want = np.zeros_like(got)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for i in range(3):
        for j in range(3):
            want += np.einsum("nchw,oc->nohw", xp[:, :, i : i + 56, j : j + 56], w[:, :, i, j])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


SPLIT = [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 2)]


@pytest.mark.parametrize("split", [True, False], ids=["split", "contiguous"])
def test_heuristic_tile_of_a_matmul(cl: str, split: bool) -> None:
    """The fp32 matmul tile the GPU heuristics stage (16x16 threads, 8x8 each, K by 16), at 256 x 64 x 256: a
    thread's 8 rows and columns as two groups of 4 (stored [2][16 threads][4], tc/stage._outer_upcasts_first), and
    as 8 (STAGE_SPLIT=0, stored thread by thread)."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((256, 64)).astype(np.float32), rng.standard_normal((64, 256)).astype(np.float32)
    out = Tensor(a, device=cl).realize() @ Tensor(b, device=cl).realize()
    opts = [Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 16)]
    opts += SPLIT if split else [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 8)]
    got = _run_last_kernel(out, lambda _: opts + [Opt(OptOps.UNROLL, 0, 16)])
    np.testing.assert_allclose(got.reshape(256, 256), a @ b, rtol=1e-4, atol=1e-4)


def test_split_tile_layout() -> None:
    """The B tile of the split fp32 matmul tile (columns n = 64*h + 16*v + l for upcasts h (2), v (4) and thread l)
    is stored [k][h][l][v]: a thread's 4 neighbouring columns are one 16-byte vector, and the 16 threads of a
    warp read 16 neighbouring vectors; with one upcast of 8 the thread's columns stay contiguous ([k][l][8])."""
    a, b = Tensor.empty(256, 64), Tensor.empty(64, 256)
    items = (a.realize() @ b.realize()).schedule()
    for item in items:
        current().unqueue(item)
    for opts, want in ((SPLIT, (64, 4, 1)), ([Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 8)], (8, 1))):
        k = Kernel(items[-1].ast, CUDARenderer("sm_90"))
        k.apply_opts([Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 16), *opts, Opt(OptOps.UNROLL, 0, 16)])
        k.apply_opt(Opt(OptOps.STAGE, None, 3))
        b_load = next(u for u in staged_loads(k) if tile_of(k, u).copy_order[-1] != k.axes_of(AxisType.UNROLL)[0])
        tile = tile_of(k, b_load)
        assert tile.strides[0] == 128 and tile.strides[1:] == want, (tile, [k.axis_types[a] for a in tile.axes])


def test_matmul_of_a_transposed_view(cl: str) -> None:
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((32, 24)).astype(np.float32)
    out = Tensor(a, device=cl).realize() @ Tensor(b, device=cl).realize().T
    opts = [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 1, 8), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 4)]
    np.testing.assert_allclose(_run_last_kernel(out, lambda _: opts).reshape(40, 32), a @ b.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [64, 128])
def test_batched_matmul_tile(cl: str, n: int) -> None:
    """Attention's matmuls are batched over heads: the GPU heuristic stages a 128 x n tile per head (n = 64: an
    attention head's width), the batch axis left in the grid; against numpy."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((64, 256, 32)).astype(np.float32), rng.standard_normal((64, 32, n)).astype(np.float32)
    out = Tensor(a, device=cl).realize() @ Tensor(b, device=cl).realize()
    items = out.schedule()
    for item in items:
        current().unqueue(item)
    item = items[-1]
    opts = hand_coded_optimizations(Kernel(item.ast, Device[cl].renderer))
    assert any(o.op is OptOps.STAGE for o in opts), opts
    for buf in item.bufs:
        buf.ensure_allocated()
    CompiledRunner(get_program(item.ast, Device[cl].renderer, opts=opts))(item.bufs)
    got = np.frombuffer(item.bufs[0].as_bytes(), np.float32).reshape(64, 256, n)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_causal_attention_fwd_bwd_with_staged_tiles(cl: str) -> None:
    """scaled_dot_product_attention (causal) forward and backward where the heuristic stages its batched matmuls
    (64 heads of 256 x 64), against numpy's attention and its gradients."""
    rng = np.random.default_rng(6)
    q, k, v, g = (rng.standard_normal((4, 16, 256, 64)).astype(np.float32) for _ in range(4))
    tq, tk, tv = (Tensor(a, device=cl, requires_grad=True) for a in (q, k, v))
    out = tq.scaled_dot_product_attention(tk, tv, is_causal=True)
    (out * Tensor(g, device=cl)).sum().backward()
    assert tq.grad is not None and tk.grad is not None and tv.grad is not None
    items = Tensor.schedule(out, tq.grad, tk.grad, tv.grad)  # (queued: run by the reads below)
    renderer = Device[cl].renderer
    staged = [
        it
        for it in items
        if it.ast.op.name == "SINK"
        and any(o.op is OptOps.STAGE for o in hand_coded_optimizations(Kernel(it.ast, renderer)))
    ]
    assert len(staged) >= 4, [it.ast.op for it in items]  # S = QK^T, P @ V and the gradients' matmuls
    scale = 1 / np.sqrt(64)
    s = np.where(np.tril(np.ones((256, 256), bool)), q @ k.swapaxes(-1, -2) * scale, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = g @ v.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), p @ v, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(tv.grad.numpy(), p.swapaxes(-1, -2) @ g, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(tq.grad.numpy(), ds @ k * scale, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(tk.grad.numpy(), ds.swapaxes(-1, -2) @ q * scale, rtol=1e-3, atol=1e-4)
