"""TinyJit with training: jitted optimizer steps give the same parameters as eager ones."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg import Tensor, TinyJit, nn
from tg_nn.optim import SGD, Adam, Optimizer
from tg_nn.state import get_parameters, get_state_dict, load_state_dict


class ConvNet:
    def __init__(self) -> None:
        self.c1 = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.l1 = nn.Linear(4 * 3 * 3, 5)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l1(self.bn(self.c1(x)).relu().max_pool2d((2, 2)).flatten(1))


class MLP:
    def __init__(self) -> None:
        self.l1, self.l2 = nn.Linear(6, 8), nn.Linear(8, 3)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


def _batches(n: int, shape: tuple[int, ...], classes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Inputs with learnable labels (the argmax of the first `classes` input values), so a loss can fall."""
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]
    return [(x, x.reshape(shape[0], -1)[:, :classes].argmax(1).astype(np.int32)) for x in xs]


def _train(model: object, opt: Optimizer, batches: list, jit: bool) -> list[float]:
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y)  # type: ignore[operator]
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        return loss

    fn: Callable[[Tensor, Tensor], Tensor] = TinyJit(step) if jit else step
    with Tensor.train():
        return [fn(Tensor(x), Tensor(y)).item() for x, y in batches]


def _mean_loss(model: object, batches: list) -> float:
    losses = [model(Tensor(x)).sparse_categorical_crossentropy(Tensor(y)).item() for x, y in batches]  # type: ignore[operator]
    return float(np.mean(losses))


@pytest.mark.parametrize(
    "make_model, make_opt, shape, classes",
    [
        (MLP, lambda p: Adam(p, lr=0.01), (16, 6), 3),
        (ConvNet, lambda p: SGD(p, lr=0.05, momentum=0.9, nesterov=True), (8, 1, 8, 8), 5),
    ],
    ids=["mlp-adam", "convnet-bn-sgd"],
)
def test_ten_jitted_steps_equal_ten_eager_steps(make_model, make_opt, shape, classes) -> None:  # type: ignore
    Tensor.manual_seed(0)
    eager_model, jit_model = make_model(), make_model()
    load_state_dict(jit_model, get_state_dict(eager_model))
    batches = _batches(10, shape, classes)
    before = _mean_loss(eager_model, batches)
    eager_losses = _train(eager_model, make_opt(get_parameters(eager_model)), batches, jit=False)
    jit_losses = _train(jit_model, make_opt(get_parameters(jit_model)), batches, jit=True)
    np.testing.assert_allclose(jit_losses, eager_losses, rtol=1e-5, atol=1e-6)
    assert _mean_loss(eager_model, batches) < 0.95 * before  # it trains
    for k, v in get_state_dict(eager_model).items():
        np.testing.assert_allclose(get_state_dict(jit_model)[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_learning_rate_schedule_reaches_a_jitted_step() -> None:
    Tensor.manual_seed(1)
    model = MLP()
    opt = SGD(get_parameters(model), lr=0.1)
    x, y = _batches(1, (4, 6), 3)[0]

    @TinyJit
    def step(xt: Tensor, yt: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model(xt).sparse_categorical_crossentropy(yt).backward()
        opt.step()
        return loss

    with Tensor.train():
        for _ in range(3):
            step(Tensor(x), Tensor(y))
        before = model.l1.weight.numpy()
        opt.lr.assign(Tensor([0.0])).realize()
        step(Tensor(x), Tensor(y))  # a replay, with lr now zero
        np.testing.assert_array_equal(model.l1.weight.numpy(), before)
        opt.lr.assign(Tensor([0.1])).realize()
        step(Tensor(x), Tensor(y))
        assert not np.array_equal(model.l1.weight.numpy(), before)


def test_load_state_dict_writes_in_place_so_a_recording_sees_new_weights() -> None:
    Tensor.manual_seed(2)
    model, other = MLP(), MLP()

    @TinyJit
    def forward(x: Tensor) -> Tensor:
        return model(x)

    x = Tensor(np.ones((2, 6), np.float32))
    for _ in range(3):
        forward(x)
    load_state_dict(model, get_state_dict(other))
    np.testing.assert_allclose(forward(x).numpy(), other(x).numpy(), rtol=1e-6)
