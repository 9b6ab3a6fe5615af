"""The helpers behind the symbolic rules that look at whole sums: like terms, div/mod of sums, comparisons.

A sum is read as its list of terms (`split_add`), each term as `base * coefficient`.

>>> from tg_uop import UOp
>>> x = UOp.variable("x", 0, 100)
>>> ((x // 4) * 4 + x % 4).simplify().render()
'x'
"""

from __future__ import annotations

import math

from tg_uop.dtype import dtypes
from tg_uop.ops import Ops
from tg_uop.uop import UOp


def split_add(x: UOp) -> list[UOp]:
    """The terms of a chain of ADDs, left to right."""
    if x.op is not Ops.ADD:
        return [x]
    terms: list[UOp] = []
    todo = [x]  # (a walk: linear in the terms, where concatenating the halves' lists was quadratic, and no
    # recursion limit for long sums)
    while todo:
        u = todo.pop()
        if u.op is Ops.ADD:
            todo += (u.src[1], u.src[0])
        else:
            terms.append(u)
    return terms


def sum_terms(terms: list[UOp], like: UOp) -> UOp:
    """terms[0] + terms[1] + ... (0 of `like`'s dtype for no terms)."""
    if not terms:
        return like.const_like(0)
    ret = terms[0]
    for t in terms[1:]:
        ret = ret + t
    return ret


def base_coeff(t: UOp) -> tuple[UOp, int]:
    """A term as (base, integer coefficient): x*3 -> (x, 3), x -> (x, 1)."""
    if t.op is Ops.MUL and t.src[1].op is Ops.CONST:
        return t.src[0], int(t.src[1].arg)
    return t, 1


# ---------------------------------------------------------------------------------------------
# like terms


def _recombine_divmod(coeffs: dict[UOp, int]) -> bool:
    """(x//k)*k + x%k -> x and ((x//k)%m)*k + x%k -> x%(k*m), scaled by a common coefficient."""
    for base, a in list(coeffs.items()):
        if base.op is not Ops.MOD or base.src[1].op is not Ops.CONST or base.src[1].arg <= 0:
            continue
        x, k = base.src[0], int(base.src[1].arg)
        div = x // k
        if coeffs.get(div) == a * k:
            del coeffs[base], coeffs[div]
            coeffs[x] = coeffs.get(x, 0) + a
            return True
        for other, b in coeffs.items():
            if other.op is Ops.MOD and other.src[0] is div and other.src[1].op is Ops.CONST and b == a * k:
                if x.vmin < 0 or other.src[1].arg <= 0:
                    continue
                del coeffs[base], coeffs[other]
                merged = x % (k * int(other.src[1].arg))
                coeffs[merged] = coeffs.get(merged, 0) + a
                return True
    return False


def combine_terms(x: UOp) -> UOp | None:
    """Collect like integer terms of a sum: x*2 + x*3 -> x*5, x + x -> x*2, constants added, div/mod rejoined."""
    terms = split_add(x)
    coeffs: dict[UOp, int] = {}
    consts = [int(t.arg) for t in terms if t.op is Ops.CONST]
    for t in terms:
        if t.op is not Ops.CONST:
            base, k = base_coeff(t)
            coeffs[base] = coeffs.get(base, 0) + k
    recombined = False
    while _recombine_divmod(coeffs):
        recombined = True
    plain = len(coeffs) == len(terms) - len(consts) and all(coeffs.values())
    if plain and not recombined and len(consts) <= 1 and (not consts or consts[0] != 0):
        return None  # nothing to combine
    new_terms = [b if k == 1 else b * k for b, k in coeffs.items() if k != 0]
    if sum(consts):
        new_terms.append(x.const_like(sum(consts)))
    ret = sum_terms(new_terms, x)
    return None if ret is x else ret


# ---------------------------------------------------------------------------------------------
# div and mod of sums


