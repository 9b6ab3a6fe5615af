"""CPU benchmarks: tg (default opts, and BEAM=2) against numpy, torch and tinygrad where they are importable.

Run: `uv run python bench/bench_cpu.py` (one JSON line per figure). torch and tinygrad are never dependencies: run
the script with an interpreter that has them and PYTHONPATH=$(ls -d packages/*/src | paste -sd:) to compare, e.g.
`DEV=CPU PYTHONPATH=$(ls -d packages/*/src | paste -sd:) /work/peers/torchvenv/bin/python bench/bench_cpu.py`.

Figures: matmul N=256/1024/2048 fp32 (GFLOPS); ((a+b)*c).relu() and sum on 2^24 floats (GB/s); conv2d
(16,3,64,64)x(16,3,3,3) and (64,64,56,56)x(64,64,3,3), padding 1 (GFLOPS); realize of a tiny op (us); BEAM=2
search seconds for matmul 1024, cold and warm. Each figure is measured in ROUNDS rounds (default 5) that take the
implementations in turn (numpy, torch, tinygrad, tg), the best of a few runs in each round; the line gives the
median over the rounds and its range (BENCH_PAUSE seconds between two implementations, default 0.3: idle threads
of the one before stop spinning). A `ratio` line per figure gives tg over the best peer (medians).
Every implementation gets new inputs before each run, made outside the timed part: tg must (a graph on the same
buffers is computed once and then served), and peers that read one pair of arrays over and over would read them
from every core's cache, while tg's threads read inputs just written by the main thread (on 2 cores torch's
256x256 matmul took 193 us on reused inputs and 234 on fresh ones; BENCH_REUSE=1 times the peers on reused ones).
Every line says how many threads its implementation used: numpy's OpenBLAS, torch's intra-op threads, tg's
(THREADS, default all cores). `OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 THREADS=1` compares them on one core.
Diagnostics beside the headline (what tg's figure is made of): `matmul_kernels`, tg's kernels of a matmul alone
(the copies into panels and the product, without building and scheduling the graph), `realize_parts`, where a
realize of tg's figure goes (microseconds building the graph, then realizing it, and the kernels alone on those
buffers), and `thread_pool_us`, one launch of a threaded kernel that does almost nothing (the cost of handing a
kernel to the threads and back; `moves`: how often in the whole run a pool worker found itself on the Python thread's
CPU and left it).
BENCH_SMALL=1: small sizes (a smoke run); BENCH_BEAM=0 skips the BEAM figures.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

SMALL = os.getenv("BENCH_SMALL", "0") not in ("", "0")  # quick smoke run with small sizes
ROUNDS = int(os.getenv("ROUNDS", "5"))
# seconds between two implementations' runs: every library's idle threads spin a while after a call (OpenBLAS,
# OpenMP, tg's pool: 2 ms) and would take the cores of the next one's threads
PAUSE = float(os.getenv("BENCH_PAUSE", "0.3"))
REUSE = os.getenv("BENCH_REUSE", "0") not in ("", "0")  # peers time one set of inputs over and over
SIZES = (256,) if SMALL else (256, 1024, 2048)
N_VEC = 1 << (16 if SMALL else 24)
CONVS = (
    [((2, 3, 16, 16), (4, 3, 3, 3))]
    if SMALL
    else [((16, 3, 64, 64), (16, 3, 3, 3)), ((64, 64, 56, 56), (64, 64, 3, 3))]
)


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    print(json.dumps({"bench": bench, "impl": impl, "value": round(value, 3), "unit": unit, "params": params}))
    sys.stdout.flush()


def best_time(fn: Callable[..., object], make: Callable[[], tuple[Any, ...]], reps: int = 3) -> float:
    """The best of `reps` runs of fn(*make()), each on inputs made just before (untimed); with BENCH_REUSE=1 (peers
    only: tg times its own runs) on one set made once."""
    best, args = float("inf"), make()
    for _ in range(reps):
        if not REUSE:
            args = make()
        st = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - st)
    return best


# ---------------------------------------------------------------- thread counts
def numpy_threads() -> int | None:
    """Threads numpy's OpenBLAS uses (asked from the library numpy ships), None when it cannot be asked."""
    import ctypes
    import glob

    for lib in glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*")):
        for sym in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads"):
            if (fn := getattr(ctypes.CDLL(lib), sym, None)) is not None:
                return int(fn())
    return None


