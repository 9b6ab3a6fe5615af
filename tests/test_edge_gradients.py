"""Gradients at the edges, as PyTorch and tinygrad define them, checked against numpy formulas.

relu and abs at 0, clip at its bounds, max/min ties, pow with a zero base or exponent, sigmoid and
tanh far into saturation, comparisons and casts in a graph, zero-size tensors.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable

import numpy as np
import pytest

from tg import Tensor

X = np.array([0.0, -1.0, 1.0, 2.5, -2.5, -0.0], np.float32)


def grad_of(f: Callable[[Tensor], Tensor], x: np.ndarray, device: str | None = None) -> np.ndarray:
    t = Tensor(x, device=device)
    return f(t).sum().gradient(t)[0].numpy()


@pytest.mark.parametrize(
    "name, f, expected",
    [
        ("relu", lambda t: t.relu(), (X > 0).astype(np.float32)),
        ("abs", lambda t: t.abs(), np.sign(X)),
        ("clip", lambda t: t.clip(-1.0, 1.0), ((X >= -1) & (X <= 1)).astype(np.float32)),
        ("clamp_min", lambda t: t.clamp(min_=0.0), (X >= 0).astype(np.float32)),
        ("sign", lambda t: t.sign(), np.zeros_like(X)),
        (
            "maximum_tie",
            lambda t: t.maximum(Tensor(np.zeros_like(X))),
            np.where(X > 0, 1.0, np.where(X == 0, 0.5, 0.0)),
        ),
        (  # a tie with a constant splits too (torch.maximum(x, zeros)); relu's slope at 0 stays 0
            "maximum_const_tie",
            lambda t: t.maximum(0),
            np.where(X > 0, 1.0, np.where(X == 0, 0.5, 0.0)),
        ),
        (
            "minimum_const_tie",
            lambda t: t.minimum(0.0),
            np.where(X < 0, 1.0, np.where(X == 0, 0.5, 0.0)),
        ),
        (
            "minimum_tie",
            lambda t: t.minimum(Tensor(np.zeros_like(X))),
            np.where(X < 0, 1.0, np.where(X == 0, 0.5, 0.0)),
        ),
        ("cmp", lambda t: (t > 0).float() * 3, np.zeros_like(X)),
        ("int_cast", lambda t: t.int().float(), np.zeros_like(X)),
        ("where", lambda t: (t > 0).where(t * 2, t * 3), np.where(X > 0, 2.0, 3.0)),
    ],
)
def test_edge_gradients(name: str, f: Callable[[Tensor], Tensor], expected: np.ndarray) -> None:
    np.testing.assert_array_equal(grad_of(f, X), expected.astype(np.float32), err_msg=name)


D = 1e-3
SMOOTH = [
    "asin",
    "atan",
    "asinh",
    "erf",
    "softplus",
    "logsigmoid",
    "elu",
    "celu",
    "selu",
    "sigmoid",
    "tanh",
    "mish",
    "gelu",
]


@pytest.mark.parametrize("name", SMOOTH)
def test_slope_at_zero_and_around(name: str) -> None:
    """Functions built from |x|, sign(x) or a branch at 0 keep their true slope there (central differences)."""
    x = np.array([0.0, -0.3, 0.3, -0.7, 0.7], np.float32)
    f = lambda v: getattr(Tensor(v), name)().numpy().astype(np.float64)  # noqa: E731
    numeric = (f(x + D) - f(x - D)) / (2 * D)
    if name in ("elu", "celu", "selu"):  # PyTorch's one-sided slope at 0 is the left one (alpha * exp(0))
        numeric[0] = (f(x[:1]) - f(x[:1] - D))[0] / D
    np.testing.assert_allclose(grad_of(lambda t: getattr(t, name)(), x), numeric, rtol=2e-2, atol=2e-3, err_msg=name)


def test_piecewise_ends() -> None:
    """hardsigmoid, relu6 and hardtanh-like clips: PyTorch's slope is 0 at the ends of the linear part."""
    x = np.array([-3.0, 3.0, 0.0, -4.0, 4.0], np.float32)
    np.testing.assert_allclose(grad_of(lambda t: t.hardsigmoid(), x), [0, 0, 1 / 6, 0, 0], rtol=1e-6)
    np.testing.assert_array_equal(
        grad_of(lambda t: t.relu6(), np.array([0.0, 6.0, 3.0, 7.0], np.float32)), [0, 0, 1, 0]
    )


def test_max_min_reduction_ties_share() -> None:
    m = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 1.0]], np.float32)
    np.testing.assert_array_equal(grad_of(lambda t: t.max(axis=1), m), [[0, 0.5, 0.5], [0.5, 0.5, 0]])
    np.testing.assert_array_equal(grad_of(lambda t: t.min(), m), [[0.5, 0, 0], [0, 0, 0.5]])


