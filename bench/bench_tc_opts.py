"""Opt lists for an fp16 (tensor cores) or fp32 matmul on CUDA, timed side by side (run on the GPU machine; for tuning).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/bench_tc_opts.py [--n 4096] [--dtype fp32]

Prints one JSON line per opt list ({"bench": "tc_opts", "impl": "tg", "value": TFLOPS, "params": {opts}}), and
checks each result against torch (max abs error in the params) so a fast wrong kernel is seen at once.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time

import numpy as np

os.environ.setdefault("DEV", "CUDA")

from cuda_timing import best_seconds, compiled, scheduled  # noqa: E402

from tg import Context, Device, Tensor  # noqa: E402
from tg_codegen.heuristic import hand_coded_optimizations  # noqa: E402
from tg_codegen.kernel import Kernel  # noqa: E402
from tg_codegen.opt import Opt, OptOps  # noqa: E402

TC, L, U, R, S = OptOps.TC, OptOps.LOCAL, OptOps.UPCAST, OptOps.UNROLL, OptOps.STAGE
CANDIDATES = [
    [(L, 0, 2), (L, 1, 2), (U, 0, 4), (U, 1, 8), (R, 0, 4)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 4), (U, 1, 4), (R, 0, 2)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 2), (U, 1, 8), (R, 0, 2)],
    [(L, 0, 4), (L, 1, 2), (U, 0, 4), (U, 1, 8), (R, 0, 2)],
    [(L, 0, 2), (L, 1, 4), (U, 0, 4), (U, 1, 8), (R, 0, 2)],
    [(L, 0, 4), (U, 0, 4), (U, 1, 8), (R, 0, 2)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 2), (U, 1, 16), (R, 0, 2)],
    [(L, 0, 4), (L, 1, 4), (U, 0, 2), (U, 1, 8), (R, 0, 2)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 8), (U, 1, 8), (R, 0, 2)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 2), (U, 1, 4), (R, 0, 2)],
    # the operand tiles staged in shared memory (STAGE), fragments read from there
    [(L, 0, 2), (L, 1, 2), (U, 0, 4), (U, 1, 8), (R, 0, 2), (S, None, 0)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 4), (U, 1, 8), (R, 0, 4), (S, None, 0)],
    [(L, 0, 2), (L, 1, 4), (U, 0, 4), (U, 1, 4), (R, 0, 2), (S, None, 0)],
    [(L, 0, 4), (L, 1, 2), (U, 0, 2), (U, 1, 8), (R, 0, 2), (S, None, 0)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 2), (U, 1, 8), (R, 0, 4), (S, None, 0)],
    [(L, 0, 4), (L, 1, 4), (U, 0, 2), (U, 1, 4), (R, 0, 4), (S, None, 0)],
    # pipelined: 2-4 slots per tile, cp.async copies, ldmatrix fragments from swizzled tiles (tc/stage.py)
    [(L, 0, 2), (L, 1, 2), (U, 0, 4), (U, 1, 8), (R, 0, 2), (S, None, 2)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 4), (U, 1, 8), (R, 0, 2), (S, None, 3)],
    [(L, 0, 2), (L, 1, 4), (U, 0, 4), (U, 1, 8), (R, 0, 2), (S, None, 2)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 4), (U, 1, 4), (R, 0, 2), (S, None, 3)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 4), (U, 1, 4), (R, 0, 2), (S, None, 4)],
    [(L, 0, 2), (L, 1, 4), (U, 0, 4), (U, 1, 4), (R, 0, 2), (S, None, 2)],
    [(L, 0, 2), (L, 1, 4), (U, 0, 4), (U, 1, 4), (R, 0, 2), (S, None, 3)],
    [(L, 0, 4), (L, 1, 2), (U, 0, 2), (U, 1, 8), (R, 0, 2), (S, None, 3)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 2), (U, 1, 8), (R, 0, 2), (S, None, 3)],
    [(L, 0, 4), (L, 1, 4), (U, 0, 2), (U, 1, 4), (R, 0, 2), (S, None, 2)],
    [(L, 0, 4), (L, 1, 2), (U, 0, 4), (U, 1, 8), (R, 0, 2), (S, None, 2)],
    # K by one tensor-core step (no UNROLL) in 3-4 slots, or by 4 steps on narrower tiles (48 KiB at most)
    [(L, 0, 2), (L, 1, 2), (U, 0, 4), (U, 1, 8), (S, None, 3)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 4), (U, 1, 8), (S, None, 4)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 4), (U, 1, 4), (R, 0, 4), (S, None, 2)],
    [(L, 0, 2), (L, 1, 2), (U, 0, 2), (U, 1, 8), (R, 0, 4), (S, None, 2)],
]


# Hopper's warpgroup MMA (TC arg 1, sm_90): 2 warpgroups on M, K by 32 or 64, 2-4 slots (over 48 KiB: dynamic)
WGMMA_CANDIDATES = [
    [(L, 0, 2), (R, 0, 2), (S, None, 2)],
    [(L, 0, 2), (R, 0, 2), (S, None, 3)],
    [(L, 0, 2), (R, 0, 4), (S, None, 2)],
    [(L, 0, 2), (R, 0, 4), (S, None, 3)],
    [(L, 0, 2), (R, 0, 4), (S, None, 4)],
]


FP32_CANDIDATES = [
    [(L, 0, 16), (L, 1, 16), (U, 0, 4), (U, 1, 4)],
    [(L, 0, 16), (L, 1, 16), (U, 0, 8), (U, 1, 8)],
    [(L, 0, 16), (L, 1, 16), (U, 0, 8), (U, 1, 4)],
    [(L, 0, 16), (L, 1, 16), (U, 0, 8), (U, 1, 8), (R, 0, 4)],
    [(L, 0, 8), (L, 1, 32), (U, 0, 8), (U, 1, 4)],
    [(L, 0, 8), (L, 1, 16), (U, 0, 8), (U, 1, 8)],
    [(L, 0, 16), (L, 1, 16), (U, 0, 4), (U, 1, 8), (R, 0, 2)],
    [(L, 1, 256), (U, 0, 8), (U, 1, 4)],
    # operand tiles staged in shared memory (STAGE), the K loop unrolled over the tile
    [(L, 0, 16), (L, 1, 16), (U, 0, 8), (U, 1, 8), (R, 0, 8), (S, None, 0)],
    [(L, 0, 16), (L, 1, 16), (U, 0, 8), (U, 1, 8), (R, 0, 16), (S, None, 0)],
    [(L, 0, 16), (L, 1, 16), (U, 0, 8), (U, 1, 8), (R, 0, 4), (S, None, 0)],
    [(L, 0, 16), (L, 1, 16), (U, 0, 4), (U, 1, 8), (R, 0, 8), (S, None, 0)],
    [(L, 0, 16), (L, 1, 16), (U, 0, 8), (U, 1, 4), (R, 0, 8), (S, None, 0)],
    [(L, 0, 8), (L, 1, 16), (U, 0, 8), (U, 1, 8), (R, 0, 8), (S, None, 0)],
    [(L, 1, 16), (L, 0, 16), (U, 0, 8), (U, 1, 8), (R, 0, 8), (S, None, 0)],
    [(L, 0, 32), (L, 1, 8), (U, 0, 4), (U, 1, 8), (R, 0, 8), (S, None, 0)],
    [(L, 0, 8), (L, 1, 32), (U, 0, 8), (U, 1, 4), (R, 0, 8), (S, None, 0)],
    [(L, 0, 16), (L, 1, 8), (U, 0, 8), (U, 1, 8), (R, 0, 8), (S, None, 0)],
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dtype", choices=("fp16", "fp32", "tf32"), default="fp16")
    parser.add_argument("--stage-only", action="store_true", help="only the default and the lists with STAGE")
    parser.add_argument("--pipelined-only", action="store_true", help="only the default and pipelined STAGE lists")
    args = parser.parse_args()
    npdt = np.float16 if args.dtype == "fp16" else np.float32
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # the reference in full fp32 (tf32: tg's error is TF32's)

    n = args.n
    rng = np.random.default_rng(0)
    an, bn = (rng.standard_normal((n, n)).astype(npdt) for _ in range(2))
    ta, tb = torch.from_numpy(an).cuda(), torch.from_numpy(bn).cuda()
    ref = (ta @ tb).float().cpu().numpy()
    # the peer in the same run: torch's matmul of the same operands (TF32 allowed for --dtype tf32)
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
    for _ in range(3):
        ta @ tb
    best_torch = float("inf")
    for _ in range(args.reps):
        torch.cuda.synchronize()
        st = time.perf_counter()
        ta @ tb
        torch.cuda.synchronize()
        best_torch = min(best_torch, time.perf_counter() - st)
    torch.backends.cuda.matmul.allow_tf32 = False
    value = round(2 * n**3 / best_torch * 1e-12, 2)
    line = {
        "bench": "tc_opts",
        "impl": "torch",
        "value": value,
        "unit": "TFLOPS",
        "params": {"n": n, "dtype": args.dtype},
    }
    print(json.dumps(line), flush=True)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    items = scheduled(a.matmul(b))
    *_, item = items
    renderer = Device["CUDA"].renderer
    with Context(ALLOW_TF32=int(args.dtype == "tf32")):
        default = hand_coded_optimizations(Kernel(item.ast, renderer))
    lists = [(default, 0)] + [(default, mb) for mb in (1, 2, 3)]  # 2nd: min blocks per SM for __launch_bounds__
    if args.dtype in ("fp16", "tf32"):
        lists += [([Opt(TC, 0, 0)] + [Opt(op, ax, amt) for op, ax, amt in c], 0) for c in CANDIDATES]
    if args.dtype == "fp16" and any(getattr(tc, "wgmma", False) for tc in renderer.tensor_cores):
        lists += [([Opt(TC, 0, 1)] + [Opt(op, ax, amt) for op, ax, amt in c], 0) for c in WGMMA_CANDIDATES]
    else:
        lists += [([Opt(op, ax, amt) for op, ax, amt in c], 0) for c in FP32_CANDIDATES]
    if args.stage_only:
        lists = lists[:1] + [(opts, mb) for opts, mb in lists if Opt(S) in opts]
    if args.pipelined_only:  # and the heuristic's choice without its STAGE, to compare
        unstaged = [o for o in default if o.op is not S]
        pipelined = [(opts, mb) for opts, mb in lists[4:] if any(o.op is S and o.arg >= 2 for o in opts)]
        # (a warpgroup MMA has no unstaged form)
        keep = unstaged != default and Opt(TC, 0, 1) not in default
        lists = lists[:1] + ([(unstaged, 0)] if keep else []) + pipelined
    for opts, min_blocks in lists:
        renderer.min_blocks_per_sm = min_blocks  # type: ignore[attr-defined]
        with Context(ALLOW_TF32=int(args.dtype == "tf32")):
            runner = compiled(item, opts)
        if runner is None:
            continue
        best = best_seconds(functools.partial(runner, item.bufs), args.reps)
        out = np.frombuffer(item.bufs[0].as_bytes(), dtype=npdt).reshape(n, n).astype(np.float32)
        err = float(np.abs(out - ref).max())
        desc = [f"{o.op.name}:{o.axis}:{o.arg}" for o in opts]
        value = round(2 * n**3 / best * 1e-12, 2)
        params = {"n": n, "dtype": args.dtype, "opts": desc, "min_blocks": min_blocks, "max_abs_err": err}
        line = {"bench": "tc_opts", "impl": "tg", "value": value, "unit": "TFLOPS", "params": params}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
