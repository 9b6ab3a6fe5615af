"""Register tiles chosen by the heuristics for matmul- and conv-like kernels (CPU and GPU rules)."""

from __future__ import annotations

from tg_codegen import Kernel, Opt, OptOps
from tg_codegen.heuristic import hand_coded_optimizations
from tg_codegen.renderer.cstyle import ClangRenderer
from tg_codegen.renderer.cuda import CUDARenderer
from tg_shape import ShapeTracker, View
from tg_uop import Ops, UOp, dtypes
from tg_uop.helpers import Context

F32 = dtypes.float32


def _load(n: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> UOp:
    view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create(shape, strides),)))
    return UOp(Ops.LOAD, F32, (UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), n), view))


def _mul_sum(shape: tuple[int, ...], a: tuple[int, ...], b: tuple[int, ...], axes: tuple[int, ...]) -> UOp:
    """sum over `axes` of A*B, both read through `shape` with the given strides (the output is contiguous)."""
    red = UOp(Ops.REDUCE_AXIS, F32, (_load(1, shape, a) * _load(2, shape, b),), (Ops.ADD, axes))
    out_shape = tuple(1 if i in axes else s for i, s in enumerate(shape))
    out = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create(out_shape),)))
    return UOp(
        Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), 0), out, red)),)
    )


def _matmul(n: int) -> UOp:  # (M, N, K): A (M, K) row-major, B (K, N) row-major
    return _mul_sum((n, n, n), (n, 0, 1), (0, 1, n), (2,))


def _conv(b: int, cin: int, cout: int, hw: int) -> UOp:
    """Valid 3x3 conv as (B, Cout, OY, OX, Cin, KY, KX): x (B, Cin, hw+2, hw+2), w (Cout, Cin, 3, 3)."""
    h = hw + 2
    x = (cin * h * h, 0, h, 1, h * h, h, 1)
    w = (0, cin * 9, 0, 0, 9, 3, 1)
    return _mul_sum((b, cout, hw, hw, cin, 3, 3), x, w, (4, 5, 6))


def _upcasts(opts: list[Opt]) -> list[Opt]:
    return [o for o in opts if o.op is OptOps.UPCAST]


def _tile(opts: list[Opt]) -> dict[int, int]:
    """Elements a thread computes along each axis (the product of its UPCASTs: 4 then 2 make 8)."""
    ret: dict[int, int] = {}
    for o in _upcasts(opts):
        ret[o.axis or 0] = ret.get(o.axis or 0, 1) * (o.arg or 1)
    return ret


def test_cpu_matmul_tile_by_vector_width() -> None:
    """The N axis (B moves along it with stride 1) is the vector axis, so it comes last: AVX2 (16 registers) one
    8-float vector by 8 rows, AVX-512 (32 registers) one 16-float vector by 16 rows."""
    avx2 = hand_coded_optimizations(Kernel(_matmul(64), ClangRenderer(2)))
    assert _upcasts(avx2) == [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 8)]
    avx512 = hand_coded_optimizations(Kernel(_matmul(256), ClangRenderer(2, vector_bytes=64)))
    assert _upcasts(avx512) == [Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.UPCAST, 1, 16)]


def test_cpu_long_matmul_runs_the_column_strips_outside() -> None:
    """K=1536: a strip of B (1536 x 8 floats, 48 KB) outgrows L1, so the tile loop along N (B moves) goes outside
    the one along M (A moves): each strip serves every row tile while it is in cache. K=64 keeps the order."""
    opts = hand_coded_optimizations(Kernel(_matmul(1536), ClangRenderer(2)))
    assert opts[:3] == [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.SWAP, 0, 1)]
    assert not any(o.op is OptOps.SWAP for o in hand_coded_optimizations(Kernel(_matmul(64), ClangRenderer(2))))


def test_cpu_longer_matmul_is_blocked_along_k() -> None:
    """K=2048: the reduction runs in blocks of 512 outside the tile loops (KBLOCK); a block's strips fit in L1, so
    the tile loops keep their order."""
    opts = hand_coded_optimizations(Kernel(_matmul(2048), ClangRenderer(2)))
    assert opts[:3] == [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.KBLOCK, 0, 512)]
    assert not any(o.op is OptOps.SWAP for o in opts)
    assert not any(o.op is OptOps.KBLOCK for o in hand_coded_optimizations(Kernel(_matmul(1024), ClangRenderer(2))))


