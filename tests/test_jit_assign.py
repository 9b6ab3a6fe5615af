"""TinyJit records the in-place writes a function makes, also those it leaves lazy (not realized inside)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tg import Tensor, TinyJit


def _sgd_run(step: Callable[..., object], device: str, steps: int = 12) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    w = Tensor(rng.standard_normal((3, 2)).astype(np.float32), device=device).realize()
    b = Tensor(np.zeros(2, np.float32), device=device).realize()
    history = []
    for i in range(steps):
        x = Tensor(rng.standard_normal((4, 3)).astype(np.float32), device=device)
        y = Tensor(rng.standard_normal((4, 2)).astype(np.float32), device=device)
        step(w, b, x, y, i)
        history.append(np.concatenate([w.numpy().ravel(), b.numpy()]))
    return history


def _sgd_step(w: Tensor, b: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """A hand-written SGD step: the updates are lazy assigns, the returned loss does not depend on them."""
    loss = ((x @ w + b - y) ** 2).mean()
    gw, gb = loss.gradient(w, b)
    w.assign(w - gw * 0.1)
    b.assign(b - gb * 0.1)
    return loss.contiguous()


def test_sgd_step_replays_its_assigns(device: str) -> None:
    jitted = TinyJit(_sgd_step)
    plain = _sgd_run(lambda w, b, x, y, i: _sgd_step(w, b, x, y), device)
    replayed = _sgd_run(lambda w, b, x, y, i: jitted(w, b, x, y), device)
    assert len(jitted.jit_cache) > 0  # calls 3.. were replays
    for i, (p, r) in enumerate(zip(plain, replayed)):
        np.testing.assert_allclose(r, p, rtol=1e-5, atol=1e-6, err_msg=f"step {i}")
    assert not np.allclose(plain[-1], plain[-2])  # the weights kept moving


def test_assign_only_function(device: str) -> None:
    """The issue's case: w.assign(w * 0.5 + x), nothing returned."""

    @TinyJit
    def f(w: Tensor, x: Tensor) -> None:
        w.assign(w * 0.5 + x)

    w = Tensor([0.0], device=device).realize()
    got, want, v = [], [], 0.0
    for i in range(10):
        x = 0.5 * (i + 1)
        f(w, Tensor([x], device=device))
        v = v * 0.5 + x
        got.append(w.item())
        want.append(v)
    assert got == want


def test_assign_pending_before_the_call_is_not_recorded(device: str) -> None:
    """A write left lazy before the call runs once, before the recording, never on replays."""
    w = Tensor([1.0], device=device).realize()

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x * w).contiguous()

    got = []
    for i in range(5):
        if i == 1:
            w.assign(w + 1)  # pending when the capture call starts
        got.append(f(Tensor([1.0], device=device)).item())
    assert got == [1.0, 2.0, 2.0, 2.0, 2.0]
    assert w.item() == 2.0
