"""Semantics of existing Tensor methods, as tinygrad/PyTorch/numpy define them, each against numpy.

scatter and setitem with duplicate indices (the last write wins), conv2d padding="same"/"valid",
bool lists as indices, matmul with 1-D and 0-D operands, equal lazy tensors sharing one buffer, and
the exception types of tinygrad/PyTorch for bad input.
"""

from __future__ import annotations

import numpy as np
import pytest

from tg import GlobalCounters, Tensor, nn
from tg_tensor.engine.util import ShapeError


def test_scatter_duplicate_indices_last_write_wins(device: str) -> None:
    t = Tensor.zeros(3, device=device).scatter(0, Tensor([0, 0], device=device), Tensor([1.0, 2.0], device=device))
    assert t.tolist() == [2.0, 0.0, 0.0]
    src = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    index = np.array([[0, 0, 2], [1, 1, 1]], np.int32)
    want = np.zeros((2, 3), np.float32)
    for i in range(2):
        for j in range(3):
            want[i, index[i, j]] = src[i, j]  # in order: the last write wins
    got = Tensor.zeros(2, 3, device=device).scatter(1, Tensor(index, device=device), Tensor(src, device=device))
    np.testing.assert_array_equal(got.numpy(), want)
    added = Tensor.zeros(3).scatter(0, Tensor([0, 0]), Tensor([1.0, 2.0]), reduce="add")
    assert added.tolist() == [3.0, 0.0, 0.0]  # reduce="add" still sums


def test_setitem_duplicate_indices_last_write_wins() -> None:
    x = Tensor([0.0, 0.0, 0.0, 0.0]).realize()
    x[Tensor([1, 1, 2])] = Tensor([5.0, 6.0, 7.0])
    ref = np.zeros(4, np.float32)
    ref[[1, 1, 2]] = [5.0, 6.0, 7.0]
    np.testing.assert_array_equal(x.numpy(), ref)


