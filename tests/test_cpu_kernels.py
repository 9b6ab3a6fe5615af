"""The CPU's matmul and convolution kernels against numpy: KBLOCK (a reduction in blocks, partial sums in the output),
the thread pool (THREAD loops outlined and run by tg_parallel), register tiles for AVX2 and AVX-512 targets.

Kernels are compiled here with the opts each test names (as BEAM or the heuristics would apply them) and run on
buffers of a scheduled tensor; odd sizes, sizes below one tile, transposed and strided operands, threads that do
not divide the chunks. The PYTHON device (an interpreter of the same linear program) checks KBLOCK without a C
compiler.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import re
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg import Device, Tensor
from tg_codegen import get_program
from tg_codegen.kernel import Kernel
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_codegen.renderer.cstyle import ClangRenderer
from tg_codegen.renderer.threadpool import SPIN_US
from tg_runtime import ops_cpu
from tg_runtime.ops_cpu import ClangCompiler, CPUProgram, load_thread_pool
from tg_runtime.runner import CompiledRunner
from tg_tensor.engine.realizer import ScheduleItem, current
from tg_uop.helpers import Context, prod

U, R, T, K, S = OptOps.UPCAST, OptOps.UNROLL, OptOps.THREAD, OptOps.KBLOCK, OptOps.SWAP


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _item(t: Tensor) -> ScheduleItem:
    """The last kernel of `t`'s schedule, the ones before it run (the copies its inputs need)."""
    items = t.schedule()
    for item in items:
        current().unqueue(item)
        for buf in item.bufs:
            buf.ensure_allocated()
    for item in items[:-1]:
        CompiledRunner(get_program(item.ast, Device[item.bufs[0].device].renderer))(item.bufs)
    return items[-1]


def _run(item: ScheduleItem, opts: list[Opt], renderer: object | None = None) -> np.ndarray:
    device = item.bufs[0].device
    spec = get_program(item.ast, renderer or Device[device].renderer, opts=opts)  # type: ignore[arg-type]
    CompiledRunner(spec, device=device)(item.bufs)
    out = item.bufs[0]
    return np.frombuffer(out.as_bytes(), dtype=np.float32).copy()


def _matmul(a: np.ndarray, b: np.ndarray, device: str) -> ScheduleItem:
    x, w = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
    return _item(x @ w)


# ---- KBLOCK ----
@pytest.mark.parametrize(
    "n,k,m,opts",
    [
        (5, 12, 7, [Opt(K, 0, 4)]),  # below one tile, three blocks
        (16, 64, 16, [Opt(U, 0, 4), Opt(U, 1, 8), Opt(K, 0, 16)]),
        (9, 30, 24, [Opt(U, 1, 8), Opt(R, 0, 3), Opt(K, 0, 5)]),  # an unrolled block of 5 x 3
        (12, 40, 8, [Opt(K, 0, 8), Opt(S, 0, 1)]),  # the block loop moved inside the row loop: still in order
    ],
)
def test_kblock_matches_numpy(device: str, n: int, k: int, m: int, opts: list[Opt]) -> None:
    if device == "CL":
        pytest.skip("KBLOCK is for renderers without workgroups")
    a, b = _rand(n, k), _rand(k, m, seed=1)
    got = _run(_matmul(a, b, device), opts).reshape(n, m)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_kblock_of_transposed_and_strided_operands() -> None:
    a, b = _rand(24, 48), _rand(48, 60, seed=1)
    x = Tensor(a).realize().T  # (48, 24), read by columns
    w = Tensor(b).realize()[::2, 1::3]  # (24, 20) every other row, every third column
    got = _run(_item(x[:20] @ w), [Opt(U, 0, 4), Opt(K, 0, 6)]).reshape(20, 20)
    np.testing.assert_allclose(got, a.T[:20] @ b[::2, 1::3], rtol=1e-4, atol=1e-4)


