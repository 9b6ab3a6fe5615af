"""Opt lists for the slowest kernels of the jitted MNIST train step, timed side by side (GPU machine; tuning).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/sweep_mnist_kernels.py [--top 6] [--tries 60]
    ... bench/sweep_mnist_kernels.py --wide --tries 200 --only NAME,NAME   # any-divisor LOCALs and GROUP

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
from typing import Any

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
    return _applying(k, itertools.product(locals_, ups, unrolls))


def _divisors(n: int) -> list[int]:
    return [d for d in range(2, min(n, 256) + 1) if n % d == 0]


WIDE_PAIRS = ((4, 4), (8, 4), (4, 8), (16, 2), (2, 16), (8, 2), (4, 2), (16, 4), (3, 3), (3, 8), (8, 3))


def wide_candidates(k: Kernel, sample: int = 20000) -> list[list[Opt]]:
    """--wide: LOCALs of any divisor of an axis (13, 26, 3: MNIST's rows and taps) on up to three axes (32-512
    threads), UPCASTs by 2, 3, 4, 8 or 16 on up to two axes, an optional UNROLL and an optional GROUP of a reduce
    axis; `sample` of the combinations, shuffled with a fixed seed (the rules of docs/gpu.md's MNIST section came
    from this list)."""
    glob, red = k.axes_of("global"), k.axes_of("reduce")
    size, rsize = [int(k.full_shape[a]) for a in glob], [int(k.full_shape[a]) for a in red]
    n = len(glob)
    rng = random.Random(1)
    pairs = [
        [Opt(OptOps.LOCAL, a, s), Opt(OptOps.LOCAL, b, t)]
        for a, b in itertools.permutations(range(n), 2)
        for s in _divisors(size[a])
        for t in _divisors(size[b])
        if 32 <= s * t <= 512
    ]
    triples = [
        [Opt(OptOps.LOCAL, a, s), Opt(OptOps.LOCAL, b, t), Opt(OptOps.LOCAL, c, u)]
        for a, b, c in itertools.permutations(range(n), 3)
        for s in _divisors(size[a])
        for t in _divisors(size[b])
        for u in _divisors(size[c])
        if 64 <= s * t * u <= 512
    ]
    locals_: list[list[Opt]] = [[]] + [[Opt(OptOps.LOCAL, a, s)] for a in range(n) for s in _divisors(size[a])]
    locals_ += rng.sample(pairs, min(len(pairs), 300)) + rng.sample(triples, min(len(triples), 300))
    ups: list[list[Opt]] = [[]] + [
        [Opt(OptOps.UPCAST, a, s)] for a in range(n) for s in (2, 3, 4, 8, 16) if size[a] % s == 0
    ]
    ups += [
        [Opt(OptOps.UPCAST, a, s), Opt(OptOps.UPCAST, b, t)]
        for a, b in itertools.permutations(range(n), 2)
        for s, t in WIDE_PAIRS
        if size[a] % s == 0 and size[b] % t == 0
    ]
    unrolls: list[list[Opt]] = [[]] + [
        [Opt(OptOps.UNROLL, r, s)] for r in range(len(red)) for s in (0, 2, 4) if s == 0 or rsize[r] % s == 0
    ]
    groups: list[list[Opt]] = [[]] + [
        [Opt(OptOps.GROUP, r, s)] for r in range(len(red)) for s in (2, 4, 8, 13, 16, 26, 32) if rsize[r] % s == 0
    ]
    combos = list(itertools.product(locals_, ups, unrolls, groups))
    rng.shuffle(combos)
    return _applying(k, combos[:sample])


def _applying(k: Kernel, combos: Any) -> list[list[Opt]]:
    """The opt lists (each combo's parts joined) that apply to `k`, each once, in order."""
    ret, seen = [], set()
    for combo in combos:
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
    parser.add_argument("--wide", action="store_true", help="any-divisor LOCALs on up to 3 axes, and GROUP")
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
        cands = wide_candidates(k) if args.wide else candidates(k)
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
