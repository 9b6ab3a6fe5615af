"""Linear algebra and NN functions against numpy references (small shapes: PYTHON is an interpreter)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tg import Tensor, dtypes

RNG = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _t(x: np.ndarray, device: str) -> Tensor:
    return Tensor(x, device=device)


# ---- numpy references ----
def ref_conv(x: np.ndarray, w: np.ndarray, stride: Any, dilation: Any, pads: Any, groups: int) -> np.ndarray:
    nd = w.ndim - 2
    x = np.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    k = w.shape[2:]
    out_sz = [(x.shape[2 + i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    cg, og = w.shape[1], w.shape[0] // groups
    out = np.zeros((x.shape[0], w.shape[0], *out_sz))
    axes = list(range(1, nd + 2))
    for pos in np.ndindex(*out_sz):
        window = tuple(
            slice(pos[i] * stride[i], pos[i] * stride[i] + dilation[i] * (k[i] - 1) + 1, dilation[i]) for i in range(nd)
        )
        patch = x[(slice(None), slice(None)) + window]
        for g in range(groups):
            res = np.tensordot(patch[:, g * cg : (g + 1) * cg], w[g * og : (g + 1) * og], axes=(axes, axes))
            out[(slice(None), slice(g * og, (g + 1) * og)) + pos] = res
    return out


def ref_conv_grads(
    x: np.ndarray, w: np.ndarray, g: np.ndarray, stride: Any, dilation: Any, pads: Any, groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """The gradients of sum(ref_conv(x, w, ...) * g) to x and to w, window by window as ref_conv computes it."""
    nd = w.ndim - 2
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads)).astype(np.float64)
    dxp, dw = np.zeros_like(xp), np.zeros(w.shape)
    k, cg, og = w.shape[2:], w.shape[1], w.shape[0] // groups
    for pos in np.ndindex(*g.shape[2:]):
        window = tuple(
            slice(pos[i] * stride[i], pos[i] * stride[i] + dilation[i] * (k[i] - 1) + 1, dilation[i]) for i in range(nd)
        )
        for grp in range(groups):
            cin, cout = slice(grp * cg, (grp + 1) * cg), slice(grp * og, (grp + 1) * og)
            gp = g[(slice(None), cout) + pos]  # (n, og)
            dw[cout] += np.tensordot(gp, xp[(slice(None), cin) + window], axes=(0, 0))
            dxp[(slice(None), cin) + window] += np.tensordot(gp, w[cout], axes=(1, 0))
    crop = tuple(slice(b, xp.shape[2 + i] - a) for i, (b, a) in enumerate(pads))
    return dxp[(slice(None), slice(None)) + crop], dw


def ref_pool(x: np.ndarray, k: tuple[int, int], stride: tuple[int, int], fn: Any) -> np.ndarray:
    oh, ow = (x.shape[2] - k[0]) // stride[0] + 1, (x.shape[3] - k[1]) // stride[1] + 1
    out = np.zeros(x.shape[:2] + (oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = fn(x[:, :, i * stride[0] : i * stride[0] + k[0], j * stride[1] : j * stride[1] + k[1]])
    return out


def ref_conv_transpose1d(x: np.ndarray, w: np.ndarray, s: int, p: int, d: int, op: int, groups: int) -> np.ndarray:
    n, cin, length = x.shape
    cg, og, k = cin // groups, w.shape[1], w.shape[2]
    out_len = (length - 1) * s - 2 * p + d * (k - 1) + op + 1
    out = np.zeros((n, og * groups, out_len + 2 * p + k * d))
    for g in range(groups):
        for c in range(cg):
            for o in range(og):
                for i in range(length):
                    for kk in range(k):
                        out[:, g * og + o, i * s + kk * d] += x[:, g * cg + c, i] * w[g * cg + c, o, kk]
    return out[:, :, p : p + out_len]


# ---- linear algebra ----
@pytest.mark.parametrize(
    "sa,sb",
    [((3, 4), (4, 2)), ((4,), (4, 3)), ((2, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (3, 4, 2)), ((5, 0), (0, 2))],
)
def test_matmul(device: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = _r(*sa), _r(*sb)
    out = _t(a, device) @ _t(b, device)
    assert out.shape == np.matmul(a, b).shape
    np.testing.assert_allclose(out.numpy(), np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_matmul_variants(device: str) -> None:
    a, b = _r(3, 4), _r(2, 4)
    np.testing.assert_allclose(_t(a, device).dot(_t(b, device).T).numpy(), a @ b.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_t(a, device).matmul(_t(b.T.copy(), device)).numpy(), a @ b.T, rtol=1e-5, atol=1e-6)
    ai = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = _t(ai, device) @ _t(ai.T.copy(), device)
    assert out.dtype == dtypes.int32 and out.tolist() == (ai @ ai.T).tolist()
    w, bias = _r(4, 3), _r(3)
    np.testing.assert_allclose(
        _t(a, device).linear(_t(w, device), _t(bias, device)).numpy(), a @ w + bias, rtol=1e-5, atol=1e-6
    )
    with pytest.raises(ValueError, match=r"matmul: shapes \(3, 4\) and \(5, 6\) do not align: 4 != 5"):
        Tensor.ones(3, 4, device=device) @ Tensor.ones(5, 6, device=device)
    with pytest.raises(ValueError, match="at least 1 dim"):
        Tensor(1.0, device=device) @ Tensor.ones(2, device=device)


@pytest.mark.parametrize(
    "formula,shapes",
    [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("ij->ji", [(2, 3)]),
        ("ii->i", [(3, 3)]),
        ("ii", [(3, 3)]),
        ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
        ("i,j->ij", [(3,), (2,)]),
        ("ij,ij->", [(2, 3), (2, 3)]),
        ("ijk->kj", [(2, 3, 4)]),
        ("...ij,...jk->...ik", [(2, 2, 3), (1, 3, 2)]),
        ("i...->...", [(3, 2, 2)]),
        ("...i,i", [(2, 3), (3,)]),
    ],
)
def test_einsum(device: str, formula: str, shapes: list[tuple[int, ...]]) -> None:
    arrays = [_r(*s) for s in shapes]
    out = Tensor.einsum(formula, *[_t(a, device) for a in arrays])
    np.testing.assert_allclose(out.numpy(), np.einsum(formula, *arrays), rtol=1e-5, atol=1e-5)


def test_einsum_errors() -> None:
    with pytest.raises(ValueError, match="names 2 operands, got 1"):
        Tensor.einsum("ij,jk->ik", Tensor.ones(2, 2))
    with pytest.raises(ValueError, match="index 'j' has sizes 3 and 4"):
        Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3), Tensor.ones(4, 2))


# ---- convolution and pooling ----
CONV_CASES = [
    # x shape, w shape, stride, dilation, padding, groups
    ((1, 2, 4, 5), (2, 2, 2, 2), 1, 1, 0, 1),
    ((2, 2, 5, 4), (4, 1, 3, 2), (2, 1), 1, 1, 2),
    ((1, 1, 6, 6), (2, 1, 2, 2), 2, 2, (1, 0, 2, 1), 1),
    ((1, 2, 5), (3, 2, 3), 2, 1, 1, 1),
    ((1, 1, 3, 3, 4), (2, 1, 2, 2, 2), 1, 1, 0, 1),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(device: str, case: Any) -> None:
    xs, ws, stride, dilation, padding, groups = case
    nd = len(ws) - 2
    x, w, b = _r(*xs), _r(*ws), _r(ws[0])
    out = _t(x, device).conv2d(_t(w, device), _t(b, device), groups, stride, dilation, padding)
    st = (stride,) * nd if isinstance(stride, int) else stride
    dl = (dilation,) * nd if isinstance(dilation, int) else dilation
    if isinstance(padding, int):
        pads = [(padding, padding)] * nd
    else:  # torch's flat order: last dim first
        pads = [(padding[i], padding[i + 1]) for i in range(0, len(padding), 2)][::-1]
    expected = ref_conv(x, w, st, dl, pads, groups) + b.reshape(1, -1, *([1] * nd))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)


GRAD_CONV_CASES = [
    *CONV_CASES,
    # stride 1 (conv2d's input gradient is then a convolution with the flipped weights): groups, dilation,
    # asymmetric padding, padding beyond the kernel's reach (through the windows), 1x1
    ((2, 4, 6, 6), (6, 2, 3, 3), 1, 1, 1, 2),
    ((1, 2, 7, 6), (3, 2, 3, 2), 1, (2, 1), (1, 0, 2, 1), 1),
    ((1, 2, 5, 5), (2, 2, 3, 3), 1, 1, 3, 1),
    ((2, 3, 4, 4), (2, 3, 1, 1), 1, 1, 0, 1),
]


@pytest.mark.parametrize("case", GRAD_CONV_CASES)
def test_conv_gradients(device: str, case: Any) -> None:
    """The gradients of conv2d to its input and its weight, against numpy's window by window."""
    xs, ws, stride, dilation, padding, groups = case
    nd = len(ws) - 2
    x, w = _r(*xs), _r(*ws)
    xt, wt = Tensor(x, device=device, requires_grad=True), Tensor(w, device=device, requires_grad=True)
    out = xt.conv2d(wt, None, groups, stride, dilation, padding)
    g = _r(*out.shape)
    (out * _t(g, device)).sum().backward()
    st = (stride,) * nd if isinstance(stride, int) else stride
    dl = (dilation,) * nd if isinstance(dilation, int) else dilation
    if isinstance(padding, int):
        pads = [(padding, padding)] * nd
    else:
        pads = [(padding[i], padding[i + 1]) for i in range(0, len(padding), 2)][::-1]
    dx, dw = ref_conv_grads(x, w, g, st, dl, pads, groups)
    assert xt.grad is not None and wt.grad is not None
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-4, atol=1e-4)


