"""The split of a whole-tensor sum (tg_tensor/split_reduce.py: G chunks x 8 lanes of partials), G swept, timed on CUDA.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/sweep_sum_split.py [--chunks 64,512,64,512]

One JSON line per G: the sum of 2^26 floats through a TinyJit replay (GB/s, as bench_gpu.py's sum_jit) and its
kernels alone; torch's sum in the same run. Checks each result against numpy.
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

import tg_tensor.split_reduce as split_reduce  # noqa: E402
from tg import Device, Tensor, TinyJit  # noqa: E402
from tg_tensor.realizer import current  # noqa: E402
from tg_uop.helpers import LRUCache  # noqa: E402


def _alternate(fn: Any, sets: list[Tensor], counter: Any) -> Any:
    return fn(sets[next(counter) % len(sets)])


def main() -> None:
    import torch

    n = 2**26
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(n, dtype=np.float32) for _ in range(2)]
    ta = torch.from_numpy(host[0]).cuda()
    secs = replay_seconds(lambda: ta.sum(), 50, torch.cuda.synchronize)
    print(json.dumps({"bench": "sum_split", "impl": "torch", "value": round(4 * n / secs * 1e-9, 1), "unit": "GB/s"}))
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", default="64,128,256,512,1024,2048,4096", help="the G values, in order (repeats)")
    for g in (int(x) for x in parser.parse_args().chunks.split(",")):
        split_reduce.SPLIT_CHUNKS = (g,)
        current().recipes = LRUCache(4096)  # schedules are cached by graph structure: schedule again
        sets = [Tensor(h).realize() for h in host]
        total = TinyJit(lambda x: x.sum().realize())
        i = itertools.count()
        call = functools.partial(_alternate, total, sets, i)
        secs = replay_seconds(call, 50, Device["CUDA"].synchronize)
        got = float(total(sets[0]).item())
        kernel = tg_kernel_seconds(sets[1].sum(), 10)
        params = {"G": g, "kernel_GBs": round(4 * n / kernel * 1e-9, 1), "rel_err": abs(got / float(host[0].sum()) - 1)}
        line = {"bench": "sum_split", "impl": "tg", "value": round(4 * n / secs * 1e-9, 1), "unit": "GB/s"}
        print(json.dumps(line | {"params": params}), flush=True)


if __name__ == "__main__":
    main()