def test_kblock_with_threads_matches_numpy() -> None:
    """Blocks inside each thread's rows: 3 threads over 7 row chunks (the pool hands them out one by one)."""
    a, b = _rand(7 * 8, 96), _rand(96, 16, seed=1)
    renderer = ClangRenderer(threads=3, vector_bytes=Device["CPU"].renderer.vector_bytes)
    assert load_thread_pool(Device["CPU"].compiler)  # type: ignore[arg-type]
    item = _matmul(a, b, "CPU")
    # (after KBLOCK the block loop is output axis 0, the rows axis 1)
    got = _run(item, [Opt(U, 1, 8), Opt(U, 0, 8), Opt(K, 0, 32), Opt(T, 1, 7)], renderer).reshape(56, 16)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_heuristics_block_a_long_reduction() -> None:
    """K = 2048: the heuristics pick KBLOCK on their own; the product still matches numpy."""
    a, b = _rand(16, 2048), _rand(2048, 24, seed=1)
    item = _matmul(a, b, "CPU")
    from tg_codegen.heuristic import hand_coded_optimizations

    opts = hand_coded_optimizations(Kernel(item.ast, Device["CPU"].renderer))
    assert any(o.op is K for o in opts), opts
    np.testing.assert_allclose(_run(item, opts).reshape(16, 24), a @ b, rtol=1e-3, atol=1e-3)


def test_kblock_refuses_what_would_break_the_order() -> None:
    item = _matmul(_rand(16, 64), _rand(64, 16, seed=1), "CPU")
    k = Kernel(item.ast, ClangRenderer(threads=4)).apply_opts([Opt(K, 0, 16)])
    for opt in (Opt(T, 0, 2), Opt(U, 0, 2), Opt(OptOps.PADTO, 0, 8), Opt(K, 0, 2)):  # axis 0 is the block loop
        with pytest.raises(KernelOptError):
            k.copy().apply_opt(opt)
    with pytest.raises(KernelOptError, match="whole axis"):
        Kernel(item.ast, ClangRenderer()).apply_opt(Opt(K, 0, 64))


def test_kblock_needs_a_plain_sum_stored() -> None:
    """The partial sums live in the output: a value computed from the sum (relu), or stored narrower, refuses."""
    x, w = Tensor(_rand(8, 32)).realize(), Tensor(_rand(32, 8, seed=1)).realize()
    for t in ((x @ w).relu(), (x @ w).cast("float16"), (x @ w).max(axis=1)):
        item = _item(t)
        with pytest.raises(KernelOptError):
            Kernel(item.ast, ClangRenderer()).apply_opt(Opt(K, 0, 8))


def test_kblock_refused_on_gpu_renderers() -> None:
    from tg_codegen.renderer.cuda import CUDARenderer

    item = _matmul(_rand(16, 64), _rand(64, 16, seed=1), "CPU")
    with pytest.raises(KernelOptError, match="workgroups"):
        Kernel(item.ast, CUDARenderer()).apply_opt(Opt(K, 0, 16))


@pytest.mark.parametrize("seed", range(12))
def test_random_opts_on_plain_sums_match_numpy(device: str, seed: int) -> None:
    """Matmuls and row sums (a sum stored as it is: what KBLOCK takes) of random sizes under random opts of BEAM's
    space (search.fuzz_opts, as OPT_FUZZ applies them), KBLOCK first where it applies."""
    if device == "CL":
        pytest.skip("KBLOCK is for renderers without workgroups")
    from tg_codegen.search import fuzz_opts

    rng = np.random.default_rng(seed)
    n, k, m = (int(v) for v in rng.integers(1, 40, 3))
    a, b = _rand(n, k * 2, seed=seed), _rand(k * 2, m, seed=seed + 1)
    if seed % 3 == 2:
        item, want = _item(Tensor(a, device=device).realize().sum(axis=1)), a.sum(axis=1)
    else:
        item, want = _matmul(a, b, device), a @ b
    kernel = Kernel(item.ast, Device[device].renderer)
    for trial in range(4):
        opts = fuzz_opts(kernel, [], seed * 10 + trial)
        got = _run(item, opts).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(opts))


# ---- the thread pool ----
def _pool_renderer(threads: int) -> ClangRenderer:
    assert load_thread_pool(Device["CPU"].compiler)  # type: ignore[arg-type]
    return ClangRenderer(threads=threads, vector_bytes=Device["CPU"].renderer.vector_bytes)