def test_conv_input_gradient_is_a_convolution() -> None:
    """A stride-1 conv2d's input gradient is one convolution of the output gradient with the flipped weights: no
    kernel writes the (N, Cin, *out, *kernel) product that summing back through the windows' views would (the MNIST
    train step's second conv: 17.8 MB at batch 128)."""
    x, w = _r(4, 8, 9, 9), _r(16, 8, 3, 3)
    xt = Tensor(x, requires_grad=True)
    out = xt.conv2d(Tensor(w), padding=1)
    g = _r(*out.shape)
    out.backward(Tensor(g))
    assert xt.grad is not None
    windows = 4 * 8 * 9 * 9 * 3 * 3
    sizes = [buf.size for item in xt.grad.schedule() for buf in item.bufs]
    assert max(sizes) < windows, sizes
    dx, _ = ref_conv_grads(x, w, g, (1, 1), (1, 1), [(1, 1), (1, 1)], 1)
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("s,p,d,op,groups", [(1, 0, 1, 0, 1), (2, 1, 1, 1, 1), (2, 0, 2, 0, 2)])
def test_conv_transpose(device: str, s: int, p: int, d: int, op: int, groups: int) -> None:
    x, w = _r(1, 2, 4), _r(2, 2, 3)
    out = _t(x, device).conv_transpose2d(_t(w, device), None, groups, s, d, p, op)
    np.testing.assert_allclose(out.numpy(), ref_conv_transpose1d(x, w, s, p, d, op, groups), rtol=1e-4, atol=1e-5)


