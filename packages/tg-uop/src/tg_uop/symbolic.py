"""Symbolic algebra as rewrite rules: constant folding, identities, and div/mod folding from bounds.

>>> from tg_uop import UOp
>>> x, y = UOp.variable("x", 0, 100), UOp.variable("y", 0, 3)
>>> ((x * 4 + y) // 4).simplify().render(), ((x * 4 + y) % 4).simplify().render()
('x', 'y')
"""

from __future__ import annotations

from tg_uop.dtype import dtypes
from tg_uop.ops import GroupOp, Ops
from tg_uop.rewrite import PatternMatcher, UPat
from tg_uop.uop import UOp, exec_alu


def fold_constants(x: UOp) -> UOp | None:
    """An ALU op on constants becomes a constant."""
    if x.dtype.count > 1 or not all(s.op is Ops.CONST for s in x.src):
        return None
    if x.op in (Ops.IDIV, Ops.MOD) and x.src[1].arg == 0:
        return None  # C leaves it undefined: keep it visible rather than invent a value
    return x.const_like(exec_alu(x.op, x.dtype, [s.arg for s in x.src]))


def fold_by_bounds(x: UOp) -> UOp | None:
    """An integer or bool node whose range is a single value is that constant."""
    if x.op is Ops.CONST or x.dtype.count > 1 or dtypes.is_float(x.dtype):
        return None
    if x.vmin == x.vmax:
        return x.const_like(x.vmin)
    return None


def split_add(x: UOp) -> list[UOp]:
    """The terms of a chain of ADDs."""
    if x.op is Ops.ADD:
        return split_add(x.src[0]) + split_add(x.src[1])
    return [x]


def sum_terms(terms: list[UOp], like: UOp) -> UOp:
    if not terms:
        return like.const_like(0)
    ret = terms[0]
    for t in terms[1:]:
        ret = ret + t
    return ret


def fold_divmod(x: UOp, c: UOp, op: Ops) -> UOp | None:
    """(q*k + r) // k -> q and (q*k + r) % k -> r, when 0 <= r < k and the sum is non-negative."""
    k = c.arg
    if k <= 0 or x.vmin < 0:
        return None
    if x.vmax < k:
        return x if op is Ops.MOD else x.const_like(0)
    quotient, rest = [], []
    const_total = 0
    for t in split_add(x):
        if t.op is Ops.CONST:
            const_total += t.arg
        elif (q := t.divides(k)) is not None:
            quotient.append(q)
        else:
            rest.append(t)
    q_const, r_const = divmod(const_total, k)
    if r_const:
        rest.append(x.const_like(r_const))
    remainder = sum_terms(rest, x)
    if not quotient and not q_const:
        return None
    if remainder.vmin < 0:
        return None
    qsum = sum_terms(quotient, x)
    qsum = qsum + q_const if q_const else qsum
    if remainder.vmax >= k:  # keep the part that is not a multiple of k: (q*k + r) % k -> r % k
        return remainder % int(k) if op is Ops.MOD else qsum + remainder // int(k)
    return remainder if op is Ops.MOD else qsum


def nested_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x // a) // b -> x // (a*b) for non-negative x and positive a, b."""
    if x.vmin < 0 or c1.arg <= 0 or c2.arg <= 0:
        return None
    return x // int(c1.arg * c2.arg)


