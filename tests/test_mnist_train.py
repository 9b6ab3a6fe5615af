"""End to end: a small convnet trained with a jitted Adam step on 2,000 MNIST images reaches >= 90% test accuracy.

Asserts accuracy, never time (it takes well under a minute on CPU with two cores).
"""

from __future__ import annotations

import numpy as np

from tg import Tensor, TinyJit, nn
from tg_nn.datasets import mnist_numpy


class SmallNet:
    def __init__(self) -> None:
        self.c1 = nn.Conv2d(1, 8, 3)
        self.c2 = nn.Conv2d(8, 16, 3)
        self.l1 = nn.Linear(16 * 5 * 5, 10)

    def __call__(self, x: Tensor) -> Tensor:
        x = self.c1(x).relu().max_pool2d((2, 2))
        x = self.c2(x).relu().max_pool2d((2, 2))
        return self.l1(x.flatten(1))


def test_small_convnet_reaches_90_percent_on_a_2000_image_subset(mnist_dir: str) -> None:
    X_train, Y_train, X_test, Y_test = mnist_numpy(mnist_dir)
    x_tr, y_tr = X_train[:2000].astype(np.float32) / 255.0, Y_train[:2000].astype(np.int32)
    x_te, y_te = X_test.astype(np.float32) / 255.0, Y_test.astype(np.int32)

    Tensor.manual_seed(0)
    model = SmallNet()
    opt = nn.optim.Adam(nn.state.get_parameters(model), lr=0.003)

    @TinyJit
    def train_step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            Tensor.realize(loss, *opt.schedule_step())
            return loss

    @TinyJit
    def correct(x: Tensor, y: Tensor) -> Tensor:
        return (model(x).argmax(axis=1) == y).sum()

    rng = np.random.default_rng(0)
    losses = []
    for _ in range(4):  # epochs over the subset, batches of 50
        order = rng.permutation(2000)
        for i in range(0, 2000, 50):
            idx = order[i : i + 50]
            losses.append(train_step(Tensor(x_tr[idx]), Tensor(y_tr[idx])).item())
    hits = sum(
        int(correct(Tensor(x_te[i : i + 1000]), Tensor(y_te[i : i + 1000])).item()) for i in range(0, 10000, 1000)
    )
    accuracy = hits / 10000
    print(f"loss {np.mean(losses[:10]):.3f} -> {np.mean(losses[-10:]):.3f}, test accuracy {accuracy:.4f}")
    assert np.mean(losses[-10:]) < np.mean(losses[:10]) / 3
    assert accuracy >= 0.90
