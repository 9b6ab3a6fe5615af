"""Tensor cores on the GPU (CUDA only; skipped elsewhere): TC matmuls in fp16 and bf16 against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Context, Device, Tensor, dtypes
from tg_codegen import get_program
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_runtime.runner import CompiledRunner
from tg_tensor.engine.realizer import ScheduleItem, current
from tg_uop import DType

DTYPES = {"fp16": dtypes.float16, "bf16": dtypes.bfloat16}


def _cuda_or_skip() -> None:
    try:
        Device["CUDA"]
    except Exception as e:
        pytest.skip(f"CUDA unavailable: {e}")
    if not Device["CUDA"].renderer.tensor_cores:
        pytest.skip("this GPU has no tensor cores tg uses (needs sm_80+)")


def _inputs(m: int, n: int, k: int, dt: DType, seed: int = 0) -> tuple[Tensor, Tensor, np.ndarray]:
    """a (m,k), b (k,n) in `dt` on CUDA, and the float64 product of their rounded values."""
    rng = np.random.default_rng(seed)
    a = Tensor(rng.standard_normal((m, k)).astype(np.float32), device="CUDA").cast(dt).contiguous().realize()
    b = Tensor(rng.standard_normal((k, n)).astype(np.float32), device="CUDA").cast(dt).contiguous().realize()
    an, bn = (x.cast(dtypes.float32).numpy().astype(np.float64) for x in (a, b))
    return a, b, an @ bn


def _check(out: np.ndarray, ref: np.ndarray, k: int) -> None:
    # inputs are exact in the half type; accumulation is fp32; the output rounds to 8 (bf16) or 11 (fp16) bits
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=2e-2, atol=2e-2 * np.sqrt(k))


def _last_item(t: Tensor) -> ScheduleItem:
    """The last kernel of `t`'s schedule with its buffers allocated, taken out of the queue (the test launches it)."""
    items = t.schedule()
    for item in items:
        current().unqueue(item)
        for buf in item.bufs:
            buf.ensure_allocated()
    return items[-1]


def _layout_inputs(m: int, n: int, k: int, dt: str, layout: str, seed: int) -> tuple[Tensor, Tensor, np.ndarray]:
    """a (m,k) and b (k,n) in `dt` ("tf32": float32) on CUDA, each stored transposed where `layout` says "t" (A as
    K x M, B as N x K) and read through a transposed view, and the float64 product of their rounded values."""
    rng = np.random.default_rng(seed)
    an, bn = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    cast = dtypes.float32 if dt == "tf32" else DTYPES[dt]

    def stored(x: np.ndarray, transposed: bool) -> Tensor:
        t = Tensor(np.ascontiguousarray(x.T) if transposed else x, device="CUDA").cast(cast).contiguous().realize()
        return t.T if transposed else t

    a, b = stored(an, layout[0] == "t"), stored(bn, layout[1] == "t")
    ref = a.cast(dtypes.float32).numpy().astype(np.float64) @ b.cast(dtypes.float32).numpy().astype(np.float64)
    return a, b, ref


def _check_output(item: ScheduleItem, dt: str, shape: tuple[int, int, int], ref: np.ndarray) -> None:
    """The (m, n) output of `item` in `dt` against `ref` (TF32 to 1e-2, the 16-bit types to 2e-2, atol by sqrt(k))."""
    m, n, k = shape
    out = np.frombuffer(item.bufs[0].as_bytes(), dtype={"fp16": np.float16, "bf16": np.uint16, "tf32": np.float32}[dt])
    if dt == "bf16":
        out = (out.astype(np.uint32) << 16).view(np.float32)
    tol = 1e-2 if dt == "tf32" else 2e-2
    np.testing.assert_allclose(out.reshape(m, n).astype(np.float64), ref, rtol=tol, atol=tol * np.sqrt(k))


SHAPES = [(16, 8, 16), (32, 16, 64), (64, 128, 48), (256, 64, 256), (128, 256, 512)]


