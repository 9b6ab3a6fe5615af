"""Train a small convnet on MNIST with a jitted Adam step; prints a progress bar and the final test accuracy.

Run with `uv run examples/beautiful_mnist.py` (STEPS=, BS=, LR=, EVAL_EVERY= to change the defaults;
EVAL_EVERY=0 tests only at the end). GPUS=n trains data-parallel on n devices of the default kind
(`DEV=CUDA GPUS=2`; on the CPU, `GPUS=2` uses CPU:0 and CPU:1): each batch is split over the devices,
the parameters are replicated, and their gradients are all-reduced (NCCL on CUDA). BS must split evenly.
SHARDED=1 takes that path on a set of one device too (`GPUS=1 SHARDED=1`: tensors on the 1-tuple of devices,
all-reduces over one rank), to compare it with the plain single-device path.
JIT_CACHE=1 (the default) keeps the jitted training step's capture in a file under the user cache directory (one
per device and BS), so the next run replays it from its first step; JIT_CACHE=0 turns it off, another value is the
file to use (not with GPUS/SHARDED).
The data is read from MNIST_DIR, else from ../shared/datasets/mnist beside the repository when that
folder exists (as on the project's machines), else as tg.nn.datasets.mnist() finds it (user cache, download).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

import numpy as np

from tg import Device, GlobalCounters, Tensor, TinyJit, getenv, nn
from tg_uop.helpers import cache_dir


class Model:
    def __init__(self) -> None:
        self.c1 = nn.Conv2d(1, 32, 3)
        self.c2 = nn.Conv2d(32, 64, 3)
        self.l1 = nn.Linear(1600, 10)

    def __call__(self, x: Tensor) -> Tensor:
        x = self.c1(x).relu().max_pool2d((2, 2))
        x = self.c2(x).relu().max_pool2d((2, 2))
        return self.l1(x.flatten(1).dropout(0.5))  # random bits made on the device: a new mask every jitted step


def progress(step: int, total: int, started: float, text: str) -> None:
    done = int(30 * step / total)
    rate = step / max(time.perf_counter() - started, 1e-9)
    sys.stdout.write(f"\r{step:5d}/{total} [{'=' * done}{' ' * (30 - done)}] {rate:5.2f} steps/s  {text}")
    sys.stdout.flush()


def data_dir() -> str | None:
    shared = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "datasets", "mnist")
    return os.getenv("MNIST_DIR") or (shared if os.path.isdir(shared) else None)


def jit_cache_path(bs: int, sharded: bool) -> str | None:
    """The file of the training step's capture (JIT_CACHE=1: one per device and batch size), or None (off)."""
    setting = os.getenv("JIT_CACHE", "1")
    if setting == "0" or sharded:
        return None
    if setting != "1":
        return setting
    digest = hashlib.sha256(repr((Device.DEFAULT, bs)).encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), "jit", f"beautiful_mnist-{digest}.tgjit")


def main() -> None:
    X_train, Y_train, X_test, Y_test = nn.datasets.mnist_numpy(data_dir())
    X_train_f = X_train.astype(np.float32) / 255.0
    X_test_f, Y_test_i = X_test.astype(np.float32) / 255.0, Y_test.astype(np.int32)
    X_train_t, Y_train_t = Tensor(X_train_f).realize(), Tensor(Y_train.astype(np.int32)).realize()  # on the device once

    Tensor.manual_seed(getenv("SEED", 42))
    model = Model()
    gpus = tuple(f"{Device.DEFAULT.split(':')[0]}:{i}" for i in range(getenv("GPUS", 1)))
    sharded = len(gpus) > 1 or bool(getenv("SHARDED", 0))
    if sharded:  # data parallel: every device holds the whole model
        for p in nn.state.get_parameters(model):
            p.to_(gpus)

    def split(*ts: Tensor) -> list[Tensor]:
        return [t.shard(gpus, axis=0) for t in ts] if sharded else list(ts)

    def one_device(t: Tensor) -> Tensor:
        return t.to(gpus[0]) if sharded else t

    # data parallel: the parameters in one flat buffer per device (fused), so their gradients are all-reduced in one
    # collective instead of one per parameter
    opt = nn.optim.Adam(nn.state.get_parameters(model), lr=getenv("LR", 0.001), fused=sharded or None)

    def train_step(samples: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            x, y = X_train_t[samples], Y_train_t[samples]  # the batch is gathered on the device (indexed loads)
            x, y = split(x, y)  # GPUS=n: each device gets BS/n samples
            loss = one_device(model(x).sparse_categorical_crossentropy(y).backward())
            Tensor.realize(loss, *opt.schedule_step())
            return loss

    steps, bs, every = getenv("STEPS", 1500), getenv("BS", 128), getenv("EVAL_EVERY", 250)
    # what the step reads and updates besides its input, by name: a saved capture binds these tensors by name
    state = {**nn.state.get_state_dict(model, "model"), **nn.state.get_state_dict(opt, "opt")}
    state |= {"data.X_train": X_train_t, "data.Y_train": Y_train_t}
    jitted_step = TinyJit(train_step, cache=(cache := jit_cache_path(bs, sharded)), state=state)

    @TinyJit
    def correct(x: Tensor, y: Tensor) -> Tensor:
        x, y = split(x, y)
        return one_device((model(x).argmax(axis=1) == y).sum())

    def test_accuracy() -> float:
        n, bs = len(X_test_f), 1000
        hits = sum(
            int(correct(Tensor(X_test_f[i : i + bs]), Tensor(Y_test_i[i : i + bs])).item()) for i in range(0, n, bs)
        )
        return 100.0 * hits / n

    rng = np.random.default_rng(getenv("SEED", 42))
    acc: float | None = None  # no test accuracy before the first evaluation
    print(f"training {steps} steps of batch {bs} on {Device.DEFAULT} (the first step compiles the kernels)")
    if cache is not None:
        print(f"TinyJit capture file: {cache} ({'found' if os.path.exists(cache) else 'not there yet'})")
    started = time.perf_counter()
    GlobalCounters.reset()
    for step in range(1, steps + 1):
        samples = Tensor(rng.integers(0, len(X_train_f), bs).astype(np.int32))
        loss = jitted_step(samples)
        if (every > 0 and step % every == 0) or step == steps:  # EVAL_EVERY=0: only at the end
            acc = test_accuracy()
        if step == 1 or step % 10 == 0 or step == steps:
            shown = "-" if acc is None else f"{acc:5.2f}%"
            progress(step, steps, started, f"loss {loss.item():6.3f}  test accuracy {shown}")
    elapsed = time.perf_counter() - started
    print(f"\ntrained {steps} steps of batch {bs} in {elapsed:.1f} s ({steps / elapsed:.2f} steps/s)")
    print(f"test accuracy: {acc:.2f}%" if acc is not None else "test accuracy: - (no step ran)")


if __name__ == "__main__":
    main()