@pytest.mark.parametrize("threads,chunks", [(2, 2), (3, 7), (4, 2), (8, 64)])
def test_thread_pool_runs_every_chunk_once(threads: int, chunks: int) -> None:
    """An elementwise kernel whose THREAD loop has `chunks` iterations on `threads` threads: each element once."""
    a = _rand(chunks * 12, 5)
    item = _item(Tensor(a).realize() * 3 + 1)
    got = _run(item, [Opt(T, 0, chunks)], _pool_renderer(threads)).reshape(a.shape)
    np.testing.assert_allclose(got, a * 3 + 1, rtol=1e-5, atol=1e-6)  # (a*3+1 may be one FMA)


def test_thread_pool_serves_two_python_threads_at_once() -> None:
    """Two Python threads launch threaded kernels together: one gets the pool, the other runs its chunks alone."""
    renderer = _pool_renderer(3)
    cases = []
    for seed in range(2):
        a = _rand(96, 33, seed=seed)
        item = _item(Tensor(a).realize() + float(seed))
        runner = CompiledRunner(get_program(item.ast, renderer, opts=[Opt(T, 0, 6)]))
        cases.append((a + seed, item, runner))
    errors: list[BaseException] = []

    def hammer(runner: CompiledRunner, item: ScheduleItem) -> None:
        try:
            for _ in range(200):
                runner(item.bufs)
        except BaseException as e:  # (reported by the main thread)
            errors.append(e)

    workers = [threading.Thread(target=hammer, args=(r, i)) for _, i, r in cases]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors
    for want, item, _ in cases:
        np.testing.assert_allclose(np.frombuffer(item.bufs[0].as_bytes(), np.float32).reshape(want.shape), want)


def test_thread_pool_woken_ahead_of_a_job() -> None:
    """Workers asleep (past their spin) are woken by tg_pool_wake (a CPU realize's Device.prepare), with a job after
    the wake, with none (they sleep again), and twice in a row: every launch still runs each chunk once."""
    renderer = _pool_renderer(3)
    wake = ops_cpu._pools[0].tg_pool_wake
    a = _rand(72, 9)
    item = _item(Tensor(a).realize() * 2 - 1)
    runner = CompiledRunner(get_program(item.ast, renderer, opts=[Opt(T, 0, 9)]))
    asleep = 3 * SPIN_US * 1e-6
    for pattern in ("wake-run", "wake-idle", "wake-wake-run", "run"):
        time.sleep(asleep)
        for _ in range(pattern.count("wake")):
            wake()
        if pattern.endswith("idle"):
            time.sleep(asleep)
        item.bufs[0].copyin(memoryview(np.zeros(a.size, np.float32)))
        runner(item.bufs)
        got = np.frombuffer(item.bufs[0].as_bytes(), np.float32).reshape(a.shape)
        np.testing.assert_allclose(got, a * 2 - 1, rtol=1e-5, atol=1e-6, err_msg=pattern)


def _wakes(wake: Callable[[], object], seconds: float, look: Callable[[], bool]) -> bool:
    """Call tg_pool_wake every 0.1 ms for `seconds` or until `look()` (called before each wake and once more at the
    end) is true: whether this thread ran without a 0.5 ms pause up to that last look (else the wakes were not 0.1 ms
    apart and a worker may rightly have slept)."""
    last = start = time.perf_counter()
    while True:
        done = look()  # (before the time is read: a pause after it is caught below)
        now = time.perf_counter()
        if now - last >= 5e-4:
            return False
        if done or now - start >= seconds:
            return True
        wake()
        last = now
        while time.perf_counter() - now < 1e-4:
            pass


def _append_false(values: list[int], value: int) -> bool:
    """Keep `value`, and say the wakes go on (_wakes's look while naps are counted)."""
    values.append(value)
    return False