@pytest.mark.parametrize("dt", sorted(DTYPES))
@pytest.mark.parametrize("shape", SHAPES)
def test_default_matmul_uses_tensor_cores(dt: str, shape: tuple[int, int, int]) -> None:
    _cuda_or_skip()
    m, n, k = shape
    a, b, ref = _inputs(m, n, k, DTYPES[dt])
    c = a.matmul(b)
    items = c.schedule()
    spec = get_program(items[-1].ast, Device["CUDA"].renderer)
    assert any(o.op is OptOps.TC for o in spec.applied_opts), f"heuristics chose {spec.applied_opts}"
    _check(c.cast(dtypes.float32).numpy(), ref, k)


OPTS = {
    "tc_only": [Opt(OptOps.TC, 0, 0)],
    "unroll": [Opt(OptOps.TC, 0, 0), Opt(OptOps.UNROLL, 0, 2)],
    "warps_tiles": [
        Opt(OptOps.TC, 0, 0),
        Opt(OptOps.LOCAL, 0, 2),
        Opt(OptOps.LOCAL, 1, 2),
        Opt(OptOps.UPCAST, 0, 2),
        Opt(OptOps.UPCAST, 1, 2),
        Opt(OptOps.UNROLL, 0, 2),
    ],
}
# the same with the operand tiles staged in shared memory (STAGE: the lanes share the copy; fragments read there)
OPTS["warps_tiles_staged"] = OPTS["warps_tiles"] + [Opt(OptOps.STAGE)]


@pytest.mark.parametrize("dt", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(OPTS))
def test_explicit_tc_opts(dt: str, name: str) -> None:
    _cuda_or_skip()
    m, n, k = 64, 32, 128
    a, b, ref = _inputs(m, n, k, DTYPES[dt], seed=1)
    item = _last_item(a.matmul(b))
    runner = CompiledRunner(get_program(item.ast, Device["CUDA"].renderer, opts=OPTS[name]))
    runner(item.bufs, wait=True)
    out = np.frombuffer(item.bufs[0].as_bytes(), dtype=np.float16 if dt == "fp16" else np.uint16)
    if dt == "bf16":
        out = (out.astype(np.uint32) << 16).view(np.float32)
    _check(out.reshape(m, n), ref, k)


def test_batched_and_transposed_operands() -> None:
    """A batch axis and a transposed B (K contiguous) still find M, N, K."""
    _cuda_or_skip()
    rng = np.random.default_rng(2)
    an = rng.standard_normal((3, 32, 64)).astype(np.float16)
    bn = rng.standard_normal((3, 48, 64)).astype(np.float16)
    a, b = Tensor(an, device="CUDA"), Tensor(bn, device="CUDA")
    c = a.matmul(b.transpose(1, 2))
    items = c.schedule()
    spec = get_program(items[-1].ast, Device["CUDA"].renderer)
    assert any(o.op is OptOps.TC for o in spec.applied_opts), f"heuristics chose {spec.applied_opts}"
    ref = an.astype(np.float64) @ bn.astype(np.float64).transpose(0, 2, 1)
    _check(c.numpy().astype(np.float64), ref, 64)


def test_fused_epilogue() -> None:
    """Elementwise ops after the reduction (bias, relu) apply to every fragment element."""
    _cuda_or_skip()
    a, b, ref = _inputs(64, 32, 32, dtypes.float16, seed=3)
    bias = np.linspace(-1, 1, 32).astype(np.float16)
    out = (a.matmul(b) + Tensor(bias, device="CUDA")).relu().numpy()
    _check(out, np.maximum(ref + bias.astype(np.float64), 0), 32)


def test_operands_at_odd_offsets() -> None:
    """Slices starting mid-buffer: fragments must only merge loads into wide ones where those are aligned."""
    _cuda_or_skip()
    rng = np.random.default_rng(4)
    an = rng.standard_normal((64, 80)).astype(np.float16)
    bn = rng.standard_normal((70, 64)).astype(np.float16)
    a, b = Tensor(an, device="CUDA")[:, 3:67], Tensor(bn, device="CUDA")[5:69, :]
    out = a.matmul(b).numpy()
    _check(out, an[:, 3:67].astype(np.float64) @ bn[5:69, :].astype(np.float64), 64)


# ---- TF32: fp32 matmuls on the m16n8k8 tensor core, only under ALLOW_TF32


