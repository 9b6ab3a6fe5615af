"""Issue 16's realize fast path: what a realize touches does not grow with the live tensors, and nothing the
schedule cache hands back is stale or bound to the wrong buffers (every result checked against numpy)."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np

from tg import GlobalCounters, Tensor
from tg_tensor.engine.realizer import current, fresh
from tg_tensor.front import front


def test_a_realize_visits_the_holders_of_its_node_not_every_live_tensor() -> None:
    with fresh() as r:
        keep = [Tensor(np.full(4, i, np.float32)).realize() for i in range(300)]
        t = keep[0]
        a, b = t * 4, t * 4  # one node, two holders
        c = t * 5
        r.live_tensors.visits = 0
        a.realize()
        assert r.live_tensors.visits <= 2, f"visited {r.live_tensors.visits} tensors, expected only a's node's holders"
        assert b.uop is a.uop and c.uop is not a.uop  # b shares a's buffer; c stood for another node
        GlobalCounters.reset()
        np.testing.assert_equal(b.numpy(), np.zeros(4, np.float32))
        assert GlobalCounters.kernel_count == 0
        np.testing.assert_equal(c.numpy(), np.zeros(4, np.float32))
        np.testing.assert_equal(keep[7].numpy() * 4, (keep[7] * 4).numpy())


def test_the_live_index_follows_a_tensor_whose_node_changes() -> None:
    with fresh() as r:
        t = Tensor([1.0, 2.0, 3.0]).realize()
        moved = t * 4
        moved.uop = (t * 7).uop  # re-pointed by hand: it no longer stands for t * 4
        a = t * 4
        a.realize()
        assert moved.uop is not a.uop
        np.testing.assert_equal(moved.numpy(), np.array([7.0, 14.0, 21.0], np.float32))
        np.testing.assert_equal(a.numpy(), np.array([4.0, 8.0, 12.0], np.float32))
        assert any(x is moved for x in r.live_tensors.holders(moved.uop))
        assert not any(x is moved for x in r.live_tensors.holders((t * 4).uop))


def test_dead_tensors_leave_the_live_index() -> None:
    with fresh() as r:
        base = len(r.live_tensors)
        ts = [Tensor([float(i)]) * 2 for i in range(50)]
        assert len(r.live_tensors) >= base + 50
        node = ts[3].uop
        del ts
        gc.collect()
        assert len(r.live_tensors) < base + 50
        assert r.live_tensors.holders(node) == []
        assert sum(1 for _ in r.live_tensors) == len(r.live_tensors)
    assert current() is not r


def _f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_cached_schedules_bind_each_graphs_own_buffers(device: str) -> None:
    xs = [_f32(4, seed=i) for i in range(4)]
    outs = [(Tensor(x, device=device) * 2.5 - 1).realize() for x in xs]  # one structure: cached after the first
    for x, out in zip(xs, outs):  # every result kept its own buffer (no replay wrote an earlier output)
        np.testing.assert_allclose(out.numpy(), x * 2.5 - 1, rtol=1e-6)


def test_constants_dtypes_shapes_and_devices_are_part_of_the_structure(device: str) -> None:
    x = _f32(4)
    t = Tensor(x, device=device)
    for c in (2.5, 3.5, 0.0, -0.0, float("inf")):
        with np.errstate(all="ignore"):
            np.testing.assert_equal((1 / (t * c)).numpy(), (1 / (x * np.float32(c))).astype(np.float32))
    ints = np.arange(4, dtype=np.int32)
    np.testing.assert_equal((Tensor(ints, device=device) * 3).numpy(), ints * 3)
    np.testing.assert_allclose((Tensor(x.reshape(2, 2), device=device) * 3).numpy(), x.reshape(2, 2) * 3, rtol=1e-6)
    y = _f32(5, seed=3)
    np.testing.assert_allclose((Tensor(y, device=device) * 3).numpy(), y * 3, rtol=1e-6)
    if device != "PYTHON":
        np.testing.assert_allclose((Tensor(x, device="PYTHON") * 3).numpy(), x * 3, rtol=1e-6)


def test_which_leaf_goes_where_is_part_of_the_structure(device: str) -> None:
    a, b, c = (_f32(4, seed=s) for s in range(3))
    ta, tb, tc = (Tensor(v, device=device) for v in (a, b, c))
    cases = [
        (lambda: (ta - tb) * (ta - tc), (a - b) * (a - c)),
        (lambda: (ta - tb) * (tc - ta), (a - b) * (c - a)),
        (lambda: (tb - ta) * (ta - tc), (b - a) * (a - c)),
        (lambda: (ta - ta) * (tb - tc), (a - a) * (b - c)),
        (lambda: (ta - tb) * (ta - tb), (a - b) * (a - b)),
    ]
    for _ in range(2):  # the second round replays every schedule
        for build, want in cases:
            np.testing.assert_allclose(build().numpy(), want, rtol=1e-5)


def test_views_of_realized_buffers_in_a_cached_structure(device: str) -> None:
    for seed in range(3):
        x = _f32(4, 6, seed=seed)
        t = Tensor(x, device=device).realize()
        got = (t.permute(1, 0)[1:4].reshape(3, 2, 2) + t[0:2].reshape(3, 2, 2).flip(0)).numpy()
        np.testing.assert_allclose(got, x.T[1:4].reshape(3, 2, 2) + x[0:2].reshape(3, 2, 2)[::-1], rtol=1e-6)


def test_a_replayed_structure_reads_the_values_after_an_assign(device: str) -> None:
    w = Tensor(np.array([1.0, 2.0, 3.0], np.float32), device=device).realize()
    before = w * 2  # built before the write: keeps the old values
    np.testing.assert_equal((w * 2).numpy(), [2.0, 4.0, 6.0])  # caches `w * 2`'s structure
    w.assign(Tensor(np.array([10.0, 20.0, 30.0], np.float32), device=device)).realize()
    np.testing.assert_equal((w * 2).numpy(), [20.0, 40.0, 60.0])  # the same structure, the new version
    np.testing.assert_equal(before.numpy(), [2.0, 4.0, 6.0])
    w += 1
    np.testing.assert_equal((w * 2).numpy(), [22.0, 42.0, 62.0])


def test_a_node_realized_after_its_structure_was_cached_is_read_from_its_buffer() -> None:
    t = Tensor(_f32(4)).realize()
    m = t * 2
    lazy = m.uop
    first = (Tensor(lazy) + 1).realize()  # caches the structure `t * 2 + 1`: one kernel from t
    m.realize()
    items = (Tensor(lazy) + 1).schedule()  # m's node is realized now: the kernel loads m's buffer
    assert len(items) == 1 and any(b is current().buffers[m.uop.base] for b in items[0].bufs)
    current().run(items)
    np.testing.assert_allclose(first.numpy(), t.numpy() * 2 + 1, rtol=1e-6)


def test_a_cached_structure_never_revives_a_buffer_a_failed_realize_left_unwritten() -> None:
    bad = Tensor(_f32(4)).realize()
    current().failed[bad.uop.base] = "a test marks it failed"
    try:
        (Tensor(_f32(4, seed=1)) * 3).realize()  # the structure is cached with a healthy buffer
        import pytest

        with pytest.raises(RuntimeError, match="never computed"):
            (bad * 3).realize()
    finally:
        del current().failed[bad.uop.base]


def test_pickled_and_copied_tensors_join_the_live_index() -> None:
    import copy
    import pickle

    with fresh() as r:
        t = Tensor(np.array([1.0, 2.0], np.float32)).realize()
        lazy = t * 3
        for other in (pickle.loads(pickle.dumps(lazy)), copy.copy(lazy)):
            assert other.uop is lazy.uop and other is not lazy
            assert sum(1 for x in r.live_tensors.holders(lazy.uop) if x is other) == 1
        again = copy.copy(lazy)
        lazy.realize()  # every holder of the node now stands for its buffer
        assert again.uop is lazy.uop
        np.testing.assert_equal(again.numpy(), np.array([3.0, 6.0], np.float32))
        again.uop = (t * 5).uop  # the copy moves alone: the original keeps its own entry
        assert any(x is lazy for x in r.live_tensors.holders(lazy.uop))
        assert not any(x is again for x in r.live_tensors.holders(lazy.uop))


def test_scalar_operands_from_the_view_cache_are_never_stale(device: str) -> None:
    """`t * c` takes the view of `c` from a small cache keyed by value, its type and sign, dtype, device, shape:
    every change of one of them must give the new value (checked against numpy, each case twice: the second
    time from the cache)."""
    x = _f32(4) + 2  # (positive: 1 / (x * -0.0) is -inf)
    ints = np.array([3, -7, 0, 2**30], np.int32)
    bools = np.array([True, False, True, False])
    t, ti, tb = Tensor(x, device=device), Tensor(ints, device=device), Tensor(bools, device=device)
    with np.errstate(all="ignore"):
        cases = [
            (lambda: 1 / (t * 0.0), 1 / (x * np.float32(0.0))),
            (lambda: 1 / (t * -0.0), 1 / (x * np.float32(-0.0))),  # -0.0 == 0.0 in Python: the sign is in the key
            (lambda: t * 2.5, x * np.float32(2.5)),
            (lambda: t * 3.5, x * np.float32(3.5)),
            (lambda: t * float("nan"), x * np.float32(np.nan)),
            (lambda: 2.5 - t, np.float32(2.5) - x),
            (lambda: t - 2.5, x - np.float32(2.5)),
            (lambda: t * 2, x * np.float32(2)),
            (lambda: t.reshape(2, 2) * 2.5, x.reshape(2, 2) * np.float32(2.5)),  # another shape
            (lambda: t.half() * 0.1, x.astype(np.float16) * np.float16(0.1)),  # another dtype: 0.1 rounds otherwise
            (lambda: ti * 3, ints * 3),
            (lambda: ti * True, ints * 1),  # True == 1 in Python: the type is in the key
            (lambda: ti + 1, ints + 1),
            (lambda: ti * 2.5, (ints * 2.5).astype(np.float32)),  # widens to float: no cached view
            (lambda: tb + True, bools | True),
            (lambda: tb * True, bools & True),
            (lambda: tb * 1, bools.astype(np.int32)),  # an int with a bool tensor widens
        ]
        for _ in range(2):
            for build, want in cases:
                got = build().numpy()
                assert got.dtype == want.dtype, (got.dtype, want.dtype)
                np.testing.assert_allclose(got, want, rtol=1e-3 if want.dtype == np.float16 else 1e-6)
    if device != "PYTHON":  # another device: its own view
        np.testing.assert_allclose((Tensor(x, device="PYTHON") * 2.5).numpy(), x * np.float32(2.5), rtol=1e-6)


def test_the_scalar_view_cache_stays_small_and_right() -> None:
    from tg_tensor.elementwise import SCALAR_VIEWS_MAX

    with fresh() as r:
        x = _f32(3)
        t = Tensor(x)
        for i in range(SCALAR_VIEWS_MAX + 40):
            c = float(i) / 7
            if i % 50 == 0:
                np.testing.assert_allclose((t * c).numpy(), x * np.float32(c), rtol=1e-6)
            else:
                t * c
            assert len(front(r).scalar_views) <= SCALAR_VIEWS_MAX
        np.testing.assert_allclose((t * (1 / 7)).numpy(), x * np.float32(1 / 7), rtol=1e-6)


def test_the_short_way_of_a_seen_structure_keeps_realize_semantics() -> None:
    """Realizer.realize replays a cached one-kernel structure straight to its launch: results, other holders of
    the node, queued items, autograd's graph and failures must behave as through schedule + run."""
    with fresh() as r:
        x, y = _f32(4), _f32(4, seed=1)
        t, u = Tensor(x).realize(), Tensor(y).realize()
        (t * 4).realize()  # the structure `buffer * 4` is cached now
        a, b = u * 4, u * 4  # one node, two holders
        GlobalCounters.reset()
        a.realize()
        assert GlobalCounters.kernel_count == 1 and b.uop is a.uop
        np.testing.assert_allclose(b.numpy(), y * 4, rtol=1e-6)
        queued = t * 3
        queued.schedule()  # queued, not run: the next realize runs it first (no short way past the queue)
        (u * 4).realize()
        assert not r.pending
        np.testing.assert_allclose(queued.numpy(), x * 3, rtol=1e-6)
        w = Tensor(x, requires_grad=True)
        (w * 4).sum().realize()
        out = (w * 4).sum()  # the same structure: replayed, and autograd still sees the graph it was built from
        out.realize()
        out.backward()
        assert w.grad is not None
        np.testing.assert_allclose(w.grad.numpy(), np.full(4, 4.0, np.float32))
        node = a.uop
        GlobalCounters.reset()
        a.realize()  # realized already: nothing runs, nothing changes
        assert GlobalCounters.kernel_count == 0 and a.uop is node
        later = t * 5
        later.schedule()
        a.realize()  # ... but what is queued still runs
        assert not r.pending and GlobalCounters.kernel_count == 1
        np.testing.assert_allclose(later.numpy(), x * 5, rtol=1e-6)
        bad = Tensor(_f32(4, seed=2)).realize()
        r.failed[bad.uop.base] = "a test marks it failed"
        import pytest

        with pytest.raises(RuntimeError, match="never computed"):
            (bad * 4).realize()
        del r.failed[bad.uop.base]
        np.testing.assert_allclose((bad * 4).numpy(), bad.numpy() * 4, rtol=1e-6)


