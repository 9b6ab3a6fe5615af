"""MNIST train step (batch 128, TinyJit) steps/s, next to torch eager when torch is installed; and TinyJit's
replay cost per kernel. One JSON line per figure: {"bench", "impl", "value", "unit", "params"}.

Run with `uv run bench/bench_mnist.py` (STEPS=, BS=, KERNELS=, ROUNDS= to change the sizes). tg and torch take turns
for ROUNDS rounds (default 3) of STEPS steps each; each line gives the median steps/s, its range and the threads the
implementation used (tg: THREADS, default all cores; torch: torch.get_num_threads()), and a `ratio` line tg over torch.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
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


def tg_stepper(bs: int) -> Callable[[list[tuple[np.ndarray, np.ndarray]]], float]:
    """A jitted train step (warmed up: captured and replayed once); the returned function runs it on the batches
    and returns steps/s."""
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

    for x, y in batches(3, bs):  # warm-up, capture, first replay
        step(Tensor(x), Tensor(y)).item()

    def run(data: list[tuple[np.ndarray, np.ndarray]]) -> float:
        st = time.perf_counter()
        for x, y in data:
            loss = step(Tensor(x), Tensor(y))
        loss.item()
        return len(data) / (time.perf_counter() - st)

    return run


def torch_stepper(bs: int) -> tuple[Callable[[list[tuple[np.ndarray, np.ndarray]]], float], int] | None:
    """torch eager's train step of the same model (and its thread count), or None without torch."""
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

    def run(data: list[tuple[np.ndarray, np.ndarray]]) -> float:
        tdata = [(torch.from_numpy(x), torch.from_numpy(y).long()) for x, y in data]
        st = time.perf_counter()
        for x, y in tdata:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
        return len(data) / (time.perf_counter() - st)

    run(batches(3, bs))
    return run, int(torch.get_num_threads())


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
    steps, bs, kernels, rounds = getenv("STEPS", 10), getenv("BS", 128), getenv("KERNELS", 50), getenv("ROUNDS", 3)
    dev = Device.DEFAULT
    GlobalCounters.reset()
    runs: dict[str, tuple[Callable[[list[tuple[np.ndarray, np.ndarray]]], float], int | None]] = {
        "tg": (tg_stepper(bs), getattr(Device[dev].renderer, "threads", None))
    }
    if (ref := torch_stepper(bs)) is not None:
        runs["torch"] = ref
    data = batches(steps, bs)
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, (run, _) in runs.items():
            rates[name].append(run(data))
    for name, (_, threads) in runs.items():
        v = rates[name]
        device = dev if name == "tg" else "cpu"
        emit("mnist_train_step", name, statistics.median(v), "steps/s", batch=bs, steps=steps, device=device,
             threads=threads, range=[round(min(v), 2), round(max(v), 2)])  # fmt: skip
    if "torch" in rates:
        ratio = statistics.median(rates["tg"]) / statistics.median(rates["torch"])
        emit("mnist_train_step", "ratio", ratio, "x", batch=bs, vs="torch")
    replay, eager = jit_overhead_us_per_kernel(kernels)
    emit("jit_replay_overhead", "tg", replay, "us/kernel", kernels=kernels, device=dev)
    emit("jit_replay_overhead", "tg-eager", eager, "us/kernel", kernels=kernels, device=dev)


if __name__ == "__main__":
    main()
