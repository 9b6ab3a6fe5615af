"""Optimizers against the update rules written out in numpy (PyTorch's formulas), on every device."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest

from tg import Tensor, nn
from tg_nn.optim import LAMB, LARS, SGD, Adam, AdamW, Muon, Optimizer, OptimizerGroup

TARGET = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
SCALE = np.array([1.0, 2.0, 0.5, 3.0], np.float32)
W0 = np.array([1.0, 1.0, -1.0, 0.25], np.float32)


def _grad(w: np.ndarray) -> np.ndarray:
    """d/dw of sum(SCALE * (w - TARGET)^2)."""
    return 2 * SCALE * (w - TARGET)


def _run_tg(make: Callable[[list[Tensor]], Optimizer], steps: int, device: str) -> np.ndarray:
    w = Tensor(W0.copy(), device=device, requires_grad=True)
    opt = make([w])
    target, scale = Tensor(TARGET, device=device), Tensor(SCALE, device=device)
    with Tensor.train():
        for _ in range(steps):
            opt.zero_grad()
            (scale * (w - target) * (w - target)).sum().backward()
            opt.step()
    return w.numpy()


def _cube_steps(opt: Optimizer, w: Tensor, steps: int) -> None:
    """`steps` optimizer steps on the loss sum(w**3) (gradient 3*w**2, which the numpy references write out)."""
    for _ in range(steps):
        with Tensor.train():
            opt.zero_grad()
            (w * w * w).sum().backward()
            opt.step()


def _sgd_ref(steps: int, lr: float, momentum: float = 0.0, wd: float = 0.0, nesterov: bool = False) -> np.ndarray:
    w, b = W0.astype(np.float64), np.zeros(4)
    for _ in range(steps):
        g = _grad(w) + wd * w
        if momentum:
            b = momentum * b + g
            g = g + momentum * b if nesterov else b
        w = w - lr * g
    return w


def _lamb_ref(steps: int, lr: float, b1: float, b2: float, eps: float, wd: float, adam: bool) -> np.ndarray:
    w, m, v = W0.astype(np.float64), np.zeros(4), np.zeros(4)
    for t in range(1, steps + 1):
        g = _grad(w)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        up = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * w
        ratio = 1.0 if adam else np.linalg.norm(w) / np.linalg.norm(up)
        w = w - lr * ratio * up
    return w


@pytest.mark.parametrize(
    "kw", [{}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True}, {"momentum": 0.5, "weight_decay": 0.1}]
)
def test_sgd(device: str, kw: dict[str, float]) -> None:
    got = _run_tg(lambda p: SGD(p, lr=0.05, **kw), 5, device)
    np.testing.assert_allclose(got, _sgd_ref(5, 0.05, kw.get("momentum", 0.0), kw.get("weight_decay", 0.0),
                                             bool(kw.get("nesterov"))), rtol=1e-5, atol=1e-6)  # fmt: skip


# float32 against a float64 reference: (1 - b2^t) is small in the first steps, so allow 1e-4
def test_adam_adamw_lamb(device: str) -> None:
    np.testing.assert_allclose(
        _run_tg(lambda p: Adam(p, lr=0.1), 6, device),
        _lamb_ref(6, 0.1, 0.9, 0.999, 1e-8, 0.0, True),
        rtol=1e-4,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        _run_tg(lambda p: AdamW(p, lr=0.1, weight_decay=0.1), 6, device),
        _lamb_ref(6, 0.1, 0.9, 0.999, 1e-8, 0.1, True),
        rtol=1e-4,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        _run_tg(lambda p: LAMB(p, lr=0.1, weight_decay=0.01), 6, device),
        _lamb_ref(6, 0.1, 0.9, 0.999, 1e-6, 0.01, False),
        rtol=1e-4,
        atol=1e-6,
    )


def test_learning_rate_is_a_tensor_that_schedules_can_change() -> None:
    w = Tensor(W0.copy(), requires_grad=True)
    opt = SGD([w], lr=0.1)
    with Tensor.train():
        opt.zero_grad()
        (w * w).sum().backward()
        opt.lr.assign(Tensor([0.0])).realize()  # a schedule setting lr to zero: no movement
        opt.step()
    np.testing.assert_array_equal(w.numpy(), W0)


def test_optimizer_group_steps_every_member() -> None:
    a, b = Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)
    group = OptimizerGroup(SGD([a], lr=0.5), SGD([b], lr=0.25))
    with Tensor.train():
        group.zero_grad()
        (a * a + b * b).sum().backward()
        group.step()
    assert a.tolist() == [0.0] and b.tolist() == [0.5]
    assert group[1].params[0] is b


def test_step_outside_training_works_and_without_gradients_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    w = Tensor([1.0], requires_grad=True)
    opt = SGD([w], lr=0.5)
    monkeypatch.setattr(Optimizer, "_warned", False)
    (w * w).sum().backward()
    with pytest.warns(UserWarning, match="Tensor.training=False"):
        opt.step()  # PyTorch code steps outside any training mode: it runs, with one warning
    assert w.tolist() == [0.0]
    opt.zero_grad()
    (w * w).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.step()  # once only
    opt.zero_grad()
    with Tensor.train(), pytest.raises(RuntimeError, match=r"parameters \[0\] have no gradient"):
        opt.step()
    with pytest.raises(ValueError, match="no parameter requires a gradient"):
        SGD([Tensor([1.0], requires_grad=False)])
    with pytest.raises(ValueError, match="nesterov needs a momentum"):
        SGD([Tensor([1.0])], nesterov=True)


def test_optimizer_realizes_buffers_such_as_batchnorm_statistics() -> None:
    bn = nn.BatchNorm2d(2)
    opt = SGD(nn.state.get_parameters(bn), lr=0.1)
    assert len(opt.params) == 2 and len(opt.buffers) == 3  # weight, bias; running mean/var, count
    x = Tensor(np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2))
    with Tensor.train():
        opt.zero_grad()
        bn(x).sum().backward()
        opt.step()
    assert bn.num_batches_tracked.tolist() == [1]
    assert bn.running_mean.numpy()[0] > 0


@pytest.mark.parametrize("classic, nesterov", [(True, False), (False, True)])
def test_lars_against_numpy(classic: bool, nesterov: bool) -> None:
    """LARS (tinygrad's rule) for three steps of a quadratic loss, against the same update in numpy."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    lr, mom, wd, tcoef = 0.1, 0.9, 1e-2, 0.02
    w = Tensor(w0.copy(), requires_grad=True)
    opt = LARS([w], lr=lr, momentum=mom, weight_decay=wd, nesterov=nesterov, classic=classic, tcoef=tcoef)
    _cube_steps(opt, w, 3)
    ref, b = w0.astype(np.float64), np.zeros_like(w0, dtype=np.float64)
    for _ in range(3):
        g = 3 * ref * ref
        r1, r2 = np.sqrt((ref * ref).sum()), np.sqrt((g * g).sum())
        r = tcoef * r1 / (r2 + wd * r1)
        g = g + wd * ref
        if classic:
            g = g * r * lr
        b = mom * b + g
        g = g + mom * b if nesterov else b
        if not classic:
            g = g * r * lr
        ref = ref - g
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-4, atol=1e-6)
    assert isinstance(nn.optim.LARS([Tensor([1.0])]), LARS)


