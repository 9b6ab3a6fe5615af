"""Tensors on several devices: sharded ops, gradients and training equal one device.

By default the devices are CPU:0, CPU:1, ... and the collectives are the host implementation, so every
piece is tested without a GPU. `TG_MULTI_KIND=CUDA pytest tests/test_multi.py` runs the same tests on
CUDA:0, CUDA:1, ... through NCCL. Each test runs on device sets of 1 and 2 devices (3 where it says so); a
set of one device takes the whole multi-device path too (lowering, collectives as schedule items, NCCL with
a 1-rank communicator on CUDA, TinyJit replays). Tests needing more devices than present skip, naming the
count.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from tg import GlobalCounters, Tensor, TinyJit, nn
from tg.nn.state import get_parameters
from tg_runtime.device import Buffer, Device, DeviceSet
from tg_runtime.runner import run_copy
from tg_tensor.engine.collective import run_collective
from tg_tensor.engine.realizer import current
from tg_tensor.engine.schedule import buffer_of
from tg_tensor.jit import JitError
from tg_uop import Ops, dtypes

KIND = os.getenv("TG_MULTI_KIND", "CPU")


def _present() -> int:
    """How many devices of KIND this host has (CPU:n and other host devices are made on demand)."""
    if KIND != "CUDA":
        return 8
    from tg_runtime.ops_cuda import device_count

    return device_count()


PRESENT = _present()


def devs(n: int) -> tuple[str, ...]:
    """n devices of KIND (KIND:0 .. KIND:n-1); skips the test where the host has fewer."""
    if n > PRESENT:
        pytest.skip(f"needs {n} {KIND} device{'s' if n > 1 else ''}, {PRESENT} present")
    return tuple(f"{KIND}:{i}" for i in range(n))


rng = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_devices_are_distinct() -> None:
    devs(2)
    assert Device.canonicalize(f"{KIND.lower()}:0") == KIND
    t = Tensor([1.0, 2.0], device=f"{KIND}:1")
    assert t.device == f"{KIND}:1" and Device[f"{KIND}:1"] is not Device[KIND]
    assert (t * 2).tolist() == [2.0, 4.0]
    assert (t.to(KIND) + Tensor([1.0, 1.0], device=KIND)).tolist() == [2.0, 3.0]


@pytest.mark.parametrize("n", [1, 2])
def test_shard_layout_and_roundtrip(n: int) -> None:
    D = devs(n)
    a = rand(4, 6)
    x = Tensor(a).shard(D, axis=0)
    assert x.device == D and x.shape == (4, 6) and isinstance(x.device, DeviceSet) and x.uop.op is Ops.MULTI
    assert [s.shape for s in x.uop.src[:-1]] == [(4 // n, 6)] * n
    assert [s.device for s in x.uop.src[:-1]] == [KIND, *[f"{KIND}:{i}" for i in range(1, n)]]
    np.testing.assert_array_equal(x.numpy(), a)
    np.testing.assert_array_equal(x.to(KIND).numpy(), a)
    np.testing.assert_array_equal(x.to(D[-1]).numpy(), a)
    r = Tensor(a).shard(D)  # replicated
    assert [s.shape for s in r.uop.src[:-1]] == [(4, 6)] * n
    np.testing.assert_array_equal(r.numpy(), a)
    y = Tensor(a, device=D)
    assert y.device == D and y.uop.arg is None
    np.testing.assert_array_equal(y.numpy(), a)
    np.testing.assert_array_equal(Tensor(a).to(D).numpy(), a)
    c = Tensor.full((4, 6), 2.0, device=x.device)  # a tensor made on x's device set is on the set
    assert c.device == D and isinstance(c.device, DeviceSet)
    np.testing.assert_array_equal((x * c).numpy(), a * 2)


def test_one_device_set_is_not_the_device() -> None:
    one = Tensor([1.0, 2.0]).shard(devs(1), axis=0)
    assert str(one.device) == f"{KIND}," and one.device == (KIND,) and one.device != KIND
    assert Device.canonicalize(f"{KIND.lower()}:0,") == one.device  # the name reads back as the set
    assert (one * 3).to(KIND).tolist() == [3.0, 6.0]


def test_three_devices() -> None:
    D3 = devs(3)
    a = rand(4, 6)
    z = Tensor(a)
    z.shard_(D3, axis=1)
    assert [s.shape for s in z.uop.src[:-1]] == [(4, 2)] * 3
    np.testing.assert_array_equal(z.numpy(), a)
    np.testing.assert_allclose((z * 2).sum(axis=1).numpy(), (a * 2).sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_elementwise_and_reductions(axis: int | None, n: int) -> None:
    D = devs(n)
    a, b = rand(4, 6), rand(4, 6)
    x, y = Tensor(a).shard(D, axis), Tensor(b).shard(D)  # sharded with replicated
    np.testing.assert_allclose(((x + y) * 2 - x.exp()).numpy(), (a + b) * 2 - np.exp(a), rtol=1e-6, atol=1e-6)
    # (atol: a GPU contracts a * 3 + 1 into one FMA, so values that cancel to ~0 differ from numpy's two roundings)
    np.testing.assert_allclose((x * 3 + 1).relu().numpy(), np.maximum(a * 3 + 1, 0), rtol=1e-6, atol=1e-6)
    for ax in (None, 0, 1):
        np.testing.assert_allclose(x.sum(axis=ax).numpy(), a.sum(axis=ax), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(x.max(axis=ax).numpy(), a.max(axis=ax))
        np.testing.assert_allclose(x.mean(axis=ax).numpy(), a.mean(axis=ax), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.softmax(axis=1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-5)
    assert (x < y).numpy().tolist() == (a < b).tolist()


@pytest.mark.parametrize("n", [1, 2])
def test_matmul_with_sharded_operands(n: int) -> None:
    D = devs(n)
    a, w = rand(4, 6), rand(6, 8)
    ref = a @ w
    for xa, wa in [(0, None), (None, 1), (1, 0), (0, 1), (None, None)]:
        x, m = Tensor(a).shard(D, xa), Tensor(w).shard(D, wa)
        np.testing.assert_allclose((x @ m).numpy(), ref, rtol=1e-5, atol=1e-5, err_msg=f"x axis {xa}, w axis {wa}")


@pytest.mark.parametrize("n", [1, 2])
def test_movement_ops(n: int) -> None:
    a = rand(4, 6)
    x = Tensor(a).shard(devs(n), axis=0)
    np.testing.assert_array_equal(x.T.numpy(), a.T)
    np.testing.assert_array_equal(x.reshape(2, 12).numpy(), a.reshape(2, 12))
    np.testing.assert_array_equal(x.reshape(8, 3).numpy(), a.reshape(8, 3))
    np.testing.assert_array_equal(x.reshape(24).numpy(), a.reshape(24))
    np.testing.assert_array_equal(x.reshape(6, 4).numpy(), a.reshape(6, 4))  # mixes shards: gathered
    np.testing.assert_array_equal(x[1:3, 2:].numpy(), a[1:3, 2:])
    np.testing.assert_array_equal(x[:, ::-1].numpy(), a[:, ::-1])
    np.testing.assert_array_equal(x.flip(0).numpy(), a[::-1])
    np.testing.assert_array_equal(x.pad(((1, 1), (0, 2))).numpy(), np.pad(a, ((1, 1), (0, 2))))
    np.testing.assert_array_equal(x.reshape(4, 1, 6).expand(4, 3, 6).numpy(), np.broadcast_to(a[:, None], (4, 3, 6)))
    np.testing.assert_array_equal(x.cat(x, dim=1).numpy(), np.concatenate([a, a], 1))
    np.testing.assert_array_equal(x.cat(x, dim=0).numpy(), np.concatenate([a, a], 0))


@pytest.mark.parametrize("n", [1, 2])
def test_assign_through_a_view_of_a_sharded_tensor(n: int) -> None:
    """A KV cache split by heads: writing a slice of it (each device its shard's slice) is seen by the whole
    tensor and by later reads, also at a position given by a bound Variable."""
    from tg_uop import UOp

    D = devs(n)
    cache = Tensor.zeros(1, 2 * n, 8, 2).shard(D, axis=1).contiguous().realize()
    ref = np.zeros((1, 2 * n, 8, 2), np.float32)
    for pos in range(3):
        v = rand(1, 2 * n, 1, 2)
        start = UOp.variable("start", 0, 7).bind(pos)
        cache[:, :, start : start + 1].assign(Tensor(v).shard(D, axis=1))
        ref[:, :, pos : pos + 1] = v
        seen = cache[:, :, : start + 1].reshape(2 * n, start + 1, 2)  # a symbolic reshape keeps the heads split
        np.testing.assert_array_equal(seen.sum(axis=1).numpy(), ref[0, :, : pos + 1].sum(axis=1))
        positions = Tensor.arange(2, device=cache.device) + start  # a bound Variable made on every device
        assert positions.device == cache.device and positions.tolist() == [pos, pos + 1]
    np.testing.assert_array_equal(cache.numpy(), ref)


@pytest.mark.parametrize("n", [1, 2])
def test_gradients_equal_single_device(n: int) -> None:
    D = devs(n)
    a, w, b = rand(8, 6), rand(6, 4), rand(4)

    def loss(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return ((x @ w + b).relu() * 1.5).log_softmax(axis=1).mean()

    w1, b1 = Tensor(w, requires_grad=True), Tensor(b, requires_grad=True)
    loss(Tensor(a), w1, b1).backward()
    for xa, wa in [(0, None), (None, 1), (1, 0)]:
        wm, bm = Tensor(w).shard(D, wa), Tensor(b).shard(D)
        wm.requires_grad, bm.requires_grad = True, True
        lm = loss(Tensor(a).shard(D, xa), wm, bm)
        lm.backward()
        assert wm.grad is not None and bm.grad is not None and wm.grad.device == D
        np.testing.assert_allclose(wm.grad.numpy(), w1.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bm.grad.numpy(), b1.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [1, 2])
def test_optimizer_on_sharded_params(n: int) -> None:
    D = devs(n)
    a, w = rand(8, 6), rand(6, 4)
    results = []
    for ds, axis in [(None, None), (D, None), (D, 1)]:
        x, p = Tensor(a), Tensor(w)
        if ds is not None:
            x, p = x.shard(ds, axis=0), p.shard(ds, axis=axis)
        opt = nn.optim.Adam([p], lr=0.05)
        with Tensor.train():
            for _ in range(3):
                opt.zero_grad()
                (x @ p).square().mean().backward()
                opt.step()
        if ds is not None:
            assert p.device == ds and p.uop.op is Ops.MULTI and p.uop.arg == axis
        results.append(p.numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[2], results[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [1, 3])
def test_collectives(n: int) -> None:
    D = devs(n)  # NCCL on CUDA (a 1-rank communicator for n=1), the host otherwise
    parts = [rand(6) for _ in range(n)]
    ins = [Buffer(d, 6, dtypes.float32).copyin(memoryview(p.tobytes())) for d, p in zip(D, parts)]

    def run(kind: str, op: str, size: int) -> list[np.ndarray]:
        outs = [Buffer(d, size, dtypes.float32) for d in D]
        run_collective(kind, op, outs, ins)
        return [np.frombuffer(o.as_bytes(), np.float32) for o in outs]

    total = np.sum(parts, axis=0)
    for o in run("allreduce", "SUM", 6):
        np.testing.assert_allclose(o, total, rtol=1e-6)
    for o in run("allreduce", "MAX", 6):
        np.testing.assert_array_equal(o, np.max(parts, axis=0))
    for o in run("allreduce", "PROD", 6):
        np.testing.assert_allclose(o, np.prod(parts, axis=0), rtol=1e-6)
    for o in run("allgather", "", 6 * n):
        np.testing.assert_array_equal(o, np.concatenate(parts))
    k = 6 // n
    for i, o in enumerate(run("reducescatter", "SUM", k)):
        np.testing.assert_allclose(o, total[k * i : k * (i + 1)], rtol=1e-6)
    for o in run("broadcast", "", 6):
        np.testing.assert_array_equal(o, parts[0])
    with pytest.raises(ValueError, match="unknown reduction 'MIN'"):
        run("allreduce", "MIN", 6)


@pytest.mark.parametrize("n", [1, 2])
def test_reduce_over_sharded_axis_is_one_allreduce(n: int) -> None:
    x = Tensor(rand(4, 6)).shard(devs(n), axis=0)
    items = x.sum(axis=0).schedule()
    kinds = [it.ast.arg for it in items if it.ast.op is Ops.COLLECTIVE]
    assert kinds == [("allreduce", "SUM")]


@pytest.mark.parametrize("n", [1, 2])
def test_reduction_split_again_is_one_reducescatter(n: int) -> None:
    D = devs(n)
    a, b, c = rand(4, 6, 2), rand(6, 2), rand(6, 2)
    x = Tensor(a).shard(D, axis=0)
    for axis, ref in [(0, b), (1, c)]:  # the sum (replicated) meets a tensor sharded on axis 0, then on axis 1
        z = Tensor(ref).shard(D, axis=axis)
        out = x.sum(axis=0) * 2 + z
        kinds = [it.ast.arg for it in out.schedule() if it.ast.op is Ops.COLLECTIVE]
        assert kinds == [("reducescatter", "SUM")], f"axis {axis}: {kinds}"
        assert out.device == D and out.uop.arg == axis
        np.testing.assert_allclose(out.numpy(), a.sum(axis=0) * 2 + ref, rtol=1e-5, atol=1e-6)
    s = x.sum(axis=0)  # read whole too: one all-reduce serves both
    out = s + Tensor(b).shard(D, axis=0)
    kinds = [it.ast.arg for it in s.schedule(out) if it.ast.op is Ops.COLLECTIVE]
    assert kinds == [("allreduce", "SUM")]
    np.testing.assert_allclose(s.numpy(), a.sum(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), a.sum(axis=0) + b, rtol=1e-5, atol=1e-6)


def _mnist_subset(n: int) -> tuple[np.ndarray, np.ndarray]:
    mnist_dir = os.getenv("MNIST_DIR")
    if mnist_dir and os.path.isdir(mnist_dir):
        X, Y, _, _ = nn.datasets.mnist_numpy(mnist_dir)
        return (X[:n].astype(np.float32) / 255.0).reshape(n, 1, 28, 28), Y[:n].astype(np.int32)
    r = np.random.default_rng(1)  # no dataset here: noisy images as bright as their label (learnable at once)
    Y = r.integers(0, 10, n).astype(np.int32)
    return (Y[:, None, None, None] / 10 + 0.1 * r.random((n, 1, 28, 28))).astype(np.float32), Y


class _Net:
    def __init__(self) -> None:
        self.c1 = nn.Conv2d(1, 4, 3)
        self.l1 = nn.Linear(4 * 13 * 13, 10)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l1(self.c1(x).relu().max_pool2d((2, 2)).flatten(1))


def _train(
    ds: tuple[str, ...] | None,
    X: np.ndarray,
    Y: np.ndarray,
    steps: int,
    bs: int,
    jits: list[Any] | None = None,
    fused: bool = False,
) -> list[float]:
    Tensor.manual_seed(7)
    model = _Net()
    if ds is not None:
        for p in get_parameters(model):
            p.to_(ds)  # replicated
    opt = nn.optim.Adam(get_parameters(model), lr=0.01, fused=fused)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            if ds is not None:
                x, y = x.shard(ds, axis=0), y.shard(ds, axis=0)  # the batch split over the devices
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            opt.step()
            return (loss.to(ds[0]) if ds is not None else loss).contiguous()

    if jits is not None:
        jits.append(step)
    return [step(Tensor(X[i * bs : (i + 1) * bs]), Tensor(Y[i * bs : (i + 1) * bs])).item() for i in range(steps)]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("n", [1, 2])
def test_data_parallel_mnist_matches_one_device(n: int, fused: bool) -> None:
    """fused: the replicated parameters in one flat buffer per device (tg_nn.fused), one all-reduce a step."""
    D = devs(n)
    X, Y = _mnist_subset(80)
    one = _train(None, X, Y, steps=5, bs=16)  # the plain single-device path
    many = _train(D, X, Y, steps=5, bs=16, fused=fused)  # steps 3.. replay the recording (collectives included)
    np.testing.assert_allclose(many, one, rtol=1e-5, atol=1e-6)
    assert one[-1] < one[0]


def test_a_fused_data_parallel_update_all_reduces_the_gradients_once() -> None:
    """The gradients of replicated parameters gathered into one flat gradient (a fused optimizer) are all-reduced
    as one collective: a sum's all-reduce is linear, so a + b of all-reduces (or of an all-reduce and a value
    the same on every device, here the bias's gradient) is one all-reduce of the per-device sums. Unfused, or
    before, one all-reduce ran per parameter."""
    D = devs(2)
    rng = np.random.default_rng(3)
    a, w, b = rng.standard_normal((8, 6)), rng.standard_normal((6, 4)), rng.standard_normal(4)
    results = []
    for ds in (None, D):
        x, pw, pb = Tensor(a, dtype=dtypes.float32), Tensor(w, dtype=dtypes.float32), Tensor(b, dtype=dtypes.float32)
        if ds is not None:
            x, pw, pb = x.shard(ds, axis=0), pw.shard(ds), pb.shard(ds)
        opt = nn.optim.AdamW([pw, pb], lr=0.05, fused=True)
        with Tensor.train():
            opt.zero_grad()
            ((x @ pw + pb).square().mean() + pb.sum()).backward()  # (pb's gradient: partial sums plus a constant)
            opt.clip_grad_norm(1.0)
            items = Tensor.schedule(*opt.schedule_step())
        collectives = [it for it in items if it.ast.op is Ops.COLLECTIVE]
        assert len(collectives) == (0 if ds is None else 1), [it.ast.arg for it in collectives]
        current().run(items)
        results.append((pw.numpy(), pb.numpy()))
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_fused_optimizer_refuses_parameters_split_over_devices() -> None:
    p = Tensor(rand(4, 6)).shard(devs(2), axis=1)
    with pytest.raises(ValueError, match="split over .* along axis 1"):
        nn.optim.Adam([p], fused=True)


def test_data_parallel_step_replays_as_one_cuda_graph_per_gpu() -> None:
    """On CUDA the data-parallel step (its kernels on both GPUs, the batch's copies, the NCCL all-reduces) replays
    as one CUDA graph per GPU, and trains as one device does."""
    if KIND != "CUDA":
        pytest.skip("CUDA graphs with NCCL inside: TG_MULTI_KIND=CUDA on a host with 2 GPUs")
    D = devs(2)
    X, Y = _mnist_subset(96)
    one = _train(None, X, Y, steps=6, bs=16)
    jits: list[Any] = []
    many = _train(D, X, Y, steps=6, bs=16, jits=jits)
    graph = jits[0].recording.graph
    assert type(graph).__name__ == "CUDAMultiGraph", graph
    np.testing.assert_allclose(many, one, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [1, 2])
def test_bad_input(n: int) -> None:
    D = devs(n)
    if n == 2:
        with pytest.raises(RuntimeError, match="size 5, which does not split evenly over 2 devices"):
            Tensor.ones(5, 2).contiguous().shard(D, axis=0)
    else:  # everything splits over one device
        np.testing.assert_array_equal(Tensor.ones(5, 2).contiguous().shard(D, axis=0).numpy(), np.ones((5, 2)))
    with pytest.raises(ValueError, match="devices of different kinds"):
        Tensor.ones(4).shard(("CPU:0", "PYTHON:1"), axis=0)
    with pytest.raises(ValueError, match="names a device twice"):
        Tensor.ones(4).shard(("CPU:0", "CPU"), axis=0)
    with pytest.raises(TypeError, match="tuple of device names"):
        Tensor.ones(4).shard("CPU:1")  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="axis 2 is out of range"):
        Tensor.ones(4, 2).shard(D, axis=2)
    x = Tensor.ones(4).shard(D, axis=0)
    with pytest.raises(ValueError, match="already on several devices"):
        x.shard(D)
    with pytest.raises(ValueError, match=f"operands are on different devices: {DeviceSet(D)} "):
        (x + Tensor.ones(4).contiguous()).realize()
    with pytest.raises(ValueError, match="that is several devices"):
        Device[DeviceSet(D)]


@pytest.mark.parametrize("n", [1, 2])
def test_jit_refuses_multi_device_io(n: int) -> None:
    D = devs(n)

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x * 2

    with pytest.raises(JitError, match="shard it inside the function"):
        f(Tensor.ones(4).shard(D, axis=0))

    @TinyJit
    def g(x: Tensor) -> Tensor:
        return x.shard(D, axis=0) * 2

    with pytest.raises(JitError, match="returns a tensor on several devices"):
        g(Tensor.ones(4))


@pytest.mark.parametrize("n", [1, 2])
def test_copies_between_devices_skip_the_host(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    D = devs(n)
    a = rand(64)
    x = (Tensor(a, device=D[0]) * 2).realize()  # its kernel may still be running (GPUs): the copy waits for it
    dest = Buffer(D[-1], 64, dtypes.float32)
    host_reads: list[Buffer] = []
    as_bytes = Buffer.as_bytes
    monkeypatch.setattr(Buffer, "as_bytes", lambda b: host_reads.append(b) or as_bytes(b))
    run_copy(dest, buffer_of(x.uop.base))  # KIND:0 -> KIND:0 (n=1) or KIND:1: device to device
    y = Tensor(a, device=D[0]).to(D[-1]).realize() if n > 1 else None  # a COPY item takes the same way
    assert host_reads == []
    np.testing.assert_array_equal(np.frombuffer(dest.as_bytes(), np.float32), a * 2)
    if y is not None:
        np.testing.assert_array_equal(y.numpy(), a)
    other = Buffer("PYTHON", 64, dtypes.float32)  # no direct way between these kinds: through host bytes
    host_reads.clear()
    run_copy(other, dest)
    assert host_reads == [dest]
    np.testing.assert_array_equal(np.frombuffer(other.as_bytes(), np.float32), a * 2)


def test_each_device_loads_and_launches_its_own_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    # a kernel's ProgramSpec names only its renderer's family ("CUDA" for every GPU): the runner must still be loaded
    # on, and launched by, the device of its buffers (else KIND:1's kernel ran in KIND:0's context: a GPU then reads
    # KIND:1's memory from the wrong device, an illegal address without peer access)
    D = devs(2)
    made: list[str] = []
    for d in D:
        dev = Device[d]
        monkeypatch.setattr(dev, "runtime", lambda name, lib, _rt=dev.runtime, _d=d: made.append(_d) or _rt(name, lib))
    a, b = rand(37), rand(37)
    for d in D:
        made.clear()
        x = Tensor(a, device=d) * 3.5 + Tensor(b, device=d)  # a kernel no other test compiles
        from tg_runtime.runner import get_runner

        item = [it for it in x.schedule() if it.ast.op is Ops.SINK][-1]
        runner = get_runner(d, item.ast)
        assert runner.device == Device.canonicalize(d) and made == [d]
        np.testing.assert_allclose(x.numpy(), a * 3.5 + b, rtol=1e-6)


def test_nccl_missing_names_the_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_runtime import nccl

    monkeypatch.setattr(nccl, "_lib", None)
    monkeypatch.setattr(nccl, "_candidates", lambda: ["/nonexistent/libnccl.so.2"])
    with pytest.raises(nccl.NCCLError, match="pip install nvidia-nccl-cu12"):
        nccl.load_nccl()
    assert os.environ.get("NCCL_NVLS_ENABLE") == "0"
    # CPU collectives need no library
    x = Tensor([1.0, 2.0, 3.0, 4.0], device="CPU").shard(("CPU:0", "CPU:1"), axis=0)
    assert x.sum().item() == 10.0


def test_a_later_schedule_reads_what_an_earlier_one_computed_per_device() -> None:
    """A product of a sharded tensor realized per device by one schedule is read, not computed again, by the next
    schedule that needs it (the global node is recorded as the MULTI of its shards' buffers); a tensor-parallel
    decode step writes each layer's cache in a schedule of its own, and a data-parallel step realizes its loss
    after the update: both computed their graphs again."""
    D = devs(2)
    x_np, w_np = rand(8, 64), rand(64, 32)
    x, w = Tensor(x_np).shard(D, axis=0).realize(), Tensor(w_np).to(D).realize()
    h = x @ w
    total, first = h.sum(1), h + 1
    total.realize(first)  # two kernels read h: each device stores its shard of h
    GlobalCounters.reset()
    second = (h * 2).realize()
    assert GlobalCounters.global_ops < 8 * 32 * 64, GlobalCounters.global_ops  # no product again: 256 multiplies
    np.testing.assert_allclose(second.numpy(), (x_np @ w_np) * 2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(first.numpy(), x_np @ w_np + 1, rtol=1e-5, atol=1e-5)


def test_a_multi_device_graph_that_cannot_be_built_falls_back_to_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device kind whose graph of a multi-device step fails to build (a driver or NCCL that cannot capture it)
    warns and replays the step launch by launch, with the same results."""
    from tg_runtime.device import Compiled

    def refuse(self: Compiled, items: list[Any]) -> None:
        raise RuntimeError("capture refused")

    D = devs(2)
    monkeypatch.setattr(type(Device[D[0]]), "multi_graph", refuse)  # (the kind's own, where it defines one: CUDA)
    X, Y = _mnist_subset(64)
    one = _train(None, X, Y, steps=4, bs=16)
    with pytest.warns(UserWarning, match="capture refused"):
        many = _train(D, X, Y, steps=4, bs=16)
    np.testing.assert_allclose(many, one, rtol=1e-5, atol=1e-6)
