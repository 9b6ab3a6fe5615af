"""Opt lists for the 64-channel conv2d on CUDA, timed side by side (run on the GPU machine; for tuning).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/bench_conv_opts.py

Prints one JSON line per opt list ({"bench": "conv_opts", "value": TFLOPS, "params": {opts, max_abs_err}}); each
result is checked against torch so a fast wrong kernel shows at once.
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

L, U, R, S = OptOps.LOCAL, OptOps.UPCAST, OptOps.UNROLL, OptOps.STAGE
# globals: 0 batch, 1 (group, size 1), 2 cout, 3 out y, 4 out x; reduces: 0 cin, 1 ky, 2 kx
CANDIDATES = [
    [(L, 4, 8), (L, 2, 4), (U, 2, 4), (U, 3, 2)],
    [(L, 4, 8), (L, 2, 8), (U, 2, 4), (U, 3, 4)],
    [(L, 4, 8), (L, 3, 4), (U, 2, 8)],
    [(L, 4, 4), (L, 2, 16), (U, 3, 4), (U, 2, 2)],
    [(L, 4, 8), (L, 2, 16), (U, 2, 4), (U, 3, 2), (R, 2, 3)],
    [(L, 4, 8), (L, 3, 8), (U, 2, 16)],
    [(L, 4, 8), (L, 2, 8), (U, 2, 8), (U, 3, 4), (R, 2, 3)],
    [(L, 0, 16), (L, 2, 16), (U, 2, 4), (U, 0, 4)],
    [(L, 4, 8), (L, 3, 8), (L, 2, 4), (U, 2, 16)],
    [(L, 4, 8), (L, 3, 8), (U, 2, 16), (U, 0, 2)],
    [(L, 4, 8), (L, 3, 4), (U, 2, 16)],
    # the input and weight tiles staged in shared memory (STAGE)
    [(L, 4, 8), (L, 2, 16), (U, 2, 4), (U, 3, 2), (R, 2, 3), (S, None, 0)],
    [(L, 4, 8), (L, 2, 8), (U, 2, 8), (U, 3, 4), (R, 2, 3), (S, None, 0)],
    [(L, 4, 8), (L, 2, 8), (U, 2, 8), (U, 3, 4), (R, 0, 4), (S, None, 0)],
    [(L, 4, 8), (L, 2, 8), (U, 2, 8), (U, 3, 4), (R, 2, 3), (R, 0, 2), (S, None, 0)],
    [(L, 4, 8), (L, 3, 2), (L, 2, 8), (U, 2, 8), (U, 3, 4), (R, 2, 3), (S, None, 0)],
]


def main() -> None:
    import torch

    xs, ws = (64, 64, 56, 56), (64, 64, 3, 3)
    flop = 2 * xs[0] * ws[0] * xs[2] * xs[3] * ws[1] * ws[2] * ws[3]
    rng = np.random.default_rng(0)
    xn, wn = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    ref = torch.nn.functional.conv2d(torch.from_numpy(xn).cuda(), torch.from_numpy(wn).cuda(), padding=1)
    ref_np = ref.cpu().numpy()
    items = scheduled(Tensor(xn).realize().conv2d(Tensor(wn).realize(), padding=1))
    (item,) = items  # one kernel: the conv
    renderer = Device["CUDA"].renderer
    default = hand_coded_optimizations(Kernel(item.ast, renderer))
    lists = [default, default + [Opt(S)]] + [[Opt(op, ax, amt) for op, ax, amt in c] for c in CANDIDATES]
    for opts in lists:
        if (runner := compiled(item, opts)) is None:
            continue
        best = best_seconds(functools.partial(runner, item.bufs), 5)
        out = np.frombuffer(item.bufs[0].as_bytes(), dtype=np.float32).reshape(ref_np.shape)
        params = {
            "opts": [f"{o.op.name}:{o.axis}:{o.arg}" for o in opts],
            "max_abs_err": float(np.abs(out - ref_np).max()),
        }
        print(
            json.dumps(
                {
                    "bench": "conv_opts",
                    "impl": "tg",
                    "value": round(flop / best * 1e-12, 2),
                    "unit": "TFLOPS",
                    "params": params,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