def test_structure_ids_of_binary_nodes_match_a_naive_canonical_form() -> None:
    """structure() (with its short way for two sources) agrees with a plain recursive canonical form: equal ids
    exactly for graphs equal up to which buffers they read (by first use), and the leaves in first-use order."""
    from tg_uop import Ops, UOp, dtypes
    from tg_uop.structure import structure
    from tg_uop.uop import arg_key

    def canon(node: UOp, order: list[UOp]) -> object:
        if node.op is Ops.BUFFER:
            if node not in order:
                order.append(node)
            return ("BUF", order.index(node), node.dtype, node.arg[1], node.src[0].arg)
        return (node.op, node.dtype, arg_key(node.arg), tuple(canon(s, order) for s in node.src))

    for rnd in range(2):  # fresh buffers each round: the same shapes of graph must get the same ids again
        a, b, c = (UOp.new_buffer("CPU", 4, dtypes.float) for _ in range(3))
        e = UOp.new_buffer("CPU", 5, dtypes.float)
        k, k2 = UOp(Ops.CONST, dtypes.float, (), 2.5), UOp(Ops.CONST, dtypes.float, (), -0.0)
        graphs = [a + b, b + a, a + a, a + e, a * k, k * a, k + k2, k2 + k, a * b, (a + b) + c, (a + b) + a]
        graphs += [a + (b + c), c + (a + b), (a + b) * (b + a), k + (a + b), (a + b) + k, (a + b) * (a + b)]
        graphs += [((a + k) + b) + (c + a), (a + a) + b, b + (a + a), -a + b, -(a + b)]
        forms = []
        for g in graphs:
            order: list[UOp] = []
            forms.append(canon(g, order))
            assert structure(g)[1] == tuple(order), f"leaves of {g.op} out of first-use order"
        ids = [structure(g)[0] for g in graphs]
        for i in range(len(graphs)):
            for j in range(len(graphs)):
                assert (ids[i] == ids[j]) == (forms[i] == forms[j]), f"round {rnd}: graphs {i} and {j}"
        if rnd == 0:
            first = ids
        else:
            assert ids == first, "the same shapes of graph over new buffers got other ids"


