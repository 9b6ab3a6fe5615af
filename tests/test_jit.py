"""TinyJit: capture and replay, input checks, fresh outputs, the memory planner and JIT=0."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Context, GlobalCounters, JitError, Tensor, TinyJit, dtypes
from tg_tensor.jit import plan_memory


def _arr(seed: int, shape: tuple[int, ...] = (4, 3)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_replay_computes_with_new_inputs(device: str) -> None:
    calls = []

    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        calls.append(1)
        return ((x * 2 + y).relu() * 3).sum(axis=1)

    for i in range(5):
        xn, yn = _arr(i), _arr(100 + i)
        out = f(Tensor(xn, device=device), Tensor(yn, device=device))
        np.testing.assert_allclose(out.numpy(), (np.maximum(xn * 2 + yn, 0) * 3).sum(1), rtol=1e-5, atol=1e-5)
    assert len(calls) == 2  # warm-up and capture ran Python; three replays did not
    assert len(f.jit_cache) >= 1


def test_outputs_of_two_calls_are_different_tensors_with_their_own_values() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x * 10

    outs = [f(Tensor(np.full(3, float(i), np.float32))) for i in range(5)]
    assert len({id(o) for o in outs}) == 5
    for i, o in enumerate(outs):  # read after all calls: no later call overwrote an earlier result
        assert o.tolist() == [i * 10.0] * 3


def test_replay_runs_the_recorded_kernels_only() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return ((x + 1).contiguous() * 2).relu().sum()

    for i in range(3):
        f(Tensor(_arr(i)))
    GlobalCounters.reset()
    out = f(Tensor(_arr(9)))
    assert GlobalCounters.kernel_count == len(f.jit_cache) == 2
    np.testing.assert_allclose(out.item(), np.maximum((_arr(9) + 1) * 2, 0).sum(), rtol=1e-5)


def test_changed_shape_or_dtype_raises_jit_error() -> None:
    @TinyJit
    def f(x: Tensor, y: Tensor | None = None) -> Tensor:
        return x + 1 if y is None else x + y

    for i in range(3):
        f(Tensor(_arr(i)))
    with pytest.raises(JitError, match=r"input 0 has shape \(5, 3\).*expects shape \(4, 3\)"):
        f(Tensor(_arr(0, (5, 3))))
    with pytest.raises(JitError, match="dtype dtypes.int"):
        f(Tensor(np.zeros((4, 3), np.int32)))
    for i in range(3):  # another keyword is another call signature: its own recording, right values
        np.testing.assert_allclose(f(Tensor(_arr(i)), y=Tensor(_arr(7))).numpy(), _arr(i) + _arr(7), rtol=1e-6)


def test_mismatch_is_caught_already_at_the_capture_call() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x * 2

    f(Tensor(_arr(0)))
    with pytest.raises(JitError, match="shape"):
        f(Tensor(_arr(0, (2, 2))))


def test_device_mismatch_raises_jit_error() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x * 2

    f(Tensor(_arr(0), device="CPU"))
    with pytest.raises(JitError, match="device PYTHON.*device CPU"):
        f(Tensor(_arr(0), device="PYTHON"))


def test_non_contiguous_and_lazy_inputs_are_realized_first() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x.sum(axis=0)

    for i in range(4):
        a = _arr(i, (3, 4))
        out = f(Tensor(a).T * 2)  # a lazy, permuted input
        np.testing.assert_allclose(out.numpy(), (a.T * 2).sum(0), rtol=1e-5)


def test_jit_0_disables_capture() -> None:
    calls = []

    @TinyJit
    def f(x: Tensor) -> Tensor:
        calls.append(1)
        return x + 1

    with Context(JIT=0):
        for i in range(4):
            assert f(Tensor([float(i)])).tolist() == [i + 1.0]
    assert len(calls) == 4 and f.jit_cache == []


def test_returning_an_input_is_refused() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x

    f(Tensor([1.0]))
    with pytest.raises(JitError, match="must return tensors it computes"):
        f(Tensor([2.0]))


def test_same_tensor_twice_is_refused() -> None:
    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        return x + y

    t = Tensor([1.0])
    with pytest.raises(JitError, match="same tensor was passed as two inputs"):
        f(t, t)


def test_host_data_that_changes_between_calls_is_refused() -> None:
    counter = iter(range(100))

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x + Tensor([float(next(counter))])  # new host data on every call: a replay would freeze it

    f(Tensor([1.0]))
    with pytest.raises(JitError, match="creates tensor data on the host that changes between calls"):
        f(Tensor([1.0]))


def test_constant_host_data_is_fine() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x + Tensor([5.0])

    assert [f(Tensor([float(i)])).item() for i in range(4)] == [5.0, 6.0, 7.0, 8.0]


def test_tuple_and_dict_returns_and_non_tensor_values() -> None:
    @TinyJit
    def f(x: Tensor) -> tuple[Tensor, str, Tensor]:
        return x + 1, "tag", (x * x).sum()

    for i in range(4):
        a, tag, b = f(Tensor([float(i), 2.0]))
        assert a.tolist() == [i + 1.0, 3.0] and tag == "tag" and b.item() == i * i + 4.0

    @TinyJit
    def g(x: Tensor) -> dict[str, Tensor]:
        return {"double": x * 2, "same": x * 2}

    for i in range(4):
        out = g(Tensor([float(i)]))
        assert out["double"].item() == 2.0 * i and out["same"].item() == 2.0 * i


def test_memory_planner_shares_intermediate_buffers() -> None:
    @TinyJit
    def chain(x: Tensor) -> Tensor:
        for _ in range(6):
            x = (x * 1.5 + 1).contiguous()
        return x.sum()

    xs = [np.arange(16, dtype=np.float32) + i for i in range(4)]
    outs = [chain(Tensor(x)).item() for x in xs]
    for x, o in zip(xs, outs):
        ref = x.astype(np.float64)
        for _ in range(6):
            ref = ref * 1.5 + 1
        assert o == pytest.approx(ref.sum(), rel=1e-5)
    bufs = {id(b) for launch in chain.jit_cache for b in launch.bufs}
    assert len(chain.jit_cache) == 7
    assert len(bufs) <= 4  # input + two alternating intermediates + output (without planning: 8)


def test_plan_memory_respects_lifetimes() -> None:
    from tg_runtime import Buffer
    from tg_tensor.jit import _Launch

    a, b, c, d = (Buffer("CPU", 4, dtypes.float32) for _ in range(4))
    launches = [_Launch(None, [b, a]), _Launch(None, [c, b]), _Launch(None, [d, c])]
    saved = plan_memory(launches, {id(b), id(c)})
    assert saved == 0  # b is read by the launch that writes c: they overlap
    launches = [_Launch(None, [b, a]), _Launch(None, [c, b]), _Launch(None, [d, c]), _Launch(None, [a, d])]
    e = Buffer("CPU", 4, dtypes.float32)
    launches.append(_Launch(None, [e, a]))
    assert plan_memory(launches, {id(b), id(c), id(d), id(e)}) == 2  # d reuses b; e reuses b or c
    assert launches[2].bufs[0] is b and any(launches[4].bufs[0] is x for x in (b, c))
    assert launches[3].bufs[1] is b  # d's reader now reads b


def test_decorating_a_method() -> None:
    class Model:
        def __init__(self) -> None:
            self.scale = Tensor([3.0]).realize()

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return x * self.scale

    m = Model()
    assert [m(Tensor([float(i)])).item() for i in range(4)] == [0.0, 3.0, 6.0, 9.0]


@pytest.mark.parametrize("read", ["item", "numpy", "tolist"])
def test_reading_values_inside_a_jitted_function_is_an_error(read: str) -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        scale = getattr(x.sum(), read)()  # would be frozen into the recording
        return x * float(np.asarray(scale))

    with pytest.raises(
        JitError, match=r"reading values \(.numpy\(\)/.item\(\)/.tolist\(\)\) inside the jitted function"
    ):
        f(Tensor([1.0, 2.0]))
    with Context(JIT=0):  # without the JIT the same function is fine
        assert f(Tensor([1.0, 2.0])).tolist() == [3.0, 6.0]


def test_persistent_state_updated_in_place_is_shared_across_replays() -> None:
    total = Tensor([0.0]).contiguous().realize()

    @TinyJit
    def accumulate(x: Tensor) -> Tensor:
        total.assign(total + x.sum()).realize()
        return total * 1

    results = [accumulate(Tensor([float(i), 1.0])).item() for i in range(5)]
    assert results == [1.0, 3.0, 6.0, 10.0, 15.0]
    assert total.item() == 15.0


def test_nn_dropout_gets_a_new_mask_on_every_replay() -> None:
    from tg import nn

    drop = nn.Dropout(0.5, seed=3)

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return drop(x) * 1

    with Tensor.train():
        masks = [f(Tensor(np.ones(256, np.float32))).numpy() for _ in range(5)]
    for m in masks:
        assert set(np.unique(m).tolist()) <= {0.0, 2.0} and 80 < int((m == 0).sum()) < 176
    assert all(not np.array_equal(masks[i], masks[j]) for i in range(5) for j in range(i))


def test_tensor_dropout_gets_a_new_mask_on_every_replay() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x.dropout(0.5) * 1  # the mask is made on the device from a counter the step increments

    with Tensor.train():
        masks = [f(Tensor(np.ones(256, np.float32))).numpy() for _ in range(5)]
    assert len(f.jit_cache) == 3  # the counter increment, the mask (stored: a backward reads it), mask-and-scale
    for m in masks:
        assert set(np.unique(m).tolist()) <= {0.0, 2.0} and 80 < int((m == 0).sum()) < 176
    assert all(not np.array_equal(masks[i], masks[j]) for i in range(5) for j in range(i))


def test_host_data_that_changes_inside_the_jit_is_refused() -> None:
    rng = np.random.default_rng(0)

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x * Tensor(rng.random(64).astype(np.float32))  # made on the host: a replay would freeze it

    f(Tensor(np.ones(64, np.float32)))
    for _ in range(2):  # refused at the capture, and again on every later call
        with pytest.raises(JitError, match="creates tensor data on the host that changes between calls"):
            f(Tensor(np.ones(64, np.float32)))


def test_same_input_on_every_call_still_records_kernels() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x + 1).contiguous() * 2

    x = Tensor([1.0, 2.0])
    assert [f(x).tolist() for _ in range(4)] == [[4.0, 6.0]] * 4
    assert len(f.jit_cache) == 2
