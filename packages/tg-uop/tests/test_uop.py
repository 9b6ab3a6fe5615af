"""UOp: hash-consing, freeing, printing, construction checks, range analysis, variables."""

from __future__ import annotations

import gc
import math
import weakref

import pytest

from tg_uop import Ops, UOp, Variable, dtypes
from tg_uop.evaluate import evaluate
from tg_uop.uop import UOpMetaClass


def test_million_identical_uops_are_one_object() -> None:
    x = UOp.variable("x", 0, 10)
    made = [UOp(Ops.ADD, dtypes.int32, (x, UOp.const(dtypes.int32, 1))) for _ in range(1_000_000)]
    assert len({id(u) for u in made}) == 1
    assert made[0] is x + 1


def test_dropped_uops_are_freed() -> None:
    u = UOp.variable("only_here", 0, 3) * 12345
    refs = [weakref.ref(n) for n in u.toposort]
    assert sum(1 for r in UOpMetaClass.ucache.values() if r() in u.toposort) == 3
    del u
    gc.collect()
    assert all(r() is None for r in refs)
    assert all(r() is not None for r in UOpMetaClass.ucache.values())  # dead entries left the cache
    assert not any(k[0] is Ops.DEFINE_VAR and "only_here" in str(k[3]) for k in UOpMetaClass.ucache)


def test_uops_are_immutable() -> None:
    x = UOp.variable("x", 0, 3)
    with pytest.raises(AttributeError, match="immutable"):
        x.arg = ("y", 0, 3)  # type: ignore[misc]
    assert x.replace(arg=("y", 0, 3)) is UOp.variable("y", 0, 3)


def test_float_args_keep_negative_zero_apart() -> None:
    assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
    assert UOp.const(dtypes.float32, float("nan")) is UOp.const(dtypes.float32, float("nan"))


def test_nested_args_are_keyed_by_type_as_well_as_value() -> None:
    """A nested tuple of ints (a pad, a reduce's (op, axes)) is its own key; a float or bool inside keeps it apart
    from the equal-comparing ints (1 == 1.0 == True) and -0.0 from 0.0, at any depth."""
    from tg_uop.structure import structure

    buf = UOp.new_buffer("CPU", 4, dtypes.float)
    pads = [((0, 1),), ((0, 1.0),), ((0, True),), ((0, 1), "x"), ((0, (1, 1)),)]
    nodes = [UOp(Ops.PAD, dtypes.float, (buf,), p) for p in pads]
    assert len({id(n) for n in nodes}) == len(pads)
    assert nodes[0] is UOp(Ops.PAD, dtypes.float, (buf,), ((0, 1),))
    assert len({structure(n)[0] for n in nodes}) == len(pads)
    zeros = [UOp(Ops.PAD, dtypes.float, (buf,), ((z, 1),)) for z in (0.0, -0.0)]
    assert zeros[0] is not zeros[1] and structure(zeros[0])[0] != structure(zeros[1])[0]
    reduce = buf.r(Ops.ADD, (0,))
    assert reduce is UOp(Ops.REDUCE_AXIS, dtypes.float, (buf,), (Ops.ADD, (0,)))
    assert reduce is not UOp(Ops.REDUCE_AXIS, dtypes.float, (buf,), (Ops.MAX, (0,)))


def test_repr_prints_shared_subtrees_once() -> None:
    x = UOp.variable("x", 0, 10)
    shared = x * 3 + 1
    text = repr(shared * shared)
    assert text.count("Ops.DEFINE_VAR") == 1 and text.startswith("x0 = ")


def test_toposort_puts_sources_first() -> None:
    x = UOp.variable("x", 0, 10)
    e = (x + 1) * (x + 1) + x
    order = list(e.toposort)
    assert order[-1] is e and all(order.index(s) < order.index(n) for n in order for s in n.src)


def test_alu_dtype_mismatch_names_dtypes_and_op() -> None:
    a, b = UOp.const(dtypes.int32, 1), UOp.const(dtypes.float32, 1.0)
    with pytest.raises(TypeError, match=r"ADD.*dtypes\.int.*dtypes\.float"):
        a + b
    with pytest.raises(TypeError, match=r"IDIV.*float"):
        b // b
    with pytest.raises(TypeError, match=r"WHERE.*bool"):
        a.where(a, a)


def test_const_like_and_cast() -> None:
    f = UOp.const(dtypes.float16, 1.0)
    assert f.const_like(3).dtype == dtypes.float16 and f.const_like(3).arg == 3.0
    assert UOp.const(dtypes.uint8, 300).arg == 44
    assert UOp.const(dtypes.int32, 5).cast(dtypes.float32).simplify().arg == 5.0


