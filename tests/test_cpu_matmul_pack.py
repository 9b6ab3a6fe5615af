"""CPU matmul on packed panels of the right operand, and of the left one where its rows divide into panels
(tg_tensor.linalg._packed_dot), against numpy.

The size threshold is lowered here so small products take the packed path; every case checks that it did
(one more kernel per packed operand: the copy into panels). Odd shapes, batched and broadcast batches, transposed
operands, gradients, and the shapes that are never packed (1xN, Nx1, widths that are not a multiple of the panel).
"""

from __future__ import annotations

import numpy as np
import pytest

import tg_tensor.linalg as la
from tg import GlobalCounters, Tensor
from tg_uop.helpers import Context


@pytest.fixture
def low_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(la, "PACK_MIN_MACS", 0)
    monkeypatch.setattr(la, "PACK_MIN_STRIP_BYTES", 0)


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + len(shape)).standard_normal(shape).astype(np.float32)


def _kernels(a: np.ndarray, b: np.ndarray, pack: int, ta: bool = False, tb: bool = False) -> tuple[np.ndarray, int]:
    x, w = Tensor(a if not ta else a.T.copy(), device="CPU"), Tensor(b if not tb else b.T.copy(), device="CPU")
    x, w = (x.T if ta else x).realize(), (w.T if tb else w).realize()
    GlobalCounters.reset()
    with Context(CPU_PACK=pack, MERGE_SIBLINGS=0):  # (each copy a kernel of its own: counted below)
        got = (x @ w).numpy()
    return got, GlobalCounters.kernel_count


PACKED = [
    ((33, 7), (7, 48)),  # rows and reduce length that divide nothing
    ((64, 600), (600, 32)),  # a reduce long enough for the heuristic's panel loop order (heuristic.py); x packed
    ((3, 40, 5), (3, 5, 32)),  # batched
    ((2, 1, 40, 8), (3, 8, 32)),  # broadcast batch dims
    ((40, 9), (2, 9, 64)),  # a 2-D left operand against a batch of right operands
    ((2, 48, 9), (9, 32)),  # a batch of left operands (packed) against one right operand
    ((3, 32, 5), (1, 5, 32)),  # broadcast batch, both packed
    ((32, 2100), (2100, 32)),  # a reduction long enough to be cut in blocks (KBLOCK)
]


@pytest.mark.parametrize("sa,sb", PACKED)
def test_packed_matmul_matches_numpy(low_threshold: None, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = _rand(*sa), _rand(*sb, seed=1)
    got, packed_kernels = _kernels(a, b, 1)
    want, plain_kernels = _kernels(a, b, 0)
    copies = 1 + (sa[-2] % 16 == 0)  # w into panels, and x when its rows divide into them
    assert packed_kernels == plain_kernels + copies, "the operands should be copied into panels first"
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(want, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_packed_matmul_of_transposed_operands(low_threshold: None, ta: bool, tb: bool) -> None:
    a, b = _rand(48, 20), _rand(20, 32, seed=1)
    got, kernels = _kernels(a, b, 1, ta, tb)
    assert kernels >= 2
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sa,sb", [((1, 64), (64, 32)), ((64, 32), (32, 1)), ((64, 32), (32, 40)), ((8, 64), (64, 16))])
def test_unpacked_shapes(low_threshold: None, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    """1xN (too few rows to pay for the copy), Nx1, a width not a multiple of 16, a single panel: one kernel."""
    a, b = _rand(*sa), _rand(*sb, seed=1)
    got, kernels = _kernels(a, b, 1)
    assert kernels == 1
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_packed_matmul_gradients(low_threshold: None) -> None:
    a, b, g = _rand(40, 24), _rand(24, 32, seed=1), _rand(40, 32, seed=2)
    x, w = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    ((x @ w) * Tensor(g)).sum().backward()
    assert x.grad is not None and w.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), g @ b.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.grad.numpy(), a.T @ g, rtol=1e-4, atol=1e-4)


def test_packed_matmul_accumulation_dtype(low_threshold: None) -> None:
    a, b = _rand(40, 24).astype(np.float16), _rand(24, 32, seed=1).astype(np.float16)
    got = Tensor(a, device="CPU").dot(Tensor(b, device="CPU"), dtype=Tensor(np.float32(0)).dtype).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_short_reductions_are_not_packed() -> None:
    """At the real thresholds: a strip of w 128 long (8 KB) stays in L1 unpacked; 1024 long (64 KB) is packed."""
    x = Tensor.empty(2048, 128, device="CPU")
    assert not la._packs(x, Tensor.empty(128, 512, device="CPU"))
    assert la._packs(Tensor.empty(64, 1024, device="CPU"), Tensor.empty(1024, 512, device="CPU"))


def test_other_devices_are_not_packed(low_threshold: None) -> None:
    x, w = Tensor(_rand(40, 8), device="PYTHON"), Tensor(_rand(8, 32, seed=1), device="PYTHON")
    assert not la._packs(x, w)
    assert la._packs(x.to("CPU"), w.to("CPU"))
