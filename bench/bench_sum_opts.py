"""Opt lists for the first (big) kernel of a sum of 2^26 floats on CUDA, timed side by side (GPU machine; tuning).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/bench_sum_opts.py

One JSON line per opt list ({"bench": "sum_opts", "value": GB/s, "params": {opts, rel_err}}); the partial sums the
kernel writes are checked against numpy.
"""

from __future__ import annotations

import functools
import json
import os

import numpy as np

os.environ.setdefault("DEV", "CUDA")

from cuda_timing import best_seconds, compiled, scheduled  # noqa: E402

from tg import Device, Tensor  # noqa: E402
from tg_codegen.heuristic import hand_coded_optimizations  # noqa: E402
from tg_codegen.kernel import Kernel  # noqa: E402
from tg_codegen.opt import Opt, OptOps  # noqa: E402

G, GT, L, R, U = OptOps.GROUP, OptOps.GROUPTOP, OptOps.LOCAL, OptOps.UNROLL, OptOps.UPCAST
CANDIDATES = [
    [(GT, 0, 256)],
    [(G, 0, 256), (R, 0, 4)],
    [(G, 0, 128), (U, 1, 8), (R, 0, 2)],
    [(G, 0, 256), (U, 1, 8)],
    [(G, 0, 64), (U, 1, 8), (R, 0, 4)],
    [(G, 0, 32), (U, 1, 8), (R, 0, 4)],
    [(G, 0, 256), (U, 1, 4)],
    [(L, 1, 2), (G, 0, 128), (U, 1, 4), (R, 0, 2)],
    [(L, 1, 8), (G, 0, 64), (R, 0, 4)],
    [(L, 1, 8), (G, 0, 32), (R, 0, 4)],
    [(L, 1, 8), (G, 0, 16), (R, 0, 4)],
    [(L, 1, 8), (GT, 0, 32)],
]


def main() -> None:
    n = 2**26
    xn = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    items = scheduled(Tensor(xn).realize().sum())
    item = items[0]
    renderer = Device["CUDA"].renderer
    lists = [hand_coded_optimizations(Kernel(item.ast, renderer))]
    lists += [[Opt(op, ax, amt) for op, ax, amt in c] for c in CANDIDATES]
    for opts in lists:
        if (runner := compiled(item, opts)) is None:
            continue
        best = best_seconds(functools.partial(runner, item.bufs), 10)
        total = float(np.frombuffer(item.bufs[0].as_bytes(), dtype=np.float32).astype(np.float64).sum())
        err = abs(total - float(xn.astype(np.float64).sum())) / np.sqrt(n)
        desc = [f"{o.op.name}:{o.axis}:{o.arg}" for o in opts]
        params = {"n": n, "kernel": runner.name, "opts": desc, "err_over_sqrt_n": round(err, 6)}
        print(json.dumps({"bench": "sum_opts", "impl": "tg", "value": round(4 * n / best * 1e-9, 1), "unit": "GB/s",
                          "params": params}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
