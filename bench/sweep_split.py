"""Sweep of the split-reduction parameters (tg_tensor.engine.split_reduce) on the MNIST train step (GPU machine).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/sweep_split.py

One JSON line per variant: steps/s of the jitted batch-512 step (bench_gpu.bench_mnist_step's timing).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import bench_gpu  # noqa: E402

import tg_tensor.engine.split_reduce as sr  # noqa: E402
from tg_runtime.runner import clear_runner_cache  # noqa: E402
from tg_tensor.engine.realizer import current  # noqa: E402

VARIANTS = [  # (most parts G, partials last, minimum reduce length per output)
    (256, True, 1 << 15), (256, False, 1 << 15), (64, True, 1 << 15), (64, False, 1 << 15),
    (16, True, 1 << 15), (16, False, 1 << 15), (512, False, 1 << 15), (256, False, 1 << 12),
    (32, False, 1 << 12),
]  # fmt: skip


def main() -> None:
    for most, last, minimum in VARIANTS:
        sr.SPLIT_AXIS_PARTS, sr.SPLIT_AXIS_LAST, sr.SPLIT_REDUCE_MIN = (most, 2), last, minimum
        sr.SPLIT_AXIS_MAX_PARTIALS = 1 << 24
        current().recipes.clear()
        clear_runner_cache()
        value = bench_gpu.tg_mnist_steps_per_s(512, 30)
        print(
            json.dumps({"bench": "sweep_split", "value": round(value, 2), "parts": most, "last": last, "min": minimum})
        )


if __name__ == "__main__":
    main()
