"""Where a CPU realize spends its time outside the kernels (matmul 256, sum 2^24, conv seed): diagnostic, not a figure.

For each case: the realize as bench_cpu.py times it (fresh inputs made just before), the same graph on inputs
already realized (back to back), the kernels alone, and the realize after a 20 ms pause (the pool's workers asleep).
Run: `DEV=CPU PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 bench/diag_cpu_overhead.py`.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def med_us(fn: Callable[[], float], reps: int = 21) -> float:
    return round(statistics.median(fn() for _ in range(reps)) * 1e6, 1)


def main() -> None:
    from tg import Device, Tensor

    Device.DEFAULT = "CPU"

    def rand(*s: int) -> Any:
        return Tensor(np.random.rand(*s).astype(np.float32)).realize()

    cases: list[tuple[str, Callable[[], tuple[Any, ...]], Callable[..., Any]]] = [
        ("matmul256", lambda: (rand(256, 256), rand(256, 256)), lambda a, b: a @ b),
        ("sum2^24", lambda: (rand(1 << 24),), lambda a: a.sum()),
        ("conv_seed", lambda: (rand(16, 3, 64, 64), rand(16, 3, 3, 3)), lambda x, w: x.conv2d(w, padding=1)),
        ("matmul1024", lambda: (rand(1024, 1024), rand(1024, 1024)), lambda a, b: a @ b),
    ]
    for name, inputs, compute in cases:
        diag_case(name, inputs, compute)
    torch_rows()


def diag_case(name: str, inputs: Callable[[], tuple[Any, ...]], compute: Callable[..., Any]) -> None:
    """One JSON line: the median microseconds of each way to run `compute` on `inputs()` (see the module doc)."""
    from tg import Device
    from tg_runtime.runner import get_runner
    from tg_tensor.engine.realizer import current

    args = inputs()
    compute(*args).realize()

    def fresh() -> float:
        xs = inputs()
        st = time.perf_counter()
        compute(*xs).realize()
        return time.perf_counter() - st

    def same() -> float:
        st = time.perf_counter()
        compute(*args).realize()
        return time.perf_counter() - st

    def asleep() -> float:
        time.sleep(0.02)
        return same()

    items = compute(*args).schedule()
    for item in items:
        current().unqueue(item)
        for buf in item.bufs:
            buf.ensure_allocated()
    runners = [(get_runner(item.bufs[0].device, item.ast), item.bufs) for item in items]

    def kernels() -> float:
        st = time.perf_counter()
        for r, bufs in runners:
            r(bufs)
        return time.perf_counter() - st

    def kernels_asleep() -> float:
        time.sleep(0.02)
        return kernels()

    row = {"case": name, "threads": Device["CPU"].renderer.threads, "kernels": [r.spec.name for r, _ in runners]}
    for label, fn in (
        ("fresh", fresh),
        ("same", same),
        ("asleep", asleep),
        ("kernels", kernels),
        ("kernels_asleep", kernels_asleep),
    ):
        row[label + "_us"] = med_us(fn, 9 if "sum" in name or "1024" in name else 21)
    print(json.dumps(row), flush=True)


def torch_rows() -> None:
    """torch's 256x256 matmul and 2^24 sum, back to back and after a 20 ms pause (its threads asleep)."""
    try:
        import torch

        a, b = torch.rand(256, 256), torch.rand(256, 256)
        x = torch.rand(1 << 24)

        def t_fresh() -> float:
            a2, b2 = torch.rand(256, 256), torch.rand(256, 256)
            st = time.perf_counter()
            a2 @ b2
            return time.perf_counter() - st

        def t_same() -> float:
            st = time.perf_counter()
            a @ b
            return time.perf_counter() - st

        def t_asleep() -> float:
            time.sleep(0.02)
            return t_same()

        def t_sum_asleep() -> float:
            time.sleep(0.02)
            st = time.perf_counter()
            x.sum()
            return time.perf_counter() - st

        print(
            json.dumps(
                {
                    "case": "torch",
                    "threads": torch.get_num_threads(),
                    "mm_fresh_us": med_us(t_fresh),
                    "mm_same_us": med_us(t_same),
                    "mm_asleep_us": med_us(t_asleep),
                    "sum_asleep_us": med_us(t_sum_asleep),
                }
            ),
            flush=True,
        )
    except ImportError:
        pass


if __name__ == "__main__":
    main()
