"""GPU benchmark: tg on CUDA against torch in the same run (run on the lent GPU machine).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/bench_gpu.py [--quick]

Prints one JSON line per figure: {"bench", "impl", "value", "unit", "params"}. Kernel times are the best of
several launches of the already-compiled kernels (tg) or of the op (torch), synchronized on the device.
Figures: tiny realize; TinyJit replay per kernel (CUDA graph, and JIT=2 launches); conv2d 64-channel;
elementwise and sum on 2^26 floats; matmul 4096 fp32/tf32/fp16/bf16 (--beam N adds BEAM=N matmuls).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.setrecursionlimit(100_000)
os.environ.setdefault("DEV", "CUDA")

from cuda_timing import best_seconds, scheduled  # noqa: E402

from tg import Context, Tensor, dtypes  # noqa: E402
from tg_runtime import Device, get_runner  # noqa: E402
from tg_runtime.runner import clear_runner_cache  # noqa: E402


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    print(
        json.dumps({"bench": bench, "impl": impl, "value": round(value, 3), "unit": unit, "params": params}), flush=True
    )


def tg_kernel_seconds(t: Tensor, reps: int) -> float:
    """Best total time of the kernels that compute `t` (compiled once, then launched `reps` times)."""
    runners = [(get_runner("CUDA", it.ast), it.bufs) for it in scheduled(t) if it.ast.op.name == "SINK"]
    return best_seconds(lambda: [r(bufs) for r, bufs in runners], reps)


def torch_seconds(fn: Callable[[], Any], reps: int) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        st = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - st)
    return best


def tg_matmul(a: Tensor, b: Tensor) -> Tensor:
    if hasattr(Tensor, "matmul"):
        return a.matmul(b)
    n, k = a.shape
    m = b.shape[1]
    return (a.reshape(n, 1, k) * b.permute(1, 0).reshape(1, m, k)).sum(axis=2)


MATMUL_DTYPES = {"fp32": dtypes.float32, "fp16": dtypes.float16, "bf16": dtypes.bfloat16}


def bench_matmul(n: int, reps: int, names: tuple[str, ...] = ("fp32", "fp16", "bf16"), beam: int = 0) -> None:
    """torch and tg for each dtype; with beam > 0, tg's kernels are chosen by BEAM=beam (impl tg_beam<beam>)."""
    import torch

    for name in names:
        flop = 2 * n**3
        if not beam:
            torch.backends.cuda.matmul.allow_tf32 = False
            tdt = getattr(torch, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[name])
            ta, tb = torch.randn(n, n, dtype=tdt, device="cuda"), torch.randn(n, n, dtype=tdt, device="cuda")
            secs = torch_seconds(lambda ta=ta, tb=tb: ta @ tb, reps)
            emit("matmul", "torch", flop / secs * 1e-12, "TFLOPS", n=n, dtype=name)
        dt = MATMUL_DTYPES[name]
        a = Tensor(np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)).cast(dt).contiguous().realize()
        b = Tensor(np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)).cast(dt).contiguous().realize()
        impl = f"tg_beam{beam}" if beam else "tg"
        with Context(BEAM=beam):
            secs = tg_kernel_seconds(tg_matmul(a, b), reps)
        emit("matmul", impl, flop / secs * 1e-12, "TFLOPS", n=n, dtype=name)
    if beam:
        return
    torch.backends.cuda.matmul.allow_tf32 = True
    ta, tb = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    emit("matmul", "torch", 2 * n**3 / torch_seconds(lambda: ta @ tb, reps) * 1e-12, "TFLOPS", n=n, dtype="tf32")


