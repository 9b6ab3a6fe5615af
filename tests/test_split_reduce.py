"""Split reductions (split_reduce.py) against numpy on every device: the two-kernel forms give the same values.

The threshold is lowered here so small tensors take the split paths (PYTHON interprets every loop).
"""

from __future__ import annotations

import numpy as np
import pytest

import tg_tensor.engine.split_reduce as sr
from tg import GlobalCounters, Tensor

CASES = [
    ((64, 8, 5, 5), (0, 2, 3)),  # a conv bias gradient: batch x height x width per channel
    ((32, 4, 3, 6, 6), (0, 3, 4)),  # a weight-gradient-like reduction: several outputs, batch first
    ((5, 16, 3, 7), (1, 3)),  # the cut axis is not the first
    ((3, 96), (1,)),  # few outputs: the flattened chunk form
]


@pytest.fixture
def low_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sr, "SPLIT_REDUCE_MIN", 64)
    monkeypatch.setattr(sr, "SPLIT_AXIS_PARTS", (16, 2))


@pytest.mark.parametrize("shape,axes", CASES)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_split_reduce_matches_numpy(
    device: str, low_threshold: None, shape: tuple[int, ...], axes: tuple[int, ...], op: str
) -> None:
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    t = Tensor(x, device=device)
    GlobalCounters.reset()
    got = getattr(t, op)(axis=axes).realize()
    assert GlobalCounters.kernel_count == 2, "the reduction should run as two kernels"
    np.testing.assert_allclose(got.numpy(), getattr(x, op)(axis=axes), rtol=1e-5, atol=1e-5)


def test_split_axis_gradient_matches_numpy(device: str, low_threshold: None) -> None:
    x = np.random.default_rng(0).standard_normal((16, 3, 6, 6)).astype(np.float32)
    w = Tensor(
        np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32), device=device, requires_grad=True
    )
    out = Tensor(x, device=device).conv2d(w)
    out.sum().backward()
    # d(sum conv)/dw[o, c, i, j] = sum over batch and output positions of x[b, c, y+i, x+j]
    ref = np.array([[[x[:, c, i : i + 4, j : j + 4].sum() for j in range(3)] for i in range(3)] for c in range(3)])
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), np.broadcast_to(ref, (4, 3, 3, 3)), rtol=1e-4, atol=1e-4)


def test_no_split_without_a_divisor() -> None:
    node = Tensor(np.ones((7, 1 << 15), np.float32)).uop.r(sr.Ops.ADD, (1,))
    assert sr.split_reduce(node) is not None  # 7 outputs: the chunk form
    prime = Tensor(np.ones((40, 32771), np.float32)).uop.r(sr.Ops.ADD, (1,))
    assert sr.split_axis(prime) is None and sr.split_reduce(prime) is None


def test_sum_of_an_indivisible_length_is_split_with_zero_padding(device: str) -> None:
    """10,007 x 7 floats (no chunking divides it): the sum pads zeros to a length that splits evenly, so each chunk
    is long enough for a workgroup to share; a max of the same is left as it is. Both equal numpy."""
    x = np.random.default_rng(3).standard_normal(70049).astype(np.float32)
    node = Tensor(x).uop.r(sr.Ops.ADD, (0,))
    split = sr.split_reduce(node)
    assert split is not None and any(u.op is sr.Ops.PAD for u in split.toposort)
    assert sr.split_reduce(Tensor(x).uop.r(sr.Ops.MAX, (0,))) is None
    t = Tensor(x, device=device)
    np.testing.assert_allclose(t.sum().numpy(), x.astype(np.float64).sum(), rtol=1e-5)
    np.testing.assert_allclose(t.max().numpy(), x.max())


def test_split_k_fills_the_compute_units(device: str) -> None:
    """A weight-gradient-like sum (16384 rows into 96 outputs) on a device of 132 units is cut in G parts whose
    partials fill them (split-K); on a device of none (a CPU) it is left whole. The split sum equals numpy."""
    x = np.random.default_rng(4).standard_normal((4096, 96)).astype(np.float32)
    node = Tensor(x, device=device).uop.r(sr.Ops.ADD, (0,))
    assert sr.split_for_units(node, 0) is None
    split = sr.split_for_units(node, 132)
    assert split is not None
    partials = split.src[0].src[0]
    assert partials.shape is not None and partials.shape[0] >= 2  # G partials per output
    np.testing.assert_allclose(Tensor(split).numpy(), x.astype(np.float64).sum(0, keepdims=True), rtol=1e-4, atol=1e-4)


def _reduce_of(t: Tensor) -> sr.UOp:
    """The (last) REDUCE_AXIS of t's lazy graph."""
    return [u for u in t.uop.toposort if u.op is sr.Ops.REDUCE_AXIS][-1]


def test_split_k_parts_of_float32_and_16_bit_products() -> None:
    """A weight gradient's product (384 x 1536 outputs, 16384 long: 72 tiles of 8192 outputs) is cut for 8 blocks a
    unit when its operands are float32 (FMA tiles), for 2 when they are bfloat16 (tensor cores)."""
    x, dy = Tensor.empty(16384, 384), Tensor.empty(16384, 1536)

    def parts(node: sr.UOp) -> int:
        split = sr.split_for_units(node, 132)
        assert split is not None
        shape = split.src[0].src[0].shape
        assert shape is not None
        return int(shape[0])

    assert parts(_reduce_of(x.T @ dy)) == 16  # ceil(8 * 132 / 72) = 15 -> 16 parts
    assert parts(_reduce_of(x.T.cast("bfloat16") @ dy.cast("bfloat16"))) == 4  # ceil(2 * 132 / 72) = 4


def test_embedding_gradient_is_split_but_its_lookup_is_not(device: str) -> None:
    """An embedding's lookup (a one-hot sum over the table's rows) stays one reduction, codegen folds it into a
    gather; its gradient (a one-hot sum over the 4096 indices, for each of 5 x 8 table entries) is a scan either way
    and is split for a device of 132 units. Values against numpy."""
    rng = np.random.default_rng(5)
    idx, table = rng.integers(0, 5, 4096).astype(np.int32), rng.standard_normal((5, 8)).astype(np.float32)
    g = rng.standard_normal((4096, 8)).astype(np.float32)
    w = Tensor(table, device=device, requires_grad=True)
    i = Tensor(idx, device=device)
    out = w[i]
    assert sr.is_one_hot_sum(_reduce_of(out)) and sr.split_for_units(_reduce_of(out), 132) is None
    (out * Tensor(g, device=device)).sum().backward()
    assert w.grad is not None
    grad = _reduce_of(w.grad)
    assert not sr.is_one_hot_sum(grad)
    split = sr.split_for_units(grad, 132)
    assert split is not None
    want = np.zeros((5, 8), np.float64)
    np.add.at(want, idx, g)
    np.testing.assert_allclose(Tensor(split).numpy().reshape(5, 8), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.numpy(), table[idx])
