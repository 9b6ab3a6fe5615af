"""Optimizers with fused=True (the parameters as windows of one flat buffer) against numpy and their unfused selves."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg.nn.optim import LAMB, SGD, AdamW
from tg.nn.state import get_state_dict, load_state_dict

SHAPES = [(3, 4), (4,), (2, 2, 3)]


def _params(seed: int) -> list[Tensor]:
    rng = np.random.default_rng(seed)
    return [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in SHAPES]


def _loss(params: list[Tensor], targets: list[np.ndarray]) -> Tensor:
    total = Tensor(0.0)
    for p, t in zip(params, targets):
        total = total + ((p - Tensor(t)) ** 2).sum() * 3.0
    return total


def _numpy_adamw(ps: list[np.ndarray], grads_of, steps: int, lr: float, wd: float, clip: float | None) -> list:
    b1, b2, eps = 0.9, 0.999, 1e-8
    m = [np.zeros_like(p) for p in ps]
    v = [np.zeros_like(p) for p in ps]
    for t in range(1, steps + 1):
        gs = grads_of(ps)
        if clip is not None:
            norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in gs))
            gs = [g * min(1.0, clip / (norm + 1e-6)) for g in gs]
        for i, g in enumerate(gs):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            up = (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps) + wd * ps[i]
            ps[i] = ps[i] - lr * up
    return ps


@pytest.mark.parametrize("clip", [None, 0.5])
def test_fused_adamw_matches_numpy_and_unfused(clip: float | None) -> None:
    rng = np.random.default_rng(1)
    targets = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    results = []
    for fused in (True, False):
        params = _params(0)
        opt = AdamW(params, lr=0.05, weight_decay=0.1, fused=fused)
        with Tensor.train():
            for _ in range(3):
                opt.zero_grad()
                _loss(params, targets).backward()
                if clip is not None:
                    opt.clip_grad_norm(clip)
                opt.step()
        results.append([p.numpy() for p in params])
    start = [p.numpy() for p in _params(0)]
    want = _numpy_adamw(start, lambda ps: [6.0 * (p - t) for p, t in zip(ps, targets)], 3, 0.05, 0.1, clip)
    for fused_p, plain_p, ref in zip(*results, want):
        np.testing.assert_allclose(fused_p, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(fused_p, plain_p, rtol=1e-6, atol=1e-6)


def test_clip_grad_norm_returns_the_norm_and_scales_every_grad() -> None:
    params = _params(2)
    opt = SGD(params, lr=0.1, fused=True)
    rng = np.random.default_rng(3)
    targets = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    with Tensor.train():
        _loss(params, targets).backward()
        grads = [6.0 * (p.numpy() - t) for p, t in zip(params, targets)]
        norm = opt.clip_grad_norm(1.0).item()
    want = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads))
    assert norm == pytest.approx(want, rel=1e-5)
    for p, g in zip(params, grads):
        assert p.grad is not None and p.grad.shape == p.shape
        np.testing.assert_allclose(p.grad.numpy(), g / (want + 1e-6), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="max_norm must be > 0, got 0"):
        opt.clip_grad_norm(0)


def test_fused_parameters_load_and_save_as_before() -> None:
    """A model's parameters re-homed in the flat buffer still load (assign into their windows) and save."""

    class Model:
        def __init__(self) -> None:
            self.w, self.b = _params(4)[:2]

    model = Model()
    AdamW([model.w, model.b], fused=True)
    new = {"w": np.full((3, 4), 2.0, np.float32), "b": np.arange(4, dtype=np.float32)}
    load_state_dict(model, {k: Tensor(v) for k, v in new.items()})
    np.testing.assert_array_equal(model.w.numpy(), new["w"])
    np.testing.assert_array_equal(get_state_dict(model)["b"].numpy(), new["b"])


def test_fused_refuses_what_one_flat_buffer_cannot_hold() -> None:
    a = Tensor([1.0, 2.0], requires_grad=True)
    h = Tensor([1.0], dtype=dtypes.float16, requires_grad=True)
    with pytest.raises(ValueError, match=r"parameter 1 is dtypes.half on .*one flat buffer holds one dtype"):
        AdamW([a, h], fused=True)
    with pytest.raises(ValueError, match="fused=True needs an update of each parameter on its own"):
        LAMB([Tensor([1.0], requires_grad=True)], fused=True)
