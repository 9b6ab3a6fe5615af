"""Tensors on several CPU devices (CPU:0, CPU:1, ...): sharded ops, gradients and training equal one device.

The same graphs run on several GPUs through NCCL: `TG_MULTI_KIND=CUDA pytest tests/test_multi.py` on a host
with 3 GPUs (2 for all but the 3-device cases). By default the collectives are the host implementation
between CPU devices, so every piece is tested without a GPU.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tg import Tensor, TinyJit, nn
from tg.nn.state import get_parameters
from tg_runtime.device import Buffer, Device, DeviceSet
from tg_tensor.collective import run_collective
from tg_tensor.jit import JitError
from tg_uop import Ops, dtypes

KIND = os.getenv("TG_MULTI_KIND", "CPU")
D2 = (f"{KIND}:0", f"{KIND}:1")
D3 = (f"{KIND}:0", f"{KIND}:1", f"{KIND}:2")
rng = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_devices_are_distinct() -> None:
    assert Device.canonicalize(f"{KIND.lower()}:0") == KIND
    t = Tensor([1.0, 2.0], device=f"{KIND}:1")
    assert t.device == f"{KIND}:1" and Device[f"{KIND}:1"] is not Device[KIND]
    assert (t * 2).tolist() == [2.0, 4.0]
    assert (t.to(KIND) + Tensor([1.0, 1.0], device=KIND)).tolist() == [2.0, 3.0]


def test_shard_layout_and_roundtrip() -> None:
    a = rand(4, 6)
    x = Tensor(a).shard(D2, axis=0)
    assert x.device == D2 and x.shape == (4, 6)
    assert [s.shape for s in x.uop.src[:-1]] == [(2, 6), (2, 6)]
    assert [s.device for s in x.uop.src[:-1]] == [KIND, f"{KIND}:1"]
    np.testing.assert_array_equal(x.numpy(), a)
    np.testing.assert_array_equal(x.to(KIND).numpy(), a)
    np.testing.assert_array_equal(x.to(f"{KIND}:1").numpy(), a)
    r = Tensor(a).shard(D2)  # replicated
    assert [s.shape for s in r.uop.src[:-1]] == [(4, 6), (4, 6)]
    np.testing.assert_array_equal(r.numpy(), a)
    y = Tensor(a, device=D2)
    assert y.device == D2 and y.uop.arg is None
    np.testing.assert_array_equal(y.numpy(), a)
    z = Tensor(a)
    z.shard_(D3, axis=1)
    np.testing.assert_array_equal(z.numpy(), a)
    np.testing.assert_array_equal(Tensor(a).to(D2).numpy(), a)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_elementwise_and_reductions(axis: int | None) -> None:
    a, b = rand(4, 6), rand(4, 6)
    x, y = Tensor(a).shard(D2, axis), Tensor(b).shard(D2)  # sharded with replicated
    np.testing.assert_allclose(((x + y) * 2 - x.exp()).numpy(), (a + b) * 2 - np.exp(a), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose((x * 3 + 1).relu().numpy(), np.maximum(a * 3 + 1, 0), rtol=1e-6)
    for ax in (None, 0, 1):
        np.testing.assert_allclose(x.sum(axis=ax).numpy(), a.sum(axis=ax), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(x.max(axis=ax).numpy(), a.max(axis=ax))
        np.testing.assert_allclose(x.mean(axis=ax).numpy(), a.mean(axis=ax), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.softmax(axis=1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-5)
    assert (x < y).numpy().tolist() == (a < b).tolist()


def test_matmul_with_sharded_operands() -> None:
    a, w = rand(4, 6), rand(6, 8)
    ref = a @ w
    for xa, wa in [(0, None), (None, 1), (1, 0), (0, 1), (None, None)]:
        x, m = Tensor(a).shard(D2, xa), Tensor(w).shard(D2, wa)
        np.testing.assert_allclose((x @ m).numpy(), ref, rtol=1e-5, atol=1e-5, err_msg=f"x axis {xa}, w axis {wa}")


def test_movement_ops() -> None:
    a = rand(4, 6)
    x = Tensor(a).shard(D2, axis=0)
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


def test_gradients_equal_single_device() -> None:
    a, w, b = rand(8, 6), rand(6, 4), rand(4)

    def loss(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return ((x @ w + b).relu() * 1.5).log_softmax(axis=1).mean()

    w1, b1 = Tensor(w, requires_grad=True), Tensor(b, requires_grad=True)
    loss(Tensor(a), w1, b1).backward()
    for xa, wa in [(0, None), (None, 1), (1, 0)]:
        wm, bm = Tensor(w).shard(D2, wa), Tensor(b).shard(D2)
        wm.requires_grad, bm.requires_grad = True, True
        lm = loss(Tensor(a).shard(D2, xa), wm, bm)
        lm.backward()
        assert wm.grad is not None and bm.grad is not None and wm.grad.device == D2
        np.testing.assert_allclose(wm.grad.numpy(), w1.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bm.grad.numpy(), b1.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_optimizer_on_sharded_params() -> None:
    a, w = rand(8, 6), rand(6, 4)
    results = []
    for devs, axis in [(None, None), (D2, None), (D2, 1)]:
        x, p = Tensor(a), Tensor(w)
        if devs is not None:
            x, p = x.shard(devs, axis=0), p.shard(devs, axis=axis)
        opt = nn.optim.Adam([p], lr=0.05)
        with Tensor.train():
            for _ in range(3):
                opt.zero_grad()
                (x @ p).square().mean().backward()
                opt.step()
        if devs is not None:
            assert p.device == devs and p.uop.op is Ops.MULTI and p.uop.arg == axis
        results.append(p.numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[2], results[0], rtol=1e-5, atol=1e-6)


def test_collectives_host() -> None:
    parts = [rand(6) for _ in range(3)]
    ins = [Buffer(d, 6, dtypes.float32).copyin(memoryview(p.tobytes())) for d, p in zip(D3, parts)]

    def run(kind: str, op: str, size: int) -> list[np.ndarray]:
        outs = [Buffer(d, size, dtypes.float32) for d in D3]
        run_collective(kind, op, outs, ins)
        return [np.frombuffer(o.as_bytes(), np.float32) for o in outs]

    for o in run("allreduce", "SUM", 6):
        np.testing.assert_allclose(o, parts[0] + parts[1] + parts[2], rtol=1e-6)
    for o in run("allreduce", "MAX", 6):
        np.testing.assert_array_equal(o, np.maximum(np.maximum(parts[0], parts[1]), parts[2]))
    for o in run("allgather", "", 18):
        np.testing.assert_array_equal(o, np.concatenate(parts))
    total = parts[0] + parts[1] + parts[2]
    for i, o in enumerate(run("reducescatter", "SUM", 2)):
        np.testing.assert_allclose(o, total[2 * i : 2 * i + 2], rtol=1e-6)
    for o in run("broadcast", "", 6):
        np.testing.assert_array_equal(o, parts[0])
    with pytest.raises(ValueError, match="unknown reduction 'MIN'"):
        run("allreduce", "MIN", 6)


def test_reduce_over_sharded_axis_is_one_allreduce() -> None:
    x = Tensor(rand(4, 6)).shard(D2, axis=0)
    items = x.sum(axis=0).schedule()
    kinds = [it.ast.arg for it in items if it.ast.op is Ops.COLLECTIVE]
    assert kinds == [("allreduce", "SUM")]


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


def _train(devs: tuple[str, ...] | None, X: np.ndarray, Y: np.ndarray, steps: int, bs: int) -> list[float]:
    Tensor.manual_seed(7)
    model = _Net()
    if devs is not None:
        for p in get_parameters(model):
            p.to_(devs)  # replicated
    opt = nn.optim.Adam(get_parameters(model), lr=0.01)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            if devs is not None:
                x, y = x.shard(devs, axis=0), y.shard(devs, axis=0)  # the batch split over the devices
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            opt.step()
            return (loss.to(devs[0]) if devs is not None else loss).contiguous()

    return [step(Tensor(X[i * bs : (i + 1) * bs]), Tensor(Y[i * bs : (i + 1) * bs])).item() for i in range(steps)]


def test_data_parallel_mnist_matches_one_device() -> None:
    X, Y = _mnist_subset(80)
    one = _train(None, X, Y, steps=5, bs=16)
    two = _train(D2, X, Y, steps=5, bs=16)  # steps 3.. replay the TinyJit recording (collectives included)
    np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-6)
    assert one[-1] < one[0]


def test_bad_input() -> None:
    with pytest.raises(RuntimeError, match="size 5, which does not split evenly over 2 devices"):
        Tensor.ones(5, 2).contiguous().shard(D2, axis=0)
    with pytest.raises(ValueError, match="devices of different kinds"):
        Tensor.ones(4).shard(("CPU:0", "PYTHON:1"), axis=0)
    with pytest.raises(ValueError, match="names a device twice"):
        Tensor.ones(4).shard(("CPU:0", "CPU"), axis=0)
    with pytest.raises(TypeError, match="tuple of device names"):
        Tensor.ones(4).shard("CPU:1")  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="axis 2 is out of range"):
        Tensor.ones(4, 2).shard(D2, axis=2)
    x = Tensor.ones(4).shard(D2, axis=0)
    with pytest.raises(ValueError, match="already on several devices"):
        x.shard(D2)
    with pytest.raises(ValueError, match=f"operands are on different devices: {KIND},{KIND}:1"):
        (x + Tensor.ones(4).contiguous()).realize()
    with pytest.raises(ValueError, match="that is several devices"):
        Device[DeviceSet(D2)]


def test_jit_refuses_multi_device_io() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x * 2

    with pytest.raises(JitError, match="shard it inside the function"):
        f(Tensor.ones(4).shard(D2, axis=0))

    @TinyJit
    def g(x: Tensor) -> Tensor:
        return x.shard(D2, axis=0) * 2

    with pytest.raises(JitError, match="returns a tensor on several devices"):
        g(Tensor.ones(4))


def test_nccl_missing_names_the_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_runtime import nccl

    monkeypatch.setattr(nccl, "_lib", None)
    monkeypatch.setattr(nccl, "_candidates", lambda: ["/nonexistent/libnccl.so.2"])
    with pytest.raises(nccl.NCCLError, match="pip install nvidia-nccl-cu12"):
        nccl.load_nccl()
    assert os.environ.get("NCCL_NVLS_ENABLE") == "0"
    # CPU collectives need no library
    x = Tensor([1.0, 2.0, 3.0, 4.0]).shard(D2, axis=0)
    assert x.sum().item() == 10.0