def test_a_realized_equal_constant_does_not_stand_for_a_cached_scalar_view() -> None:
    # `t * 2.5` takes its constant view from a cache; Tensor.full of the same value and shape is the same node: once
    # realized and then assigned to, the old record made `t * 2.5` read an overwritten buffer (StaleReadError)
    t = Tensor([1.0, 1.0, 1.0, 1.0]).realize()
    assert (t * 2.5).tolist() == [2.5] * 4
    x = Tensor.full((4,), 2.5)
    x.realize()
    x.assign(Tensor([10.0, 20.0, 30.0, 40.0])).realize()
    assert x.tolist() == [10.0, 20.0, 30.0, 40.0]
    assert (t * 2.5).tolist() == [2.5] * 4
    w = Tensor.zeros(4).realize()
    w.assign(w + 1).realize()
    assert (t * 0).tolist() == [0.0] * 4 and w.tolist() == [1.0] * 4


def test_the_short_way_shares_reshaped_results_and_rolls_back_a_failed_launch(monkeypatch: Any) -> None:
    """The short way points the other holders of the tensor's own node (a reshape of the computed one) at the
    result, leaves holders of the unreshaped node to find it through the realized record, and a launch that
    raises leaves its output marked failed (read: an error, not garbage) and computes again next time."""
    import pytest

    import tg_tensor.engine.realizer as realizer_mod

    with fresh():
        x = _f32(4)
        t = Tensor(x).realize()
        (t * 4).realize()  # cached: `buffer * 4`
        a, b, c = (t * 4).reshape(2, 2), (t * 4).reshape(2, 2), t * 4
        a.realize()
        assert b.uop is a.uop and b.shape == (2, 2) and c.shape == (4,)
        np.testing.assert_allclose(b.numpy(), (x * 4).reshape(2, 2), rtol=1e-6)
        np.testing.assert_allclose(c.numpy(), x * 4, rtol=1e-6)

        class Broken:  # (a runner whose launches fail, by either way of launching)
            def __call__(self, *args: Any) -> None:
                raise OSError("the launch failed")

            run_replayed = __call__

        def broken(device: str, ast: Any) -> Any:
            return Broken()

        u = Tensor(_f32(4, seed=3)).realize()
        with monkeypatch.context() as m:
            m.setattr(realizer_mod, "get_runner", broken)
            f = u * 4  # a structure seen before: the short way
            with pytest.raises(OSError, match="the launch failed"):
                f.realize()
        with pytest.raises(RuntimeError, match="never computed"):
            f.numpy()
        np.testing.assert_allclose((u * 4).numpy(), u.numpy() * 4, rtol=1e-6)