def nested_mod(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x % a) % b -> x % b when b divides a (non-negative x)."""
    if x.vmin < 0 or c2.arg <= 0 or c1.arg % c2.arg != 0:
        return None
    return x % int(c2.arg)


def mod_of_div_mul(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x % (a*b)) // a -> (x // a) % b for non-negative x."""
    if x.vmin < 0 or c2.arg <= 0 or c1.arg % c2.arg != 0:
        return None
    return (x // int(c2.arg)) % int(c1.arg // c2.arg)


def combine_terms(x: UOp) -> UOp | None:
    """Collect like integer terms of an ADD chain: x*2 + x*3 -> x*5, x + x -> x*2, c1 + c2 folded."""
    if not dtypes.is_int(x.dtype):
        return None
    terms = split_add(x)
    coeffs: dict[UOp, int] = {}
    consts = [t.arg for t in terms if t.op is Ops.CONST]
    for t in terms:
        if t.op is Ops.CONST:
            continue
        base, k = (t.src[0], t.src[1].arg) if t.op is Ops.MUL and t.src[1].op is Ops.CONST else (t, 1)
        coeffs[base] = coeffs.get(base, 0) + k
    if len(coeffs) == len(terms) - len(consts) and len(consts) <= 1 and all(coeffs.values()):
        return None  # nothing to combine
    new_terms = [b if k == 1 else b * k for b, k in coeffs.items() if k != 0]
    if sum(consts):
        new_terms.append(x.const_like(sum(consts)))
    return sum_terms(new_terms, x)


def lt_fold(x: UOp, c: UOp) -> UOp | None:
    """x*k < c -> x < ceil(c/k) for positive k (integers)."""
    if x.op is not Ops.MUL or x.src[1].op is not Ops.CONST or not dtypes.is_int(x.dtype):
        return None
    k = x.src[1].arg
    if k <= 0:
        return None
    return x.src[0] < int(-(-c.arg // k))


symbolic_simple = PatternMatcher(
    [
        # constants to the right for commutative ops
        (
            UPat(GroupOp.Commutative, src=(UPat.cvar("c"), UPat.var("x")), name="op"),
            lambda op, c, x: None if x.op is Ops.CONST else UOp(op.op, op.dtype, (x, c)),
        ),
        # folding
        (UPat(GroupOp.ALU, name="x"), fold_constants),
        (
            UPat((Ops.CAST,), src=(UPat.cvar("c"),), name="x"),
            lambda x, c: x.const_like(exec_alu(Ops.CAST, x.dtype, [c.arg])),
        ),
        # identities
        (UPat.var("x") + 0, lambda x: x),
        (UPat.var("x") - 0, lambda x: x),
        (UPat.var("x") * 1, lambda x: x),
        (UPat.var("x") // 1, lambda x: x),
        (UPat.var("x", dtype=dtypes.ints) * 0, lambda x: x.const_like(0)),
        (UPat.var("x") - UPat.var("x"), lambda x: x.const_like(0) if dtypes.is_int(x.dtype) else None),
        (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x),
        (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
        (UPat(Ops.AND, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
        (UPat(Ops.OR, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
        (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("a"))), lambda a: a),
        (UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("a"), UPat.var("b"))), lambda c, a, b: a if c.arg else b),
        (UPat(Ops.CAST, name="x"), lambda x: x.src[0] if x.src[0].dtype == x.dtype else None),
        (UPat(Ops.AND, src=(UPat.var("x", dtype=dtypes.bool), UPat.const(dtypes.bool, True))), lambda x: x),
        (
            UPat(Ops.AND, src=(UPat.var("x", dtype=dtypes.bool), UPat.const(dtypes.bool, False))),
            lambda x: x.const_like(False),
        ),
        (UPat(Ops.OR, src=(UPat.var("x", dtype=dtypes.bool), UPat.const(dtypes.bool, False))), lambda x: x),
    ]
)

symbolic = symbolic_simple + PatternMatcher(
    [
        # ranges that pin a value
        (UPat(GroupOp.ALU, name="x"), fold_by_bounds),
        # regroup constants: (x + c1) + c2 -> x + (c1 + c2), (x * c1) * c2 -> x * (c1 * c2)
        ((UPat.var("x") + UPat.cvar("c1")) + UPat.cvar("c2"), lambda x, c1, c2: x + (c1.arg + c2.arg)),
        ((UPat.var("x") * UPat.cvar("c1")) * UPat.cvar("c2"), lambda x, c1, c2: x * (c1.arg * c2.arg)),
        # move constants outward: (x + c) + y -> (x + y) + c
        ((UPat.var("x") + UPat.cvar("c")) + UPat.var("y"), lambda x, c, y: None if y.op is Ops.CONST else (x + y) + c),
        # distribute constants: (x + y) * c -> x*c + y*c for ints (index maths)
        ((UPat.var("x", dtype=dtypes.ints) + UPat.var("y")) * UPat.cvar("c"), lambda x, y, c: x * c + y * c),
        (UPat(Ops.ADD, name="x"), combine_terms),
        # div and mod from bounds
        (UPat.var("x", dtype=dtypes.ints) // UPat.cvar("c"), lambda x, c: fold_divmod(x, c, Ops.IDIV)),
        (UPat.var("x", dtype=dtypes.ints) % UPat.cvar("c"), lambda x, c: fold_divmod(x, c, Ops.MOD)),
        ((UPat.var("x") // UPat.cvar("c1")) // UPat.cvar("c2"), nested_div),
        ((UPat.var("x") % UPat.cvar("c1")) % UPat.cvar("c2"), nested_mod),
        ((UPat.var("x") % UPat.cvar("c1")) // UPat.cvar("c2"), mod_of_div_mul),
        # comparisons
        (UPat.var("x", dtype=dtypes.ints) < UPat.cvar("c"), lt_fold),
    ]
)