def _conv_ref(x: np.ndarray, w: np.ndarray, pads: tuple[tuple[int, int], ...], dil: tuple[int, int]) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    n, _, h, wd = xp.shape
    co, _, kh, kw = w.shape
    oh, ow = h - dil[0] * (kh - 1), wd - dil[1] * (kw - 1)
    out = np.zeros((n, co, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dil[0] : i * dil[0] + oh, j * dil[1] : j * dil[1] + ow]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


@pytest.mark.parametrize("kernel, dilation", [((3, 3), (1, 1)), ((2, 3), (1, 2)), ((4, 2), (2, 1))])
def test_conv2d_padding_same_and_valid(kernel: tuple[int, int], dilation: tuple[int, int]) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, *kernel)).astype(np.float32)
    # torch's "same": total d*(k-1) per dim, the odd extra on the right
    pads = tuple(((d * (k - 1)) // 2, d * (k - 1) - (d * (k - 1)) // 2) for k, d in zip(kernel, dilation))
    got = Tensor(x).conv2d(Tensor(w), dilation=dilation, padding="same").numpy()
    assert got.shape == (2, 4, 7, 6)
    np.testing.assert_allclose(got, _conv_ref(x, w, pads, dilation), rtol=1e-4, atol=1e-4)
    valid = Tensor(x).conv2d(Tensor(w), dilation=dilation, padding="valid").numpy()
    np.testing.assert_allclose(valid, _conv_ref(x, w, ((0, 0), (0, 0)), dilation), rtol=1e-4, atol=1e-4)
    layer = nn.Conv2d(3, 4, kernel, padding="same", dilation=dilation)
    assert layer(Tensor(x)).shape == (2, 4, 7, 6)
    with pytest.raises(ValueError, match="not supported for strided convolutions"):
        Tensor(x).conv2d(Tensor(w), stride=2, padding="same")
    with pytest.raises(ValueError, match="'valid' or 'same', got 'full'"):
        Tensor(x).conv2d(Tensor(w), padding="full")


def test_bool_list_index_is_a_mask() -> None:
    a = np.array([[1, 2], [3, 4], [5, 6]], np.int32)
    t = Tensor(a)
    np.testing.assert_array_equal(t[[True, False, True]].numpy(), a[[True, False, True]])
    np.testing.assert_array_equal(t[:, [False, True]].numpy(), a[:, [False, True]])
    mask = [[True, False], [False, True], [True, True]]
    np.testing.assert_array_equal(t[mask].numpy(), a[np.array(mask)])
    with pytest.raises(IndexError, match="does not match"):
        t[[True, False]]


@pytest.mark.parametrize(
    "a, b",
    [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((5, 2, 3), (3,)), ((3,), (5, 3, 4)), ((5, 1, 2, 3), (4, 3, 2))],
)
def test_matmul_1d_and_batched_like_numpy(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(a).astype(np.float32), rng.standard_normal(b).astype(np.float32)
    want = x @ y
    for got in ((Tensor(x) @ Tensor(y)).numpy(), Tensor(x).dot(Tensor(y)).numpy(), Tensor(x).matmul(Tensor(y)).numpy()):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a, b", [((), (3,)), ((3,), ()), ((), ())])
def test_matmul_0d_raises_like_torch(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    with pytest.raises(RuntimeError, match="at least 1 dim"):  # torch: RuntimeError; numpy: ValueError (both hold)
        Tensor(np.ones(a, np.float32)) @ Tensor(np.ones(b, np.float32))


def test_shape_errors_are_runtime_errors_as_in_tinygrad() -> None:
    with pytest.raises(RuntimeError, match="do not align: 3 != 4"):
        Tensor.ones(3) @ Tensor.ones(4)
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        Tensor.ones(2, 3, 4) @ Tensor.ones(5, 4, 2)
    with pytest.raises(RuntimeError, match="not a permutation"):
        Tensor.ones(2, 3).permute(0, 0)
    with pytest.raises(RuntimeError, match="only one dimension can be -1"):
        Tensor.ones(2, 3).reshape(-1, -1)
    assert issubclass(ShapeError, ValueError)  # tg's earlier ValueError still catches them
    with pytest.raises(IndexError):
        Tensor.ones(2, 3).sum(axis=2)
    with pytest.raises(IndexError, match="out of bounds"):
        Tensor([1, 2])[5]


def test_equal_lazy_tensors_share_one_buffer() -> None:
    t = Tensor([1.0, 2.0, 3.0]).realize()
    a, b = t * 4, t * 4
    assert a.uop is b.uop
    a.realize()
    assert a.uop is b.uop  # b stands for the same buffer now
    GlobalCounters.reset()
    assert b.tolist() == [4.0, 8.0, 12.0] and GlobalCounters.kernel_count == 0
    b.assign(Tensor([0.0, 0.0, 0.0]))  # b stood for a's result: assigning replaces b, never writes a
    assert a.tolist() == [4.0, 8.0, 12.0] and b.tolist() == [0.0, 0.0, 0.0]


def test_relu_family_keeps_nan() -> None:
    x = np.array([np.nan, -1.0, 0.5, 7.0], np.float32)
    for name in ("relu", "relu6", "hardsigmoid", "elu", "softplus", "abs", "sigmoid"):
        assert np.isnan(getattr(Tensor(x), name)().numpy()[0]), name
    assert np.isnan(Tensor(x).clip(0.0, 1.0).numpy()[0])


def test_assign_mismatches_raise_runtime_errors_as_tinygrad() -> None:
    w = Tensor([1.0, 2.0]).realize()
    with pytest.raises(RuntimeError, match="does not match the tensor's shape"):
        w.assign(Tensor([1.0, 2.0, 3.0]))
    with pytest.raises(RuntimeError, match="does not match the tensor's dtype"):
        w.assign(Tensor([1, 2]))
    with pytest.raises(TypeError):  # tg's earlier type still catches it
        w.assign(Tensor([1, 2]))


@pytest.mark.parametrize(
    "pads",
    [(0, 2, 3, 2), (-1, 2, 2, -1), (3, -3, 0, -3), (3, -5, 1, -5), (0, 0, 0, -5), (4, 4, 0, 4), (-2, -2, 1, 0)],
)
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_reflect_replicate_with_negative_pads(pads: tuple[int, int, int, int], mode: str) -> None:
    """Negative amounts crop; the mirrored or repeated values count from the input's own edges (PyTorch): numpy's
    pad of the positive amounts, then the crop."""
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    (l, r, t, b) = pads
    want = np.pad(
        x, ((0, 0), (0, 0), (max(t, 0), max(b, 0)), (max(l, 0), max(r, 0))), mode=mode.replace("replicate", "edge")
    )
    want = want[:, :, -min(t, 0) : want.shape[2] + min(b, 0), -min(l, 0) : want.shape[3] + min(r, 0)]
    np.testing.assert_array_equal(Tensor(x).pad(pads, mode=mode).numpy(), want)


@pytest.mark.parametrize("op", ["any", "all"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_any_all_over_empty_axes_keep_the_other_dims(op: str, keepdim: bool) -> None:
    x = np.ones((1, 0, 3, 0, 5), np.float32)
    got = getattr(Tensor(x), op)(axis=(1, 3), keepdim=keepdim).numpy()
    want = getattr(np, op)(x, axis=(1, 3), keepdims=keepdim)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert getattr(Tensor(np.ones((2, 0))), op)(axis=0).shape == (0,)


def test_arange_widens_past_the_default_int() -> None:
    t = Tensor.arange(2**31, 2**31 + 3)
    assert t.dtype == __import__("tg").dtypes.int64
    np.testing.assert_array_equal(t.numpy(), np.arange(2**31, 2**31 + 3, dtype=np.int64))
    np.testing.assert_array_equal(
        Tensor.arange(127, -129, -1, dtype="int8").numpy(), np.arange(127, -129, -1, dtype=np.int8)
    )


def test_reduce_dtype_by_name() -> None:
    x = np.array([[1.5, 2.0], [3.0, 4.0]], np.float32)
    assert Tensor(x).sum(dtype="float64").dtype == __import__("tg").dtypes.float64
    np.testing.assert_allclose(Tensor(x).prod(axis=1, dtype="float32").numpy(), np.prod(x, axis=1), rtol=1e-6)


def test_gradient_of_comparisons_in_a_product_is_the_mask() -> None:
    x = np.array([-1.5, 0.0, 2.0, -0.5], np.float32)
    t = Tensor(x, requires_grad=True)
    (t * (t < 0)).sum().backward()
    assert t.grad is not None
    np.testing.assert_array_equal(t.grad.numpy(), (x < 0).astype(np.float32))


def test_tuples_inside_an_index_are_sequences_as_in_numpy() -> None:
    x = np.arange(2 * 5 * 6, dtype=np.float32).reshape(2, 5, 6)
    t = Tensor(x)
    for index in [((0,),), (((0,),),), (0, (1, 1)), ((1, 0), slice(None), (2, 3)), (slice(None), ((0, 1), (2, 3)))]:
        np.testing.assert_array_equal(t[index].numpy(), x[index], err_msg=str(index))
    np.testing.assert_array_equal(t[(Tensor([1, 0]), (1, 1))].numpy(), x[(np.array([1, 0]), (1, 1))])


def test_bools_among_ints_in_a_list_index_are_ints() -> None:
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    np.testing.assert_array_equal(Tensor(x)[[True, False, 2]].numpy(), x[np.array([True, False, 2])])


def _lerp_u8(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """tinygrad's uint8 lerp in numpy: 7-bit fixed-point weight, rounded and floored."""
    wi = (w.astype(np.float32) * 128 + 0.5).astype(np.int64)
    return (a.astype(np.int64) + np.floor_divide((b.astype(np.int64) - a) * wi + 64, 128)).astype(np.uint8)


def test_interpolate_keeps_the_dtype_and_uint8_lerps_in_fixed_point() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (1, 2, 9, 7)).astype(np.uint8)
    out = (4, 5)
    got = Tensor(x).interpolate(out, mode="linear")
    assert got.dtype == __import__("tg").dtypes.uint8
    want = x
    for ax, n_out in ((3, out[1]), (2, out[0])):  # the last dim first
        n = x.shape[ax]
        pos = np.maximum((np.arange(n_out) + 0.5) * (n / n_out) - 0.5, 0)
        lo = np.minimum(np.floor(pos).astype(int), n - 1)
        hi = np.minimum(lo + 1, n - 1)
        shape = [1] * 4
        shape[ax] = n_out
        w = (pos - lo).astype(np.float32).reshape(shape)
        want = _lerp_u8(np.take(want, lo, axis=ax), np.take(want, hi, axis=ax), w)
    np.testing.assert_array_equal(got.numpy(), want)
    xi = rng.integers(-50, 50, (1, 1, 6)).astype(np.int32)
    gi = Tensor(xi).interpolate((4,), mode="linear", align_corners=True)
    pos = np.arange(4) * (5 / 3)
    lo = np.minimum(np.floor(pos).astype(int), 5)
    hi = np.minimum(lo + 1, 5)
    wf = (pos - lo).astype(np.float32)
    want_i = (xi[..., lo] * (1 - wf) + xi[..., hi] * wf).astype(np.int32)
    assert gi.dtype == __import__("tg").dtypes.int32
    np.testing.assert_array_equal(gi.numpy(), want_i)
