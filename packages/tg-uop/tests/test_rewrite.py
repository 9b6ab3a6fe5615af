"""UPat, PatternMatcher and graph_rewrite."""

from __future__ import annotations

from tg_uop import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite


def test_seed_example() -> None:
    pm = PatternMatcher([(UPat.cvar("c1") + UPat.cvar("c2"), lambda c1, c2: c1.const_like(c1.arg + c2.arg))])
    e = (UOp.const(dtypes.int32, 1) + 2) + UOp.const(dtypes.int32, 3)
    assert graph_rewrite(e, pm) is UOp.const(dtypes.int32, 6)


def test_commutative_sugar_matches_either_order() -> None:
    x = UOp.variable("x", 0, 9)
    pm = PatternMatcher([(UPat.var("a") + UPat.cvar("c"), lambda a, c: a * c)])
    three = UOp.const(dtypes.int32, 3)
    assert graph_rewrite(x + 3, pm) is x * 3
    assert graph_rewrite(three.alu(Ops.ADD, x), pm) is x * 3


def test_tuple_src_is_ordered_list_is_any_order() -> None:
    x = UOp.variable("x", 0, 9)
    c = UOp.const(dtypes.int32, 2)
    ordered = UPat(Ops.SUB, src=(UPat.var("a"), UPat.cvar("c")))
    anyorder = UPat(Ops.SUB, src=[UPat.var("a"), UPat.cvar("c")])
    assert ordered.match(x - 2, {}) and not ordered.match(c.alu(Ops.SUB, x), {})
    assert anyorder.match(c.alu(Ops.SUB, x), {})


def test_match_on_dtype_arg_and_repeated_name() -> None:
    x = UOp.variable("x", 0, 9)
    assert UPat(Ops.CONST, dtype=dtypes.int32, arg=5).match(UOp.const(dtypes.int32, 5), {})
    assert not UPat(Ops.CONST, dtype=dtypes.float32).match(UOp.const(dtypes.int32, 5), {})
    same = UPat.var("a") * UPat.var("a")
    assert same.match(x * x, {}) and not same.match(x * (x + 1), {})


def test_matcher_is_indexed_by_op_and_composes() -> None:
    a = PatternMatcher([(UPat(Ops.MUL, name="m"), lambda m: m.src[0])])
    b = PatternMatcher([(UPat(Ops.ADD, name="s"), lambda s: s.src[0])])
    assert set(a.by_op) == {Ops.MUL}
    x = UOp.variable("x", 0, 9)
    assert graph_rewrite((x * 2) + 1, a + b) is x


def test_ctx_is_passed_to_rules_that_ask() -> None:
    seen: list[UOp] = []
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda ctx, v: ctx.append(v))])
    x, y = UOp.variable("x", 0, 9), UOp.variable("y", 0, 9)
    graph_rewrite(x + y, pm, ctx=seen)
    assert seen == [x, y]


def test_bottom_up_sees_the_original_subtree() -> None:
    x = UOp.variable("x", 0, 9)
    fold_mul = PatternMatcher(
        [
            (UPat(Ops.MUL, src=(UPat(Ops.ADD, name="a"), UPat.cvar("c"))), lambda a, c: UOp.const(dtypes.int32, -1)),
            (UPat(Ops.ADD, name="a"), lambda a: a.src[0]),
        ]
    )
    e = (x + 1) * 2
    assert graph_rewrite(e, fold_mul) is x * 2  # sources first: the ADD is gone before the MUL is seen
    assert graph_rewrite(e, fold_mul, bottom_up=True).arg == -1  # node first


def test_rewrite_reaches_fixed_point_and_memoizes() -> None:
    x = UOp.variable("x", 0, 9)
    calls: list[UOp] = []

    def dec(c: UOp) -> UOp | None:
        calls.append(c)
        return c.const_like(c.arg - 1) if c.arg > 0 else None

    pm = PatternMatcher([(UPat.cvar("c"), dec)])
    shared = x + 5
    out = graph_rewrite(shared * shared, pm)
    assert out is (x + 0) * (x + 0)


def test_operator_sugar_covers_reflected_and_bitwise_ops() -> None:
    x = UOp.variable("x", 0, 9)
    b = x < 3
    assert (10 - UPat.var("v")).match(UOp.const(dtypes.int32, 10) - x, {})
    assert (UPat.var("p") & UPat.var("q")).match(b & (x < 5), {})
    assert (UPat.var("p") | UPat.var("q")).match(b | (x < 5), {})
    assert (UPat.var("p") ^ UPat.cvar("c")).match(x ^ 3, {})
    f = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("f", 0, 1))
    assert (UPat.var("a") / UPat.cvar("c")).match(f / 2.0, {})
