"""Issue 16's realize fast path: what a realize touches does not grow with the live tensors, and nothing the
schedule cache hands back is stale or bound to the wrong buffers (every result checked against numpy)."""

from __future__ import annotations

import gc

import numpy as np

from tg import GlobalCounters, Tensor
from tg_tensor.realizer import current, fresh


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