def test_the_short_way_launches_a_kernel_of_a_bound_variable(monkeypatch: Any) -> None:
    """A seen structure with a bound Variable replays through CompiledRunner.run_replayed with the variable's
    value (its launch passes the values; a kernel without variables calls the program's launcher)."""
    from tg_runtime.device import DeviceSet
    from tg_runtime.runner import CompiledRunner
    from tg_uop import UOp

    seen: list[tuple[int, ...]] = []
    run_replayed = CompiledRunner.run_replayed

    def spy(self: CompiledRunner, bufs: Any, var_vals: Any) -> None:
        seen.append(tuple(var_vals.values()))
        run_replayed(self, bufs, var_vals)

    monkeypatch.setattr(CompiledRunner, "run_replayed", spy)
    monkeypatch.setattr(DeviceSet, "made", False)  # (a multi-device test before this one turns the short way off)
    with fresh():
        v = UOp.variable("i", 1, 10)
        for seed in range(3):
            x = _f32(8, seed=seed)
            t = Tensor(x).realize()
            out = (t.shrink(((0, v.bind(3)),)) * 2).realize()
            np.testing.assert_allclose(out.numpy(), x[:3] * 2, rtol=1e-6)
    assert seen == [(3,), (3,)]  # the first realize recorded the structure, the next two replayed it


