"""A/B of a heuristic switch (AB_FLAG, default GPU_CONV_TILE_2D) on the MNIST step and the bench convs (GPU machine).

PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/ab_conv_tile.py
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import bench_gpu  # noqa: E402

import tg_codegen.heuristic as heuristic  # noqa: E402
from tg import Tensor  # noqa: E402
from tg_runtime.runner import clear_runner_cache  # noqa: E402
from tg_tensor.engine.realizer import current  # noqa: E402


def main() -> None:
    flag = os.getenv("AB_FLAG", "GPU_CONV_TILE_2D")  # the heuristic switch to compare
    for on in (False, True, False, True):
        setattr(heuristic, flag, on)
        current().recipes.clear()
        clear_runner_cache()
        row: dict[str, object] = {
            flag: on,
            "mnist_steps_per_s": round(bench_gpu.tg_mnist_steps_per_s(512, 50), 1),
        }
        for name, (xs, ws, pad) in bench_gpu.CONVS.items():
            x, w = Tensor.rand(*xs, device="CUDA").realize(), Tensor.rand(*ws, device="CUDA").realize()
            oh = xs[2] + 2 * pad - 2
            flop = 2 * xs[0] * ws[0] * oh * oh * ws[1] * 9
            row[f"conv_{name}_tflops"] = round(
                flop / bench_gpu.tg_kernel_seconds(x.conv2d(w, padding=pad), 10) * 1e-12, 2
            )
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
