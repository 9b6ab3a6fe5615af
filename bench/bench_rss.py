"""Memory of a long eager run: N realizes of `(a * i + 1).sum().item()` with a distinct Python constant each
time (a learning-rate schedule or a loop counter written as a number), and the same with a jitted step.

    uv run python bench/bench_rss.py [N]        (default 10000; DEV=PYTHON/CPU/CL picks the device)

Prints one JSON line per figure: RSS growth in MB after a warm-up of N/10 iterations, the compiled kernels
held, and the time per iteration. Reported, never asserted (numpy's peer figure: the same loop in numpy). Also the
kernel time of `a * k + 1` over 4M floats with k folded into the code vs read from a buffer.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

import numpy as np

from tg import Device, Tensor, TinyJit
from tg_runtime.runner import _runner_cache, get_runner
from tg_tensor.engine.realizer import current


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def emit(bench: str, impl: str, value: float, unit: str, **params: object) -> None:
    print(json.dumps({"bench": bench, "impl": impl, "value": round(value, 3), "unit": unit, "params": params}))


def run(name: str, step, n: int) -> None:  # type: ignore[no-untyped-def]
    warm = max(n // 10, 1)
    for i in range(warm):
        step(i)
    start_rss, st = rss_mb(), time.perf_counter()
    for i in range(warm, warm + n):
        step(i)
    dt = time.perf_counter() - st
    device = Device.DEFAULT
    emit("rss_growth", name, rss_mb() - start_rss, "MB", n=n, warmup=warm, device=device, rss_end_mb=round(rss_mb()))
    emit("rss_iter_time", name, dt / n * 1e6, "us", n=n, device=device, kernels_cached=len(_runner_cache))


def kernel_runner(t: Tensor) -> tuple[Any, list[Any]]:
    """The compiled kernel that computes `t` and its buffers (allocated), without running it."""
    (item,) = t.schedule()
    current().unqueue()
    for b in item.bufs:
        b.ensure_allocated()
    return get_runner(item.bufs[0].device, item.ast), item.bufs


def lifted_vs_folded(size: int = 1 << 22) -> None:
    """The price of a constant read from a buffer instead of folded into the code, on one large kernel."""
    a = Tensor(np.ones(size, dtype=np.float32)).realize()
    folded = kernel_runner(a * 2.5 + 1)
    for k in (3.5, 4.5):  # a second and third member of the family: its constants now come from buffers
        (a * k + 1).realize()
    lifted = kernel_runner(a * 5.5 + 1)
    best = {"folded": 1e9, "lifted": 1e9}
    for _ in range(10):  # interleaved, so both see the same machine
        for name, (runner, bufs) in (("folded", folded), ("lifted", lifted)):
            best[name] = min(best[name], runner(bufs, wait=True) or 1e9)
    emit("const_kernel_time", "folded", best["folded"] * 1e6, "us", size=size, device=Device.DEFAULT)
    ratio = best["lifted"] / best["folded"]
    emit("const_kernel_time", "lifted", best["lifted"] * 1e6, "us", size=size, device=Device.DEFAULT, ratio=ratio)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    lifted_vs_folded()
    a = Tensor(np.arange(16, dtype=np.float32))
    an = np.arange(16, dtype=np.float32)
    run("numpy", lambda i: float((an * i + 1).sum()), n)
    run("tg_eager", lambda i: (a * i + 1).sum().item(), n)
    jitted = TinyJit(lambda x, k: (x * k + 1).sum())
    run("tg_jit_tensor_arg", lambda i: jitted(a, Tensor([float(i)]).reshape(())).item(), n)


if __name__ == "__main__":
    main()