def test_comparisons_build_bool_nodes() -> None:
    x = UOp.variable("x", 0, 10)
    assert (x < 3).dtype == dtypes.bool and (x >= 3).dtype == dtypes.bool
    assert evaluate(x >= 3, {x: 3}) is True and evaluate(x <= 3, {x: 4}) is False


def test_substitute() -> None:
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    e = (x + 2) * x
    assert e.substitute({x: y}) is (y + 2) * y


def test_float_bounds_are_never_nan() -> None:
    """A NaN constant, or a bound that comes out NaN (x + inf with x down to -inf), gives the dtype's range."""
    f = dtypes.float32
    x = UOp(Ops.LOAD, f, (UOp(Ops.DEFINE_GLOBAL, f.ptr(), (), 0),))
    nan, zero = UOp.const(f, float("nan")), UOp.const(f, 0.0)
    assert (nan.vmin, nan.vmax) == (-math.inf, math.inf)
    assert ((x + math.inf).vmin, (x + math.inf).vmax) == (-math.inf, math.inf)
    c = x < zero
    w = c.where(zero, c.where(nan, x))
    assert (w.vmin, w.vmax) == (-math.inf, math.inf)  # was [0.0, 0.0]: min(0.0, nan) is 0.0
    assert (UOp.const(f, 1e-12) < w).vmin is False and (UOp.const(f, 1e-12) < w).vmax is True


def test_vmin_vmax() -> None:
    x, w = UOp.variable("x", 0, 10), UOp.variable("w", -4, 4)
    assert ((x * 4 + 3).vmin, (x * 4 + 3).vmax) == (3, 43)
    assert ((x % 4).vmin, (x % 4).vmax) == (0, 3)
    assert ((w % 3).vmin, (w % 3).vmax) == (-2, 2)
    assert ((w // 2).vmin, (w // 2).vmax) == (-2, 2)
    assert ((x - w).vmin, (x - w).vmax) == (-4, 14)
    assert (x < 11).vmin is True and (x < 0).vmax is False
    big = UOp.variable("big", 0, 2**31 - 1)
    assert (big + 1).vmin == dtypes.min(dtypes.int32)  # may wrap: bounds are the dtype's
    assert (big.cast(dtypes.uint8)).vmax == 255


def test_render() -> None:
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 3)
    assert ((x * 4 + y) // 2).render() == "(((x*4)+y)//2)"
    assert (x < 3).where(x, y).render() == "(x if (x<3) else y)"


def test_variable_bind_unbind() -> None:
    n = Variable("n", 1, 32)
    bound = n.bind(7)
    assert bound.unbind() == (n, 7) and bound.vmin == 1 and bound.vmax == 32
    assert evaluate(bound * 2, {}) == 14
    with pytest.raises(ValueError, match=r"'n'.*40.*\[1, 32\]"):
        n.bind(40)
    with pytest.raises(ValueError, match=r"'m'.*\[5, 2\]"):
        UOp.variable("m", 5, 2)


def test_tensor_level_movement_errors_name_shape_and_arg() -> None:
    b = UOp.new_buffer("PYTHON", 12, dtypes.float32).reshape((3, 4))
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5, 5\)"):
        b.reshape((5, 5))
    with pytest.raises(ValueError, match=r"\(0, 0\).*\(3, 4\)"):
        b.permute((0, 0))
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(6, 4\)"):
        b.expand((6, 4))
    with pytest.raises(ValueError, match=r"-1.*\(3, 4\)"):
        b.pad(((0, 0), (-1, 0)))
    with pytest.raises(ValueError, match=r"\(0, 5\).*\(3, 4\)"):
        b.shrink(((0, 3), (0, 5)))


def test_evaluate_reports_missing_variable() -> None:
    with pytest.raises(ValueError, match="'q'"):
        evaluate(UOp.variable("q", 0, 3) + 1, {})


def test_cached_graph_walks_do_not_keep_a_node_alive() -> None:
    # toposort and base are cached or computed without a reference from the node to itself: a dropped graph
    # dies by reference counting, not at the next cyclic GC (its buffers are released at once)
    gc.disable()
    try:
        a = UOp.variable("a", 0, 9)
        node = (a * 3 + 1).maximum(a)
        assert (
            list(node.toposort)[-1] is node and node in node.toposort and len(node.toposort) == len(set(node.toposort))
        )
        assert node.base is node
        ref = weakref.ref(node)
        del node
        assert ref() is None
    finally:
        gc.enable()