def test_saturation_has_no_nan() -> None:
    x = np.array([-200.0, -100.0, -30.0, 0.0, 30.0, 100.0, 200.0], np.float32)
    x64 = x.astype(np.float64)
    e = np.exp(-np.abs(x64))  # the derivatives in a form that loses nothing far out
    s, ds = np.where(x64 >= 0, 1, e) / (1 + e), e / (1 + e) ** 2
    e2 = np.exp(-2 * np.abs(x64))
    t = Tensor(x)
    np.testing.assert_allclose(t.sigmoid().numpy(), s, rtol=1e-5, atol=1e-38)
    np.testing.assert_allclose(grad_of(lambda t: t.sigmoid(), x), ds, rtol=1e-4, atol=1e-38)
    np.testing.assert_allclose(grad_of(lambda t: t.tanh(), x), 4 * e2 / (1 + e2) ** 2, rtol=1e-4, atol=1e-38)
    s_neg = np.where(x64 >= 0, e, 1) / (1 + e)  # sigmoid(-x) = 1 - sigmoid(x)
    np.testing.assert_allclose(grad_of(lambda t: t.logsigmoid(), x), s_neg, rtol=1e-4, atol=1e-38)
    for name in ("softplus", "elu", "celu", "selu", "mish", "silu", "gelu", "erf", "sinh", "tanh", "swish"):
        g = grad_of(lambda t, name=name: getattr(t, name)(), x)  # type: ignore[misc]
        assert not np.isnan(g).any(), (name, g)


def test_pow_zero_base_and_exponent() -> None:
    b = np.array([0, 0, 0, 0, 2, -2, -2, 2, 0.5, 0, 0, -2], np.float32)
    e = np.array([0, 1, 2, -1, 0, 3, 2, 0.5, -2, 0.3, -0.3, 0.5], np.float32)
    tb, te = Tensor(b), Tensor(e)
    r = tb**te
    gb, ge = r.sum().gradient(tb, te)
    with np.errstate(all="ignore"):
        b64, e64 = b.astype(np.float64), e.astype(np.float64)
        np.testing.assert_allclose(r.numpy(), b64**e64, rtol=1e-6)
        # PyTorch's formulas, NaN and inf included: d/db = e * b**(e-1), 0 where e == 0 (inf at 0 ** 0.3,
        # NaN for a negative base and a fractional exponent); d/de = b**e * ln b, 0 where b == 0 and e >= 0
        # (NaN for any negative base, -inf at 0 ** -0.3)
        want_b = np.where(e64 == 0, 0.0, e64 * b64 ** (e64 - 1))
        want_e = np.where((b64 == 0) & (e64 >= 0), 0.0, b64**e64 * np.log(b64))
    np.testing.assert_allclose(gb.numpy(), want_b, rtol=1e-5)
    np.testing.assert_allclose(ge.numpy(), want_e, rtol=1e-5)
    zero = Tensor([0.0])
    assert (zero**0).sum().gradient(zero)[0].tolist() == [0.0]


def test_pow_edges_match_pytorch() -> None:
    """x ** c at infinite and zero bases, (-inf) ** fractional, x ** 0 for any x (numpy's values; the
    gradients are e * x ** (e - 1), 0 for c == 0, as PyTorch)."""
    import math

    for c in (-1, 0, 0.3, 1, 2, 2.5, -0.3):
        x = np.array([-math.inf, 0.0, 1.0, math.inf, -2.0, 0.5], np.float32)
        t = Tensor(x)
        got = (t**c).sum().gradient(t)[0].numpy()
        with np.errstate(all="ignore"):
            x64 = x.astype(np.float64)
            want = np.zeros_like(x64) if c == 0 else c * x64 ** (c - 1)
            np.testing.assert_allclose((t**c).numpy(), x64**c, rtol=1e-6)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"c={c}")
    v = Tensor([-math.inf, math.inf, 0.0, math.nan]) ** Tensor([0.0, 0.0, 0.0, 0.0])
    assert v.tolist() == [1.0, 1.0, 1.0, 1.0]
    assert (Tensor([-math.inf]) ** 0.3).tolist() == [math.inf] and (Tensor([-math.inf]) ** 3.3).tolist() == [math.inf]
    s = Tensor([0.5, 1.0, 2.0])
    g = ((-5.5) ** s).sum().gradient(s)[0].numpy()  # log of a negative base: NaN, as PyTorch
    assert np.isnan(g).all()


def test_zero_size_gradients_are_zero_size_zeros() -> None:
    x = Tensor(np.zeros((4, 0), np.float32))
    for f in (
        lambda t: t.sum(axis=0).sum(),
        lambda t: t.sum(),
        lambda t: (t * 2).mean(axis=1).sum(),
        lambda t: t.exp().sum(),
    ):
        (g,) = f(x).gradient(x)
        assert g.shape == (4, 0)
        assert g.numpy().shape == (4, 0)
    y = Tensor(np.zeros((0, 3), np.float32), requires_grad=True)
    y.sum().backward()
    assert y.grad is not None and y.grad.numpy().shape == (0, 3)


def test_unrelated_target_has_zero_gradient() -> None:
    x, other = Tensor([1.0, 2.0]), Tensor([[3.0, 4.0]])
    assert (x * 2).sum().gradient(other)[0].tolist() == [[0.0, 0.0]]
    w = Tensor([1.0, -1.0], requires_grad=True)
    ((w > 0).float() * 2).sum().backward()  # in the graph only through a comparison: zero, not None
    assert w.grad is not None and w.grad.tolist() == [0.0, 0.0]


def test_zero_size_gradient_program_exits_cleanly() -> None:
    """The issue's program used to end in a segmentation fault at interpreter exit."""
    program = textwrap.dedent(
        """
        import numpy as np
        from tg import Tensor
        x = Tensor(np.zeros((4, 0), np.float32))
        print(x.sum(axis=(0,)).realize().numpy())
        print(Tensor.realize(*x.sum(axis=(0,)).sum().gradient(x)).numpy().shape)
        print((Tensor(np.zeros((0, 4), np.float32)) + 1).numpy().shape)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", program], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["[]", "(4, 0)", "(0, 4)"]