@pytest.mark.parametrize("shape", SHAPES)
def test_tf32_matmul_only_when_allowed(shape: tuple[int, int, int]) -> None:
    _cuda_or_skip()
    m, n, k = shape
    a, b, ref = _inputs(m, n, k, dtypes.float32, seed=5)
    for allowed in (0, 1):
        with Context(ALLOW_TF32=allowed):
            c = a.matmul(b)
            items = c.schedule()
            spec = get_program(items[-1].ast, Device["CUDA"].renderer)
            assert any(o.op is OptOps.TC for o in spec.applied_opts) == bool(allowed), spec.applied_opts
            out = c.numpy().astype(np.float64)
        if allowed:  # TF32 keeps 10 mantissa bits of each operand
            np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2 * np.sqrt(k))
        else:
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("name", sorted(OPTS))
def test_tf32_explicit_opts(name: str) -> None:
    _cuda_or_skip()
    m, n, k = 64, 32, 128
    a, b, ref = _inputs(m, n, k, dtypes.float32, seed=6)
    item = _last_item(a.matmul(b))
    with pytest.raises(KernelOptError, match="ALLOW_TF32"):
        get_program(item.ast, Device["CUDA"].renderer, opts=OPTS[name])
    with Context(ALLOW_TF32=1):
        runner = CompiledRunner(get_program(item.ast, Device["CUDA"].renderer, opts=OPTS[name]))
    runner(item.bufs, wait=True)
    out = np.frombuffer(item.bufs[0].as_bytes(), dtype=np.float32).reshape(m, n)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=1e-2, atol=1e-2 * np.sqrt(k))


# ---- pipelined tiles (STAGE with 2 or 3 slots): cp.async copies, ldmatrix fragments from swizzled tiles

PIPELINED = [Opt(OptOps.TC, 0, 0), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.UPCAST, 0, 2)]
PIPELINED += [Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 2)]


@pytest.mark.parametrize("dt", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("depth", [2, 3])
@pytest.mark.parametrize("k", [64, 160])
def test_pipelined_tiles(dt: str, layout: str, depth: int, k: int) -> None:
    """A (t: stored K x M, read transposed) times B (t: stored N x K) through pipelined staged tiles; k=64 in
    fp16 is two steps of the reduce loop (fewer than 3 slots), 160 is five (ten in TF32)."""
    _cuda_or_skip()
    m, n = 64, 64
    a, b, ref = _layout_inputs(m, n, k, dt, layout, seed=7)
    with Context(ALLOW_TF32=int(dt == "tf32")):
        item = _last_item(a.matmul(b))
        spec = get_program(item.ast, Device["CUDA"].renderer, opts=PIPELINED + [Opt(OptOps.STAGE, None, depth)])
    assert "__tg_cp_async16(" in spec.src and "__tg_cp_async_wait<" in spec.src
    if dt != "tf32":
        assert "__tg_ldmatrix_x4" in spec.src and "__tg_ldmatrix_x2" in spec.src
    CompiledRunner(spec)(item.bufs, wait=True)
    _check_output(item, dt, (m, n, k), ref)


def test_pipelined_tile_smaller_than_the_workgroup() -> None:
    """2 warps (64 threads) copy B's 16 x 8 tile of 16 pieces: the guarded copies leave the next slot intact."""
    _cuda_or_skip()
    a, b, ref = _inputs(64, 32, 128, dtypes.float16, seed=8)
    item = _last_item(a.matmul(b))
    opts = [Opt(OptOps.TC, 0, 0), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE, None, 2)]
    spec = get_program(item.ast, Device["CUDA"].renderer, opts=opts)
    assert ") __tg_cp_async16(" in spec.src
    CompiledRunner(spec)(item.bufs, wait=True)
    out = np.frombuffer(item.bufs[0].as_bytes(), dtype=np.float16)
    _check(out.reshape(64, 32), ref, 128)


# ---- Hopper's warpgroup MMA (wgmma): operands read from the pipelined tiles by descriptor


def _hopper_or_skip() -> None:
    _cuda_or_skip()
    if not any(getattr(tc, "wgmma", False) for tc in Device["CUDA"].renderer.tensor_cores):
        pytest.skip("warpgroup MMAs need an sm_90 GPU (Hopper)")


