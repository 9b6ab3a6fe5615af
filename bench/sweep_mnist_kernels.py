"""Opt lists for the slowest kernels of the jitted MNIST train step, timed side by side (GPU machine; tuning).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/sweep_mnist_kernels.py [--top 6] [--tries 60]

For each of the `top` slowest kernels (default opts), up to `tries` opt lists (LOCAL on one or two output
axes, UPCAST of one or two output axes, an optional UNROLL; a fixed-seed sample of those that apply) are
compiled, checked against the default's output and timed (best of 5). One JSON line per kernel: the
default's time and the five fastest lists.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import random
import sys
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import bench_gpu  # noqa: E402
from cuda_timing import best_seconds, compiled  # noqa: E402

from tg import Context, Tensor  # noqa: E402
from tg_codegen.kernel import Kernel  # noqa: E402
from tg_codegen.opt import KernelOptError, Opt, OptOps  # noqa: E402
from tg_runtime import Device  # noqa: E402
from tg_runtime.runner import _runner_cache  # noqa: E402


def candidates(k: Kernel) -> list[list[Opt]]:
    """Opt lists that apply to `k`: LOCALs, then UPCASTs, then an UNROLL (each part optional)."""
    n_glob, n_red = len(k.axes_of("global")), len(k.axes_of("reduce"))
    locals_: list[list[Opt]] = [[]] + [[Opt(OptOps.LOCAL, a, s)] for a in range(n_glob) for s in (8, 16, 32, 64, 128)]
    locals_ += [
        [Opt(OptOps.LOCAL, a, s), Opt(OptOps.LOCAL, b, t)]
        for a, b in itertools.permutations(range(n_glob), 2)
        for s, t in ((32, 2), (32, 4), (32, 8), (16, 4), (16, 16), (8, 8), (64, 4), (4, 16))
    ]
    ups: list[list[Opt]] = [[]] + [[Opt(OptOps.UPCAST, a, s)] for a in range(n_glob) for s in (2, 4, 8, 16)]
    ups += [
        [Opt(OptOps.UPCAST, a, s), Opt(OptOps.UPCAST, b, t)]
        for a, b in itertools.permutations(range(n_glob), 2)
        for s, t in ((4, 4), (8, 4), (4, 8), (16, 2), (2, 16), (8, 2), (4, 2), (16, 4))
    ]
    unrolls: list[list[Opt]] = [[]] + [[Opt(OptOps.UNROLL, r, s)] for r in range(n_red) for s in (0, 2, 4)]
    ret, seen = [], set()
    for combo in itertools.product(locals_, ups, unrolls):
        opts = [o for part in combo for o in part]
        try:
            k.copy().apply_opts(opts)
        except KernelOptError:
            continue
        key = tuple(opts)
        if key not in seen:
            seen.add(key)
            ret.append(opts)
    return ret


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--tries", type=int, default=60)
    parser.add_argument("--only", default="", help="comma-separated kernel names to sweep (default: the slowest)")
    args = parser.parse_args()
    with Context(DEBUG=0):
        step = bench_gpu.tg_mnist_step(512)
        for x, y in bench_gpu.mnist_batches(3, 512):
            step(Tensor(x), Tensor(y)).item()
    rec = step.recording
    assert rec is not None
    timed = []
    for launch in rec.launches:
        if launch.runner is not None:
            timed.append((min(launch.runner(launch.bufs, wait=True) or 0.0 for _ in range(5)), launch))
    timed.sort(key=lambda t: -t[0])
    renderer = Device["CUDA"].renderer
    asts = {id(r): key[1] for key, r in _runner_cache.data.items()}
    done: set[str] = set()
    for _, launch in timed:
        if len(done) >= args.top:
            break
        assert launch.runner is not None
        spec = launch.runner.spec
        if spec.name in done or (args.only and spec.name not in args.only.split(",")):
            continue
        done.add(spec.name)
        ast = asts[id(launch.runner)]
        item = SimpleNamespace(ast=ast)
        default = list(spec.applied_opts)
        runner = compiled(item, default)
        assert runner is not None
        base = best_seconds(functools.partial(runner, launch.bufs), 5)
        out_idx = spec.outs[0] if spec.outs else 0
        ref = np.frombuffer(launch.bufs[out_idx].as_bytes(), dtype=np.float32).copy()
        k = Kernel(ast, renderer)
        cands = candidates(k)
        random.Random(0).shuffle(cands)
        results = []
        for opts in cands[: args.tries]:
            if (r := compiled(item, opts)) is None:
                continue
            secs = best_seconds(functools.partial(r, launch.bufs), 5)
            got = np.frombuffer(launch.bufs[out_idx].as_bytes(), dtype=np.float32)
            err = float(np.abs(got - ref).max()) if got.shape == ref.shape else -1.0
            results.append((secs, [f"{o.op.name}:{o.axis}:{o.arg}" for o in opts], err))
        results.sort(key=lambda r: r[0])
        print(json.dumps({
            "kernel": spec.name, "default_us": round(base * 1e6, 1), "default": [str(o) for o in default],
            "candidates": len(cands), "tried": len(results),
            "best": [{"us": round(s * 1e6, 1), "opts": o, "err": e} for s, o, e in results[:5]],
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
