"""MNIST train step (batch 128, TinyJit) steps/s, next to torch eager when torch is installed; and TinyJit's
replay cost per kernel. One JSON line per figure: {"bench", "impl", "value", "unit", "params"}.

Run with `uv run bench/bench_mnist.py` (STEPS=, BS=, KERNELS= to change the sizes).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from beautiful_mnist import Model  # noqa: E402

from tg import Device, GlobalCounters, Tensor, TinyJit, getenv, nn  # noqa: E402


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    print(json.dumps({"bench": bench, "impl": impl, "value": round(value, 4), "unit": unit, "params": params}))


def batches(n: int, bs: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [(rng.random((bs, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, bs).astype(np.int32)) for _ in range(n)]


def tg_steps_per_s(steps: int, bs: int) -> float:
    Tensor.manual_seed(0)
    model = Model()
    opt = nn.optim.Adam(nn.state.get_parameters(model))

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            Tensor.realize(loss, *opt.schedule_step())
            return loss

    data = batches(steps + 3, bs)
    for x, y in data[:3]:  # warm-up, capture, first replay
        step(Tensor(x), Tensor(y)).item()
    st = time.perf_counter()
    for x, y in data[3:]:
        loss = step(Tensor(x), Tensor(y))
    loss.item()
    return steps / (time.perf_counter() - st)


def torch_steps_per_s(steps: int, bs: int) -> float | None:
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError:
        return None
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Dropout(0.5), torch.nn.Linear(1600, 10),
    )  # fmt: skip
    opt = torch.optim.Adam(net.parameters())
    data = [(torch.from_numpy(x), torch.from_numpy(y).long()) for x, y in batches(steps + 3, bs)]
    for i, (x, y) in enumerate(data):
        if i == 3:
            st = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    return steps / (time.perf_counter() - st)


def jit_overhead_us_per_kernel(kernels: int, calls: int = 200) -> tuple[float, float]:
    """(replay us/kernel, eager us/kernel) for a chain of tiny kernels, where launching is all the work."""

    def chain(x: Tensor) -> Tensor:
        for _ in range(kernels):
            x = (x + 1).contiguous()
        return x

    jitted = TinyJit(chain)
    x = Tensor(np.zeros(4, np.float32))
    for _ in range(3):
        jitted(x).realize()
    st = time.perf_counter()
    for _ in range(calls):
        jitted(x)
    replay = (time.perf_counter() - st) / calls / kernels * 1e6
    st = time.perf_counter()
    for _ in range(max(calls // 20, 3)):
        chain(x).realize()
    eager = (time.perf_counter() - st) / max(calls // 20, 3) / kernels * 1e6
    return replay, eager


def main() -> None:
    steps, bs, kernels = getenv("STEPS", 5), getenv("BS", 128), getenv("KERNELS", 50)
    dev = Device.DEFAULT
    GlobalCounters.reset()
    emit("mnist_train_step", "tg", tg_steps_per_s(steps, bs), "steps/s", batch=bs, steps=steps, device=dev)
    if (ref := torch_steps_per_s(steps, bs)) is not None:
        emit("mnist_train_step", "torch", ref, "steps/s", batch=bs, steps=steps, device="cpu")
    replay, eager = jit_overhead_us_per_kernel(kernels)
    emit("jit_replay_overhead", "tg", replay, "us/kernel", kernels=kernels, device=dev)
    emit("jit_replay_overhead", "tg-eager", eager, "us/kernel", kernels=kernels, device=dev)


if __name__ == "__main__":
    main()