def bench_elementwise(n: int, reps: int) -> None:
    import torch

    ta, tb, tc = (torch.randn(n, device="cuda") for _ in range(3))
    nbytes = 4 * n * 4

    def fused(x: Any, y: Any, z: Any) -> Any:
        return ((x + y) * z).relu()

    emit("elementwise", "torch", nbytes / torch_seconds(lambda: fused(ta, tb, tc), reps) * 1e-9, "GB/s", n=n)
    try:
        compiled = torch.compile(fused)
        secs = torch_seconds(lambda: compiled(ta, tb, tc), reps)
        emit("elementwise", "torch_compile", nbytes / secs * 1e-9, "GB/s", n=n)
    except Exception as e:  # torch.compile needs a working triton toolchain
        print(f"# torch.compile unavailable: {e}", file=sys.stderr)
    rng = np.random.default_rng(0)
    a, b, c = (Tensor(rng.standard_normal(n, dtype=np.float32)).realize() for _ in range(3))
    emit("elementwise", "tg", nbytes / tg_kernel_seconds(((a + b) * c).relu(), reps) * 1e-9, "GB/s", n=n)
    emit("sum", "torch", 4 * n / torch_seconds(lambda: ta.sum(), reps) * 1e-9, "GB/s", n=n)
    emit("sum", "tg", 4 * n / tg_kernel_seconds(a.sum(), reps) * 1e-9, "GB/s", n=n)


def bench_tiny_realize(reps: int) -> None:
    t = Tensor([1.0, 2.0, 3.0]).realize()
    (t + 1).realize()
    best = float("inf")
    for _ in range(reps):
        st = time.perf_counter()
        (t + 1).realize()
        Device["CUDA"].synchronize()
        best = min(best, time.perf_counter() - st)
    emit("tiny_realize", "tg", best * 1e6, "us")


def bench_conv(reps: int, quick: bool) -> None:
    """conv2d (64,64,56,56)x(64,64,3,3), padding 1, fp32: tg's one kernel vs torch (cuDNN)."""
    xs, ws = ((2, 4, 8, 8), (4, 4, 3, 3)) if quick else ((64, 64, 56, 56), (64, 64, 3, 3))
    flop = 2 * xs[0] * ws[0] * xs[2] * xs[3] * ws[1] * ws[2] * ws[3]
    x, w = Tensor.rand(*xs, device="CUDA").realize(), Tensor.rand(*ws, device="CUDA").realize()
    emit("conv2d", "tg", flop / tg_kernel_seconds(x.conv2d(w, padding=1), reps) * 1e-12, "TFLOPS", x=xs, w=ws)
    try:
        import torch
    except ImportError:
        return
    tx, tw = torch.rand(*xs, device="cuda"), torch.rand(*ws, device="cuda")
    secs = torch_seconds(lambda: torch.nn.functional.conv2d(tx, tw, padding=1), reps)
    emit("conv2d", "torch", flop / secs * 1e-12, "TFLOPS", x=xs, w=ws)


def bench_jit_replay(kernels: int = 50, calls: int = 200) -> None:
    """TinyJit replay cost per kernel for a chain of tiny kernels (a CUDA graph launch; JIT=2: one by one)."""
    from tg import TinyJit

    for jit, impl in ((1, "tg_cuda_graph"), (2, "tg_launches")):
        with Context(JIT=jit):

            @TinyJit
            def chain(x: Tensor) -> Tensor:
                for _ in range(kernels):
                    x = (x + 1).contiguous()
                return x

            x = Tensor.zeros(4, device="CUDA").contiguous().realize()
            for _ in range(3):
                chain(x)
            Device["CUDA"].synchronize()
            st = time.perf_counter()
            for _ in range(calls):
                chain(x)
            Device["CUDA"].synchronize()
            emit("jit_replay", impl, (time.perf_counter() - st) / calls / kernels * 1e6, "us/kernel", kernels=kernels)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, to check the script itself")
    parser.add_argument("--beam", type=int, default=0, help="also time the fp16/bf16 matmuls with BEAM=n")
    args = parser.parse_args()
    reps = 3 if args.quick else 10
    n = 64 if args.quick else 4096
    with Context(DEBUG=0):
        bench_tiny_realize(reps)
        bench_jit_replay(5 if args.quick else 50)
        bench_conv(reps, args.quick)
        bench_elementwise(2**12 if args.quick else 2**26, reps)
        bench_matmul(n, reps)
        if args.beam:
            clear_runner_cache()  # the default kernels are cached per AST; BEAM must choose again
            bench_matmul(n, reps, ("fp16", "bf16"), beam=args.beam)


if __name__ == "__main__":
    main()
