"""Run the same Tensor calls in tinygrad and in tg and compare the results' values and dtypes.

api_diff.py compares names and signatures; this compares what the methods return (values and
return dtypes) for the methods issue 12 added, on small fixed inputs. tinygrad runs in its own venv:

    uv run python scripts/api_crosscheck.py --tinygrad-python /work/venv-tinygrad/bin/python

Random methods (randperm, multinomial) compare dtypes and shapes only: the two draw different numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np

RANDOM = {"randperm", "multinomial"}


def calls(Tensor: Any, dtypes: Any) -> dict[str, Any]:  # noqa: N803  (the class under test)
    """name -> a tensor computed with `Tensor` (tinygrad's or tg's) on the same inputs."""
    x8 = Tensor(np.array([[1, -2, 3], [2, 2, -1]], dtype=np.int8))
    f = Tensor(np.array([[1.5, -2.0, 3.0], [0.5, 2.0, -1.0]], dtype=np.float32))
    h = f.cast(dtypes.float16)
    b = Tensor(np.array([True, False, True]))
    img = Tensor.arange(16).reshape(1, 1, 4, 4).float()
    return {
        "sort": f.sort(descending=True)[0],
        "sort.indices": x8.sort()[1],
        "sort.int8": x8.sort(0)[0],
        "argsort": f.argsort(descending=True),
        "topk": h.topk(2)[0],
        "topk.indices": f.topk(2, dim=0)[1],
        "cummax": b.cummax()[0],
        "cummax.indices": x8.cummax(1)[1],
        "cummin.indices": f.cummin(1)[1],
        "cumprod.int8": x8.cumprod(1),
        "cumprod.bool": b.cumprod(0),
        "logcumsumexp.int8": x8.logcumsumexp(1),
        "copysign.int8": x8.copysign(-1),
        "copysign": f.copysign(Tensor([-0.0, 1.0, -1.0])),
        "fmod.int8": x8.fmod(3),
        "fmod": f.fmod(0.7),
        "log10": x8.abs().log10(),
        "logaddexp.half": h.logaddexp(h),
        "isclose.int8": x8.isclose(x8),
        "allclose": f.allclose(f + 1e-9),
        "normalize.half": h.normalize(),
        "softmin.half": h.softmin(),
        "diag.bool": b.diag(),
        "diagonal": f.diagonal(1),
        "unfold": f.unfold(1, 2, 1),
        "pad_to.int8": x8.pad_to(3, 4),
        "shrink_to": f.shrink_to(1, 2),
        "meshgrid.xy": Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]), indexing="xy")[0],
        "rearrange": f.rearrange("a b -> b a"),
        "nonzero": x8.nonzero(),
        "masked_select": f.masked_select(f > 0),
        "scatter_reduce.amax": f.scatter_reduce(0, Tensor([[0, 1, 0]]), Tensor([[5.0, 6.0, 7.0]]), "amax"),
        "scatter_reduce.mean.int": Tensor([1, 2, 3]).scatter_reduce(0, Tensor([0, 0, 1]), Tensor([4, 5, 8]), "mean"),
        "nll_loss": f.log_softmax(1).nll_loss(Tensor([0, 2])),
        "max_pool2d.indices": img.max_pool2d(return_indices=True)[1],
        "max_unpool2d": img.max_pool2d(return_indices=True)[0].max_unpool2d(img.max_pool2d(return_indices=True)[1]),
        "gelu.none": f.gelu(approximate="none"),
        "softmax.dtype": f.softmax(dtype="float16"),
        "short": f.short(),
        "randperm": Tensor.randperm(3),
        "multinomial": Tensor([0.0, 1.0]).multinomial(1),
    }


def dump(which: str) -> dict[str, Any]:
    if which == "tinygrad":
        from tinygrad import Tensor, dtypes
    else:
        from tg import Tensor, dtypes
    out = {}
    for name, t in calls(Tensor, dtypes).items():
        arr = t.numpy()
        out[name] = {
            "dtype": np.dtype(arr.dtype).name,
            "shape": list(arr.shape),
            "values": arr.astype(np.float64).ravel().tolist(),
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tinygrad-python", default=os.environ.get("TINYGRAD_PYTHON", "/work/venv-tinygrad/bin/python"))
    ap.add_argument("--dump", choices=("tg", "tinygrad"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dump:
        json.dump(dump(args.dump), sys.stdout)
        return 0
    env = {**os.environ, "DEV": os.environ.get("TINYGRAD_DEV", "PYTHON")}
    res = subprocess.run(
        [args.tinygrad_python, __file__, "--dump", "tinygrad"], capture_output=True, text=True, env=env, check=False
    )
    if res.returncode:
        raise SystemExit(f"api_crosscheck: tinygrad failed:\n{res.stderr[-3000:]}")
    theirs, ours = json.loads(res.stdout), dump("tg")
    bad = 0
    for name in theirs:
        t, o = theirs[name], ours[name]
        same = t["dtype"] == o["dtype"] and t["shape"] == o["shape"]
        if same and name.split(".")[0] not in RANDOM:
            same = bool(np.allclose(t["values"], o["values"], rtol=2e-3, atol=2e-3, equal_nan=True))
        bad += not same
        print(
            f"{'ok  ' if same else 'DIFF'} {name:26s} tinygrad {t['dtype']}{t['shape']}  tg {o['dtype']}{o['shape']}"
            + ("" if same else f"\n     tinygrad {t['values']}\n     tg       {o['values']}")
        )
    print(f"{len(theirs) - bad} of {len(theirs)} calls agree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
