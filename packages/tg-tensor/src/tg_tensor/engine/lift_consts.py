"""Constants that change between realizes become kernel inputs, so they do not compile new kernels.

`(a * i + 1).sum()` for i = 0, 1, 2, ... builds kernel ASTs that differ only in one constant.
Compiling each (tens of ms, and a kernel kept in memory) is far dearer than reading the number from
a one-element buffer. The first AST of a family (the ASTs equal up to constants) compiles as it is,
with its constants folded into the code; when a second member shows up, the family switches to one
kernel that loads its constants from buffers (one per distinct constant, shared and cached).

The choice depends only on the graphs this Realizer scheduled before (its `families`), never on what the
runtime compiled: a warm process and a cold one build the same kernel ASTs for the same program.

>>> from tg_tensor import Tensor
>>> [(Tensor([1.0, 2.0]) * i + 1).sum().item() for i in range(4)]  # the kernel compiles twice, not 4 times
[2.0, 5.0, 8.0, 11.0]
"""

from __future__ import annotations

from typing import Any

from tg_runtime.device import Buffer
from tg_tensor.engine.realizer import current
from tg_tensor.engine.util import np_dtype
from tg_uop import DType, Ops, UOp, dtypes

# The caches live in the Realizer: `families` (device, AST with constants as loads) -> the first member
# seen, compiled with its constants folded (and that member -> itself); `const_bufs` one-element buffers
# holding a constant, by (device, dtype, value), read-only, so shared; `plain_only` non-empty while TinyJit
# records (its recordings are per set of Python values, so folded constants are best).


def _liftable(u: UOp) -> bool:
    if u.op is not Ops.CONST or not u.src or u.dtype in (dtypes.bool, dtypes.bfloat16):
        return False
    return isinstance(u.arg, (int, float)) and not isinstance(u.arg, bool)


def _value_key(u: UOp) -> Any:
    return (type(u.arg), u.arg.hex() if isinstance(u.arg, float) else u.arg)  # nan equals nan, -0.0 is not 0.0


def lift(ast: UOp, first: int) -> tuple[UOp, list[UOp]]:
    """`ast` with every (non-bool) constant loaded from a buffer numbered `first`, `first + 1`, ...; also
    one CONST per new buffer, in order (the values to put in them)."""
    consts: dict[tuple[DType, Any], int] = {}
    values: list[UOp] = []
    replace: dict[UOp, UOp] = {}
    for u in ast.toposort:
        if not _liftable(u):
            continue
        key = (u.dtype, _value_key(u))
        if key not in consts:
            consts[key] = len(values)
            values.append(u)
        g = UOp(Ops.DEFINE_GLOBAL, u.dtype.ptr(), (), first + consts[key])
        replace[u] = UOp(Ops.LOAD, u.dtype, (g, u.src[0]))
    return (ast.substitute(replace) if replace else ast), values


def lift_changing_consts(device: str, ast: UOp, first: int) -> tuple[UOp, list[Buffer]]:
    """The AST to compile for this kernel and the constant buffers it reads after its other buffers.

    The first AST of a family (same AST up to constants) that this Realizer schedules runs as it is, with
    its constants folded, every time it comes back; any other member reads its constants from buffers.
    """
    rz = current()
    if rz.plain_only or rz.families.get((device, ast)) is ast or not any(_liftable(u) for u in ast.toposort):
        return ast, []  # (a first member is also recorded under its own key: no lift to find it again)
    lifted, values = lift(ast, first)
    first_seen = rz.families.get(family := (device, lifted))
    if first_seen is None or first_seen is ast:
        rz.families[family] = rz.families[(device, ast)] = ast
        return ast, []
    return lifted, [_const_buffer(device, v) for v in values]


def _const_buffer(device: str, c: UOp) -> Buffer:
    import numpy as np

    key = (device, c.dtype, _value_key(c))
    cache = current().const_bufs
    if (buf := cache.get(key)) is None:
        data = np.array([c.arg], dtype=np_dtype(c.dtype)).tobytes()
        buf = cache[key] = Buffer(device, 1, c.dtype).copyin(memoryview(data))
    return buf
