"""STAGE (tc/stage.py): operand tiles in shared memory. Rendering and refusals here; numbers on CL in tg-runtime's
test_opts.py, NVRTC compiles in tests/test_cuda_compile.py."""

from __future__ import annotations

import pytest

from tg_codegen import Kernel, KernelOptError, Opt, OptOps, get_program
from tg_codegen.heuristic import hand_coded_optimizations
from tg_codegen.renderer.cuda import CUDARenderer
from tg_codegen.tc.stage import stage_bytes, staged_loads, tile_of
from tg_shape import ShapeTracker, View
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.helpers import Context


def _view(shape: tuple[int, ...], strides: tuple[int, ...] | None = None) -> UOp:
    return UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create(shape, strides),)))


def matmul_ast(n: int, k: int, m: int, dt: DType = dtypes.float32) -> UOp:
    """C[n, m] = sum_k A[n, k] * B[k, m] as a kernel AST over (n, m, k)."""
    a = UOp(Ops.LOAD, dt, (UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 1), _view((n, m, k), (k, 0, 1))))
    b = UOp(Ops.LOAD, dt, (UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 2), _view((n, m, k), (0, 1, m))))
    red = UOp(Ops.REDUCE_AXIS, dtypes.float32, ((a * b).cast(dtypes.float32),), (Ops.ADD, (2,)))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), _view((n, m, 1)), red))
    return UOp(Ops.SINK, dtypes.void, (store,))


# (a thread's 8 rows and 8 columns each as two groups of 4, stored 64 apart: tc/stage._outer_upcasts_first)
STAGED = [Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 16), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4)]
STAGED += [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 16), Opt(OptOps.STAGE)]
PIPELINED = STAGED[:-1] + [Opt(OptOps.STAGE, None, 3)]  # (3 slots where the shared memory takes them)


def test_heuristic_stages_a_big_fp32_matmul() -> None:
    spec = get_program(matmul_ast(4096, 1024, 4096), CUDARenderer("sm_90"))
    assert list(spec.applied_opts) == PIPELINED
    assert tuple(spec.local_size or ()) == (16, 16) and tuple(spec.global_size or ()) == (32, 32)
    # 3 slots of two 128 x 16 tiles of 4 bytes, 16-byte aligned so a thread reads its 8 values as two float4; A's
    # (copied along its 16 rows) with 4 elements of padding after each row of 128: past 48 KiB, dynamic
    # (each array 1024-byte aligned there: A's 3 x 2112 x 4 = 25344 bytes take 25600)
    assert spec.shared_bytes == 25600 + 3 * 2048 * 4 and "float* stage1 = (float*)(__tg_smem + 25600);" in spec.src
    # the first two steps' tiles copied before the loop, then one barrier a step: the loads of step r + 2 first,
    # their stores after step r's reads
    assert spec.src.count("__syncthreads();") == 2
    loop = spec.src[spec.src.index("for (") :]
    assert loop.index("*(data1+") < loop.index("*((tg_floatx4*)(stage0+") < loop.rindex("*(stage0+")
    assert "*((tg_floatx4*)(stage0+" in spec.src and "*((tg_floatx4*)(stage1+" in spec.src
    # an sm_75 block has 48 KiB: one slot
    assert list(get_program(matmul_ast(4096, 1024, 4096), CUDARenderer("sm_75")).applied_opts) == STAGED


