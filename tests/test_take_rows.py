"""`x[idx]` with one integer index tensor is built by tg_tensor/take_rows.py: the general path's graph, node for node.

The general path is reached with the index in a tuple (`x[(idx, ...)]`); hash-consing makes equal graphs one
object, so `is` checks that the two builders agree on every node (dtypes, casts, broadcasts, no-ops).
"""

from __future__ import annotations

import numpy as np
import pytest

from tg import Context, Tensor, dtypes
from tg_tensor.take_rows import take_rows
from tg_uop import DType

TABLE_SHAPES = [(6, 5), (5,), (4, 3, 2), (3, 0), (2, 1), (7, 1, 3)]
INDEX_SHAPES = [(3,), (), (2, 2), (0,), (1,), (1, 1)]
TABLE_DTYPES = [dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.bool]
INDEX_DTYPES = [dtypes.int32, dtypes.int64, dtypes.int8, dtypes.uint8, dtypes.uint32]


def _table(shape: tuple[int, ...], dt: DType) -> Tensor:
    return Tensor((np.arange(int(np.prod(shape))).reshape(shape) % 5) - 1, dtype=dt)


def _index(n: int, shape: tuple[int, ...], dt: DType, seed: int = 0) -> Tensor:
    low = 0 if dtypes.is_unsigned(dt) else -n
    return Tensor(np.random.default_rng(seed).integers(low, n, shape), dtype=dt)


@pytest.mark.parametrize("shape", TABLE_SHAPES)
def test_same_graph_as_the_general_path(shape: tuple[int, ...]) -> None:
    for ishape in INDEX_SHAPES:
        for xt in TABLE_DTYPES:
            for it in INDEX_DTYPES:
                x, i = _table(shape, xt), _index(shape[0], ishape, it)
                fast = take_rows(x, i)
                assert fast is not None, (shape, ishape, xt, it)
                assert fast.uop is x[(i, ...)].uop, (shape, ishape, xt, it)
                assert x[i].uop is fast.uop


def test_lazy_operands_and_a_grad_table_build_the_same_graph() -> None:
    w = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3), requires_grad=True)
    i = Tensor([3, -1, 0]) * 1 - Tensor([0, 0, 0])
    for x in (w, w * 2, w.T.T + 1, Tensor.ones(4, 3)):
        fast = take_rows(x, i)
        assert fast is not None and fast.uop is x[(i, ...)].uop


def test_values_match_numpy(device: str) -> None:
    table = np.arange(7 * 3, dtype=np.float32).reshape(7, 3) - 4
    idx = np.array([[6, -7], [0, -1], [3, 3]], np.int32)
    x, i = Tensor(table, device=device).realize(), Tensor(idx, device=device).realize()
    np.testing.assert_array_equal(x[i].numpy(), table[idx])
    ints = (np.arange(10) * 3 - 5).astype(np.int8)
    np.testing.assert_array_equal(Tensor(ints, device=device)[i].numpy(), ints[idx])


def test_out_of_range_rows_are_zero_and_check_index_raises() -> None:
    table = np.arange(8, dtype=np.float32).reshape(4, 2) + 1
    x, i = Tensor(table), Tensor([1, 4, -5, 2])
    np.testing.assert_array_equal(x[i].numpy(), [[3, 4], [0, 0], [0, 0], [5, 6]])  # tinygrad's default
    with Context(CHECK_INDEX=1), pytest.raises(IndexError, match="index 4 is out of range"):
        x[i]


def test_gradient_accumulates_repeated_rows() -> None:
    w = Tensor(np.zeros((4, 2), np.float32), requires_grad=True)
    (w[Tensor([1, 1, 3, -1])] * Tensor([[1.0, 2.0]])).sum().backward()
    assert w.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), [[0, 0], [2, 4], [0, 0], [2, 4]])


def test_other_cases_take_the_general_path() -> None:
    x = Tensor(np.arange(6, dtype=np.float32).reshape(3, 2))
    one_row = Tensor(np.ones((1, 2), np.float32))
    assert take_rows(one_row, Tensor([0, -1])) is None  # a size-1 dim: the sum there is not a reduction
    assert take_rows(x, Tensor([True, False, True])) is None  # a mask
    assert take_rows(x, Tensor([0.0])) is None  # not an integer index (the general path raises)
    np.testing.assert_array_equal(one_row[Tensor([0, -1])].numpy(), [[1, 1], [1, 1]])
    with pytest.raises(IndexError, match="must be integers"):
        x[Tensor([0.0])]
    Tensor.no_grad = True  # every step of the general path is wrapped in DETACH then
    try:
        assert take_rows(x, Tensor([2])) is None
        np.testing.assert_array_equal(x[Tensor([2, 0])].numpy(), [[4, 5], [0, 1]])
    finally:
        Tensor.no_grad = False
