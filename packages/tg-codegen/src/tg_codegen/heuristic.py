"""Hand-coded optimizations: a few rules that make common kernels fast without search (NOOPT=1 turns them off).

- matmul/conv-like (a reduction where some input is broadcast along output axes): a register tile, the
  outer product of a vector axis and a copies axis (see `_tile`), so every load is reused; with a long reduction,
  the tile loops ordered so a strip of the vector-lanes operand stays in cache across tiles (`_panel_outer`);
- elementwise: upcast the innermost output axis (straight-line code the C compiler vectorizes), unless tiny;
- reductions: unroll the reduce loop;
- everything large enough: split the outermost output axis over the device's CPU threads;
- GPUs: fp16/bf16 matmuls on tensor cores; a long reduction to few outputs is shared by a workgroup that
  reads neighbouring addresses; up to 256 threads of a workgroup run along the innermost output axes
  (LOCAL), with a register tile per thread (64 threads and a cout x batch tile for convs).

>>> from tg_codegen.heuristic import hand_coded_optimizations  # doctest: +SKIP
"""

from __future__ import annotations

import itertools

from tg_codegen.axes import AxisType
from tg_codegen.kernel import Kernel
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_codegen.tc.choose import tc_optimizations
from tg_codegen.tc.stage import matmul_axes, staged_matmul
from tg_uop import Ops
from tg_uop.helpers import ContextVar, prod

THREAD_MIN_WORK = 1 << 15  # below this many loop iterations, threads cost more than they give


def hand_coded_optimizations(k: Kernel) -> list[Opt]:
    """The opts the rules choose for `k` (applied to a copy; `k` is left unchanged)."""
    work = k.copy()
    if not work.uniform_reduce:
        return []
    if not all(isinstance(s, int) for s in work.full_shape):
        # a symbolic length (an LLM decode step's attention over the cache slots filled so far): on a GPU, threads
        # of a workgroup along the static output axes; with none, each kernel ran one thread per workgroup (an
        # H200's 1B-model decode spent 1.4 of its 2.3 ms per token in these)
        if work.opts.has_local:
            _gpu_locals(work, GPU_WORKGROUP)
        return list(work.applied_opts)
    if work.opts.has_local:
        _gpu(work)
    else:
        _cpu(work)
    return list(work.applied_opts)


def _cpu(k: Kernel) -> None:
    if k.reduceops and _broadcast_axes(k):
        _tile(k)
        last = len(k.axes_of(AxisType.REDUCE)) - 1
        if k.upcast_size < 16:
            k.apply_first([Opt(OptOps.UNROLL, last, a) for a in (4, 2)])
        elif last >= 0 and int(k.full_shape[k.axes_of(AxisType.REDUCE)[-1]]) <= CPU_UNROLL_TAPS:
            k.apply_first([Opt(OptOps.UNROLL, last, 0)])
    elif k.reduceops:
        _upcast_unit_stride(k)
        k.apply_first([Opt(OptOps.UNROLL, len(k.axes_of(AxisType.REDUCE)) - 1, a) for a in (8, 4, 2)])
    else:
        _upcast_inner(k)
    _threads(k)


# a tiled kernel's innermost reduce loop up to this long (a conv's taps along a row) is unrolled whole: neighbouring
# taps read overlapping input. Conv (8,64,56,56)x(64,64,3,3) pad 1 on one EPYC core 58 -> 75 GFLOPS, (16,3,64,64)
# x(16,3,3,3) 61-73 -> 76-86 (noisy, shared machine)
CPU_UNROLL_TAPS = 7


def _load_strides(k: Kernel, ignore_valid: bool = False) -> list[tuple[int | None, ...]]:
    ret = []
    for u in k.ast.toposort:
        if u.op is Ops.LOAD:
            strides = u.src[1].arg.real_strides(ignore_valid=ignore_valid)
            ret.append(tuple(s if isinstance(s, int) else None for s in strides))
    return ret


def _broadcast_axes(k: Kernel) -> list[int]:
    """Output axes (as Opt axis numbers) along which some input does not move: reuse to exploit."""
    strides = _load_strides(k)
    globals_ = k.axes_of(AxisType.GLOBAL)
    return [n for n, a in enumerate(globals_) if k.full_shape[a] > 1 and any(st[a] == 0 for st in strides)]


def _tile(k: Kernel) -> None:
    """A register tile for a matmul/conv-like kernel: an outer product of two output axes.

    One axis (V) is packed into vectors: the last upcast, so the lowerer makes it the vector lanes. The
    other (O) is unrolled into TILE_OTHER copies. The loads that move along V must be broadcast along O
    and the other way round, so each loaded value is used by a whole row or column of the tile. V is
    preferably an axis every moving load walks with stride 1 (its lanes load as one vector).
    """
    strides, globals_ = _load_strides(k), k.axes_of(AxisType.GLOBAL)
    pair = _tile_pair(k, strides, globals_)
    if pair is None:
        k.apply_first([Opt(OptOps.UPCAST, len(globals_) - 1, a) for a in (8, 4, 2)])
        return
    (v, v_amt), (o, o_amt) = pair
    mv, mo = _moving(strides, globals_[v]), _moving(strides, globals_[o])
    # O first, V second: V stays the last upcast axis and becomes the vector lanes
    if k.apply_first([Opt(OptOps.UPCAST, o, o_amt)]) and k.apply_first([Opt(OptOps.UPCAST, v, v_amt)]):
        _kblock(k)
        if all(strides[i][globals_[v]] == 1 for i in mv):  # vector loads (not lanes gathered from far apart)
            _panel_outer(k, mv, mo, v_amt)


