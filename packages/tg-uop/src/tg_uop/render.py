"""Render a UOp expression as short readable text (for errors, DEBUG output and tests).

>>> from tg_uop import UOp
>>> x = UOp.variable("x", 0, 9)
>>> (x * 4 + 1).render()
'((x*4)+1)'
"""

from __future__ import annotations

from tg_uop.ops import Ops
from tg_uop.uop import UOp

_INFIX: dict[Ops, str] = {
    Ops.ADD: "+",
    Ops.SUB: "-",
    Ops.MUL: "*",
    Ops.IDIV: "//",
    Ops.MOD: "%",
    Ops.FDIV: "/",
    Ops.CMPLT: "<",
    Ops.CMPNE: "!=",
    Ops.AND: "&",
    Ops.OR: "|",
    Ops.XOR: "^",
    Ops.SHL: "<<",
    Ops.SHR: ">>",
}


def render_expr(u: UOp) -> str:
    """Readable text for an expression; unknown ops print as NAME(args)."""
    memo: dict[UOp, str] = {}
    for node in u.toposort:
        memo[node] = _render_one(node, [memo[s] for s in node.src])
    return memo[u]


def _render_one(u: UOp, srcs: list[str]) -> str:
    if u.op is Ops.CONST:
        return repr(u.arg) if not isinstance(u.arg, bool) else str(u.arg)
    if u.op is Ops.DEFINE_VAR:
        return str(u.arg[0])
    if u.op is Ops.RANGE:
        return f"r{u.arg[0]}" if isinstance(u.arg, tuple) else f"r{u.arg}"
    if u.op is Ops.SPECIAL:
        return str(u.arg)
    if u.op in _INFIX and len(srcs) == 2:
        return f"({srcs[0]}{_INFIX[u.op]}{srcs[1]})"
    if u.op is Ops.NEG:
        return f"(-{srcs[0]})"
    if u.op is Ops.MAX:
        return f"max({srcs[0]}, {srcs[1]})"
    if u.op is Ops.WHERE:
        return f"({srcs[1]} if {srcs[0]} else {srcs[2]})"
    if u.op is Ops.CAST:
        return f"{u.dtype.name}({srcs[0]})"
    return f"{u.op.name}({', '.join(srcs)})"
