"""Diagnostic: every kernel of tg's jitted MNIST train step, timed alone on the GPU, slowest first.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/mnist_kernels.py [--beam N] [--top K]

Prints one JSON line per kernel (name, best-of-5 microseconds, grid, block, opts) and a total; with --beam
the kernels are chosen by BEAM search (compare with the default heuristics' opts).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import bench_gpu  # noqa: E402

from tg import Context, Device, Tensor  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--beam", type=int, default=0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--bs", type=int, default=512)
    args = parser.parse_args()
    with Context(BEAM=args.beam, DEBUG=0):
        step = bench_gpu.tg_mnist_step(args.bs)
        for x, y in bench_gpu.mnist_batches(3, args.bs):
            step(Tensor(x), Tensor(y)).item()
    rec = step.recording
    assert rec is not None
    rows = []
    for launch in rec.launches:
        if launch.runner is None:
            continue
        best = min(launch.runner(launch.bufs, wait=True) or 0.0 for _ in range(5))
        spec = launch.runner.spec
        rows.append((best * 1e6, spec.name, spec.global_size, spec.local_size, [str(o) for o in spec.applied_opts]))
    Device["CUDA"].synchronize()
    rows.sort(key=lambda r: -r[0])
    for us, name, grid, block, opts in rows[: args.top]:
        print(json.dumps({"kernel": name, "us": round(us, 1), "grid": grid, "block": block, "opts": opts}))
    print(json.dumps({"beam": args.beam, "kernels": len(rows), "total_us": round(sum(r[0] for r in rows), 1)}))


if __name__ == "__main__":
    main()