def _spinning_under_wakes(runner: CompiledRunner, item: ScheduleItem) -> tuple[int | None, bool]:
    """(how often a worker went to sleep while tg_pool_wake was called every 0.1 ms for 4 * SPIN_US after a job, None
    if this thread never ran that long without a 0.5 ms pause; whether they slept within 5 s once the wakes stopped).
    Naps are counted, not sleeping workers: on a busy machine a woken worker may wait a while for a CPU."""
    pool = ops_cpu._pools[0]
    wake, sleeping, naps = pool.tg_pool_wake, pool.tg_pool_sleeping, pool.tg_pool_naps
    seen: int | None = None
    for _attempt in range(50):  # (an attempt where this thread was descheduled for 0.5 ms proves nothing: again)
        runner(item.bufs)  # the worker has run a job just now: spinning (or, busy machine, still asleep: woken here)
        if not _wakes(wake, 0.5, lambda: sleeping() == 0):
            continue
        counts: list[int] = []
        if _wakes(wake, 4 * SPIN_US * 1e-6, lambda counts=counts: _append_false(counts, naps())):
            seen = counts[-1] - counts[0]
            break
    deadline = time.perf_counter() + 5.0
    while sleeping() == 0 and time.perf_counter() < deadline:
        time.sleep(0.01)
    return seen, sleeping() > 0


def test_thread_pool_wakes_keep_spinning_workers_awake() -> None:
    """Realizes every ~0.1 ms (tg_pool_wake, each realize's Device.prepare) keep a worker spinning well past SPIN_US
    after its last job: an eager loop that makes its inputs between its threaded launches finds it awake, not asleep
    since SPIN_US after the launch before. With the wakes stopped it sleeps again. (In a forked child: one worker,
    not the ones other tests started.)"""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    asleep, slept_after = _in_forked_child(_spinning_under_wakes)
    if asleep is None:
        pytest.skip("the test thread never ran 4 * SPIN_US without a 0.5 ms pause (a busy machine)")
    assert asleep == 0, f"a worker went to sleep {asleep} times between wakes 0.1 ms apart"
    assert slept_after, "the worker still spun 5 s after the last wake"


def _worker_leaves_callers_cpu(runner: CompiledRunner, item: ScheduleItem) -> tuple[int, list[int]]:
    """Put the (one) worker on this thread's CPU, this thread pinned there, wake the pool: (that CPU, the worker's
    CPU every ms after, until it has been on another one for 5 ms, or 2 s)."""
    runner(item.bufs)  # starts the worker
    me = threading.get_native_id()
    (worker,) = [int(t) for t in os.listdir("/proc/self/task") if int(t) != me]
    allowed = os.sched_getaffinity(worker)
    cpu = _cpu_of(me)
    os.sched_setaffinity(0, {cpu})  # (this thread only: Linux affinity is per thread)
    os.sched_setaffinity(worker, {cpu})  # moved here (it spins: running) ...
    os.sched_setaffinity(worker, allowed)  # ... and free to go, where it stays unless moved
    ops_cpu._pools[0].tg_pool_wake()  # (the pool learns where its caller is)
    seen = []
    for _ in range(2000):  # (up to 2 s: a busy machine may run the worker late; it moves at its first look)
        time.sleep(0.001)
        seen.append(_cpu_of(worker))
        if seen[-5:] == [seen[-1]] * 5 and seen[-1] != cpu:
            break
    return cpu, seen


def _cpu_of(tid: int) -> int:
    return int(open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()[36])


def test_thread_pool_worker_leaves_the_callers_cpu() -> None:
    """A worker that finds itself on its caller's CPU (where Linux may wake it though another CPU is idle) moves to
    another one: the two would take turns on one core. (In a forked child, whose one worker is the only other
    thread.)"""
    if "fork" not in multiprocessing.get_all_start_methods() or not hasattr(os, "sched_setaffinity"):
        pytest.skip("no fork or no CPU affinity on this platform")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: nowhere to move")
    cpu, seen = _in_forked_child(_worker_leaves_callers_cpu)
    assert seen[-1] != cpu, f"the worker stayed on its caller's CPU {cpu} for {len(seen)} ms"


def test_prepare_is_harmless_where_nothing_sleeps() -> None:
    """Device.prepare on a device without a waker (PYTHON) does nothing; on the CPU it only wakes the pool."""
    Device["PYTHON"].prepare()
    Device["CPU"].prepare()
    assert (Tensor([1.0, 2.0], device="CPU") * 2).tolist() == [2.0, 4.0]


