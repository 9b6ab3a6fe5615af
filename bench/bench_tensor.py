"""Tensor-API benchmarks on CPU: tensor-indexed gather and random numbers, against numpy.

Run: `uv run python bench/bench_tensor.py` (one JSON line per figure).
Figures: X[idx] for a (60000, 784) float32 table and 128 indices, eagerly (graph, schedule and kernel)
and as a TinyJit replay (the one-hot compare-and-sum the tensor level writes is folded into one gated
load per element by tg_codegen/gather.py: O(indices x cols)); Tensor.rand(128, 1600) as a jitted replay
and eagerly; numpy's equivalents.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

SMALL = os.getenv("BENCH_SMALL", "0") not in ("", "0")


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    print(json.dumps({"bench": bench, "impl": impl, "value": round(value, 3), "unit": unit, "params": params}))
    sys.stdout.flush()


def best_of(fn: Callable[[], object], reps: int = 3) -> float:
    fn()
    times = []
    for _ in range(reps):
        st = time.perf_counter()
        fn()
        times.append(time.perf_counter() - st)
    return min(times)


def bench_gather() -> None:
    from tg import Tensor, TinyJit

    rows = 6000 if SMALL else 60000
    table = np.random.default_rng(0).standard_normal((rows, 784)).astype(np.float32)
    idx = np.random.default_rng(1).integers(0, rows, 128).astype(np.int32)
    x, i = Tensor(table, device="CPU").realize(), Tensor(idx, device="CPU").realize()
    params = {"rows": rows, "cols": 784, "indices": 128}
    emit("gather_rows", "tg", best_of(lambda: x[i].realize(), reps=20) * 1e3, "ms", **params)
    gather = TinyJit(lambda t, j: t[j].realize())
    emit("gather_rows", "tg_jit_replay", best_of(lambda: gather(x, i), reps=20) * 1e3, "ms", **params)
    emit("gather_rows", "numpy", best_of(lambda: table[idx].copy(), reps=20) * 1e3, "ms", **params)


def bench_rand() -> None:
    from tg import Tensor, TinyJit

    @TinyJit
    def draw(z: Tensor) -> Tensor:
        return z + Tensor.rand(128, 1600, device="CPU")

    z = Tensor.zeros(128, 1600, device="CPU").contiguous().realize()
    params = {"shape": [128, 1600]}
    emit("rand", "tg_jit_replay", best_of(lambda: draw(z), reps=10) * 1e3, "ms", **params)
    emit("rand", "tg_eager", best_of(lambda: Tensor.rand(128, 1600, device="CPU").realize()) * 1e3, "ms", **params)
    rng = np.random.default_rng(0)
    emit("rand", "numpy", best_of(lambda: rng.random((128, 1600), dtype=np.float32), reps=10) * 1e3, "ms", **params)


if __name__ == "__main__":
    bench_rand()
    bench_gather()
