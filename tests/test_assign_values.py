"""In-place assign keeps value semantics: lazy tensors built before the write see the old values.

Views of the assigned memory (a realized reshape, a slice) see the write, as in PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest

from tg import GlobalCounters, Tensor, TinyJit, UOp, dtypes
from tg.nn import Linear
from tg.nn.optim import SGD, Adam
from tg_tensor.engine.realizer import StaleReadError
from tg_tensor.engine.schedule import buffer_of


def test_lazy_tensor_built_before_assign_keeps_old_values(device: str) -> None:
    w = Tensor([1.0, 2.0], device=device).realize()
    buf = buffer_of(w.uop.base)
    y = w * 2
    w.assign(Tensor([10.0, 20.0], device=device)).realize()
    assert y.tolist() == [2.0, 4.0]
    assert w.tolist() == [10.0, 20.0] and buffer_of(w.uop.base) is buf  # still written in place
    assert (w * 2).tolist() == [20.0, 40.0]


def test_no_copy_without_live_readers(device: str) -> None:
    w = Tensor([1.0, 2.0], device=device).realize()
    GlobalCounters.reset()
    w.assign(w * 3 + 1).realize()
    assert GlobalCounters.kernel_count == 1 and w.tolist() == [4.0, 7.0]
    y = w - 1
    GlobalCounters.reset()
    w.assign(w * 0).realize()
    assert GlobalCounters.kernel_count == 2  # the assign and one copy of the old values for y
    assert y.tolist() == [3.0, 6.0]


def test_views_share_memory_and_computations_do_not(device: str) -> None:
    w = Tensor([1.0, 2.0, 3.0], device=device).realize()
    col = w.reshape(3, 1)  # a view of the realized buffer
    tail = w[1:]  # a lazy view
    tail_sum = w[1:].sum()  # a computation on a view
    flipped = w.flip(0) + 0
    w.assign(Tensor([4.0, 5.0, 6.0], device=device)).realize()
    assert col.numpy().ravel().tolist() == [4.0, 5.0, 6.0]
    assert tail.tolist() == [5.0, 6.0]
    assert tail_sum.item() == 5.0 and flipped.tolist() == [3.0, 2.0, 1.0]


def test_assign_through_a_reshaped_view(device: str) -> None:
    w = Tensor([1.0, 2.0, 3.0, 4.0], device=device).realize()
    y = w.sum()
    v = w.reshape(2, 2)
    v.assign(v * 10).realize()
    assert w.tolist() == [10.0, 20.0, 30.0, 40.0]  # the view's memory is w's
    assert y.item() == 10.0


def test_chained_assigns(device: str) -> None:
    w = Tensor([1.0, 2.0], device=device).realize()
    buf = buffer_of(w.uop.base)
    before = w + 0
    w.assign(w + 1)
    mid = w * 10
    w.assign(w * 2)
    w.assign(w - 1)
    assert w.tolist() == [3.0, 5.0] and buffer_of(w.uop.base) is buf
    assert mid.tolist() == [20.0, 30.0] and before.tolist() == [1.0, 2.0]
    for i in range(3):
        w.assign(w + i).realize()
    assert w.tolist() == [6.0, 8.0]


def test_assign_reading_its_own_view_shifted(device: str) -> None:
    w = Tensor([1.0, 2.0, 3.0], device=device).realize()
    keep = w * 1
    w.assign(w.flip(0)).realize()
    assert w.tolist() == [3.0, 2.0, 1.0] and keep.tolist() == [1.0, 2.0, 3.0]


def _mlp_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    w1 = rng.standard_normal((4, 5)).astype(np.float32)
    w2 = rng.standard_normal((5, 3)).astype(np.float32)
    y = np.array([0, 1, 2, 1, 0, 2, 1, 0], np.int32)
    return x, w1, w2, y


def _np_loss(x: np.ndarray, w1: np.ndarray, w2: np.ndarray, y: np.ndarray) -> float:
    logits = np.maximum(x @ w1, 0) @ w2
    logits = logits - logits.max(1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


@pytest.mark.parametrize("opt_cls", [SGD, Adam])
def test_optimizer_step_then_loss_item_is_the_pre_step_loss(device: str, opt_cls: type) -> None:
    x, w1n, w2n, y = _mlp_data()
    w1 = Tensor(w1n, device=device, requires_grad=True)
    w2 = Tensor(w2n, device=device, requires_grad=True)
    opt = opt_cls([w1, w2], lr=0.1)
    with Tensor.train():
        for _ in range(2):
            before1, before2 = w1.numpy(), w2.numpy()
            opt.zero_grad()
            loss = ((Tensor(x, device=device) @ w1).relu() @ w2).sparse_categorical_crossentropy(
                Tensor(y, device=device)
            )
            loss.backward()
            opt.step()
            np.testing.assert_allclose(loss.item(), _np_loss(x, before1, before2, y), rtol=1e-5)
            assert not np.allclose(w1.numpy(), before1)  # the step did move the weights


def test_gradient_graph_of_an_overwritten_version_raises(device: str) -> None:
    x = Tensor([3.0, 4.0], device=device, requires_grad=True)
    w = Tensor([1.0, 2.0], device=device).realize()
    loss = (x * w).sum()
    loss.realize()  # loss keeps its graph for autograd; that graph reads w's old version
    w.assign(Tensor([5.0, 5.0], device=device)).realize()
    with pytest.raises(StaleReadError, match="in-place assign overwrote"):
        loss.gradient(x)[0].numpy()


def test_jitted_step_updates_in_place_and_reads_pre_step_values() -> None:
    x, w1n, w2n, y = _mlp_data()
    l1, l2 = Linear(4, 5, bias=False), Linear(5, 3, bias=False)
    l1.weight.assign(Tensor(w1n.T.copy())).realize()
    l2.weight.assign(Tensor(w2n.T.copy())).realize()
    opt = SGD([l1.weight, l2.weight], lr=0.1)
    xt, yt = Tensor(x), Tensor(y)

    @TinyJit
    def step(xb: Tensor, yb: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = l2(l1(xb).relu()).sparse_categorical_crossentropy(yb).backward()
            opt.step()  # realizes the updates only: the loss must still see the old weights
            return loss

    for _ in range(4):
        before1, before2 = l1.weight.numpy().T, l2.weight.numpy().T
        got = step(xt, yt).item()
        np.testing.assert_allclose(got, _np_loss(x, before1, before2, y), rtol=1e-5)
    assert step.jit_cache  # it was replayed
    assert not np.allclose(l1.weight.numpy().T, w1n)


def test_one_kernel_reading_the_old_and_the_new_version(device: str) -> None:
    w = Tensor([1.0, 2.0], device=device).realize()
    old = w * 2
    w.assign(w + 1)
    both = old + w  # one kernel would read the memory before and after the write: the old one is copied
    assert both.tolist() == [4.0, 7.0] and w.tolist() == [2.0, 3.0]


def test_lazy_chain_of_assigns_runs_in_version_order(device: str) -> None:
    w = Tensor([0.0], device=device).realize()
    reads = []
    for i in range(4):
        w.assign(w + 1)
        reads.append(w * 1 + i * 0)
    outs = Tensor.realize(*reads)  # the four versions, one realize
    assert [r.item() for r in reads] == [1.0, 2.0, 3.0, 4.0] and outs is reads[0]
    assert w.item() == 4.0


def test_assign_through_a_slice_writes_the_base(device: str) -> None:
    w = Tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], device=device).realize()
    before = w * 1
    w[1:3].assign(Tensor([20.0, 30.0], device=device)).realize()
    assert w.tolist() == [1.0, 20.0, 30.0, 4.0, 5.0, 6.0]
    m = w.reshape(2, 3)
    m[:, 2].assign(m[:, 0] * 100).realize()  # a strided column, from another column of the same memory
    assert w.tolist() == [1.0, 20.0, 100.0, 4.0, 5.0, 400.0]
    w.reshape(3, 2).T.flip(1)[0].assign(Tensor([7.0, 8.0, 9.0], device=device)).realize()
    assert w.tolist() == [9.0, 20.0, 8.0, 4.0, 7.0, 400.0]
    assert before.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    with pytest.raises(ValueError, match="cannot write through this view"):
        w.reshape(6, 1).expand(6, 2).assign(Tensor.ones(6, 2, device=device))
    with pytest.raises(ValueError, match="cannot write through this view"):
        w.pad(((1, 0),)).assign(Tensor.ones(7, device=device))


def test_assign_to_an_equal_lazy_graph_does_not_write_the_other_tensor(device: str) -> None:
    a = Tensor.zeros(3, device=device).contiguous()
    b = Tensor.zeros(3, device=device).contiguous()  # the same node as a (hash-consing)
    a.realize()
    b.assign(Tensor.ones(3, device=device)).realize()
    assert a.tolist() == [0.0, 0.0, 0.0] and b.tolist() == [1.0, 1.0, 1.0]


# ---- writes through a view: they happen as if run eagerly (as in PyTorch; tinygrad gives the same values) ----


def test_write_through_a_dropped_view_is_not_lost(device: str) -> None:
    c = Tensor.zeros(4, 3, device=device).contiguous().realize()
    c[1:2].assign(Tensor.ones(1, 3, device=device))  # the view tensor is dropped at once, before any realize
    want = np.zeros((4, 3), np.float32)
    want[1:2] = 1
    np.testing.assert_array_equal(c.numpy(), want)


def test_graph_built_after_a_view_write_reads_the_new_values(device: str) -> None:
    c = Tensor.zeros(4, 3, device=device).contiguous().realize()
    v = c[1:2]
    v.assign(Tensor.ones(1, 3, device=device))
    doubled = c * 2  # built after the write, realized first
    want = np.zeros((4, 3), np.float32)
    want[1:2] = 1
    np.testing.assert_array_equal(doubled.numpy(), want * 2)
    np.testing.assert_array_equal(v.numpy(), want[1:2])
    np.testing.assert_array_equal(c.numpy(), want)


def test_several_view_writes_to_one_buffer(device: str) -> None:
    c = Tensor.zeros(6, device=device).contiguous().realize()
    c[1:2].assign(Tensor.ones(1, device=device))
    c[2:4].assign(Tensor([3.0, 4.0], device=device))
    c[3:5].assign(c[0:2] + 7)  # overlaps the previous write; reads the same memory
    np.testing.assert_array_equal(c.numpy(), np.array([0, 1, 3, 7, 8, 0], np.float32))


def test_view_write_after_a_pending_whole_assign(device: str) -> None:
    for realize_view in (False, True):
        c = Tensor.zeros(4, device=device).contiguous().realize()
        c.assign(c + 1)  # not run yet
        v = c[1:2]
        v.assign(Tensor.full((1,), 5.0, device=device))
        if realize_view:
            v.realize()
        np.testing.assert_array_equal(c.numpy(), np.array([1, 5, 1, 1], np.float32))


def test_other_views_see_a_view_write_and_computations_keep_old_values(device: str) -> None:
    c = Tensor.zeros(4, device=device).contiguous().realize()
    tail = c[2:]  # a view built before the writes: shares the memory
    c[0:2].assign(Tensor.ones(2, device=device))
    snapshot = c * 1  # a computation between the writes keeps the values it was built from
    c[1:3].assign(Tensor.full((2,), 7.0, device=device))
    np.testing.assert_array_equal(snapshot.numpy(), np.array([1, 1, 0, 0], np.float32))
    np.testing.assert_array_equal(tail.numpy(), np.array([7, 0], np.float32))
    np.testing.assert_array_equal(c.numpy(), np.array([1, 7, 7, 0], np.float32))


def test_view_write_of_a_dropped_view_inside_tinyjit(device: str) -> None:
    cache = Tensor.zeros(3, 2, device=device).contiguous().realize()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        cache[1:2].assign(x)  # the view is dropped; the write must still be part of the recording
        return (cache * 1).sum(1).realize()

    want = np.zeros((3, 2), np.float32)
    for i in range(4):
        x = np.array([[i, 10 * i]], np.float32)
        out = step(Tensor(x, device=device))
        want[1:2] = x
        np.testing.assert_array_equal(out.numpy(), want.sum(1))
    np.testing.assert_array_equal(cache.numpy(), want)


def test_chained_assigns_read_between_writes_realized_together(device: str) -> None:
    # each lazy reader sees the version it was built from; the second write follows the first, which a reader's kernel
    # already computed in the same schedule (this used to make a copy of the written memory and a cycle)
    c = Tensor([5.0], device=device).realize()
    c.assign(c + 1)
    x = c * 2
    c.assign(c + 1)
    y = c * 3
    e1, e2 = x.empty_like(), y.empty_like()
    e1.assign(x)
    e2.assign(y)
    Tensor.realize(e1, e2)
    assert (e1.tolist(), e2.tolist(), c.tolist()) == ([12.0], [21.0], [7.0])
    assert (x.tolist(), y.tolist()) == ([12.0], [21.0])


def test_two_random_draws_assigned_together_match_draws_one_by_one(device: str) -> None:
    Tensor.manual_seed(3)
    want = [Tensor.rand(3, device=device).numpy() for _ in range(2)]
    Tensor.manual_seed(3)
    a, b = Tensor.rand(3, device=device), Tensor.rand(3, device=device)
    e1, e2 = a.empty_like(), b.empty_like()
    e1.assign(a)
    e2.assign(b)
    Tensor.realize(e1, e2)
    np.testing.assert_array_equal(e1.numpy(), want[0])
    np.testing.assert_array_equal(e2.numpy(), want[1])
    np.testing.assert_array_equal(a.numpy(), want[0])
    np.testing.assert_array_equal(b.numpy(), want[1])


def _stores_and_global_loads(t: Tensor) -> tuple[list[UOp], list[UOp]]:
    """The STOREs to buffers and the LOADs from buffers of the last kernel that realizes t, as lowered for CPU."""
    from tg_codegen import get_program
    from tg_runtime import Device
    from tg_tensor.engine.realizer import current

    items = t.schedule()
    for it in items:
        current().unqueue(it)
    item = items[-1]
    uops = get_program(item.ast, Device["CPU"].renderer).uops
    is_global = lambda u: u.src[0].src[0].op.name == "DEFINE_GLOBAL"  # noqa: E731
    stores = [u for u in uops if u.op.name == "STORE" and is_global(u)]
    return stores, [u for u in uops if u.op.name == "LOAD" and is_global(u)]


@pytest.mark.parametrize("flip", [False, True])
def test_masked_update_writes_only_its_slots(device: str, flip: bool) -> None:
    """cache.assign(mask.where(new, cache)) (a KV cache slot update) is a store of `new` where the mask holds: the
    kernel reads nothing of the cache and writes only the selected slots; where(~mask, cache, new) too."""
    start = np.arange(24, dtype=np.float32).reshape(2, 12)

    def update() -> tuple[Tensor, Tensor]:
        cache = Tensor(start, device=device).realize()
        new = Tensor([[100.0], [200.0]], device=device).realize()
        slot = Tensor([5], dtype=dtypes.int32, device=device).realize()
        at = Tensor.arange(12, device=device).reshape(1, 12) == slot.reshape(1, 1)
        return cache, cache.assign((at != True).where(cache, new) if flip else at.where(new, cache))  # noqa: E712

    stores, loads = _stores_and_global_loads(update()[1])  # (scheduled, not run)
    assert len(stores) == 1 and len(stores[0].src) == 3, "one gated store"
    assert all(u.src[0].src[0].arg != 0 for u in loads), "nothing read back from the cache"
    cache, assigned = update()
    GlobalCounters.reset()
    assigned.realize()
    assert GlobalCounters.kernel_count == 1
    want = start.copy()
    want[:, 5] = [100.0, 200.0]
    np.testing.assert_array_equal(cache.numpy(), want)


def test_assign_reading_other_elements_of_itself(device: str) -> None:
    """An assign that reads its target at other positions (reversed) is not a masked update: every element written."""
    start = np.arange(8, dtype=np.float32)
    x = Tensor(start, device=device).realize()
    keep = Tensor(start < 4, device=device)
    x.assign(keep.where(x, x.flip(0) * 10)).realize()
    np.testing.assert_array_equal(x.numpy(), np.where(start < 4, start, start[::-1] * 10))