def test_heuristics_thread_short_axes_on_many_threads() -> None:
    """16 threads and output axes all shorter than 16 (a conv weight gradient: 8 x 6 x 3 x 3 outputs summed over
    batch and pixels): no axis spreads evenly (it ran on one thread, then on 8 of 16 with one axis), so the chunks
    are pairs of two axes' indices (8 x 6 = 48: every thread busy); values vs numpy, on the pool."""
    from tg_codegen.heuristic import hand_coded_optimizations

    x, g = _rand(16, 6, 13, 13), _rand(16, 8, 11, 11, seed=1)
    xt, gt = Tensor(x).realize(), Tensor(g).realize()
    windows = np.lib.stride_tricks.sliding_window_view(x, (11, 11), axis=(2, 3))  # (16, 6, 3, 3, 11, 11)
    want = np.einsum("nchwij,noij->ochw", windows, g)
    grad = xt.reshape(16, 1, 6, 13, 13).expand(16, 8, 6, 13, 13)._pool((11, 11)) * gt.reshape(16, 8, 1, 1, 1, 11, 11)
    item = _item(grad.sum((0, 5, 6)))
    renderer = _pool_renderer(16)
    opts = hand_coded_optimizations(Kernel(item.ast, renderer))
    threads = [o for o in opts if o.op is T]
    assert len(threads) == 2, opts
    chunks = _chunks(get_program(item.ast, renderer, opts=opts).src)
    assert chunks == prod(int(o.arg) for o in threads) and chunks % 16 == 0, (chunks, opts)  # type: ignore[arg-type]
    got = _run(item, opts, renderer).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_heuristics_lanes_on_the_outer_axis_when_another_feeds_the_threads() -> None:
    """16 threads, a (batch 32, channels 8, 121 pixels, 9 taps) product summed over 16 channels (the shape of a
    conv's input gradient taken through its windows, as the MNIST step's was before conv2d's flipped-weight
    gradient): the 121 pixels can take the threads, so the batch (the outer axis) may be cut into 4 gathered lanes
    (before, the batch was kept whole for the threads and the lanes gathered along the channels: 12 against 36
    GFLOPS a core on the MNIST step's); values vs numpy, on the pool."""
    from tg_codegen.heuristic import hand_coded_optimizations

    w, g = _rand(16, 8, 3, 3, seed=1), _rand(32, 16, 11, 11, seed=2)
    gt = Tensor(g).realize().reshape(32, 16, 121).permute(0, 2, 1).reshape(32, 1, 1, 121, 1, 16)
    wt = Tensor(w).realize().reshape(16, 8, 9).permute(1, 2, 0).reshape(1, 1, 8, 1, 9, 16)
    item = _item((gt * wt).sum(5))
    renderer = _pool_renderer(16)
    opts = hand_coded_optimizations(Kernel(item.ast, renderer))
    assert Kernel(item.ast, renderer).full_shape == (32, 1, 8, 121, 9, 16), "another kernel than this test is about"
    lanes = [o for o in opts if o.op is U][-1]  # (the last upcast is the vector lanes)
    assert (lanes.axis, lanes.arg) == (0, 4), opts
    want = np.einsum("bop,oct->bcpt", g.reshape(32, 16, 121), w.reshape(16, 8, 9))
    got = _run(item, opts, renderer).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [256, 512])
def test_heuristics_split_a_matmul_tile_grid_over_threads(n: int) -> None:
    """16 threads, a register-tiled matmul: its row and column tiles both split (about two chunks a thread, 8 x 4),
    so each thread reads a block of both operands rather than all of one (CPU_THREAD_GRID=0: rows only); values vs
    numpy, on the pool."""
    from tg_codegen.heuristic import hand_coded_optimizations

    a, b = _rand(n, n), _rand(n, n, seed=1)
    with Context(CPU_PACK=0):
        item = _matmul(a, b, "CPU")
    renderer = _pool_renderer(16)
    opts = hand_coded_optimizations(Kernel(item.ast, renderer))
    assert [(o.axis, o.arg) for o in opts if o.op is T] == [(0, 8), (1, 4)], opts
    assert _chunks(get_program(item.ast, renderer, opts=opts).src) == 32
    np.testing.assert_allclose(_run(item, opts, renderer).reshape(n, n), a @ b, rtol=1e-3, atol=1e-3)
    with Context(CPU_THREAD_GRID=0):
        assert len([o for o in hand_coded_optimizations(Kernel(item.ast, renderer)) if o.op is T]) == 1


