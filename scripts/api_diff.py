"""Compare tg's public Tensor API with tinygrad's: names, parameters and defaults.

tinygrad is never a dependency of tg: install it in a separate venv and point this script at
that interpreter (it is only asked to print its Tensor's signatures as JSON).

    python3 -m venv /work/venv-tinygrad && /work/venv-tinygrad/bin/pip install tinygrad==0.14.0
    uv run python scripts/api_diff.py --tinygrad-python /work/venv-tinygrad/bin/python

Prints the names tinygrad has and tg lacks, the parameters tg lacks on shared methods, and the
deliberate omissions (listed in the README); exits 1 if anything is missing that is not omitted.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
from typing import Any

# Names tg leaves out on purpose (the README says why).
OMITTED: dict[str, str] = {
    "shard": "multi-device tensors have their own issue",
    "shard_": "multi-device tensors have their own issue",
    "decode_hevc_frame": "video decoding is out of scope",
    "keccak": "a hash function, not deep learning",
    "image_conv2d": "image-specific ops (tinygrad's QCOM IMAGE dtype)",
    "image_dot": "image-specific ops (tinygrad's QCOM IMAGE dtype)",
    "lazydata": "tinygrad's deprecated alias of .uop",
    "from_blob": "wraps a raw pointer: unsafe, and tg has no use for it",
    "from_url": "downloads at run time; tg never fetches from the network implicitly",
    "fetch": "downloads at run time; tg never fetches from the network implicitly",
    "hash": "tinygrad's keccak-based tensor hash (keccak is left out)",
    "threefry": "tg's random numbers are its own Threefry stream (rng.py); the raw primitive is internal",
    "random_bits": "tg's random numbers are its own Threefry stream (rng.py); the raw primitive is internal",
    "shard_like": "multi-device tensors have their own issue",
    "as_param": "tinygrad's function-call machinery (PARAM/CALL UOps); tg has TinyJit instead",
    "is_param": "tinygrad's function-call machinery (PARAM/CALL UOps); tg has TinyJit instead",
    "is_param_": "tinygrad's function-call machinery (PARAM/CALL UOps); tg has TinyJit instead",
    "call": "tinygrad's function-call machinery (PARAM/CALL UOps); tg has TinyJit instead",
    "callify": "tinygrad's function-call machinery (PARAM/CALL UOps); tg has TinyJit instead",
    "linear_with_vars": "tinygrad's internal linearized schedule; tg's is Tensor.schedule()",
    "schedule_linear": "tinygrad's internal linearized schedule; tg's is Tensor.schedule()",
    "ufix": "internal helper of tinygrad's mixins (a constant like self)",
    "uprod": "internal helper of tinygrad's mixins (a product of UOps)",
    "usum": "internal helper of tinygrad's mixins (a sum of UOps)",
}

# (method, parameter) pairs left out on purpose.
OMITTED_PARAMS: dict[tuple[str, str], str] = {
    ("to", "device"): "tuple of devices: multi-device",
}

# default reprs that mean the same thing in both
SAME_DEFAULTS = {("dtypes.int", "dtypes.int32"), ("dtypes.float", "dtypes.float32")}

_DUMP = r"""
import inspect, json, sys
from tinygrad import Tensor
out = {}
for name in dir(Tensor):
    if name.startswith("_"):
        continue
    attr = inspect.getattr_static(Tensor, name)
    kind = type(attr).__name__
    params = None
    fn = getattr(Tensor, name)
    if callable(fn):
        try:
            sig = inspect.signature(fn)
            params = [[p.name, str(p.kind), None if p.default is inspect.Parameter.empty else repr(p.default)]
                      for p in sig.parameters.values()]
        except (TypeError, ValueError):
            params = None
    out[name] = {"kind": kind, "params": params}