def test_staged_tile_narrows_below_one_and_a_half_waves() -> None:
    # 1536^2 outputs make 144 blocks of 128 x 128, under 1.5 per SM of an H200 (132): 288 blocks of 128 x 64;
    # a renderer that does not know its SM count keeps the wide tile down to 128 blocks
    narrow = PIPELINED[:5] + PIPELINED[6:]  # (no second UPCAST of the columns: 4 each)
    assert hand_coded_optimizations(Kernel(matmul_ast(1536, 1536, 1536), CUDARenderer("sm_90"))) == narrow
    unknown = CUDARenderer("sm_90")
    unknown.compute_units = 0
    assert hand_coded_optimizations(Kernel(matmul_ast(1536, 1536, 1536), unknown)) == PIPELINED
    # 2048^2 (256 blocks, 1.9 per SM) and the GPT step's 16384 x 384 outputs (384 blocks, 2.9 per SM): wide, which
    # measured faster than twice as many narrow ones
    for n, k, m in ((2048, 2048, 2048), (16384, 1536, 384)):
        assert hand_coded_optimizations(Kernel(matmul_ast(n, k, m), CUDARenderer("sm_90"))) == PIPELINED


def test_heuristic_keeps_small_matmuls_unstaged() -> None:
    # 4 x 4 blocks of 128 x 128 would leave most of an H100's 132 SMs idle
    opts = hand_coded_optimizations(Kernel(matmul_ast(512, 512, 512), CUDARenderer("sm_90")))
    assert opts and OptOps.STAGE not in [o.op for o in opts]


def test_tiles_and_bytes() -> None:
    k = Kernel(matmul_ast(256, 64, 256), CUDARenderer("sm_90")).apply_opts(STAGED)
    a, b = staged_loads(k)
    ta, tb = tile_of(k, a), tile_of(k, b)
    assert ta.size == tb.size == 128 * 16 and stage_bytes(k) == (132 + 128) * 16 * 4
    # stored k outermost, then a thread's two groups of rows, the 16 threads, its 4 rows of a group (contiguous:
    # float4 reads, the 16 threads' 16 neighbouring ones)
    assert [k.axis_types[x] for x in ta.axes] == ["unroll", "upcast", "local", "upcast"]
    assert tb.strides == (128, 64, 4, 1)
    # copied with A's stride-1 axis (k) fastest, B's (its columns) fastest: neighbouring threads, neighbouring bytes
    assert k.axis_types[ta.copy_order[-1]] == "unroll" and k.axis_types[tb.copy_order[-1]] == "local"
    # A's copy writes neighbouring k rows at once: each row padded to 132 elements (a multiple of 4: float4 reads)
    assert ta.strides == (132, 64, 4, 1) and ta.span == 132 * 16 and tb.span == tb.size
    with Context(STAGE_PAD=0):
        assert tile_of(k, a).strides == (128, 64, 4, 1) and tile_of(k, a).span == 128 * 16
    # one UPCAST of 8 per operand (STAGE_SPLIT=0's tile): a thread's 8 rows stored together
    old = STAGED[:2] + [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 8)] + STAGED[-2:]
    k = Kernel(matmul_ast(256, 64, 256), CUDARenderer("sm_90")).apply_opts(old)
    assert [tile_of(k, u).strides for u in staged_loads(k)] == [(132, 8, 1), (128, 8, 1)]


def test_tensor_core_fragments_from_the_tiles() -> None:
    """With TC, the warp's 32 lanes share the copy and the MMA fragments are read from the tiles."""
    opts = [Opt(OptOps.TC, 0, 0), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.STAGE)]
    spec = get_program(matmul_ast(64, 64, 64, dtypes.float16), CUDARenderer("sm_90"), opts=opts)
    assert "mma.sync.aligned.m16n8k16" in spec.src and "__shared__ __align__(1024) half stage0[512];" in spec.src
    assert "(stage0+" in spec.src and "(stage1+" in spec.src


def test_refused_without_shared_memory() -> None:
    with pytest.raises(KernelOptError, match="shared"):
        Kernel(matmul_ast(64, 64, 64)).apply_opts([Opt(OptOps.STAGE)])  # the generic renderer: no locals