def test_conv_errors(device: str) -> None:
    with pytest.raises(
        ValueError, match=r"input channels 3 \(shape \(1, 3, 4, 4\)\) do not match weight \(2, 2, 2, 2\)"
    ):
        Tensor.ones(1, 3, 4, 4, device=device).conv2d(Tensor.ones(2, 2, 2, 2, device=device))
    with pytest.raises(ValueError, match="does not fit an input of size 2"):
        Tensor.ones(1, 1, 2, 2, device=device).conv2d(Tensor.ones(1, 1, 3, 3, device=device))


def test_pools(device: str) -> None:
    x = _r(1, 2, 5, 6)
    t = _t(x, device)
    np.testing.assert_allclose(t.max_pool2d().numpy(), ref_pool(x, (2, 2), (2, 2), lambda p: p.max(axis=(2, 3))))
    np.testing.assert_allclose(
        t.max_pool2d((3, 2), stride=1).numpy(), ref_pool(x, (3, 2), (1, 1), lambda p: p.max(axis=(2, 3)))
    )
    np.testing.assert_allclose(
        t.avg_pool2d((2, 3)).numpy(), ref_pool(x, (2, 3), (2, 3), lambda p: p.mean(axis=(2, 3))), rtol=1e-5
    )
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    np.testing.assert_allclose(
        t.max_pool2d(3, stride=2, padding=1).numpy(), ref_pool(padded, (3, 3), (2, 2), lambda p: p.max(axis=(2, 3)))
    )
    zero_padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    np.testing.assert_allclose(
        t.avg_pool2d(3, stride=2, padding=1).numpy(),
        ref_pool(zero_padded, (3, 3), (2, 2), lambda p: p.mean(axis=(2, 3))),
        rtol=1e-5,
        atol=1e-6,
    )
    ceil = t.max_pool2d(2, ceil_mode=True)
    assert ceil.shape == (1, 2, 3, 3)
    np.testing.assert_allclose(ceil.numpy()[..., 2, 2], x[..., 4, 4:6].max(axis=-1))
    ones = Tensor.ones(1, 1, 3, 3, device=device)
    excl = ones.avg_pool2d(2, stride=2, padding=1, count_include_pad=False).numpy()
    np.testing.assert_allclose(excl, np.ones((1, 1, 2, 2)))
    incl = ones.avg_pool2d(2, stride=2, padding=1).numpy()
    np.testing.assert_allclose(incl, [[[[0.25, 0.5], [0.5, 1.0]]]])