def _newton_schulz_ref(g: np.ndarray, steps: int, coefs: tuple[float, ...], eps: float = 1e-7) -> np.ndarray:
    if g.shape[0] > g.shape[1]:
        return _newton_schulz_ref(g.T, steps, coefs, eps).T
    x = g / (np.sqrt((g * g).sum()) + eps)
    for _ in range(steps):
        gram, term, total = x @ x.T, x, np.zeros_like(x)
        for c in coefs:
            total, term = total + c * term, gram @ term
        x = total
    return x


@pytest.mark.parametrize("shape, nesterov", [((3, 5), True), ((6, 2), False), ((4,), True)])
def test_muon_against_numpy(device: str, shape: tuple[int, ...], nesterov: bool) -> None:
    """Muon (tinygrad's rule: LARS with Newton-Schulz steps, decoupled weight decay) for three steps, vs numpy."""
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal(shape).astype(np.float32)
    lr, mom, wd, steps, coefs = 0.05, 0.9, 0.1, 5, (3.4445, -4.775, 2.0315)
    w = Tensor(w0.copy(), device=device, requires_grad=True)
    opt = Muon([w], lr=lr, momentum=mom, weight_decay=wd, nesterov=nesterov)
    _cube_steps(opt, w, 3)
    ref, b = w0.astype(np.float64), np.zeros(shape)
    for _ in range(3):
        g = 3 * ref * ref
        b = mom * b + g
        u = g + mom * b if nesterov else b
        u = _newton_schulz_ref(u.reshape(shape[0], -1), steps, coefs).reshape(shape)
        ref = ref - (lr * u + wd * lr * ref)
    np.testing.assert_allclose(w.numpy(), ref, rtol=2e-3, atol=2e-4)


def test_batchnorm3d_is_tinygrads_name() -> None:
    bn = nn.BatchNorm3d(2)
    x = np.random.default_rng(0).standard_normal((2, 2, 3, 3, 3)).astype(np.float32)
    with Tensor.train():
        out = bn(Tensor(x)).numpy()
    mean, var = x.mean((0, 2, 3, 4), keepdims=True), x.var((0, 2, 3, 4), keepdims=True)
    np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4)


def test_adamw_step_with_gradient_rescaled_by_its_norm() -> None:
    """A norm over 65536 gradients is a split (two-kernel) reduction; the moment's assign, read both by its own
    root and by the parameter's update, ran twice (m = 0.19 g instead of 0.1 g) before the roots of one schedule
    shared their split rewrites."""
    r = np.random.default_rng(0)
    w0, x = r.standard_normal((512, 128)).astype(np.float32), r.standard_normal((8, 512)).astype(np.float32)
    w = Tensor(w0)
    opt = AdamW([w], lr=0.1, weight_decay=0.0)
    with Tensor.train():
        opt.zero_grad()
        (Tensor(x) @ w).square().mean().backward()
        assert w.grad is not None
        w.grad = w.grad * (100.0 / ((w.grad * w.grad).sum().sqrt() + 1e-6)).minimum(1.0)
        opt.step()
    g = 2.0 / (8 * 128) * x.T @ (x @ w0)
    g = g * min(100.0 / float(np.sqrt((g.astype(np.float64) ** 2).sum())), 1.0)
    m, v = 0.1 * g, 0.001 * g * g
    np.testing.assert_allclose(opt.m[0].numpy(), m, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(opt.v[0].numpy(), v, rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(w.numpy(), w0 - 0.1 * (m / 0.1) / (np.sqrt(v / 0.001) + 1e-8), rtol=1e-4, atol=1e-5)