def test_past_the_shared_memory_limit() -> None:
    """128 x 64 tiles of A and B in fp32 are 64 KiB (65 with A's rows padded): past the 48 KiB a block of an sm_75
    GPU has; an sm_90 block may opt in to 227 KiB, and the tiles are then declared in dynamic shared memory, which
    the launch asks for."""
    opts = [Opt(OptOps.LOCAL, 0, 32), Opt(OptOps.LOCAL, 1, 32), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4)]
    opts += [Opt(OptOps.UNROLL, 0, 64)]
    k = Kernel(matmul_ast(256, 256, 256), CUDARenderer("sm_75"))
    with pytest.raises(KernelOptError, match="66560 bytes of shared memory per block; the device's limit is 49152"):
        k.apply_opts(opts + [Opt(OptOps.STAGE)])
    assert not k.staged and len(k.applied_opts) == len(opts)  # refused: the kernel is as before
    spec = get_program(matmul_ast(256, 256, 256), CUDARenderer("sm_90"), opts=opts + [Opt(OptOps.STAGE)])
    assert spec.shared_bytes == 66560 and "extern __shared__ __align__(1024) unsigned char __tg_smem[];" in spec.src
    assert "float* stage1 = (float*)(__tg_smem + 33792);" in spec.src
    assert "__shared__ __align__(1024) float" not in spec.src
    small = get_program(matmul_ast(256, 256, 256), CUDARenderer("sm_90"), opts=opts[:4] + [Opt(OptOps.UNROLL, 0, 16)])
    assert small.shared_bytes == 0  # (no STAGE: nothing in shared memory)
    with pytest.raises(KernelOptError, match="266240 bytes of shared memory per block; the device's limit is 232448"):
        Kernel(matmul_ast(256, 256, 256), CUDARenderer("sm_90")).apply_opts(opts + [Opt(OptOps.STAGE, None, 4)])


def test_pipelined_slots_count_against_the_shared_memory_limit() -> None:
    """Each slot is a whole copy of the tiles: 128 x 16 tiles of A and B in fp32 are 16 KiB (16.25 with A's rows
    padded), 2 slots 32.5 KiB (accepted on an sm_75 block, 48 KiB at most), 3 slots 48.75 KiB (refused, naming the
    limit)."""
    opts = [Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 16), Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 8)]
    opts += [Opt(OptOps.UNROLL, 0, 16)]
    k = Kernel(matmul_ast(256, 64, 256), CUDARenderer("sm_75")).apply_opts(opts)
    assert stage_bytes(k.copy().apply_opts([Opt(OptOps.STAGE, None, 2)])) == 2 * (132 + 128) * 16 * 4 == 33280
    with pytest.raises(KernelOptError, match="49920 bytes of shared memory per block; the device's limit is 49152"):
        k.apply_opt(Opt(OptOps.STAGE, None, 3))
    assert not k.staged


def test_warpgroup_mma_tile_layouts() -> None:
    """wgmma's canonical layouts (stage.WgmmaTile): A stored M x K is K-major, rows of 32 halfs (64 bytes, the 64-byte
    swizzle, 8 rows = 512 bytes apart); B stored K x N is N-major, its rows (a block's 128 columns) split into
    64-element atoms (the 128-byte swizzle; atoms 32 rows x 128 bytes = 4096 bytes apart, 8 rows of K 1024 apart)."""
    from tg_codegen.tc.lower import TCLowerer

    opts = [Opt(OptOps.TC, 0, 1), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.STAGE, None, 2)]
    k = Kernel(matmul_ast(128, 64, 256, dtypes.float16), CUDARenderer("sm_90")).apply_opts(opts)
    lw = TCLowerer(k)
    assert lw.stager is not None
    a, b = (lw.stager.wgmma[x] for x in (lw.a, lw.b))
    assert (a.k_major, a.row, a.atom, a.rows, a.sbo, a.mode) == (True, 32, 32, 128, 512, 2)
    assert (b.k_major, b.row, b.atom, b.rows, b.lbo, b.sbo, b.mode) == (False, 128, 64, 32, 4096, 1024, 1)
    assert lw.wg_trans == (0, 1) and stage_bytes(k) == 2 * (128 * 32 + 32 * 128) * 2