# ---- normalization, dropout, attention, interpolation ----
def test_layernorm_batchnorm(device: str) -> None:
    x = _r(2, 3, 4)
    t = _t(x, device)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(t.layernorm().numpy(), ref, rtol=1e-4, atol=1e-5)
    w, b, m, v = _r(3), _r(3), _r(3), np.abs(_r(3)) + 0.5
    out = t.batchnorm(_t(w, device), _t(b, device), _t(m, device), _t(1 / np.sqrt(v), device))
    ref_bn = (x - m[:, None]) / np.sqrt(v[:, None]) * w[:, None] + b[:, None]
    np.testing.assert_allclose(out.numpy(), ref_bn, rtol=1e-5, atol=1e-5)


def test_layernorm_affine_values_and_gradients(device: str) -> None:
    """layernorm with weight and bias, and its gradients (a rule from the normalized x, recomputed), against
    numpy's formulas."""
    x, w, b, g = _r(3, 2, 5), _r(5), _r(5), _r(3, 2, 5)
    tx, tw, tb = (Tensor(a, device=device, requires_grad=True) for a in (x, w, b))
    out = tx.layernorm(weight=tw, bias=tb)
    (out * _t(g, device)).sum().backward()
    rstd = 1 / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    xhat = (x - x.mean(-1, keepdims=True)) * rstd
    np.testing.assert_allclose(out.numpy(), xhat * w + b, rtol=1e-4, atol=1e-5)
    gy = g * w
    dx = rstd * (gy - gy.mean(-1, keepdims=True) - xhat * (gy * xhat).mean(-1, keepdims=True))
    assert tx.grad is not None and tw.grad is not None and tb.grad is not None
    np.testing.assert_allclose(tx.grad.numpy(), dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tw.grad.numpy(), (g * xhat).sum((0, 1)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tb.grad.numpy(), g.sum((0, 1)), rtol=1e-4, atol=1e-4)


def test_dropout_honours_training(device: str) -> None:
    t = Tensor.ones(200, device=device)
    assert t.dropout(0.5) is t  # not training: identity
    with Tensor.train():
        Tensor.manual_seed(3)
        out = t.dropout(0.25).numpy()
        assert Tensor.training
    assert not Tensor.training
    assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.6 < (out > 0).mean() < 0.9
    with Tensor.train():
        assert t.dropout(1.0).numpy().sum() == 0


def test_scaled_dot_product_attention(device: str) -> None:
    q, k, v = _r(1, 3, 4), _r(1, 5, 4), _r(1, 5, 2)

    def ref(mask: np.ndarray | None) -> np.ndarray:
        s = q @ k.transpose(0, 2, 1) / 2.0
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v

    tq, tk, tv = _t(q, device), _t(k, device), _t(v, device)
    np.testing.assert_allclose(tq.scaled_dot_product_attention(tk, tv).numpy(), ref(None), rtol=1e-5, atol=1e-6)
    causal = np.tril(np.ones((3, 5), bool))
    out = tq.scaled_dot_product_attention(tk, tv, is_causal=True).numpy()
    np.testing.assert_allclose(out, ref(causal), rtol=1e-5, atol=1e-6)
    mask = RNG.random((3, 5)) > 0.3
    mask[:, 0] = True
    out = tq.scaled_dot_product_attention(tk, tv, attn_mask=_t(mask, device)).numpy()
    np.testing.assert_allclose(out, ref(mask), rtol=1e-5, atol=1e-6)


def test_interpolate(device: str) -> None:
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)
    t = _t(x, device)
    near = t.interpolate((4, 2), mode="nearest").numpy()
    np.testing.assert_equal(near, x[:, :, [0, 0, 1, 1]][:, :, :, [0, 2]])
    exact = t.interpolate((2, 3), mode="nearest-exact").numpy()
    np.testing.assert_equal(exact, x[:, :, :, [0, 2, 3]])  # floor((j + 0.5) * 4 / 3)
    lin = t.interpolate((2, 8), mode="linear").numpy()
    pos = np.maximum((np.arange(8) + 0.5) * 0.5 - 0.5, 0)
    expected = np.stack([np.interp(pos, np.arange(4), row) for row in x[0, 0]])
    np.testing.assert_allclose(lin[0, 0], expected, rtol=1e-6)
    aligned = t.interpolate((3, 4), mode="linear", align_corners=True).numpy()
    np.testing.assert_allclose(aligned[0, 0, 1], (x[0, 0, 0] + x[0, 0, 1]) / 2)