def test_a_realized_reduction_is_a_view_of_its_buffer() -> None:
    """A matmul's (or any keepdim-free reduction's) root has a trailing axis of 1 that the tensor's reshape takes off:
    by either way of realizing (a schedule, then the short way of a seen structure) the tensor becomes one reshape of
    its buffer (a contiguous buffer, read without a kernel), and a graph on the root finds the same values."""
    from tg_tensor.engine.util import is_contiguous_buffer

    with fresh():
        for seed in range(3):  # (the first schedules and caches, the others replay)
            a, b = _f32(6, 5, seed=seed), _f32(5, 7, seed=seed + 10)
            ta, tb = Tensor(a).realize(), Tensor(b).realize()
            c, s = ta @ tb, (ta * 2).sum(1)
            root = c.uop.src[0]  # (the reduce, of shape (6, 7, 1))
            same_root = Tensor(root)
            c.realize(), s.realize()
            assert is_contiguous_buffer(c.uop) and is_contiguous_buffer(s.uop), (c.uop.op, s.uop.op)
            GlobalCounters.reset()
            np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(s.numpy(), (a * 2).sum(1), rtol=1e-5, atol=1e-5)
            assert GlobalCounters.kernel_count == 0
            np.testing.assert_allclose(same_root.numpy().reshape(6, 7), a @ b, rtol=1e-5, atol=1e-5)
