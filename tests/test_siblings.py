"""Kernels with several outputs (tg_tensor/engine/siblings.py): sibling kernels over the same loops run as one launch,
with the values numpy gives; matmuls, dependent kernels and MERGE_SIBLINGS=0 stay apart."""

from __future__ import annotations

import numpy as np

from tg import Context, GlobalCounters, Tensor, TinyJit
from tg_tensor.engine.realizer import ScheduleItem, current
from tg_tensor.engine.siblings import merge_siblings


def _items(*ts: Tensor) -> list[ScheduleItem]:
    items = ts[0].schedule(*ts[1:])
    for it in items:
        current().unqueue(it)
    return items


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_sums_over_the_same_rows_are_one_kernel() -> None:
    # a layer norm's backward: the bias gradient (sum of dy) and the weight gradient (sum of dy * x-hat), x-hat
    # from the row's mean and spread (read along the row: a broadcast that is no product)
    dy, x = _data(64, 48), _data(64, 48, seed=1)
    tdy, tx = Tensor(dy).realize(), Tensor(x).realize()
    xhat = (tx - tx.mean(1, keepdim=True).contiguous()) * 0.5
    db, dw = tdy.sum(0), (tdy * xhat).sum(0)
    GlobalCounters.reset()
    Tensor.realize(db, dw)
    ref_hat = (x - x.mean(1, keepdims=True)) * 0.5
    np.testing.assert_allclose(db.numpy(), dy.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw.numpy(), (dy * ref_hat).sum(0), rtol=1e-5, atol=1e-5)
    assert GlobalCounters.kernel_count == 2, "the row means, then both gradients in one kernel"


def test_one_kernel_two_outputs_in_the_schedule() -> None:
    x = Tensor(_data(16, 32)).realize()
    items = _items(x.sum(0), (x * x).sum(0), x.max(0))
    assert len(items) == 1 and len(items[0].ast.src) == 3 and items[0].outputs == 3
    assert items[0].also_writes and items[0].writes is not None


def test_matmuls_sharing_an_operand_stay_apart() -> None:
    a, b, c = (Tensor(_data(32, 32, seed=s)).realize() for s in range(3))
    items = _items(a @ b, a @ c)
    assert len(items) == 2 and all(len(it.ast.src) == 1 for it in items)


def test_sums_reading_weights_updated_in_the_same_schedule_are_one_kernel() -> None:
    """A training step's kernels that read a weight the optimizer then updates in place (one schedule): two sums
    reading the old weights share a kernel, which runs before the update; a kernel reading the updated weights does
    not join one reading the old ones (one kernel could not run both before and after the write)."""
    x, w0 = _data(16, 32), _data(16, 32, seed=1)

    def step(old_and_new: bool = False) -> tuple[Tensor, ...]:
        tx, w = Tensor(x).realize(), Tensor(w0).realize()
        if old_and_new:
            c = (tx * w).sum(1)
            return c, (tx * w.assign(w * 2)).sum(1)
        return (tx * w).sum(1), (tx + w).max(1), w.assign(w * 0.5)

    items = _items(*step())
    assert len(items) == 2 and sorted(len(it.ast.src) for it in items) == [1, 2]
    a, b, w = step()
    Tensor.realize(a, b, w)
    np.testing.assert_allclose(a.numpy(), (x * w0).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.numpy(), (x + w0).max(1), rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), w0 * 0.5, rtol=1e-6)
    assert all(len(it.ast.src) == 1 for it in _items(*step(old_and_new=True)))
    c, d = step(old_and_new=True)
    Tensor.realize(c, d)
    np.testing.assert_allclose(c.numpy(), (x * w0).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d.numpy(), (x * w0 * 2).sum(1), rtol=1e-5, atol=1e-5)


def test_a_sum_of_old_weights_and_one_made_from_the_new_ones_stay_apart() -> None:
    """One sum reads the weights before their in-place update; another reads a buffer computed from the updated
    weights (it does not read them itself). Merged, the kernel would have to run before the update and after it:
    they stay two kernels, and both values are right."""
    x, w0 = _data(16, 32), _data(16, 32, seed=1)
    tx, w = Tensor(x).realize(), Tensor(w0).realize()
    old = (tx * w).sum(1)
    scaled = (w.assign(w * 0.5) * 3).contiguous()
    new = (tx * scaled).sum(1)
    Tensor.realize(old, new)
    np.testing.assert_allclose(old.numpy(), (x * w0).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(new.numpy(), (x * w0 * 1.5).sum(1), rtol=1e-5, atol=1e-5)


def test_a_kernel_reading_its_sibling_is_not_merged() -> None:
    x = Tensor(_data(8, 8)).realize()
    y = x * 2
    first = _items(y)  # y is scheduled: z below reads its buffer
    second = _items(y + 1)
    assert len(first) == len(second) == 1 and second[0].reads == (first[0].writes,)
    assert len(merge_siblings(first + second)) == 2
    w = x * 3  # the same loops, reading only x: joins y's kernel
    assert [len(it.ast.src) for it in merge_siblings(first + _items(w))] == [2]


def test_merge_off() -> None:
    x = Tensor(_data(16, 32)).realize()
    with Context(MERGE_SIBLINGS=0):
        items = _items(x.sum(0), (x * x).sum(0))
    assert len(items) == 2


def test_siblings_replayed_from_the_schedule_cache_and_a_jit() -> None:
    """The second realize of the same graph comes from the schedule cache (an item replayed with two outputs),
    and a TinyJit replays the merged kernel: every output right each time."""

    def both(t: Tensor) -> tuple[Tensor, Tensor]:
        return t.sum(0), (t * t + 1).sum(0)

    for seed in range(3):
        x = _data(24, 40, seed=seed)
        s, q = both(Tensor(x))
        Tensor.realize(s, q)
        np.testing.assert_allclose(s.numpy(), x.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(q.numpy(), (x * x + 1).sum(0), rtol=1e-5, atol=1e-4)

    @TinyJit
    def step(t: Tensor) -> tuple[Tensor, Tensor]:
        s, q = both(t)
        return s.realize(), q.realize()

    for seed in range(4):
        x = _data(24, 40, seed=10 + seed)
        s, q = step(Tensor(x))
        np.testing.assert_allclose(s.numpy(), x.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(q.numpy(), (x * x + 1).sum(0), rtol=1e-5, atol=1e-4)