# a reduction at least this long is cut in blocks (kblock.py) of the divisor of its length in CPU_KBLOCK_RANGE nearest
# CPU_KBLOCK: matmul 2048 on one EPYC core 74 -> 95 GFLOPS (blocks of 256 or 512); at 1024 blocking cost 5-15%
CPU_KBLOCK_MIN = 2048
CPU_KBLOCK, CPU_KBLOCK_RANGE = 512, (256, 768)


def _kblock(k: Kernel) -> None:
    """Cache blocking of a register-tiled kernel's long reduction (CPU)."""
    reduces = k.axes_of(AxisType.REDUCE)
    if k.opts.has_local or len(reduces) != 1 or int(k.full_shape[reduces[0]]) < CPU_KBLOCK_MIN:
        return
    size = int(k.full_shape[reduces[0]])
    blocks = [d for d in range(CPU_KBLOCK_RANGE[0], CPU_KBLOCK_RANGE[1] + 1) if size % d == 0]
    k.apply_first([Opt(OptOps.KBLOCK, 0, kc) for kc in sorted(blocks, key=lambda d: abs(d - CPU_KBLOCK))])


def _moving(strides: list[tuple[int | None, ...]], axis: int) -> frozenset[int]:
    """The loads (indices into `strides`) whose address moves along `axis`."""
    return frozenset(i for i, st in enumerate(strides) if st[axis] != 0)


# a tile's strip of the vector-lanes operand (reduce length x lanes) bigger than this (L1d) is reused best when the
# tiles that share it run one after another. Matmul 2048 on one core (EPYC, AVX2 tile of 8x16): 13 -> 28 GFLOPS on
# B as it is, 42 -> 95 on B packed in panels (tg_tensor.linalg); numpy 99 (the opts timed one by one in one process)
CPU_PANEL_BYTES = 32 << 10


def _panel_outer(k: Kernel, mv: frozenset[int], mo: frozenset[int], v_amt: int) -> None:
    """Order the tile loops so that the loop along which only the vector-lanes loads (`mv`) move runs outside
    the loop along which only the other tile side's loads (`mo`) move: each strip of the vector-lanes operand (a
    column panel of a matmul's right operand) then serves every tile of the other side while it is in cache, and
    the other operand is streamed once per strip. Only when a strip outgrows L1 (CPU_PANEL_BYTES)."""
    loads = [u for u in k.ast.toposort if u.op is Ops.LOAD]
    itemsize = max((loads[i].dtype.itemsize for i in mv), default=4)
    if _reduce_size(k) * v_amt * itemsize <= CPU_PANEL_BYTES:
        return
    strides, globals_ = _load_strides(k), k.axes_of(AxisType.GLOBAL)
    only = [_moving(strides, a) if int(k.full_shape[a]) > 1 else frozenset() for a in globals_]  # per output loop
    first_o = next((n for n, m in enumerate(only) if m and m <= mo and not m & mv), None)
    last_v = next((n for n in reversed(range(len(only))) if only[n] and only[n] <= mv and not only[n] & mo), None)
    if first_o is not None and last_v is not None and first_o < last_v:
        k.apply_first([Opt(OptOps.SWAP, first_o, last_v)])


# lanes of V and the most accumulators of a tile (floats), by the host's vector width. AVX2 (16 registers): one
# 8-float vector by 8 copies, 8 accumulators that leave registers for the operands (16 accumulators spill: packed
# matmul 1024 on one EPYC core built for AVX2, 8x8 83 GFLOPS, 16x8 63, 8x16 63). AVX-512 (32 registers): one 16-float
# vector by 16 copies (matmul 256 113, conv (16,3,64,64)x(16,3,3,3) 16x16 66 vs 8x32 53). Lanes gathered from
# scattered addresses take 4, up to 64 accumulators
TILE_CONTIGUOUS = {32: ((8, 16), 64), 64: ((16, 8, 32), 256)}
TILE_GATHERED, TILE_GATHERED_MAX = (4,), 64
TILE_OTHER = (16, 8, 9, 6, 4, 3, 2)  # copies of O, the first that divides it and fits