def test_cpu_packed_matmul_tiles_the_panels() -> None:
    """A and B packed in panels of 16 as tg_tensor.linalg does on the CPU: (M/16, 16, N/16, 16, K), A (M/16, K, 16)
    and B (N/16, K, 16). The 16 columns of a B panel are the vector lanes, the 16 rows of an A panel the copies."""
    n = 1024
    shape = (n // 16, 16, n // 16, 16, n)
    a, b = (n * 16, 1, 0, 0, 16), (0, 0, n * 16, 1, 16)
    opts = hand_coded_optimizations(Kernel(_mul_sum(shape, a, b, (4,)), ClangRenderer(2, vector_bytes=64)))
    assert sorted(o.arg for o in _upcasts(opts)) == [16, 16]
    assert not any(o.op is OptOps.KBLOCK for o in opts)


def test_cpu_conv_tile_gathers_batch_lanes_and_copies_cout() -> None:
    opts = hand_coded_optimizations(Kernel(_conv(128, 32, 64, 11), ClangRenderer(2)))
    # output 11x11 does not split by 4: batch (x moves, w is broadcast) takes the 4 vector lanes, cout the copies
    assert _upcasts(opts) == [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 4)]


def test_cpu_tile_keeps_the_outer_axis_for_threads() -> None:
    opts = hand_coded_optimizations(Kernel(_conv(16, 3, 16, 64), ClangRenderer(2)))
    assert Opt(OptOps.UPCAST, 0, 4) not in opts  # batch 16 / 4 would leave 4 iterations for the threads
    assert any(o.op is OptOps.THREAD and o.axis == 0 and o.arg == 8 for o in opts)


def test_gpu_conv_gets_a_small_workgroup_and_a_cout_tile() -> None:
    with Context(GPU_CONV_WINDOW=0):
        opts = hand_coded_optimizations(Kernel(_conv(64, 64, 64, 56), CUDARenderer()))
    assert [o for o in opts if o.op is OptOps.LOCAL] == [Opt(OptOps.LOCAL, 3, 8), Opt(OptOps.LOCAL, 2, 8)]
    assert _upcasts(opts) == [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 2)]


def test_gpu_conv_window_computes_two_rows_per_thread_from_shared_loads() -> None:
    """A stride-1 3x3 conv: the input moves along the output row (OY) as along the tap row (KY), and along OX as
    along KX. Each thread computes two neighbouring output rows with the 3x3 taps unrolled (half the threads)."""
    opts = hand_coded_optimizations(Kernel(_conv(64, 64, 64, 56), CUDARenderer()))
    assert [o for o in opts if o.op is OptOps.LOCAL] == [Opt(OptOps.LOCAL, 3, 8), Opt(OptOps.LOCAL, 2, 4)]
    assert _upcasts(opts) == [Opt(OptOps.UPCAST, 2, 2), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 2)]
    assert [o for o in opts if o.op is OptOps.UNROLL] == [Opt(OptOps.UNROLL, 1, 0), Opt(OptOps.UNROLL, 2, 0)]


def test_gpu_conv_window_needs_stride_one_and_short_taps() -> None:
    h = 2 * 56 + 1  # a stride-2 conv: the input moves by 2h along OY, by h along KY
    x = (64 * h * h, 0, 2 * h, 2, h * h, h, 1)
    w = (0, 64 * 9, 0, 0, 9, 3, 1)
    strided = _mul_sum((64, 64, 56, 56, 64, 3, 3), x, w, (4, 5, 6))
    for ast in (strided, _matmul(1024)):
        opts = hand_coded_optimizations(Kernel(ast, CUDARenderer()))
        assert not any(o.op is OptOps.UNROLL and o.arg == 0 for o in opts), opts


def test_gpu_matmul_1024_takes_the_narrow_staged_tile() -> None:
    """At 1024, 64 blocks of 128 x 128 are too few for an H100: 128 blocks of 128 x 64 (8x4 per thread), staged
    (fp32 on an H100: 22.1 TFLOPS against 8.4 for the register tile without shared memory, bench_tc_opts.py)."""
    opts = hand_coded_optimizations(Kernel(_matmul(1024), CUDARenderer()))
    threads = 1
    for o in opts:
        threads *= o.arg if o.op is OptOps.LOCAL and o.arg is not None else 1
    assert threads == 256
    assert _tile(opts) == {0: 8, 1: 4} and _staged(opts)


def test_gpu_matmul_tiles_by_size() -> None:
    """768: 72 blocks of 128 x 64, staged (fp32 on an H100 10.9 TFLOPS against 6.8 for the register tile); 512: 32
    blocks, too few: the register tile."""
    for n, staged in ((768, True), (512, False)):
        opts = hand_coded_optimizations(Kernel(_matmul(n), CUDARenderer()))
        assert _staged(opts) is staged, (n, opts)


def test_big_gpu_matmul_stages_its_tiles_in_shared_memory() -> None:
    opts = hand_coded_optimizations(Kernel(_matmul(4096), CUDARenderer()))
    assert _staged(opts) and _tile(opts) == {0: 8, 1: 8}


def _staged(opts: list[Opt]) -> bool:
    return any(o.op is OptOps.STAGE for o in opts)