def tg_threads() -> int:
    from tg import Device

    return int(Device["CPU"].renderer.threads)


# ---------------------------------------------------------------- implementations
class Impl:
    """One implementation's way to run each figure; `run(figure, args)` returns seconds (best of a few runs)."""

    name = ""
    threads: int | None = None

    def matmul(self, n: int) -> Callable[[], float]:
        raise NotImplementedError

    def add_mul_relu(self, n: int) -> Callable[[], float]:
        raise NotImplementedError

    def sum(self, n: int) -> Callable[[], float]:
        raise NotImplementedError

    def conv2d(self, xs: tuple[int, ...], ws: tuple[int, ...]) -> Callable[[], float] | None:
        return None


class NumpyImpl(Impl):
    name = "numpy"

    def __init__(self) -> None:
        self.threads = numpy_threads()

    def matmul(self, n: int) -> Callable[[], float]:
        make = lambda: (nrand(n, n), nrand(n, n))  # noqa: E731
        np.matmul(*make())
        return lambda: best_time(np.matmul, make)

    def add_mul_relu(self, n: int) -> Callable[[], float]:
        return lambda: best_time(lambda a, b, c: np.maximum((a + b) * c, 0), lambda: (nrand(n), nrand(n), nrand(n)))

    def sum(self, n: int) -> Callable[[], float]:
        return lambda: best_time(np.sum, lambda: (nrand(n),))


class TorchImpl(Impl):
    name = "torch"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.threads = torch.get_num_threads()

    def matmul(self, n: int) -> Callable[[], float]:
        make = lambda: (self.torch.rand(n, n), self.torch.rand(n, n))  # noqa: E731
        self.torch.matmul(*make())
        return lambda: best_time(self.torch.matmul, make)

    def add_mul_relu(self, n: int) -> Callable[[], float]:
        rand = self.torch.rand
        return lambda: best_time(lambda a, b, c: ((a + b) * c).relu(), lambda: (rand(n), rand(n), rand(n)))

    def sum(self, n: int) -> Callable[[], float]:
        return lambda: best_time(self.torch.sum, lambda: (self.torch.rand(n),))

    def conv2d(self, xs: tuple[int, ...], ws: tuple[int, ...]) -> Callable[[], float] | None:
        make = lambda: (self.torch.rand(*xs), self.torch.rand(*ws))  # noqa: E731
        conv = self.torch.nn.functional.conv2d
        conv(*make(), padding=1)
        return lambda: best_time(lambda x, w: conv(x, w, padding=1), make)


class TinygradImpl(Impl):
    name = "tinygrad"

    def __init__(self) -> None:
        os.environ.setdefault("DEV", "CPU")  # tinygrad's CPU backend (it would pick an OpenCL CPU driver first)
        from tinygrad import Tensor as TT

        self.TT = TT

    def _realized(self, shapes: list[tuple[int, ...]], fn: Callable[..., Any]) -> Callable[[], float]:
        def make() -> tuple[Any, ...]:
            return tuple(self.TT(nrand(*s)).realize() for s in shapes)

        fn(*make()).realize()
        return lambda: best_time(lambda *args: fn(*args).realize(), make)

    def matmul(self, n: int) -> Callable[[], float]:
        return self._realized([(n, n), (n, n)], lambda a, b: a @ b)

    def add_mul_relu(self, n: int) -> Callable[[], float]:
        return self._realized([(n,)] * 3, lambda a, b, c: ((a + b) * c).relu())

    def sum(self, n: int) -> Callable[[], float]:
        return self._realized([(n,)], lambda a: a.sum())