# ---- losses ----
def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def test_sparse_categorical_crossentropy(device: str) -> None:
    logits, y = _r(5, 4), np.array([0, 3, -1, 2, 1], dtype=np.int32)
    lp = _log_softmax(logits, -1)
    nll = -lp[np.arange(5), np.maximum(y, 0)]
    counted = y != -1
    out = _t(logits, device).sparse_categorical_crossentropy(_t(y, device))
    np.testing.assert_allclose(out.item(), nll[counted].mean(), rtol=1e-5)
    smooth = _t(logits, device).sparse_categorical_crossentropy(_t(y, device), label_smoothing=0.1)
    ref = (0.9 * nll - 0.1 * lp.mean(-1))[counted].mean()
    np.testing.assert_allclose(smooth.item(), ref, rtol=1e-5)
    none = _t(logits, device).sparse_categorical_crossentropy(_t(y, device), reduction="none").numpy()
    np.testing.assert_allclose(none, np.where(counted, nll, 0), rtol=1e-5)
    y2 = np.array([1, 1, 0, 3, 3], dtype=np.int32)
    out2 = _t(logits, device).sparse_categorical_crossentropy(_t(y2, device), ignore_index=3, reduction="sum")
    np.testing.assert_allclose(out2.item(), -lp[np.arange(3), y2[:3]].sum(), rtol=1e-5)