json.dump(out, sys.stdout)
"""


def describe(cls: type) -> dict[str, dict[str, Any]]:
    """Public names of `cls` with their kind and parameters (name, kind, default repr)."""
    out: dict[str, dict[str, Any]] = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        params = None
        fn = getattr(cls, name)
        if callable(fn):
            try:
                sig = inspect.signature(fn)
                params = [
                    [p.name, str(p.kind), None if p.default is inspect.Parameter.empty else repr(p.default)]
                    for p in sig.parameters.values()
                ]
            except (TypeError, ValueError):
                params = None
        out[name] = {"kind": type(attr).__name__, "params": params}
    return out


def tinygrad_api(python: str) -> dict[str, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "DEV", "VIZ")}
    res = subprocess.run([python, "-c", _DUMP], capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise SystemExit(f"api_diff: could not read tinygrad's Tensor with {python}:\n{res.stderr}")
    data: dict[str, dict[str, Any]] = json.loads(res.stdout)
    return data


def _accepts_any(params: list[list[Any]]) -> tuple[bool, bool]:
    kinds = {p[1] for p in params}
    return "VAR_POSITIONAL" in kinds, "VAR_KEYWORD" in kinds


def missing_params(theirs: list[list[Any]], ours: list[list[Any]]) -> list[str]:
    """Parameters of tinygrad's signature that tg's does not accept by name."""
    names = {p[0] for p in ours}
    _, our_kwargs = _accepts_any(ours)
    out = []
    for name, kind, _default in theirs:
        if kind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            if not any(p[1] == kind for p in ours):
                out.append(("*" if kind == "VAR_POSITIONAL" else "**") + name)
            continue
        if name in ("self", "cls") or name in names or our_kwargs:
            continue
        out.append(name)
    return out


def _same_default(a: str, b: str | None) -> bool:
    if b is None:
        return False
    if a == b or (a, b) in SAME_DEFAULTS:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def differing_defaults(theirs: dict[str, dict[str, Any]], ours: dict[str, dict[str, Any]]) -> list[str]:
    """Parameters both have whose default values differ (compared by repr)."""
    out = []
    for name in sorted(set(theirs) & set(ours)):
        tp, op = theirs[name]["params"], ours[name]["params"]
        if tp is None or op is None:
            continue
        mine = {p[0]: p[2] for p in op}
        for pname, _kind, default in tp:
            if default is None or pname not in mine or _same_default(default, mine[pname]):
                continue  # (None: tinygrad requires it, so any tg default is a superset)
            out.append(f"{name}({pname}): tinygrad {default}, tg {mine[pname]}")
    return out


def diff(theirs: dict[str, dict[str, Any]], ours: dict[str, dict[str, Any]]) -> tuple[list[str], list[str], list[str]]:
    missing, omitted, params = [], [], []
    for name in sorted(theirs):
        if name not in ours:
            (omitted if name in OMITTED else missing).append(name)
            continue
        tp, op = theirs[name]["params"], ours[name]["params"]
        if tp is None or op is None:
            continue
        for p in missing_params(tp, op):
            if (name, p) in OMITTED_PARAMS:
                omitted.append(f"{name}({p}=)")
            else:
                params.append(f"{name}: {p}")
    return missing, omitted, params


def _why(entry: str) -> str:
    """The reason an omitted name ("shard") or parameter ("to(device=)") is left out."""
    if "(" not in entry:
        return OMITTED.get(entry, "")
    name, param = entry.split("(", 1)
    return OMITTED_PARAMS.get((name, param.rstrip("=)")), "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tinygrad-python", default=os.environ.get("TINYGRAD_PYTHON", "/work/venv-tinygrad/bin/python"))
    args = ap.parse_args()
    from tg import Tensor

    theirs = tinygrad_api(args.tinygrad_python)
    ours = describe(Tensor)
    missing, omitted, params = diff(theirs, ours)
    print(f"tinygrad Tensor: {len(theirs)} public names; tg Tensor: {len(ours)}")
    print(f"missing names ({len(missing)}): {' '.join(missing) or '-'}")
    print(f"missing parameters ({len(params)}):")
    for p in params:
        print(f"  {p}")
    defaults = differing_defaults(theirs, ours)
    print(f"differing defaults ({len(defaults)}):")
    for d in defaults:
        print(f"  {d}")
    print(f"deliberately omitted ({len(omitted)}):")
    for o in omitted:
        print(f"  {o}: {_why(o)}")
    extra = sorted(set(ours) - set(theirs))
    print(f"tg-only names ({len(extra)}): {' '.join(extra) or '-'}")
    return 1 if missing or params or defaults else 0


if __name__ == "__main__":
    sys.exit(main())
