"""The schedule of a program depends only on its graphs (and documented options), never on what the runtime compiled
before: a cold process and a warm one (that compiled other members of the same kernel families) build the same
kernel ASTs (issue 37)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROGRAM = """
import json, sys
from tg_tensor import Tensor
from tg_tensor.engine.realizer import fresh

def program(consts):
    asts = []
    for c in consts:  # one family of kernels: equal up to the constant
        t = (Tensor([1.0, 2.0, 3.0]) * c + 0.5).sum()
        asts += [repr(item.ast) for item in t.schedule()]
        t.realize()
    return asts

if sys.argv[1] == "warm":  # compile the family (folded and lifted) under another Realizer first
    with fresh():
        program([5.0, 6.0, 1.0])
with fresh():
    print(json.dumps(program([0.0, 1.0, 2.0])))
"""


def _asts(mode: str) -> list[str]:
    env = {**os.environ, "DEV": "CPU"}
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_cold_and_warm_process_build_the_same_kernel_asts() -> None:
    cold, warm = _asts("cold"), _asts("warm")
    assert len(cold) == 3
    assert cold == warm
    assert cold[0] != cold[1] and cold[1] == cold[2]  # the first member folds its constant; the others load it
