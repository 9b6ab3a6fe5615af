"""Linearize: order a lowered graph into a flat program with explicit loops and accumulators.

Loops nest as a chain in RANGE order (axis number). Each node is placed at the shallowest loop depth
its inputs allow; a REDUCE becomes DEFINE_ACC before its loop, an ASSIGN inside it, and reads the
accumulator after the loop closes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tg_uop import DType, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite


def reduce_identity(op: Ops, dtype: DType) -> float | int | bool:
    """The value an accumulator starts from: 0 for ADD, 1 for MUL, the dtype's minimum for MAX.

    >>> reduce_identity(Ops.ADD, dtypes.float32), reduce_identity(Ops.MAX, dtypes.int8)
    (0, -128)
    """
    if op is Ops.ADD:
        return False if dtype == dtypes.bool else 0
    if op is Ops.MUL:
        return True if dtype == dtypes.bool else 1
    if op is Ops.MAX:
        return dtypes.min(dtype)
    raise ValueError(f"no identity element for reduce op {op}")


@dataclass
class _Level:
    pre: list[UOp] = field(default_factory=list)
    post: list[UOp] = field(default_factory=list)


def acc_slot(dtype: DType) -> UOp:
    """Where a REDUCE's value reads its own accumulator: `REDUCE(acc_slot + p0 + p1, r)` updates acc to
    acc + p0 + p1 in that order (the lowerer's chain of products for register tiles) instead of acc + (p0 + p1)."""
    return UOp(Ops.NOOP, dtype, (), "acc")


def _accumulator(ctx: list[int], u: UOp) -> UOp:
    """A REDUCE (its sources already expanded) as an ASSIGN into a fresh accumulator, numbered in order."""
    n = ctx[0]
    ctx[0] += 1
    val, *rngs = u.src
    acc = UOp(Ops.DEFINE_ACC, u.dtype, (UOp.const(u.dtype, reduce_identity(u.arg, u.dtype)), *rngs), n)
    upd = acc.alu(u.arg, val) if u.arg is not Ops.MAX else acc.maximum(val)
    if u.arg is Ops.ADD and val.op is Ops.WMMA:
        upd = _accumulate_into(val, acc)
    elif u.arg is Ops.ADD and val.op is Ops.CUSTOM and len(val.src) == 1 and val.src[0].op is Ops.WMMA:
        upd = val.replace(src=(_accumulate_into(val.src[0], acc),))  # a wait around a chain (warpgroup MMAs)
    slot = acc_slot(u.dtype.scalar())
    if u.dtype.count > 1:  # the value was packed lane by lane into vectors (vectorize.py)
        slot = UOp(Ops.VECTORIZE, u.dtype, (slot,) * u.dtype.count)
    if slot in val.toposort:
        upd = val.substitute({slot: acc})
    return UOp(Ops.ASSIGN, u.dtype, (acc, upd, *rngs))


def _start_from_stored(store: UOp, i: UOp, a: UOp, old: UOp) -> UOp | None:
    """STORE(i, sum + LOAD(i)) -> the sum's accumulator starts from the loaded value (a KBLOCK's partial sums,
    kblock.py): the value is in no register while the reduce loop runs, and one ADD fewer."""
    if a.op is not Ops.ASSIGN or a.src[1].op is not Ops.ADD or old.dtype != a.dtype:
        return None
    acc = a.src[0]
    start = acc.src[0] if acc.op is Ops.DEFINE_ACC else None
    lanes = start.src if start is not None and start.op is Ops.VECTORIZE else (start,)
    if not all(c is not None and c.op is Ops.CONST and c.arg == 0 for c in lanes):
        return None
    started = a.substitute({acc: acc.replace(src=(old, *acc.src[1:]))})
    return store.replace(src=(i, started, *store.src[2:]))


expand_reduces = PatternMatcher([(UPat(Ops.REDUCE, name="u"), _accumulator)])
start_from_stored = PatternMatcher(
    [
        (
            UPat(
                Ops.STORE,
                src=(
                    UPat(name="i"),
                    UPat(
                        Ops.ADD,
                        src=(UPat(name="a"), UPat(Ops.LOAD, src=(UPat(name="i"),), allow_any_len=True, name="old")),
                    ),
                ),
                allow_any_len=True,
                name="store",
            ),
            _start_from_stored,
        )
    ]
)


def _expand_reduces(sink: UOp) -> UOp:
    """Replace each REDUCE by an ASSIGN into a fresh accumulator (DEFINE_ACC), started from the stored value where
    the sum is added to it (`_start_from_stored`); a rewrite pass."""
    return graph_rewrite(sink, expand_reduces + start_from_stored, ctx=[0], name="expand reduces")


def _accumulate_into(wmma: UOp, acc: UOp) -> UOp:
    """A chain of WMMA(a, b, c) started from zero, started from the accumulator instead (no extra ADD)."""
    a, b, c = wmma.src
    if c.op is Ops.WMMA:
        start = _accumulate_into(c, acc)
    else:
        is_zero = all(x.op is Ops.CONST and x.arg == 0 for x in (c.src if c.op is Ops.VECTORIZE else (c,)))
        start = acc if is_zero else acc.alu(Ops.ADD, c)
    return wmma.replace(src=(a, b, start))


def linearize(sink: UOp) -> list[UOp]:
    """The program as a list of UOps, ready for a renderer or the PYTHON interpreter."""
    sink = _expand_reduces(sink)
    nodes = list(sink.toposort)
    chain = sorted((u for u in nodes if u.op is Ops.RANGE), key=lambda r: r.arg)
    pos = {r: i for i, r in enumerate(chain)}

    depth: dict[UOp, int] = {}
    is_post: dict[UOp, bool] = {}

    def seen_from_user(s: UOp) -> int:
        """The loop depth a user of `s` must be at least at."""
        if s.op is Ops.RANGE:
            return pos[s] + 1
        if s.op is Ops.ASSIGN:
            return depth[s.src[0]]  # the accumulator is read after its loops close
        if s.op is Ops.DEFINE_ACC:
            return max(pos[r] for r in s.src[1:]) + 1  # the running value exists only inside its loops
        return depth[s]

    for u in nodes:
        if u.op is Ops.RANGE:
            depth[u] = pos[u]
        elif u.op is Ops.DEFINE_ACC:
            depth[u] = min(pos[r] for r in u.src[1:])
        elif u.op is Ops.ASSIGN:
            depth[u] = max(max(seen_from_user(s) for s in u.src[:2]), max(pos[r] for r in u.src[2:]) + 1)
        else:
            depth[u] = max((seen_from_user(s) for s in u.src), default=0)
        d = depth[u]
        is_post[u] = u.op is not Ops.ASSIGN and any(
            (s.op is Ops.ASSIGN and depth[s.src[0]] == d) or (is_post.get(s, False) and depth[s] == d) for s in u.src
        )

    levels = [_Level() for _ in range(len(chain) + 1)]
    consts = [u for u in nodes if u.op is Ops.CONST]
    for u in nodes:
        if u.op in (Ops.RANGE, Ops.SINK, Ops.CONST):
            continue
        lvl = levels[depth[u]]
        (lvl.post if is_post[u] else lvl.pre).append(u)

    out: list[UOp] = list(consts)

    def emit(d: int) -> None:
        out.extend(levels[d].pre)
        if d < len(chain):
            out.append(chain[d])
            emit(d + 1)
            out.append(UOp(Ops.ENDRANGE, dtypes.void, (chain[d],)))
        out.extend(levels[d].post)

    emit(0)
    out.append(sink)
    _check_order(out)
    return out


def _check_order(program: list[UOp]) -> None:
    seen: set[UOp] = set()
    for u in program:
        for s in u.src:
            if s not in seen and not (u.op is Ops.DEFINE_ACC and s.op is Ops.RANGE):
                raise RuntimeError(f"linearize: {u.op} uses {s.op} before it is defined")
        seen.add(u)