class TgImpl(Impl):
    """tg as a user runs it: build the graph on realized inputs and realize it (fresh inputs each run, so nothing is
    served from an earlier result); the first run of each figure compiles."""

    def __init__(self, beam: int = 0) -> None:
        self.name, self.beam, self.threads = ("tg_beam2" if beam else "tg"), beam, tg_threads()

    def _timed(self, inputs: Callable[[], tuple[Any, ...]], compute: Callable[..., Any]) -> Callable[[], float]:
        from tg_uop.helpers import Context

        def run(reps: int = 3) -> float:
            best = float("inf")
            with Context(BEAM=self.beam):
                for _ in range(reps):
                    args = tuple(t.realize() for t in inputs())
                    st = time.perf_counter()
                    compute(*args).realize()
                    best = min(best, time.perf_counter() - st)
            return best

        run(1)  # compile (and search, with BEAM)
        return run

    def matmul(self, n: int) -> Callable[[], float]:
        return self._timed(lambda: (rand(n, n), rand(n, n)), lambda a, b: a @ b)

    def add_mul_relu(self, n: int) -> Callable[[], float]:
        return self._timed(lambda: (rand(n), rand(n), rand(n)), lambda a, b, c: ((a + b) * c).relu())

    def sum(self, n: int) -> Callable[[], float]:
        return self._timed(lambda: (rand(n),), lambda a: a.sum())

    def conv2d(self, xs: tuple[int, ...], ws: tuple[int, ...]) -> Callable[[], float] | None:
        return self._timed(lambda: (rand(*xs), rand(*ws)), lambda x, w: x.conv2d(w, padding=1))


def nrand(*shape: int) -> Any:
    return np.random.rand(*shape).astype(np.float32)


def rand(*shape: int) -> Any:
    from tg import Tensor

    return Tensor(nrand(*shape))


# ---------------------------------------------------------------- rounds
def compare(
    bench: str, unit: str, work: float, makers: list[tuple[Impl, Callable[[], float] | None]], **params: Any
) -> None:
    """Time every implementation in turn for ROUNDS rounds; emit each one's median (work / seconds) and tg's ratio."""
    runs = [(impl, run) for impl, run in makers if run is not None]
    values: dict[str, list[float]] = {impl.name: [] for impl, _ in runs}
    for _ in range(ROUNDS):
        for impl, run in runs:
            time.sleep(PAUSE)  # the threads of the one before (OpenBLAS, OpenMP, tg's pool) stop spinning first
            values[impl.name].append(work / run() * 1e-9)
    medians = {name: statistics.median(v) for name, v in values.items()}
    for impl, _ in runs:
        v = values[impl.name]
        emit(
            bench,
            impl.name,
            medians[impl.name],
            unit,
            **params,
            threads=impl.threads,
            range=[round(min(v), 2), round(max(v), 2)],
        )
    peers = {name: m for name, m in medians.items() if not name.startswith("tg")}
    if peers and "tg" in medians:
        best = max(peers, key=lambda name: peers[name])
        emit(bench, "ratio", medians["tg"] / peers[best], "x", **params, vs=best)


def safe_make(impl: Impl, fn: Callable[[], Callable[[], float] | None]) -> Callable[[], float] | None:
    """A peer that is installed but cannot run a figure is reported on stderr and left out of it."""
    try:
        return fn()
    except Exception as e:
        print(f"{impl.name}: skipped ({type(e).__name__}: {e})", file=sys.stderr)
        return None


def conv_flops(xs: tuple[int, ...], ws: tuple[int, ...]) -> float:
    return 2.0 * xs[0] * ws[0] * xs[2] * xs[3] * ws[1] * ws[2] * ws[3]