def _split_by_divisor(x: UOp, k: int) -> tuple[list[UOp], int, list[UOp]]:
    """x = k*(sum of quotient terms + q_const) + (sum of rest terms), with the rest's constant in [0, k)."""
    quotient: list[UOp] = []
    rest: list[UOp] = []
    const_total = 0
    for t in split_add(x):
        if t.op is Ops.CONST:
            const_total += int(t.arg)
        elif (q := t.divides(k)) is not None:
            quotient.append(q)
        elif (split := _split_coefficient(t, k)) is not None:
            quotient.append(split[0])
            rest.append(split[1])
        else:
            rest.append(t)
    q_const, r_const = divmod(const_total, k)
    if r_const:
        rest.append(x.const_like(r_const))
    return quotient, q_const, rest


def _split_coefficient(t: UOp, k: int) -> tuple[UOp, UOp] | None:
    """v*c with c > k as (v*(c//k), v*(c%k)): v*15 for k=14 is 14*v + v."""
    base, c = base_coeff(t)
    if t.op is not Ops.MUL or c <= k:
        return None
    return (base if c // k == 1 else base * (c // k)), (base if c % k == 1 else base * (c % k))


def _with_const(terms: list[UOp], c: int, like: UOp) -> UOp:
    return sum_terms(terms + ([like.const_like(c)] if c else []), like)


def fold_divmod(x: UOp, c: UOp, op: Ops) -> UOp | None:
    """x // k and x % k for a positive constant k, from bounds and the terms of x.

    (q*k + r) // k -> q and (q*k + r) % k -> r when 0 <= r < k; (q*k + r) // k -> q + r//k when both sides are
    non-negative; a factor common to every term and k is cancelled.
    """
    k = int(c.arg)
    if k <= 0:
        return None
    if -k < x.vmin and x.vmax < k:  # truncating division: |x| < k gives quotient 0 and remainder x
        return x if op is Ops.MOD else x.const_like(0)
    quotient, q_const, rest = _split_by_divisor(x, k)
    if not rest:  # exact division, for either sign
        return x.const_like(0) if op is Ops.MOD else _with_const(quotient, q_const, x)
    remainder = sum_terms(rest, x)
    if (quotient or q_const) and x.vmin >= 0 and remainder.vmin >= 0:
        if op is Ops.MOD:
            return remainder if remainder.vmax < k else remainder % k
        tail = [] if remainder.vmax < k else [remainder // k]
        return _with_const(quotient + tail, q_const, x)
    if (by_gcd := _fold_by_gcd(x, k, op)) is not None:
        return by_gcd
    return _cancel_common_factor(x, k, op)


def _fold_by_gcd(x: UOp, k: int, op: Ops) -> UOp | None:
    """(g*b + r) // k -> b // (k/g) and (g*b + r) % k -> (b % (k/g))*g + r, when g divides k and 0 <= r < g."""
    terms = split_add(x)
    big = [t for t in terms if t.op is not Ops.CONST and t.const_factor() > 1]
    if not big or x.vmin < 0:
        return None
    g = math.gcd(k, *(t.const_factor() for t in big))
    if g <= 1 or g == k:
        return None
    q_const, r_const = divmod(sum(int(t.arg) for t in terms if t.op is Ops.CONST), g)
    small = [t for t in terms if t.op is not Ops.CONST and t not in big]
    r = _with_const(small, r_const, x)
    divided = [t.divides(g) for t in big]
    if r.vmin < 0 or r.vmax >= g or any(d is None for d in divided):
        return None
    b = _with_const([d for d in divided if d is not None], q_const, x)
    return b // (k // g) if op is Ops.IDIV else (b % (k // g)) * g + r


def _cancel_common_factor(x: UOp, k: int, op: Ops) -> UOp | None:
    """(g*a) // (g*b) -> a // b and (g*a) % (g*b) -> (a % b) * g, for any sign."""
    terms = split_add(x)
    g = math.gcd(k, *(t.const_factor() for t in terms))
    if g <= 1:
        return None
    divided = [t.divides(g) for t in terms]
    if any(d is None for d in divided):
        return None
    inner = sum_terms([d for d in divided if d is not None], x)
    return inner // (k // g) if op is Ops.IDIV else (inner % (k // g)) * g


# ---------------------------------------------------------------------------------------------
# comparisons


def lt_sum(x: UOp, c: UOp) -> UOp | None:
    """Integer `sum < c` in canonical form: constants move right, common factors divide out."""
    terms = split_add(x)
    consts = [int(t.arg) for t in terms if t.op is Ops.CONST]
    if consts:
        rest = sum_terms([t for t in terms if t.op is not Ops.CONST], x)
        shift, bound = sum(consts), int(c.arg) - sum(consts)
        lo, hi = dtypes.min(x.dtype), dtypes.max(x.dtype)
        # only where the sum cannot wrap and the moved constant is a value of the dtype: `x + INT_MIN < 0` is not
        # `x < 2**31` (that constant wraps to INT_MIN, so the comparison became always false)
        if not (lo <= rest.vmin + shift and rest.vmax + shift <= hi and lo <= bound <= hi):
            return None
        return rest < bound
    g = math.gcd(*(t.const_factor() for t in terms))
    divided = [t.divides(g) for t in terms] if g > 1 else []
    if divided and all(d is not None for d in divided):
        inner = sum_terms([d for d in divided if d is not None], x)
        return inner < -(-int(c.arg) // g)
    return _lt_quotient(x, terms, int(c.arg))


def _lt_quotient(x: UOp, terms: list[UOp], c: int) -> UOp | None:
    """q*k + r < c -> q < c/k when k divides c and 0 <= r < k."""
    factors = sorted({abs(base_coeff(t)[1]) for t in terms}, reverse=True)
    for k in factors:
        if k <= 1 or c % k != 0:
            continue
        quotient, q_const, rest = _split_by_divisor(x, k)
        if not quotient or q_const or not rest:
            continue
        r = sum_terms(rest, x)
        if r.vmin >= 0 and r.vmax < k:
            return sum_terms(quotient, x) < c // k
    return None


def _negated_lt(clause: UOp) -> UOp | None:
    """The integer `x < c` inside `(x < c) != True` (that is, x >= c)."""
    if clause.op is Ops.CMPNE and clause.src[1].op is Ops.CONST and clause.src[1].arg is True:
        inner = clause.src[0]
        if _is_upper_bound(inner):
            return inner
    return None


def _is_upper_bound(clause: UOp) -> bool:
    return clause.op is Ops.CMPLT and clause.src[1].op is Ops.CONST and dtypes.is_int(clause.src[0].dtype)


def split_and(x: UOp) -> list[UOp]:
    """The clauses of a chain of bool ANDs."""
    if x.op is Ops.AND and x.dtype == dtypes.bool:
        return split_and(x.src[0]) + split_and(x.src[1])
    return [x]


def and_chain(x: UOp) -> UOp | None:
    """A conjunction without repeated clauses, and with one upper and one lower bound per expression."""
    clauses = split_and(x)
    upper: dict[UOp, int] = {}
    lower: dict[UOp, int] = {}
    for cl in clauses:
        if _is_upper_bound(cl):
            upper[cl.src[0]] = min(upper.get(cl.src[0], int(cl.src[1].arg)), int(cl.src[1].arg))
        elif (lt := _negated_lt(cl)) is not None:
            lower[lt.src[0]] = max(lower.get(lt.src[0], int(lt.src[1].arg)), int(lt.src[1].arg))
    if any(e in upper and lower[e] >= upper[e] for e in lower):
        return x.const_like(False)
    kept: list[UOp] = []
    for cl in clauses:
        is_upper = _is_upper_bound(cl)  # `x < c` with a constant c: only the tightest one stays
        lt = _negated_lt(cl)
        if is_upper and cl.src[1].arg != upper[cl.src[0]] or lt is not None and lt.src[1].arg != lower.get(lt.src[0]):
            continue
        if cl not in kept:
            kept.append(cl)
    if len(kept) == len(clauses):
        return None
    ret = kept[0]
    for cl in kept[1:]:
        ret = ret & cl
    return ret