@pytest.mark.parametrize("dt", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("depth", [2, 3])
@pytest.mark.parametrize("shape", [(128, 128, 64), (256, 384, 160)])
def test_warpgroup_mma_tiles(dt: str, layout: str, depth: int, shape: tuple[int, int, int]) -> None:
    """A (t: stored K x M) times B (t: stored N x K) with TC arg 1 (wgmma m64n128, 2 warpgroups per block; TF32's
    M- or N-contiguous operands copied element by element into K-major tiles): K=64 is two steps in 16-bit types
    (fewer than 3 slots), 160 five; 256 x 384 makes 2 x 3 blocks."""
    _hopper_or_skip()
    m, n, k = shape
    a, b, ref = _layout_inputs(m, n, k, dt, layout, seed=11)
    item = _last_item(a.matmul(b))
    opts = [Opt(OptOps.TC, 0, 1), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.STAGE, None, depth)]
    with Context(ALLOW_TF32=int(dt == "tf32")):
        spec = get_program(item.ast, Device["CUDA"].renderer, opts=opts)
    assert "wgmma.mma_async" in spec.src
    CompiledRunner(spec)(item.bufs, wait=True)
    _check_output(item, dt, (m, n, k), ref)


def test_warpgroup_mma_default_and_fused() -> None:
    """The heuristics take the warpgroup MMA for a big fp16 matmul on Hopper; a fused epilogue (bias, relu) and
    an output cast run after it."""
    _hopper_or_skip()
    a, b, ref = _inputs(256, 256, 512, dtypes.float16, seed=12)
    bias = Tensor(np.linspace(-1, 1, 256).astype(np.float32), device="CUDA").cast(dtypes.float16).realize()
    c = (a.matmul(b) + bias).relu()
    spec = get_program(c.schedule()[-1].ast, Device["CUDA"].renderer)
    assert Opt(OptOps.TC, 0, 1) in spec.applied_opts, spec.applied_opts
    want = np.maximum(ref + bias.cast(dtypes.float32).numpy().astype(np.float64), 0)
    _check(c.cast(dtypes.float32).numpy(), want, 512)


def test_warpgroup_mma_dynamic_shared_memory_in_a_cuda_graph() -> None:
    """The heuristic's wgmma tile asks for 64 KiB of dynamic shared memory: launched directly and replayed by TinyJit
    as a CUDA-graph node (whose parameters carry the size), every call gives its own product."""
    _hopper_or_skip()
    from tg import TinyJit

    a, b, _ = _inputs(256, 256, 512, dtypes.float16, seed=13)
    spec = get_program(a.matmul(b).schedule()[-1].ast, Device["CUDA"].renderer)
    assert spec.shared_bytes == 64 * 1024 and "extern __shared__" in spec.src

    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        return x.matmul(y).realize()

    outs = []
    for i in range(5):
        x, y, ref = _inputs(256, 256, 512, dtypes.float16, seed=20 + i)
        outs.append((f(x, y), ref))
        if i >= 2:
            assert f.recording is not None and f.recording.graph is not None  # replays are graph launches
    for out, ref in outs:
        _check(out.cast(dtypes.float32).numpy(), ref, 512)


def test_tf32_row_major_operand_copied_k_major_first() -> None:
    """Under ALLOW_TF32 on Hopper a big fp32 A @ B with B row-major copies B K-major first (a second kernel), and the
    matmul then takes the TF32 warpgroup MMA; without ALLOW_TF32 it stays one kernel. Both match numpy."""
    _hopper_or_skip()
    n = 1024
    rng = np.random.default_rng(14)
    an, bn = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    a, b = Tensor(an, device="CUDA").realize(), Tensor(bn, device="CUDA").realize()
    ref = an.astype(np.float64) @ bn.astype(np.float64)
    with Context(ALLOW_TF32=1):
        c = a @ b
        items = c.schedule()
        assert len(items) == 2
        spec = get_program(items[-1].ast, Device["CUDA"].renderer)
        assert spec.applied_opts[0] == Opt(OptOps.TC, 0, 1) and "tf32.tf32" in spec.src
        np.testing.assert_allclose(c.numpy().astype(np.float64), ref, rtol=1e-2, atol=1e-2 * np.sqrt(n))
    plain = a @ b
    assert len(plain.schedule()) == 1
    np.testing.assert_allclose(plain.numpy().astype(np.float64), ref, rtol=1e-4, atol=1e-3)
