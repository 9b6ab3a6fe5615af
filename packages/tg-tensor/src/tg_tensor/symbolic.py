"""Symbolic shapes: kernel ASTs hold unbound variables, the values travel beside them.

A tensor shrunk or reshaped with a bound Variable (`Variable("pos", 1, 64).bind(5)`) has that BIND in
its shape. The scheduler's kernel AST must not depend on the value, or every value would compile a
new kernel: `unbind_ast` replaces each BIND in the AST's views by its variable (a DEFINE_VAR, a
kernel argument) and returns the values, which the runner passes at launch.

>>> from tg_uop import UOp, Ops, dtypes
>>> from tg_shape import ShapeTracker
>>> n = UOp.variable("n", 1, 10)
>>> view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape((n.bind(4),)))
>>> ast, values = unbind_ast(UOp(Ops.SINK, dtypes.void, (view,)))
>>> ast.src[0].arg.shape[0] is n, values[n]
(True, 4)
"""

from __future__ import annotations

from tg_shape import ShapeTracker
from tg_uop import Ops, UOp


def unbind_ast(ast: UOp) -> tuple[UOp, dict[UOp, int]]:
    """`ast` with every bound variable in its views unbound, and {variable: value}."""
    values: dict[UOp, int] = {}
    replace: dict[UOp, UOp] = {}
    for u in ast.toposort:
        if u.op is Ops.VIEW and isinstance(u.arg, ShapeTracker) and u.arg.vars():
            st, found = u.arg.unbind()
            for var, val in found.items():
                if values.get(var, val) != val:
                    name = var.arg[0]
                    raise ValueError(f"variable {name!r} is bound to two values in one kernel: {values[var]} and {val}")
                values[var] = val
            replace[u] = u.replace(arg=st)
    if not replace:
        return ast, values
    return ast.substitute(replace), values


def check_bound(values: dict[UOp, int]) -> None:
    """Every value within its variable's range (Variable(name, min, max)), else a ValueError naming it."""
    for var, val in values.items():
        name, lo, hi = var.arg
        if not lo <= val <= hi:
            raise ValueError(f"variable {name!r} is bound to {val}, outside its range [{lo}, {hi}]")
