"""CPU benchmarks: tg (default opts and BEAM=2) against numpy, and torch / tinygrad when importable.

Run: `uv run python bench/bench_cpu.py` (prints one JSON line per figure). torch and tinygrad are never
dependencies: run the script with an interpreter that has them (and PYTHONPATH=packages/*/src) to compare.
Figures: matmul N=256/1024/2048 fp32; ((a+b)*c).relu() and sum on 2^24 floats; conv2d (16,3,64,64)x(16,3,3,3)
and (64,64,56,56)x(64,64,3,3) pad 1; realize of a tiny op (us); BEAM=2 search seconds for matmul 1024 cold/warm.
Threads: numpy (OpenBLAS) and tg both take one thread per core by default; the matmul lines say how many each
used ("threads"). `OPENBLAS_NUM_THREADS=1 THREADS=1` compares them on one core.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

SMALL = os.getenv("BENCH_SMALL", "0") not in ("", "0")  # quick smoke run with small sizes


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    print(json.dumps({"bench": bench, "impl": impl, "value": round(value, 3), "unit": unit, "params": params}))
    sys.stdout.flush()


def best_of(fn: Callable[[], object], reps: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        st = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - st)
    return best


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


# ---------------------------------------------------------------- tg
def tg_matmul(a: Any, b: Any) -> Any:
    if hasattr(a, "__matmul__"):
        return a @ b
    n, k = a.shape
    m = b.shape[1]
    return (a.reshape(n, k, 1) * b.reshape(1, k, m)).sum(1)


def tg_conv2d(x: Any, w: Any, pad: int) -> Any:
    """Stride-1 conv as a sum over the kernel taps of shifted windows times the tap's weights (one fused
    kernel: every tap is a reduction over input channels of the same shape), unless Tensor has conv2d."""
    if hasattr(x, "conv2d"):
        return x.conv2d(w, padding=pad)
    from tg import Tensor

    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = x.uop.pad(((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = None
    for i in range(kh):
        for j in range(kw):
            win = xp.shrink(((0, n), (0, c), (i, i + oh), (j, j + ow))).reshape((n, 1, c, oh, ow))
            tap = w.uop.shrink(((0, o), (0, c), (i, i + 1), (j, j + 1))).reshape((1, o, c, 1, 1))
            term = (Tensor(win) * Tensor(tap)).sum(2)
            out = term if out is None else out + term
    return out


def run_tg(inputs: Callable[[], tuple[Any, ...]], compute: Callable[..., Any], reps: int = 4) -> float:
    """Best time of `compute(*inputs).realize()`, on fresh realized inputs each time (a graph already
    computed would be served from its result without running a kernel)."""
    best = float("inf")
    for i in range(reps + 1):
        args = tuple(t.realize() for t in inputs())
        st = time.perf_counter()
        compute(*args).realize()
        if i:  # the first run compiles
            best = min(best, time.perf_counter() - st)
    return best


def rand(*shape: int) -> Any:
    from tg import Tensor

    return Tensor(np.random.rand(*shape).astype(np.float32))


def bench_tg(label: str, beam: int) -> None:
    from tg_uop.helpers import Context

    with Context(BEAM=beam):
        for n in (256,) if SMALL else (256, 1024, 2048):
            if beam and n >= 2048 and os.getenv("BENCH_BEAM_BIG", "0") in ("", "0"):
                continue  # each BEAM candidate of the 2048 matmul runs for seconds: BENCH_BEAM_BIG=1 includes it
            t = run_tg(lambda n=n: (rand(n, n), rand(n, n)), tg_matmul)
            emit("matmul", label, 2 * n**3 / t * 1e-9, "GFLOPS", n=n, threads=tg_threads())
        n = 1 << (16 if SMALL else 24)
        t = run_tg(lambda: (rand(n), rand(n), rand(n)), lambda a, b, c: ((a + b) * c).relu())
        emit("add_mul_relu", label, 4 * 4 * n / t * 1e-9, "GB/s", n=n)
        emit("sum", label, 4 * n / run_tg(lambda: (rand(n),), lambda a: a.sum()) * 1e-9, "GB/s", n=n)
        for xs, ws in conv_shapes():
            if beam and xs[1] >= 64 and os.getenv("BENCH_BEAM_BIG", "0") in ("", "0"):
                continue  # each candidate of the 64-channel conv runs for seconds: BENCH_BEAM_BIG=1 includes it
            t = run_tg(lambda xs=xs, ws=ws: (rand(*xs), rand(*ws)), lambda x, w: tg_conv2d(x, w, 1))
            emit("conv2d", label, conv_flops(xs, ws) / t * 1e-9, "GFLOPS", x=xs, w=ws)


def conv_shapes() -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    if SMALL:
        return [((2, 3, 16, 16), (4, 3, 3, 3))]
    return [((16, 3, 64, 64), (16, 3, 3, 3)), ((64, 64, 56, 56), (64, 64, 3, 3))]


def conv_flops(xs: tuple[int, ...], ws: tuple[int, ...]) -> float:
    return 2.0 * xs[0] * ws[0] * xs[2] * xs[3] * ws[1] * ws[2] * ws[3]


def bench_tiny_realize() -> None:
    """Realize of `t + 1.5` on a 4-element tensor: a new graph shape (kernel compiled before), then a seen one."""
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
            tg_matmul(a, b).realize()
        emit("beam_search_matmul", f"tg_{label}", time.perf_counter() - st, "s", n=n)


# ---------------------------------------------------------------- peers
def bench_numpy() -> None:
    for n in (256,) if SMALL else (256, 1024, 2048):
        a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
        t = best_of(lambda a=a, b=b: a @ b)
        emit("matmul", "numpy", 2 * n**3 / t * 1e-9, "GFLOPS", n=n, threads=numpy_threads())
    n = 1 << (16 if SMALL else 24)
    a, b, c = (np.random.rand(n).astype(np.float32) for _ in range(3))
    emit("add_mul_relu", "numpy", 16 * n / best_of(lambda: np.maximum((a + b) * c, 0)) * 1e-9, "GB/s", n=n)
    emit("sum", "numpy", 4 * n / best_of(lambda: a.sum()) * 1e-9, "GB/s", n=n)


def bench_torch() -> None:
    try:
        import torch
    except ImportError:
        return
    for n in (256,) if SMALL else (256, 1024, 2048):
        a, b = torch.rand(n, n), torch.rand(n, n)
        emit("matmul", "torch", 2 * n**3 / best_of(lambda a=a, b=b: a @ b) * 1e-9, "GFLOPS", n=n)
    n = 1 << (16 if SMALL else 24)
    a, b, c = torch.rand(n), torch.rand(n), torch.rand(n)
    emit("add_mul_relu", "torch", 16 * n / best_of(lambda: ((a + b) * c).relu()) * 1e-9, "GB/s", n=n)
    emit("sum", "torch", 4 * n / best_of(lambda: a.sum()) * 1e-9, "GB/s", n=n)
    for xs, ws in conv_shapes():
        x, w = torch.rand(*xs), torch.rand(*ws)
        t = best_of(lambda x=x, w=w: torch.nn.functional.conv2d(x, w, padding=1))
        emit("conv2d", "torch", conv_flops(xs, ws) / t * 1e-9, "GFLOPS", x=xs, w=ws)


def bench_tinygrad() -> None:
    os.environ.setdefault("DEV", "CPU")  # tinygrad's CPU backend (it would pick an OpenCL CPU driver first)
    try:
        from tinygrad import Tensor as TT
    except ImportError:
        return
    for n in (256,) if SMALL else (256, 1024):
        a, b = TT.rand(n, n).realize(), TT.rand(n, n).realize()
        emit("matmul", "tinygrad", 2 * n**3 / best_of(lambda a=a, b=b: (a @ b).realize()) * 1e-9, "GFLOPS", n=n)
    n = 1 << (16 if SMALL else 24)
    a, b, c = TT.rand(n).realize(), TT.rand(n).realize(), TT.rand(n).realize()
    emit("add_mul_relu", "tinygrad", 16 * n / best_of(lambda: ((a + b) * c).relu().realize()) * 1e-9, "GB/s", n=n)
    emit("sum", "tinygrad", 4 * n / best_of(lambda: a.sum().realize()) * 1e-9, "GB/s", n=n)
    t = TT([1.0, 2.0, 3.0, 4.0]).realize()
    (t + 1.5).realize()
    st = time.perf_counter()
    for _ in range(100):
        (t + 1.5).realize()
    emit("tiny_realize", "tinygrad", (time.perf_counter() - st) / 100 * 1e6, "us")


def peer(fn: Callable[[], None]) -> None:
    """A peer that is installed but cannot run here is reported on stderr, not fatal."""
    try:
        fn()
    except Exception as e:
        print(f"{fn.__name__}: skipped ({type(e).__name__}: {e})", file=sys.stderr)


def main() -> None:
    from tg import Device

    Device.DEFAULT = "CPU"
    bench_numpy()
    peer(bench_torch)
    peer(bench_tinygrad)
    bench_tg("tg", beam=0)
    bench_tiny_realize()
    if os.getenv("BENCH_BEAM", "1") not in ("", "0"):
        bench_beam_time()
        bench_tg("tg_beam2", beam=2)


if __name__ == "__main__":
    main()