def test_cross_entropy_and_binary(device: str) -> None:
    logits, y = _r(4, 3), np.array([2, 0, 1, 1], dtype=np.int32)
    lp = _log_softmax(logits, 1)
    out = _t(logits, device).cross_entropy(_t(y, device))
    np.testing.assert_allclose(out.item(), -lp[np.arange(4), y].mean(), rtol=1e-5)
    probs = np.eye(3, dtype=np.float32)[y] * 0.8 + 0.2 / 3
    out2 = _t(logits, device).cross_entropy(_t(probs, device), reduction="sum")
    np.testing.assert_allclose(out2.item(), -(lp * probs).sum(), rtol=1e-5)
    smooth = _t(logits, device).cross_entropy(_t(y, device), label_smoothing=0.2)
    np.testing.assert_allclose(smooth.item(), -(lp * probs).sum(1).mean(), rtol=1e-5)
    p, t = 1 / (1 + np.exp(-_r(6))), (RNG.random(6) > 0.5).astype(np.float32)
    bce = -(t * np.log(p) + (1 - t) * np.log(1 - p))
    np.testing.assert_allclose(_t(p, device).binary_crossentropy(_t(t, device)).item(), bce.mean(), rtol=1e-5)
    logit = np.log(p / (1 - p)).astype(np.float32)
    out3 = _t(logit, device).binary_crossentropy_logits(_t(t, device), reduction="none").numpy()
    np.testing.assert_allclose(out3, bce, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="reduction must be"):
        _t(p, device).binary_crossentropy(_t(t, device), reduction="avg")


def test_avg_pool_ceil_mode_counts_only_real_elements(device: str) -> None:
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    out = _t(x, device).avg_pool2d(2, ceil_mode=True).numpy()
    assert out.shape == (1, 1, 3, 3)
    np.testing.assert_allclose(out[0, 0, 0, 0], x[0, 0, :2, :2].mean())
    np.testing.assert_allclose(out[0, 0, 2, 1], x[0, 0, 4, 2:4].mean())
    np.testing.assert_allclose(out[0, 0, 2, 2], x[0, 0, 4, 4])


def test_scatter_multiply_and_scalar_src(device: str) -> None:
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    idx = _t(np.array([[0, 2], [1, 1]], np.int32), device)
    src = _t(np.array([[10.0, 20.0], [3.0, 4.0]], np.float32), device)
    out = _t(a, device).scatter(1, idx, src, reduce="multiply").numpy()
    np.testing.assert_equal(out, [[10.0, 2.0, 60.0], [4.0, 60.0, 6.0]])
    filled = _t(a, device).scatter(0, _t(np.array([[1, 0, 1]], np.int32), device), 0.5).numpy()
    np.testing.assert_equal(filled, [[1.0, 0.5, 3.0], [0.5, 5.0, 0.5]])


def test_conv_weight_gradient_with_packed_output_gradient_on_cpu() -> None:
    """On the CPU, a conv whose output rows do not split into 8-float vectors (11 wide) and with at least 8 input
    channels copies its output gradient with the channels innermost for the weight gradient (the register tile's
    vector lanes): one more kernel than with CPU_PACK=0, the same values as numpy's."""
    from tg import Context

    x, w = _r(8, 8, 13, 13), _r(16, 8, 3, 3)
    g = _r(8, 16, 11, 11)
    dx, dw = ref_conv_grads(x, w, g, (1, 1), (1, 1), [(0, 0), (0, 0)], 1)
    kernels = {}
    for pack in (1, 0):
        with Context(CPU_PACK=pack):
            xt, wt = Tensor(x, device="CPU", requires_grad=True), Tensor(w, device="CPU", requires_grad=True)
            xt.conv2d(wt).backward(Tensor(g, device="CPU"))
            assert wt.grad is not None and xt.grad is not None
            kernels[pack] = len(wt.grad.schedule())
            np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-4, atol=1e-3)
            np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-4, atol=1e-3)
    assert kernels[1] == kernels[0] + 1, kernels
