"""The split of a whole-tensor sum (tg_tensor/engine/split_reduce.py: G chunks x L lanes of partials), G and L swept,
timed on CUDA.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/sweep_sum_split.py [--chunks 128x8,256x4,128x8]

One JSON line per entry (G, or GxL): the sum of 2^26 floats through a TinyJit replay (GB/s, as bench_gpu.py's
sum_jit) and its kernels alone, with torch's sum timed the same way just before it (the GPU's speed drifts).
Checks each result against numpy.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
from typing import Any

import numpy as np

os.environ.setdefault("DEV", "CUDA")

from bench_gpu import replay_seconds, tg_kernel_seconds  # noqa: E402
from cuda_timing import scheduled  # noqa: E402

import tg_tensor.engine.split_reduce as split_reduce  # noqa: E402
from tg import Device, Tensor, TinyJit  # noqa: E402
from tg_runtime.runner import CompiledRunner, get_runner  # noqa: E402
from tg_tensor.engine.realizer import current  # noqa: E402
from tg_uop.helpers import LRUCache  # noqa: E402


def kernel_runners(t: Tensor) -> list[CompiledRunner]:
    return [get_runner("CUDA", it.ast) for it in scheduled(t) if it.ast.op.name == "SINK"]


def _alternate(fn: Any, sets: list[Tensor], counter: Any) -> Any:
    return fn(sets[next(counter) % len(sets)])


def main() -> None:
    import torch

    n = 2**26
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(n, dtype=np.float32) for _ in range(2)]
    ta = torch.from_numpy(host[0]).cuda()
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", default="64,128,256,512,1024", help="G or GxL values, in order (repeats)")
    parser.add_argument("--calls", type=int, default=200, help="replays timed per entry")
    args = parser.parse_args()
    for entry in args.chunks.split(","):
        secs = replay_seconds(lambda: ta.sum(), args.calls, torch.cuda.synchronize)
        line = {"bench": "sum_split", "impl": "torch", "value": round(4 * n / secs * 1e-9, 1), "unit": "GB/s"}
        print(json.dumps(line))
        g, _, lanes = entry.partition("x")
        split_reduce.SPLIT_CHUNKS = (int(g),)
        split_reduce.SPLIT_LANES = int(lanes or 8)
        current().recipes = LRUCache(4096)  # schedules are cached by graph structure: schedule again
        sets = [Tensor(h).realize() for h in host]
        total = TinyJit(lambda x: x.sum().realize())
        i = itertools.count()
        call = functools.partial(_alternate, total, sets, i)
        secs = replay_seconds(call, args.calls, Device["CUDA"].synchronize)
        got = float(total(sets[0]).item())
        kernel = tg_kernel_seconds(sets[1].sum(), 10)
        rel_err = abs(got / float(host[0].astype(np.float64).sum()) - 1)
        params = {"G": int(g), "L": split_reduce.SPLIT_LANES, "kernel_GBs": round(4 * n / kernel * 1e-9, 1)}
        params |= {
            "rel_err": rel_err,
            "kernels": [(r.spec.name, r.spec.global_size, r.spec.local_size) for r in kernel_runners(sets[1].sum())],
        }
        line = {"bench": "sum_split", "impl": "tg", "value": round(4 * n / secs * 1e-9, 1), "unit": "GB/s"}
        print(json.dumps(line | {"params": params}), flush=True)


if __name__ == "__main__":
    main()
