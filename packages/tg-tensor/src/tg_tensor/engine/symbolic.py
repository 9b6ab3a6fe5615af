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
from tg_uop.uop import sint


def unbind_ast(ast: UOp, known: dict[UOp, int] | None = None) -> tuple[UOp, dict[UOp, int]]:
    """`ast` with every bound variable in its views unbound, and {variable: value}.

    A variable that is neither bound in the AST nor in `known` (values found before) is a ValueError."""
    values: dict[UOp, int] = {}
    replace: dict[UOp, UOp] = {}
    unbound: set[UOp] = set()
    for u in ast.toposort:
        if u.op is Ops.VIEW and isinstance(u.arg, ShapeTracker) and (found_vars := u.arg.vars()):
            unbound.update(v for v in found_vars if v.op is Ops.DEFINE_VAR)
            st, found = u.arg.unbind()
            for var, val in found.items():
                if values.get(var, val) != val:
                    name = var.arg[0]
                    raise ValueError(f"variable {name!r} is bound to two values in one kernel: {values[var]} and {val}")
                values[var] = val
            replace[u] = u.replace(arg=st)
    if missing := sorted(v.expr for v in unbound - set(values) - set(known or {})):
        raise ValueError(
            f"variable {missing[0]!r} is used in a shape but not bound to a value; a kernel needs its value: "
            f"use Variable({missing[0]!r}, lo, hi).bind(value)"
        )
    if not replace:
        return ast, values
    return ast.substitute(replace), values


def concrete_shape(shape: tuple[sint, ...]) -> tuple[int, ...]:
    """The shape at the values its Variables are bound to; ValueError naming a variable that is not bound.

    >>> n = UOp.variable("n", 1, 10)
    >>> concrete_shape((n.bind(3), 4))
    (3, 4)
    """
    out: list[int] = []
    for s in shape:
        if isinstance(s, UOp):
            v = s.substitute({u: u.src[1] for u in s.toposort if u.op is Ops.BIND}).simplify()
            if v.op is not Ops.CONST:
                names = sorted({u.expr for u in v.toposort if u.op is Ops.DEFINE_VAR})
                raise ValueError(
                    f"shape {tuple(show_size(x) for x in shape)}: variable {names[0]!r} is not bound to a value"
                )
            s = int(v.arg)
        out.append(int(s))
    return tuple(out)


def show_size(s: sint) -> str:
    """A dim for messages: an int, or a symbolic size by its expression (`BIND(n, 3)`, `(n+1)`)."""
    return s.render() if isinstance(s, UOp) else str(s)


def max_size(s: UOp) -> int:
    """The largest value of a symbolic size (a bound Variable, or an expression of them): what its buffer holds."""
    unbound = s.substitute({u: u.src[0] for u in s.toposort if u.op is Ops.BIND})
    return int(unbound.vmax)
