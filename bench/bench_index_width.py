"""What 64-bit indexing costs, and that small kernels do not pay it (the width is decided per kernel).

    uv run python bench/bench_index_width.py

JSON lines: the per-launch time of small kernels (an elementwise add, a strided/padded read, a sum) with the
default choice (int32 below 2^30) and with int64 forced (WIDE_LIMIT = 0), and the codegen time of both; the
ratio forced/default is the slowdown small tensors would pay without the per-kernel decision.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np

from tg import Tensor
from tg_codegen import wide_index
from tg_codegen.program import get_program
from tg_runtime import Device
from tg_runtime.runner import CompiledRunner
from tg_tensor.engine.schedule import create_schedule

N = 1 << 22


def _cases() -> dict[str, Callable[[Tensor, Tensor], Tensor]]:
    return {
        "add": lambda a, b: a + b,
        "pad_flip": lambda a, b: a.reshape(1024, -1).flip(1).pad(((1, 1), (2, 2)))[1:-1, 2:-2].reshape(-1) + b,
        "sum_axis": lambda a, b: (a * b).reshape(2048, -1).sum(1),
    }


def _best_pair(runners: dict[str, CompiledRunner], bufs: list, reps: int = 30) -> dict[str, float]:
    """Best time of each runner, launched alternately so load on the machine hits both alike."""
    best = {mode: float("inf") for mode in runners}
    for _ in range(reps):
        for mode, runner in runners.items():
            t0 = time.perf_counter()
            runner(bufs, wait=True)
            best[mode] = min(best[mode], time.perf_counter() - t0)
    return best


def main() -> None:
    dev = Device.DEFAULT
    a = Tensor(np.random.default_rng(0).standard_normal(N).astype(np.float32)).realize()
    b = Tensor(np.random.default_rng(1).standard_normal(N).astype(np.float32)).realize()
    for name, fn in _cases().items():
        items, _ = create_schedule([fn(a, b).uop])
        item = items[-1]
        for buf in item.bufs:
            buf.ensure_allocated()
        runners, info = {}, {}
        for mode, limit in (("default", wide_index.WIDE_LIMIT), ("int64", 0)):
            saved, wide_index.WIDE_LIMIT = wide_index.WIDE_LIMIT, limit
            try:
                t0 = time.perf_counter()
                spec = get_program(item.ast, Device[dev].renderer)
                info[mode] = (time.perf_counter() - t0, "long " in spec.src)
            finally:
                wide_index.WIDE_LIMIT = saved
            runners[mode] = CompiledRunner(spec)
            runners[mode](item.bufs)
        best = _best_pair(runners, item.bufs)
        for mode, seconds in best.items():
            params = {"kernel": name, "device": dev, "n": N, "int64_index": info[mode][1]}
            params["codegen_ms"] = round(info[mode][0] * 1e3, 2)
            print(
                json.dumps(
                    {
                        "bench": "index_width",
                        "impl": f"tg_{mode}",
                        "value": seconds * 1e6,
                        "unit": "us",
                        "params": params,
                    }
                )
            )
        ratio = best["int64"] / best["default"]
        print(
            json.dumps(
                {
                    "bench": "index_width_ratio",
                    "impl": "int64/default",
                    "value": ratio,
                    "unit": "x",
                    "params": {"kernel": name, "device": dev, "n": N},
                }
            )
        )


if __name__ == "__main__":
    main()