def run_figures(impls: list[Impl], beam_big: bool) -> None:
    def makers(fig: Callable[[Impl], Callable[[], Callable[[], float] | None]]) -> list[tuple[Impl, Any]]:
        return [(impl, safe_make(impl, fig(impl))) for impl in impls]

    for n in SIZES:
        use = [i for i in impls if not (isinstance(i, TgImpl) and i.beam and n >= 2048 and not beam_big)]
        compare("matmul", "GFLOPS", 2.0 * n**3, [(i, safe_make(i, lambda i=i, n=n: i.matmul(n))) for i in use], n=n)
    compare("add_mul_relu", "GB/s", 16.0 * N_VEC, makers(lambda i: lambda: i.add_mul_relu(N_VEC)), n=N_VEC)
    compare("sum", "GB/s", 4.0 * N_VEC, makers(lambda i: lambda: i.sum(N_VEC)), n=N_VEC)
    for xs, ws in CONVS:
        use = [i for i in impls if not (isinstance(i, TgImpl) and i.beam and xs[1] >= 64 and not beam_big)]
        conv = [(i, safe_make(i, lambda i=i, xs=xs, ws=ws: i.conv2d(xs, ws))) for i in use]
        compare("conv2d", "GFLOPS", conv_flops(xs, ws), conv, x=xs, w=ws)


# ---------------------------------------------------------------- diagnostics
def bench_matmul_kernels() -> None:
    """tg's kernels of a matmul, launched alone on prepared buffers (no graph building, no scheduling)."""
    from tg_runtime.runner import get_runner
    from tg_tensor.engine.realizer import current

    for n in SIZES:
        items = (rand(n, n).realize() @ rand(n, n).realize()).schedule()
        for item in items:
            current().unqueue(item)
            for buf in item.bufs:
                buf.ensure_allocated()
        runners = [(get_runner(item.bufs[0].device, item.ast), item.bufs) for item in items]

        def launch(runners: list[Any] = runners) -> None:
            for runner, bufs in runners:
                runner(bufs)

        launch()
        times = [best_time(launch, tuple) for _ in range(ROUNDS)]
        emit(
            "matmul_kernels",
            "tg",
            2 * n**3 / statistics.median(times) * 1e-9,
            "GFLOPS",
            n=n,
            kernels=len(items),
            threads=tg_threads(),
        )


def bench_realize_parts() -> None:
    """Where tg's realize of a figure goes, on new inputs each run as the figure times it (median microseconds):
    `build` the graph (Python), `realize` it (scheduling, Python, and the kernels), the same kernels launched alone
    on new inputs (`kernels_fresh`: inputs just written by the main thread) and at once again on the same buffers
    (`kernels_warm`: inputs in every core's cache). realize - kernels_fresh is the Python and launch overhead."""
    from tg_runtime.runner import get_runner
    from tg_tensor.engine.realizer import current

    def matmul(a: Any, b: Any) -> Any:
        return a @ b

    def conv(x: Any, w: Any) -> Any:
        return x.conv2d(w, padding=1)

    figures: list[tuple[str, dict[str, Any], list[tuple[int, ...]], Callable[..., Any]]] = [
        ("matmul", {"n": n}, [(n, n), (n, n)], matmul) for n in SIZES
    ]
    figures.append(("sum", {"n": N_VEC}, [(N_VEC,)], lambda a: a.sum()))
    figures += [("conv2d", {"x": xs, "w": ws}, [xs, ws], conv) for xs, ws in CONVS]
    for name, params, shapes, compute in figures:
        parts: dict[str, list[float]] = {"build": [], "realize": [], "kernels_fresh": [], "kernels_warm": []}
        for _ in range(3 * ROUNDS):
            args = [rand(*s).realize() for s in shapes]
            st = time.perf_counter()
            out = compute(*args)
            mid = time.perf_counter()
            out.realize()
            parts["build"].append(mid - st)
            parts["realize"].append(time.perf_counter() - mid)
            items = compute(*[rand(*s).realize() for s in shapes]).schedule()
            for item in items:
                current().unqueue(item)
                for buf in item.bufs:
                    buf.ensure_allocated()
            runners = [(get_runner(item.bufs[0].device, item.ast), item.bufs) for item in items]
            for label in ("kernels_fresh", "kernels_warm"):
                st = time.perf_counter()
                for runner, bufs in runners:
                    runner(bufs)
                parts[label].append(time.perf_counter() - st)
        us = {k + "_us": round(statistics.median(v) * 1e6, 1) for k, v in parts.items()}
        total = us["build_us"] + us["realize_us"]
        emit("realize_parts", "tg", total, "us", figure=name, **params, **us, threads=tg_threads())