def _tile_pair(
    k: Kernel, strides: list[tuple[int | None, ...]], globals_: list[int]
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """((V, lanes), (O, copies)) as Opt axis numbers, or None when no two axes form an outer product.

    Strides are compared as if no load were masked: a padded conv's input walks its rows with stride 1 except at
    the borders, and its lanes load as one vector there (conv (8,64,56,56)x(64,64,3,3) pad 1 on one EPYC core:
    26 GFLOPS with 4 lanes gathered along the batch, 58 with 8 lanes along the row, 16 output channels copies)."""
    unmasked = _load_strides(k, ignore_valid=True)
    stored = k.ast.src[0].src[1].arg.real_strides(ignore_valid=True)

    def moving(a: int) -> frozenset[int]:
        return _moving(strides, a)

    def size(n: int) -> int:
        return int(k.full_shape[globals_[n]])

    best: tuple[tuple[int, ...], tuple[tuple[int, int], tuple[int, int]]] | None = None
    outer = next((n for n in range(len(globals_)) if size(n) > 1), None)
    # (another axis long enough to share among the threads: the outer one may be cut into lanes. The MNIST step's
    # conv input gradient, batch x channels x 121 pixels x 9 taps: 16 threads kept the batch whole for them and
    # gathered 4 lanes along the channels, 12 GFLOPS a core against 36 with lanes along the batch; the threads
    # split the 121 pixels anyway)
    long_axes = [n for n in range(len(globals_)) if size(n) >= 4 * k.opts.threads]
    for v in range(len(globals_)):
        mv = moving(globals_[v])
        contiguous = bool(mv) and all(unmasked[i][globals_[v]] == 1 for i in mv)
        wide = 64 if k.opts.vector_bytes >= 64 else 32
        lanes, most = TILE_CONTIGUOUS[wide] if contiguous else (TILE_GATHERED, TILE_GATHERED_MAX)
        v_amt = next((w for w in lanes if size(v) % w == 0), None)
        if v_amt is None or not mv:
            continue
        if v == outer and size(v) // v_amt < 4 * k.opts.threads and all(n == v for n in long_axes):
            continue  # (the outermost axis must keep enough iterations to share among the threads)
        for o in range(len(globals_)):
            mo = moving(globals_[o])
            if o == v or not mo or mo & mv:
                continue
            o_amt = next((c for c in TILE_OTHER if size(o) % c == 0 and c * v_amt <= most), None)
            if o_amt is None:
                continue
            # rank (measured on conv and matmul kernels): contiguous vector loads, then vector stores (a conv with
            # its weights packed, output channels innermost, has contiguous lanes along the row and along the
            # channels: the row, 88 GFLOPS vs 67); else gather the lanes from the farthest-apart addresses and keep
            # the O copies' loads close together; then a big tile
            o_stride = min(abs(unmasked[i][globals_[o]] or 0) for i in mo)
            v_stride = max(abs(unmasked[i][globals_[v]] or 0) for i in mv)
            score = (int(contiguous), int(stored[globals_[v]] == 1), v_stride, -o_stride, o_amt * v_amt)
            if best is None or score > best[0]:
                best = (score, ((v, v_amt), (o, o_amt)))
    return None if best is None else best[1]


def _upcast_unit_stride(k: Kernel) -> None:
    """Upcast an output axis that every load walks with stride 1 (its lanes load as one vector)."""
    strides = _load_strides(k)
    for n, a in enumerate(k.axes_of(AxisType.GLOBAL)):
        if strides and all(st[a] == 1 for st in strides):
            k.apply_first([Opt(OptOps.UPCAST, n, amt) for amt in (8, 4, 2)])
            return


UPCAST_MIN_WORK = 256  # an elementwise kernel of fewer outputs is not upcast: it runs in well under a microsecond


def _upcast_inner(k: Kernel) -> None:
    """Upcast the innermost output axis of an elementwise kernel, unless it is tiny: there the launch costs more
    than any loop, and 8 copies of its body only cost codegen and compile time (an Adam or random-init kernel of
    a 32-float bias is ~150 ops per element: 27 KB of C upcast, 3 KB not)."""
    globals_ = k.axes_of(AxisType.GLOBAL)
    if globals_ and prod(int(s) for s in k.full_shape) >= UPCAST_MIN_WORK:
        k.apply_first([Opt(OptOps.UPCAST, len(globals_) - 1, a) for a in (8, 4, 2)])


def _threads(k: Kernel) -> None:
    """Split the outermost output axis that divides well into chunks over the CPU threads (THREAD); where none
    does, the axis that keeps the most threads busy, one index per chunk. A plain register-tiled product (two
    output axes, `_tile_grid`) is split along both."""
    n = k.opts.threads
    if not k.opts.has_threads or n <= 1 or prod(int(s) for s in k.full_shape) < THREAD_MIN_WORK:
        return
    sizes = [int(k.full_shape[a]) for a in k.axes_of(AxisType.GLOBAL)]
    if (grid := _tile_grid(k, sizes)) is not None and k.apply_all([Opt(OptOps.THREAD, a, c) for a, c in grid]):
        return
    for i, size in enumerate(sizes):
        if (amt := thread_chunks(size, n)) and k.apply_first([Opt(OptOps.THREAD, i, amt)]):
            return
    # every output axis is shorter than the threads or spreads badly (16 threads, axes of 4, 8, 3, 3: the MNIST
    # step's conv weight gradient ran on one thread for 21 of its 39 ms on the 16-core Xeon host; 2 threads split
    # the 4): the axis, or pair of axes (chunks of both indices), whose indices keep the most threads busy (one
    # axis of 8 left half of 16 threads idle: that weight gradient took 4.0 ms of the 19 ms step)
    choices: list[tuple[float, tuple[int, ...]]] = [(busy_threads(size, n), (i,)) for i, size in enumerate(sizes)]
    pairs = [(i, j) for i, j in itertools.combinations(range(len(sizes)), 2) if sizes[i] * sizes[j] <= 16 * n]
    choices += [(busy_threads(sizes[i] * sizes[j], n), (i, j)) for i, j in pairs]
    for busy, axes in sorted(choices, key=lambda c: (-c[0], len(c[1]))):
        # (the first axis's THREAD takes it whole and leaves the globals' numbering as it was for the second)
        if busy >= 2 and k.apply_all([Opt(OptOps.THREAD, a, sizes[a]) for a in axes]):
            return


# a register-tiled matmul's tiles split over rows and columns: each thread reads a block of both operands, not all of
# one (16-core Xeon host, fresh inputs: 256x256 102 -> 82 us in 8x4 chunks, 512x512 601 -> 422 us)
CPU_THREAD_GRID = ContextVar("CPU_THREAD_GRID", 1)


def _tile_grid(k: Kernel, sizes: list[int]) -> list[tuple[int, int]] | None:
    """(axis, chunks) twice: the row and column tiles of a kernel with two output axes, both upcast (a register
    tile) and not cut in k blocks, split into about two chunks a thread, the rows into at least as many as the
    columns; None for other kernels or where no such split divides the tiles."""
    n = k.opts.threads
    if not CPU_THREAD_GRID.value or n < 4 or len(sizes) != 2 or len(k.axes_of(AxisType.UPCAST)) != 2:
        return None
    if any(o.op is OptOps.KBLOCK for o in k.applied_opts):
        return None
    best: tuple[int, list[tuple[int, int]]] | None = None
    for a in range(1, sizes[0] + 1):
        b = 2 * n // a
        if sizes[0] % a or b < 1 or a * b != 2 * n or sizes[1] % b or a < b:
            continue
        if best is None or a - b < best[0]:  # (the most square split)
            best = (a - b, [(0, a), (1, b)])
    return None if best is None else best[1]


def busy_threads(size: int, threads: int) -> float:
    """How many of `threads` an axis of `size` keeps busy with one index per chunk (the speedup over one thread).

    >>> busy_threads(8, 16), busy_threads(20, 16), busy_threads(1, 16)
    (8.0, 10.0, 1.0)
    """
    return size / -(-size // threads)


def thread_chunks(size: int, threads: int) -> int | None:
    """How many chunks to cut an axis of `size` into for `threads` threads: a divisor of it from `threads` to
    16 x `threads` whose chunks spread evenly (the threads claim them one by one), nearest 4 per thread; None when
    none spreads to 3/4 of the threads' time or better (an axis of 125 row tiles on 16 threads: 125 chunks, 98%).

    >>> thread_chunks(128, 16), thread_chunks(125, 16), thread_chunks(7, 16)
    (64, 125, None)
    """
    best: tuple[float, int, int] | None = None
    for d in range(threads, min(size, 16 * threads) + 1):
        if size % d == 0:
            spread = d / (-(-d // threads) * threads)
            if spread >= 0.75 and (best is None or (spread, -abs(d - 4 * threads)) > best[:2]):
                best = (spread, -abs(d - 4 * threads), d)
    return None if best is None else best[2]


GPU_GROUP_MAX_OUTPUTS = 2048  # with fewer outputs than this, one thread per output leaves the GPU idle
GPU_WORKGROUP = 256
GPU_CONV_WORKGROUP = 64


GPU_GROUP_WIDE_OUTPUTS = 16384  # up to this many outputs, a long stride-1 reduction is still shared by a workgroup
GPU_GROUP_WIDE_REDUCE = 1024  # (how long "long" is)


def _gpu(k: Kernel) -> None:
    if tc_optimizations(k):  # fp16/bf16 matmuls on tensor cores
        return
    outputs = prod(int(k.full_shape[a]) for a in k.axes_of(AxisType.GLOBAL))
    if k.reduceops and GPU_WARP_ROWS.value and _warp_rows(k, outputs):
        return
    if k.reduceops and outputs <= GPU_GROUP_MAX_OUTPUTS:
        if _coalesced_group(k):
            return
        k.apply_first([Opt(OptOps.GROUPTOP, 0, a) for a in (256, 128, 64, 32, 16)])
    elif k.reduceops and outputs <= GPU_GROUP_WIDE_OUTPUTS and _reduce_size(k) >= GPU_GROUP_WIDE_REDUCE:
        # e.g. the MNIST linear layer (512x10 outputs, 1600 long): one thread per output made 5 blocks (0.86 ms)
        trial = k.copy()
        if _coalesced_group(trial):
            k.apply_opts(trial.applied_opts[len(k.applied_opts) :])
            return
    budget = GPU_WORKGROUP // max(1, prod(int(k.full_shape[a]) for a in k.axes_of(AxisType.GROUP)))
    if not (k.reduceops and not k.axes_of(AxisType.GROUP) and _broadcast_axes(k)) or _a_pooling(k):
        _gpu_locals(k, budget, whole=True)
        return
    if staged_matmul(k, _load_strides(k)):  # a big matmul: operand tiles in shared memory (tc/stage.py)
        return
    if _narrow_matmul(k):
        return
    tiled = k.copy()
    for opt in _gpu_tile(k, budget):
        tiled.apply_opt(opt)
    least = GPU_MIN_WORKGROUPS if _a_product(k) else max(GPU_MIN_WORKGROUPS, 2 * k.opts.compute_units)
    if _reduce_size(k) <= GPU_SHORT_REDUCE and _workgroups(tiled) < least:
        # a register tile that leaves most SMs idle: the LLM decode step's attention scores (8 kv heads x 4 queries
        # x 1024 slots, 64 long) got 8 workgroups (49 us per call on an H100 under DEBUG=2); threads along the
        # outputs only, one output each, give 512 (20 us), bench/bench_llm.py DECODE_KERNELS=1. Where the renderer
        # knows its compute units, under two workgroups each: the split-K partials of a bf16 GPT step's GELU bias
        # gradient (256 parts x 1536, 64 long) got 192 workgroups of 8 outputs a thread, 306 us on an H200
        _gpu_locals(k, GPU_CONV_WORKGROUP)
        return
    k.apply_opts(tiled.applied_opts[len(k.applied_opts) :])


GPU_POOL_WINDOW = 16  # a reduction this short to each output, with no operand reused across outputs: a pooling


def _a_pooling(k: Kernel) -> bool:
    """A pooling: each output reduces a few inputs (max_pool2d's 2x2) and no two loads are reused across outputs
    as a product's are (a bias read per channel is not). Threads along the outputs, as an elementwise kernel's; a
    register tile only spread a warp's loads over the channels (MNIST's pooled 26x26 rows, 0.5 TB/s)."""
    return _reduce_size(k) <= GPU_POOL_WINDOW and not _a_product(k)


GPU_MIN_WORKGROUPS = 16  # a tile leaving fewer workgroups than this idles > 85% of an H100's 132 SMs
GPU_SHORT_REDUCE = 256


def _a_product(k: Kernel, least_reuse: int = 1) -> bool:
    """Two loads that each stay put along an output axis the other moves along (a matmul's or a conv's operands,
    which a register tile reuses), rather than loads whose still axes nest (a bias beside its activations). Only
    loads that move along some output and are reused across at least `least_reuse` outputs count."""
    globals_ = [a for a in k.axes_of(AxisType.GLOBAL) if int(k.full_shape[a]) > 1]
    still: set[frozenset[int]] = set()
    for st in _load_strides(k):
        axes = frozenset(a for a in globals_ if st[a] == 0)
        if len(axes) < len(globals_) and prod(int(k.full_shape[a]) for a in axes) >= least_reuse:
            still.add(axes)
    return any(not (a <= b or b <= a) for a in still for b in still)


def _workgroups(k: Kernel) -> int:
    return int(prod(int(k.full_shape[a]) for a in k.axes_of(AxisType.GLOBAL)))


def _reduce_size(k: Kernel) -> int:
    return int(prod(int(k.full_shape[a]) for a in k.axes_of(AxisType.REDUCE)))


def _gpu_tile(k: Kernel, budget: int) -> list[Opt]:
    """Opts for a matmul/conv-like kernel: a workgroup over the innermost output axes, and a register tile.

    Matmul-like: 256 threads, and an 8x4 tile of the two innermost broadcast axes (fp32 matmul 4096 on an H100
    17.3 -> 21.5 TFLOPS against 4x4, bench/bench_tc_opts.py --dtype fp32). Conv-like, where the workgroup
    takes those axes whole: 64 threads, and the tile along the outer broadcast axes (cout by 16, batch by 2;
    64-channel conv 2.3 -> 18.3 TFLOPS, bench/bench_conv_opts.py).
    """
    done = len(k.applied_opts)
    wide = k.copy()
    _gpu_locals(wide, budget)
    tiled_inner = False
    for ax, amounts in zip(_broadcast_axes(wide)[-2:], ((8, 4, 2), (4, 2))):
        tiled_inner |= wide.apply_first([Opt(OptOps.UPCAST, ax, a) for a in amounts])
    if tiled_inner:
        return wide.applied_opts[done:]
    if not done and (taps := _tap_threads(k)) is not None:
        return taps
    if GPU_CONV_TILE_2D and (square := _conv_tile_2d(k)) is not None:
        return square
    small = k.copy()
    window = _window(k) if GPU_CONV_WINDOW.value else None
    if window is not None:  # half the threads, each computing two neighbouring rows of the window's output
        _gpu_locals(small, min(budget, GPU_CONV_WORKGROUP) // 2)
        if not small.apply_first([Opt(OptOps.UPCAST, window[0], 2)]):
            small, window = k.copy(), None
    if window is None:
        _gpu_locals(small, min(budget, GPU_CONV_WORKGROUP))
    outer = list(reversed(_broadcast_axes(small)[:-2]))
    tiled = next((ax for ax in outer if small.apply_first([Opt(OptOps.UPCAST, ax, a) for a in (16, 8, 4)])), None)
    if tiled is None:  # no register tile: at least unroll a short innermost reduce loop
        if GPU_UNROLL_UNTILED and (red := wide.axes_of(AxisType.REDUCE)):
            size = int(wide.full_shape[red[-1]])
            wide.apply_first([Opt(OptOps.UNROLL, len(red) - 1, a) for a in ((0,) if size <= 32 else (4, 2))])
        return wide.applied_opts[done:]
    for ax in outer:  # and a second outer axis by 2
        if ax != tiled and small.apply_first([Opt(OptOps.UPCAST, ax, 2)]):
            break
    for tap in window[1] if window is not None else ():  # the taps unrolled: the two rows share their loads
        small.apply_first([Opt(OptOps.UNROLL, tap, 0)])
    return small.applied_opts[done:]


# A ContextVar (part of the program cache's key), so that GPU_CONV_WINDOW=0 turns the rule off for A/B runs
GPU_CONV_WINDOW = ContextVar("GPU_CONV_WINDOW", 1)
GPU_WINDOW_TAPS = 7  # reduce axes up to this long can be a window's taps (a 3x3 .. 7x7 convolution)


def _window(k: Kernel) -> tuple[int, list[int]] | None:
    """A sliding window, as in a stride-1 convolution: (the outermost output axis along which some load moves by
    the same stride as along a short reduce axis, those reduce axes) as Opt axis numbers, else None.

    Neighbouring outputs along that axis read overlapping inputs: with the axis upcast by 2 and the taps unrolled,
    the two rows share their loads (an input row serves two output rows and three taps). The 64-channel conv
    (64,64,56,56)x(64,64,3,3) on an H100: 19.1 -> 24.7 TFLOPS (a sweep of 22 opt lists: docs/gpu.md).
    """
    reduces = k.axes_of(AxisType.REDUCE)
    found = [(g, r) for g, r in _same_stride_pairs(k) if int(k.full_shape[reduces[r]]) <= GPU_WINDOW_TAPS]
    return (min(g for g, _ in found), sorted({r for _, r in found})) if found else None


def _same_stride_pairs(k: Kernel) -> set[tuple[int, int]]:
    """(output axis, reduce axis) pairs, as Opt axis numbers, along which some load moves by the same nonzero
    stride: a convolution's output positions and its taps (`_window`), or, in its weight gradient, the taps and the
    input positions (`_tap_threads`). A padded conv's masked input counts as unmasked."""
    globals_, reduces = k.axes_of(AxisType.GLOBAL), k.axes_of(AxisType.REDUCE)
    pairs: set[tuple[int, int]] = set()
    for strides in _load_strides(k, ignore_valid=True):
        for ri, r in enumerate(reduces):
            if st := strides[r]:
                pairs.update((gi, ri) for gi, g in enumerate(globals_) if strides[g] == st)
    return pairs


# matmul-like kernels without any register tile unroll their innermost reduce loop (whole when <= 32): the MNIST
# conv1 weight-gradient first stage (26-long rows) 437 -> 167-200 us in bench/sweep_mnist_kernels.py
GPU_UNROLL_UNTILED = True
GPU_CONV_TILE_2D = True  # conv-like kernels try the 2-D workgroup and register tile of _conv_tile_2d first


def _conv_tile_2d(k: Kernel) -> list[Opt] | None:
    """A 32x2 workgroup over the two outer broadcast axes (batch-like B, channel-like C) and a 4x16 register tile.

    Each thread computes 16 channels x 4 images, so a loaded input value serves 16 FMAs and a loaded weight 4
    (the 1-D tile of 16 channels reused a weight once). MNIST conv2 forward on an H100: 532 -> 304 us
    (bench/sweep_mnist_kernels.py). Needs B divisible by 128 and C by 32; None otherwise.

    Where the image's rows are odd (MNIST's 11 and 13; `_row_threads`), the workgroup runs along them instead of
    the batch, with the same register tile: H200 sweep (bench/sweep_mnist_kernels.py --wide) at batch 512,
    conv2 forward 303 -> 147 us, its input gradient (a convolution with the flipped weights) 381 -> 167 us.
    """
    axes = _broadcast_axes(k)
    outer = axes[:-2]
    if len(k.applied_opts) or len(outer) < 2:
        return None
    b, c = outer[-2], outer[-1]
    opts = [Opt(OptOps.LOCAL, b, 32), Opt(OptOps.LOCAL, c, 2), Opt(OptOps.UPCAST, c, 16), Opt(OptOps.UPCAST, b, 4)]
    try:
        k.copy().apply_opts(opts)
    except KernelOptError:
        return None
    rows = _row_threads(k, axes[-2:], GPU_CONV_ROW_THREADS // 2)
    window = _window(k)
    if rows and window is not None:
        # the threads along the image's rows instead of the batch: a warp reads and writes neighbouring pixels
        # (with the batch as threads it wrote 32 images 6,400-21,632 floats apart); the first tap row unrolled.
        # Only where the batch tile applies (the kernels the sweep measured); other convs keep their window tile
        along = rows + opts[1:] + [Opt(OptOps.UNROLL, window[1][0], 0)]
        try:
            k.copy().apply_opts(along)
            return along
        except KernelOptError:
            pass
    return opts


# a conv tile's workgroup along odd rows (13, 11, 26 wide) takes up to this many threads, channels included
GPU_CONV_ROW_THREADS = 512


def _row_threads(k: Kernel, spatial: list[int], most: int) -> list[Opt] | None:
    """LOCALs along the two innermost output axes (an image's rows and columns, as Opt axis numbers) when neither
    has a power-of-two part of GPU_WHOLE_AXIS_BELOW: the columns whole, the rows whole or by their largest
    divisor that keeps at most `most` threads; None when the axes are not such rows."""
    if len(spatial) != 2:
        return None
    globals_ = k.axes_of(AxisType.GLOBAL)
    (r, c), (nr, nc) = spatial, (int(k.full_shape[globals_[a]]) for a in spatial)
    if any(n & -n >= GPU_WHOLE_AXIS_BELOW or n <= 2 for n in (nr, nc)) or nc > most:
        return None
    d = max(d for d in range(1, nr + 1) if nr % d == 0 and d * nc <= most)
    return ([Opt(OptOps.LOCAL, r, d)] if d > 1 else []) + [Opt(OptOps.LOCAL, c, nc)]


def _tap_threads(k: Kernel) -> list[Opt] | None:
    """A convolution's weight gradient: output axes that are the kernel's taps (at most GPU_WINDOW_TAPS long, along
    which a load moves as it does along a long reduce axis: the input's window positions) take threads whole, with
    the output channels (threads of a workgroup reading the same gradient value, neighbouring inputs); a second
    channel axis (the input channels) and the output channels make a 16x4 register tile, else the threads take 16
    output channels, the reduction is unrolled along a short image row and shared by two threads (GROUP).
    H200 sweep (bench/sweep_mnist_kernels.py --wide, MNIST step, batch 512): conv1's 256-part first stage
    368 -> 71 us, conv2's 350 -> 186 us."""
    globals_, reduces = k.axes_of(AxisType.GLOBAL), k.axes_of(AxisType.REDUCE)
    size = [int(k.full_shape[a]) for a in globals_]
    rsize = [int(k.full_shape[a]) for a in reduces]
    taps = {n for n, r in _same_stride_pairs(k) if size[n] <= GPU_WINDOW_TAPS and rsize[r] > GPU_WINDOW_TAPS}
    channels = [n for n in _broadcast_axes(k) if n not in taps]
    if len(taps) != 2 or not channels or sum(1 for n in range(len(globals_)) if size[n] > 1) < 3:
        return None
    t1, t2 = sorted(taps)
    tile = [n for n in channels[1:] if size[n] % 16 == 0]
    cout = channels[0]
    if tile:
        opts = [Opt(OptOps.LOCAL, cout, 8), Opt(OptOps.LOCAL, t1, size[t1]), Opt(OptOps.LOCAL, t2, size[t2])]
        opts += [Opt(OptOps.UPCAST, tile[0], 16), Opt(OptOps.UPCAST, cout, 4)]
        opts += [Opt(OptOps.UNROLL, 0, 0)] if rsize[0] <= 32 else []
    else:
        row = max((i for i, n in enumerate(rsize) if n <= 32), key=lambda i: rsize[i], default=None)
        opts = [Opt(OptOps.LOCAL, cout, 16), Opt(OptOps.LOCAL, t2, size[t2]), Opt(OptOps.LOCAL, t1, size[t1])]
        if row is not None:
            opts += [Opt(OptOps.UNROLL, row, 0)]
            rest = [i for i in range(len(rsize)) if i != row]
            if rest and rsize[rest[-1]] % 2 == 0:
                opts += [Opt(OptOps.GROUP, rest[-1], 2)]  # (an unrolled axis keeps its number)
    try:
        k.copy().apply_opts(opts)
    except KernelOptError:
        return None
    return opts


def _coalesced_group(k: Kernel) -> bool:
    """A workgroup whose threads read neighbouring addresses: GROUP (inner split) of a reduce axis the loads walk
    with stride 1, or LOCAL over a stride-1 output axis of size s times GROUP of a reduce axis of stride s.

    Where the renderer merges neighbouring loads (supports_float4), the stride-1 output axis is upcast instead, so
    each thread reads 16 bytes at once. (sum of 2^26 floats on an H100, first kernel, bench/bench_sum_opts.py:
    464 GB/s with GROUPTOP, 1,069 with GROUP+UNROLL, 1,405 with LOCAL+GROUP, 2,290 with GROUP+UPCAST 4.)
    """
    reduces, strides = k.axes_of(AxisType.REDUCE), _load_strides(k)
    if len(reduces) != 1 or not strides:
        return False
    step = {st[reduces[0]] for st in strides}
    unit = [n for n, a in enumerate(k.axes_of(AxisType.GLOBAL)) if all(st[a] == 1 for st in strides)]
    size = int(k.full_shape[k.axes_of(AxisType.GLOBAL)[unit[-1]]]) if unit else 0
    if step == {1}:
        applied = k.apply_first([Opt(OptOps.GROUP, 0, a) for a in (256, 128, 64, 32)])
    elif step == {size} and 1 < size <= 32 and k.opts.supports_float4 and _group_wide(k, unit[-1], size):
        return True
    elif step == {size} and 1 < size <= 32 and k.apply_first([Opt(OptOps.LOCAL, unit[-1], size)]):
        applied = k.apply_first([Opt(OptOps.GROUP, 0, a) for a in (256 // size, 128 // size) if a > 1])
    else:
        return False
    if applied:
        k.apply_first([Opt(OptOps.UNROLL, 0, a) for a in (4, 2)])  # more loads in flight per thread
    return applied


# stride-1 reductions (matrix-vector products, row sums) read in (loop, lane, 16 bytes) order: see _warp_rows.
# A ContextVar, so that GPU_WARP_ROWS=0 (the rule off, for A/B runs) is part of the program cache's key
GPU_WARP_ROWS = ContextVar("GPU_WARP_ROWS", 1)
GPU_WARP = 32
GPU_WARP_MIN_WORKGROUPS = 1024  # rows per workgroup shrink (8 -> 1) to keep this many (~8 per SM of an H100)
GPU_WARP_LOOP_UNROLL = 4  # the reduce loop left after the split, unrolled by up to this: loads in flight
GPU_WARP_MAX_REUSE = 16  # two loads each reused across this many outputs: a matmul, left to the tile rules


def _warp_rows(k: Kernel, outputs: int) -> bool:
    """A reduction every load walks with stride 1, on a renderer that merges neighbouring loads (CUDA).

    Each thread reads 16 neighbouring bytes (UNROLL by 8 halves or 4 floats) and the threads of a group read
    neighbouring 16-byte pieces (GROUP after the UNROLL: the (loop, lane, 8) order), so every load instruction
    of a warp reads 512 contiguous bytes. Many outputs (a matrix-vector product): up to a warp per output (GROUP
    32; 8 threads for a 64-long row of halves), several outputs per workgroup (LOCAL), so few partials are
    combined per output, and the loop left unrolled by up to 4. Few outputs (a row sum): the whole workgroup
    (GROUP 256) on one output. The LLM decode step's matvecs read at 1.3-1.5 TB/s with 256 threads per row and
    2-byte loads; with this rule 2.6-3.0 TB/s where they fill the GPU (bench/bench_llm.py DECODE_KERNELS=1).
    """
    reduces = k.axes_of(AxisType.REDUCE)
    loads = [u for u in k.ast.toposort if u.op is Ops.LOAD]
    steps = [u.src[1].arg.real_strides()[reduces[0]] for u in loads] if len(reduces) == 1 else []
    # every load walks the reduce axis with stride 1, or stays put (a broadcast value, e.g. a position)
    if not k.opts.supports_float4 or 1 not in steps or any(st not in (0, 1) for st in steps):
        return False
    # not a matmul: no two loads that move along the outputs are each reused across >= 16 of them along different
    # output axes (A[m, k] along n, B[n, k] along m: a register tile or tensor cores do better). Loads that never
    # move (a position, a scale) do not count, nor loads reused along the same axes: a GPT step's per-token row
    # sum reads the positions and the position embedding, both the same for every sequence of the batch, and as
    # a "matmul" it ran on 8 workgroups, one thread per row (1.2 ms on an H200; 16384 rows of 384)
    if _a_product(k, GPU_WARP_MAX_REUSE):
        return False
    # 16 bytes of the narrowest moving load (the float16 weights, not the float32 activations they multiply)
    itemsize = min(u.dtype.itemsize for u, st in zip(loads, steps) if st == 1)
    lanes, size = max(1, min(8, 16 // itemsize)), _reduce_size(k)
    if size % (lanes * 2):
        return False
    trial = k.copy()
    if outputs >= GPU_WARP_MIN_WORKGROUPS:
        # a warp, or the widest power-of-two part of one that divides the row (384 floats: 16 lanes of 8 x 3)
        fits = [g for g in (GPU_WARP, 16, 8, 4) if g <= size // lanes and size % (lanes * g) == 0]
        if not fits:
            return False
        group = fits[0]
        last = len(trial.axes_of(AxisType.GLOBAL)) - 1
        rows = [r for r in (256 // group, 8, 4, 2) if r * group <= 256 and outputs // r >= GPU_WARP_MIN_WORKGROUPS]
        trial.apply_first([Opt(OptOps.LOCAL, last, r) for r in sorted(set(rows), reverse=True)])
        groups: tuple[int, ...] = (group,)
    else:
        groups = (256, 128, 64, 32)
    if not trial.apply_first([Opt(OptOps.UNROLL, 0, lanes)]):
        return False
    if not trial.apply_first([Opt(OptOps.GROUP, 0, g) for g in groups if size % (lanes * g) == 0]):
        return False
    if trial.axes_of(AxisType.REDUCE) and outputs >= GPU_WARP_MIN_WORKGROUPS:
        loop = int(trial.full_shape[trial.axes_of(AxisType.REDUCE)[0]])
        trial.apply_first([Opt(OptOps.UNROLL, 0, u) for u in (GPU_WARP_LOOP_UNROLL, 2) if loop % u == 0 and loop > u])
    k.apply_opts(trial.applied_opts[len(k.applied_opts) :])
    return True


GPU_NARROW_N = 256  # a matmul output axis up to this long, of no multiple of 16 (a vocabulary of 65), is "narrow"


def _narrow_matmul(k: Kernel) -> bool:
    """A matmul whose one output axis is short and odd (a character model's logits, 16384x65 over 384) and whose
    long operand is read along the reduce axis with stride 1: 32 rows a workgroup, each row's reduction shared by
    8 threads reading neighbouring 16 bytes, and the short axis upcast (each thread keeps, say, 13 outputs of its
    row). The tile rules gave one thread per row walking its own 1.5 KiB: 1.9 ms on an H200; this 84 us (a sweep
    of 8 lists; 32x8 threads, 13 outputs each, was the fastest)."""
    strides = _load_strides(k)
    if (found := matmul_axes(k, strides)) is None:
        return False
    reduce = k.axes_of(AxisType.REDUCE)[0]
    m, n = sorted(found[:2], key=lambda a: int(k.full_shape[a]))[::-1]
    # the long operand read along K (the short one, a few rows of weights, stays in the cache whatever its layout)
    if any(st[m] != 0 and st[reduce] not in (0, 1) for st in strides):
        return False
    size_n, globals_ = int(k.full_shape[n]), k.axes_of(AxisType.GLOBAL)
    if size_n > GPU_NARROW_N or size_n % 16 == 0 or _reduce_size(k) % 32:
        return False
    upcast = next((d for d in range(16, 1, -1) if size_n % d == 0), 0)
    opts = [Opt(OptOps.LOCAL, globals_.index(m), 32), Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.GROUP, 0, 8)]
    opts += [Opt(OptOps.UPCAST, globals_.index(n), upcast)] if upcast else []
    return k.apply_all(opts)


def _group_wide(k: Kernel, unit: int, size: int) -> bool:
    """GROUP the reduce axis by 256, then UPCAST the stride-1 output axis to one 16-byte load per thread."""
    itemsize = max(u.dtype.itemsize for u in k.ast.toposort if u.op is Ops.LOAD)
    lanes = [w for w in (8, 4, 2) if w * itemsize <= 16 and size % w == 0]
    if not lanes or not k.apply_first([Opt(OptOps.GROUP, 0, 256)]):
        return False
    k.apply_first([Opt(OptOps.UPCAST, unit, lanes[0])])
    return True


# an axis whose largest power-of-two part is below this takes its whole length of threads when it fits the
# workgroup: MNIST's 13-, 26-, 11- and 15-wide rows had threads along the channels (676 floats apart), 0.3-0.5 TB/s
GPU_WHOLE_AXIS_BELOW = 8


def _gpu_locals(k: Kernel, budget: int, whole: bool = False) -> None:
    """Threads of a workgroup along the innermost output axes (neighbouring threads, neighbouring outputs); with
    `whole`, an axis of a small power-of-two part (13, 26) takes threads along its whole length where it fits."""
    globals_ = k.axes_of(AxisType.GLOBAL)
    for n in reversed(range(len(globals_))):
        if budget <= 1:
            return
        size = k.full_shape[k.axes_of(AxisType.GLOBAL)[n]]
        if not isinstance(size, int):  # (a symbolic axis stays across workgroups)
            continue
        amounts = [a for a in (256, 128, 64, 32, 16, 8, 4, 2) if a <= budget and size % a == 0]
        if whole and size & -size < GPU_WHOLE_AXIS_BELOW and 2 < size <= budget:
            amounts.insert(0, size)
        if amounts and k.apply_first([Opt(OptOps.LOCAL, n, amounts[0])]):
            budget //= amounts[0]
