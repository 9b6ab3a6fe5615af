"""Tensor indexing by a tensor folds into an indexed load (tg_codegen/gather.py), with numpy's values.

`X[idx]`, `gather`, embeddings: the one-hot compare-and-sum the tensor level writes must become one
gated load per output element (no reduction over the table), on every device.
"""

from __future__ import annotations

import numpy as np

from tg import Tensor, nn
from tg_codegen.gather import fold_gathers
from tg_uop import Ops


def _reduces_after_fold(t: Tensor) -> int:
    items = t.schedule()
    return sum(1 for it in items for u in fold_gathers(it.ast).toposort if u.op is Ops.REDUCE_AXIS)


def test_row_gather_folds_and_matches_numpy(device: str) -> None:
    table = np.arange(6 * 5, dtype=np.float32).reshape(6, 5) - 7
    idx = np.array([3, 0, 5, 3, -1, -6], np.int32)
    x, i = Tensor(table, device=device).realize(), Tensor(idx, device=device).realize()
    assert _reduces_after_fold(x[i]) == 0
    np.testing.assert_array_equal(x[i].numpy(), table[idx])
    np.testing.assert_array_equal(x[i.reshape(2, 3)].numpy(), table[idx.reshape(2, 3)])
    np.testing.assert_array_equal(x[:, Tensor([4, 0], device=device)].numpy(), table[:, [4, 0]])
    np.testing.assert_array_equal(x[i, 2].numpy(), table[idx, 2])


def test_two_tensor_indices_fold(device: str) -> None:
    table = np.arange(4 * 5 * 3, dtype=np.int32).reshape(4, 5, 3)
    a, b = np.array([0, 3, 2], np.int32), np.array([4, 4, 1], np.int32)
    x = Tensor(table, device=device).realize()
    ta, tb = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
    assert _reduces_after_fold(x[ta, tb]) == 0
    np.testing.assert_array_equal(x[ta, tb].numpy(), table[a, b])


def test_gather_and_embedding_fold(device: str) -> None:
    rng = np.random.default_rng(0)
    src = rng.standard_normal((4, 6)).astype(np.float32)
    index = rng.integers(0, 4, (3, 6)).astype(np.int32)
    t, ti = Tensor(src, device=device).realize(), Tensor(index, device=device).realize()
    assert _reduces_after_fold(t.gather(0, ti)) == 0
    np.testing.assert_array_equal(t.gather(0, ti).numpy(), np.take_along_axis(src, index, 0))
    emb = nn.Embedding(10, 4)
    emb.weight = Tensor(rng.standard_normal((10, 4)).astype(np.float32), device=device)
    tokens = np.array([[1, 9, 0], [3, 3, 2]], np.int32)
    out = emb(Tensor(tokens, device=device))
    assert _reduces_after_fold(out) == 0  # rows are loaded, not a one-hot matmul over the vocabulary
    np.testing.assert_allclose(out.numpy(), emb.weight.numpy()[tokens], rtol=1e-6)
    outside = emb(Tensor([[-1, 10, 4]], device=device)).numpy()  # no row: zeros, as a one-hot of them selects
    np.testing.assert_array_equal(outside, [[np.zeros(4), np.zeros(4), emb.weight.numpy()[4]]])


def test_embedding_gradient_adds_the_rows_used() -> None:
    emb = nn.Embedding(5, 2)
    emb.weight = Tensor(np.zeros((5, 2), np.float32), requires_grad=True)
    tokens = np.array([[1, 4, 1], [-1, 0, 7]], np.int32)
    (emb(Tensor(tokens)) * Tensor([[1.0, 2.0]])).sum().backward()
    expected = np.zeros((5, 2), np.float32)
    np.add.at(expected, tokens[(tokens >= 0) & (tokens < 5)], [1.0, 2.0])
    assert emb.weight.grad is not None
    np.testing.assert_array_equal(emb.weight.grad.numpy(), expected)


def test_index_dtypes_and_gradient() -> None:
    for dt in (np.uint8, np.int8, np.float16, np.bool_):
        table = (np.arange(12).reshape(4, 3) % 5).astype(dt)
        np.testing.assert_array_equal(Tensor(table)[Tensor([2, 0, 3])].numpy(), table[[2, 0, 3]])
    w = Tensor(np.arange(8, dtype=np.float32).reshape(4, 2), requires_grad=True)
    (w[Tensor([1, 1, 3])] * Tensor([[1.0, 2.0]])).sum().backward()
    assert w.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), [[0, 0], [2, 4], [0, 0], [1, 2]])


def test_large_table_reads_rows_only() -> None:
    """128 rows of a (60000, 784) table: one gated load per element (the bench times it)."""
    table = np.random.default_rng(1).standard_normal((60000, 784)).astype(np.float32)
    idx = np.random.default_rng(2).integers(0, 60000, 128).astype(np.int32)
    x, i = Tensor(table).realize(), Tensor(idx).realize()
    assert _reduces_after_fold(x[i]) == 0
    np.testing.assert_array_equal(x[i].numpy(), table[idx])


def test_gathers_still_fold_after_equal_constants_were_realized(device: str) -> None:
    # x[idx] keeps its constant nodes alive between calls; a realize of an equal constant elsewhere (a 0-d True mask,
    # an arange) must not make later gathers load it from memory, which stops the fold (test_mask_index did this)
    table = np.arange(6 * 5, dtype=np.float32).reshape(6, 5)
    x, i = Tensor(table, device=device).realize(), Tensor(np.array([3, 0, 5], np.int32), device=device).realize()
    assert _reduces_after_fold(x[i]) == 0
    kept = [Tensor(True, device=device).realize(), Tensor.arange(6, device=device).realize()]
    assert _reduces_after_fold(x[i]) == 0
    np.testing.assert_array_equal(x[i].numpy(), table[[3, 0, 5]])
    assert kept[0].item() is True and kept[1].tolist() == list(range(6))