def bench_thread_pool() -> None:
    """One launch of a kernel split over the threads with almost no work in it: what handing a kernel to the threads
    costs (with the workers still awake from the launch before)."""
    from tg import Device
    from tg_codegen import get_program
    from tg_codegen.opt import Opt, OptOps
    from tg_runtime.runner import CompiledRunner
    from tg_tensor.engine.realizer import current

    threads = tg_threads()
    if threads < 2:
        return
    (item,) = (rand(threads * 4, 16).realize() + 1).schedule()
    current().unqueue(item)
    for buf in item.bufs:
        buf.ensure_allocated()
    runner = CompiledRunner(get_program(item.ast, Device["CPU"].renderer, opts=[Opt(OptOps.THREAD, 0, threads * 4)]))
    runner(item.bufs)
    calls = 2000
    st = time.perf_counter()
    for _ in range(calls):
        runner(item.bufs)
    from tg_runtime import ops_cpu

    per_call_us = (time.perf_counter() - st) / calls * 1e6
    # (moves: how often a worker found itself on the Python thread's CPU, or another worker's, and left it, in the
    # whole run: Linux may wake a worker there though another CPU is idle)
    moves = int(ops_cpu._pools[0].tg_pool_moves()) if ops_cpu._pools else 0
    emit("thread_pool_us", "tg", per_call_us, "us", chunks=threads * 4, threads=threads, moves=moves)


def bench_tiny_realize() -> None:
    """Realize of `t * 2.5` on a 4-element tensor: a new graph shape (kernel compiled before), then a seen one."""
    from tg import Tensor

    Tensor(np.ones(4, np.float32)).realize().mul(2.5).realize()  # compile the kernel once
    ts = [Tensor(np.full(4, i, np.float32)).realize() for i in range(201)]
    st = time.perf_counter()
    ts[0].mul(2.5).realize()
    emit("tiny_realize_first", "tg", (time.perf_counter() - st) * 1e6, "us")
    st = time.perf_counter()
    for t in ts[1:]:
        t.mul(2.5).realize()
    emit("tiny_realize", "tg", (time.perf_counter() - st) / (len(ts) - 1) * 1e6, "us")


def bench_beam_time() -> None:
    from tg import Tensor
    from tg_codegen.diskcache import reset_connections
    from tg_runtime.runner import clear_runner_cache
    from tg_uop.helpers import Context

    n = 256 if SMALL else 1024
    os.environ["CACHEDB"] = os.path.join(tempfile.mkdtemp(prefix="tg-bench-"), "cache.db")
    reset_connections()
    for label in ("cold", "warm"):
        a, b = (Tensor(np.random.rand(n, n).astype(np.float32)).realize() for _ in range(2))
        clear_runner_cache()
        st = time.perf_counter()
        with Context(BEAM=2):
            (a @ b).realize()
        emit("beam_search_matmul", f"tg_{label}", time.perf_counter() - st, "s", n=n)


def peers() -> list[Impl]:
    ret: list[Impl] = [NumpyImpl()]
    for cls in (TorchImpl, TinygradImpl):
        try:
            ret.append(cls())
        except ImportError:
            pass
    return ret


def main() -> None:
    from tg import Device

    Device.DEFAULT = "CPU"
    beam = os.getenv("BENCH_BEAM", "1") not in ("", "0")
    impls = [*peers(), TgImpl()]
    run_figures(impls, beam_big=False)
    bench_matmul_kernels()
    bench_realize_parts()
    bench_thread_pool()
    bench_tiny_realize()
    if beam:
        bench_beam_time()
        # (each BEAM candidate of the 2048 matmul or the 64-channel conv runs for seconds: BENCH_BEAM_BIG=1 adds them)
        run_figures([TgImpl(beam=2)], beam_big=os.getenv("BENCH_BEAM_BIG", "0") not in ("", "0"))


if __name__ == "__main__":
    main()
