"""Integer // and % by zero, and MIN // -1: defined values on every device, never a crash.

tg's rule (numpy's results, without numpy's warning): for integer tensors `x // 0 == 0` and `x % 0 == 0`,
whether the zero is a Python number or an element of a tensor; `MIN // -1 == MIN` (it wraps) and
`MIN % -1 == 0`. C leaves all of these undefined (on x86 they raise SIGFPE and kill the process), so the
renderers emit a guard for divisors that may be 0 or -1; constant divisors elsewhere cost nothing.
Each case runs in a subprocess so a crash shows as an exit code, not as a dead test runner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

SCRIPT = r"""
import json, sys
from tg import Tensor, dtypes
dev = sys.argv[1]
def t(v, dt=dtypes.int32): return Tensor(v, dtype=dt, device=dev)
out = {}
a, b = t([7, 8, -7, 0, -8]), t([0, 2, 0, 0, 3])
out["issue"] = [(t([7, 8]) // t([0, 2])).tolist(), (t([7, 8]) % t([0, 2])).tolist()]
out["tensor_zero"] = [(a // b).tolist(), (a % b).tolist(), a.div(b, rounding_mode="trunc").tolist()]
out["const_zero"] = [(a // 0).tolist(), (a % 0).tolist(), a.div(0, rounding_mode="trunc").tolist()]
out["zero_const_lhs"] = [(5 // b).tolist(), (5 % b).tolist()]
m = t([-2**31, 5, -2**31])
out["min_by_minus_one"] = [(m // t([-1, -1, 1])).tolist(), (m % t([-1, -1, 1])).tolist(), (m // -1).tolist(),
                           (m % -1).tolist()]
for name in ("int8", "int16", "int64", "uint8", "uint32"):
    x, y = t([7, 9, 0], getattr(dtypes, name)), t([0, 2, 0], getattr(dtypes, name))
    out[name] = [(x // y).tolist(), (x % y).tolist()]
big = t([-2**63, 3], dtypes.int64)
out["int64_min"] = [(big // t([-1, -1], dtypes.int64)).tolist(), (big % t([-1, -1], dtypes.int64)).tolist()]
print(json.dumps(out))
"""


def _want() -> dict[str, list[list[int]]]:
    def np_div(x: list[int], y: list[int], dt: type = np.int32) -> list[list[int]]:
        with np.errstate(all="ignore"):
            xa, ya = np.array(x, dt), np.array(y, dt)
            return [(xa // ya).tolist(), (xa % ya).tolist()]

    a, b = [7, 8, -7, 0, -8], [0, 2, 0, 0, 3]
    trunc = [0, 4, 0, 0, -2]  # C's truncating quotient with x // 0 == 0
    want = {
        "issue": np_div([7, 8], [0, 2]),
        "tensor_zero": [*np_div(a, b), trunc],
        "const_zero": [*np_div(a, [0] * 5), [0] * 5],
        "zero_const_lhs": np_div([5] * 5, b),
        "min_by_minus_one": [*np_div([-(2**31), 5, -(2**31)], [-1, -1, 1]), *np_div([-(2**31), 5, -(2**31)], [-1] * 3)],
        "int64_min": np_div([-(2**63), 3], [-1, -1], np.int64),
    }
    for name in ("int8", "int16", "int64", "uint8", "uint32"):
        want[name] = np_div([7, 9, 0], [0, 2, 0], getattr(np, name))
    return want


def test_int_div_mod_by_zero(device: str) -> None:
    env = {**os.environ, "DEV": device}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, device], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"{device}: exit code {proc.returncode}\n{proc.stderr[-3000:]}"
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    want = _want()
    for key, value in want.items():
        assert got[key] == value, f"{device} {key}: got {got[key]}, want {value}"