def _chunks(src: str) -> int:
    """How many chunks a rendered kernel hands the thread pool."""
    found = re.search(r"tg_parallel\(\w+, &tg_a, (\d+), \d+\)", src)
    assert found is not None, src
    return int(found.group(1))


@pytest.mark.parametrize("second", [(1, 4), (1, 20), (2, 3)])
def test_two_thread_axes(second: tuple[int, int]) -> None:
    """THREAD twice: the chunks are the pairs of both axes' indices (one loop of a * b; the first index chunk // b,
    the second chunk % b), each output written once, with an upcast and a reduce; a third THREAD is refused."""
    x = _rand(8, 12, 20, 5)
    item = _item(Tensor(x).realize().permute(0, 2, 1, 3).sum(3))  # (8, 20, 12): no two axes merge
    renderer = _pool_renderer(3)
    opts = [Opt(OptOps.UPCAST, 2, 4), Opt(T, 0, 8), Opt(T, *second)]
    got = _run(item, opts, renderer).reshape(8, 20, 12)
    np.testing.assert_allclose(got, x.transpose(0, 2, 1, 3).sum(3), rtol=1e-5, atol=1e-5)
    assert _chunks(get_program(item.ast, renderer, opts=opts).src) == 8 * second[1]
    with pytest.raises(KernelOptError, match="two axes"):
        get_program(item.ast, renderer, opts=[*opts, Opt(T, 0, 1)])


def _in_forked_child(probe: Callable[[CompiledRunner, ScheduleItem], Any]) -> Any:
    """`probe(runner, item)` in a forked child (one pool worker, not the ones other tests started), on a kernel of 9
    chunks for 2 threads: what it returns."""
    item = _item(Tensor(_rand(36, 9)).realize() + 1)
    runner = CompiledRunner(get_program(item.ast, _pool_renderer(2), opts=[Opt(T, 0, 9)]))
    q = multiprocessing.get_context("fork").Queue()
    p = multiprocessing.get_context("fork").Process(
        target=_child_runs_threaded_kernel, args=(lambda: probe(runner, item), q)
    )
    p.start()
    result = q.get(timeout=120)
    p.join(timeout=60)
    return result


def _child_runs_threaded_kernel(fn: Callable[[], object], q: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    q.put(fn())


def test_thread_pool_after_fork() -> None:
    """A forked child has no workers; its first threaded kernel starts them again (BEAM forks its workers)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    renderer = _pool_renderer(2)
    a = _rand(64, 16)
    item = _item(Tensor(a).realize() * 2)
    runner = CompiledRunner(get_program(item.ast, renderer, opts=[Opt(T, 0, 8)]))
    runner(item.bufs)  # the parent's workers are running

    def child() -> float:
        item.bufs[0].copyin(memoryview(np.zeros(a.size, np.float32)))
        runner(item.bufs)
        return float(np.frombuffer(item.bufs[0].as_bytes(), np.float32).sum())

    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_runs_threaded_kernel, args=(child, q))
    p.start()
    p.join(timeout=60)
    assert p.exitcode == 0
    assert abs(q.get(timeout=5) - float((a * 2).sum())) < 1e-2


# ---- convolutions ----
@pytest.mark.parametrize(
    "xs,ws,pad",
    [
        ((2, 5, 17, 24), (16, 5, 3, 3), 1),  # rows of 24 (3 vectors of 8), 16 output channels, padded
        ((3, 3, 9, 7), (5, 3, 3, 3), 1),  # below one tile everywhere
        ((2, 4, 13, 13), (8, 4, 3, 3), 0),  # 11x11 outputs (no vector along the row)
        ((1, 2, 20, 33), (4, 2, 5, 5), 2),  # 5x5 taps
    ],
)
def test_cpu_conv_matches_numpy(xs: tuple[int, ...], ws: tuple[int, ...], pad: int) -> None:
    x, w = _rand(*xs), _rand(*ws, seed=1)
    got = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=pad).numpy()
    np.testing.assert_allclose(got, _conv_ref(x, w, pad), rtol=1e-4, atol=1e-4)


def _conv_ref(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2], w.shape[3]
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, :oh, :ow]
    return np.einsum("ncyxij,ocij->noyx", win, w)


def test_conv_with_odd_rows_packs_its_weights() -> None:
    """Output rows of 11 (no 8-float vectors along them): the weights are copied with the output channels innermost
    first (one more kernel), the result and both gradients as without the copy (CPU_PACK=0)."""
    from tg import GlobalCounters
    from tg_uop.helpers import Context

    x, w, g = _rand(8, 16, 13, 13), _rand(32, 16, 3, 3, seed=1), _rand(8, 32, 11, 11, seed=2)
    results = {}
    for pack in (1, 0):
        with Context(CPU_PACK=pack):
            tx, tw = Tensor(x).realize(), Tensor(w).realize()
            GlobalCounters.reset()
            out = tx.conv2d(tw).numpy()
            kernels = GlobalCounters.kernel_count
            tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)  # (a realized result has no graph)
            (tx.conv2d(tw) * Tensor(g)).sum().backward()
            assert tx.grad is not None and tw.grad is not None
            results[pack] = (out, kernels, tx.grad.numpy(), tw.grad.numpy())
    np.testing.assert_allclose(results[1][0], _conv_ref(x, w, 0), rtol=1e-4, atol=1e-4)
    assert results[1][1] == results[0][1] + 1
    for got, want in zip(results[1][2:], results[0][2:]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ---- AVX2 and AVX-512 targets ----
def _compilers() -> list[str]:
    return [cc for cc in ("gcc", "clang") if shutil.which(cc)]


def _host_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return set(next(line for line in f if line.startswith("flags")).split(":")[1].split())
    except (OSError, StopIteration):
        return set()


# the flags that build for each target, and the CPU flags a host needs to run the result
TARGETS = {
    32: (("-mavx2", "-mfma"), {"avx2", "fma"}),
    64: (("-mavx2", "-mfma", "-mavx512f", "-mavx512vl"), {"avx2", "fma", "avx512f", "avx512vl"}),
}


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2/AVX-512 are x86 targets")
@pytest.mark.parametrize("vector_bytes", [32, 64])
@pytest.mark.parametrize("cc", _compilers() or ["none"])
def test_matmul_renders_and_builds_for_avx2_and_avx512(cc: str, vector_bytes: int) -> None:
    """The heuristics' matmul for each target (8-float vectors by 8 rows; 16-float vectors by 16 rows), built by each
    compiler found for that target; run against numpy where this host has the instructions."""
    if cc == "none":
        pytest.skip("neither gcc nor clang on PATH")
    from tg_codegen.heuristic import hand_coded_optimizations
    from tg_runtime.ops_cpu import half_type

    a, b = _rand(64, 96), _rand(96, 48, seed=1)
    item = _matmul(a, b, "CPU")
    renderer = ClangRenderer(threads=2, vector_bytes=vector_bytes, half=half_type(cc))
    opts = hand_coded_optimizations(Kernel(item.ast, renderer))
    assert sorted(o.arg for o in opts if o.op is U) == {32: [8, 8], 64: [16, 16]}[vector_bytes]
    spec = get_program(item.ast, renderer, opts=opts)
    assert f"vector_size({vector_bytes})" in spec.src and "tg_parallel" in spec.src
    flags, needs = TARGETS[vector_bytes]
    lib = ClangCompiler(cc, ("-O2", *flags, "-fno-tree-vectorize", "-ffp-contract=fast")).compile(spec.src)
    if not needs <= _host_flags():
        pytest.skip(f"built for {' '.join(flags)}; this host cannot run it")
    out = np.zeros(64 * 48, np.float32)
    CPUProgram(spec.function_name, lib)(*(arr.ctypes.data for arr in (out, a, b)))
    np.testing.assert_allclose(out.reshape(64, 48), a @ b, rtol=1e-4, atol=1e-4)
