"""bfloat16 on every device: float math rounded to bf16 after each op (tg_codegen/bf16.py on CPU and CL).

Checked bit for bit against numpy doing the same (float32 math, round to nearest even bf16).
"""

from __future__ import annotations

import numpy as np

from tg import Tensor, dtypes


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bf16 (ties to even), as float32; NaN stays NaN."""
    f = np.asarray(x, np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(f), f, rounded)


def test_bf16_elementwise_matches_rounded_float(device: str) -> None:
    rng = np.random.default_rng(0)
    a = bf16(rng.standard_normal(1027).astype(np.float32) * 10)  # odd size: vector and scalar tails
    b = bf16(rng.standard_normal(1027).astype(np.float32))
    ta = Tensor(a, dtype=dtypes.bfloat16, device=device)
    tb = Tensor(b, dtype=dtypes.bfloat16, device=device)
    np.testing.assert_array_equal((ta * tb + 1).numpy(), bf16(bf16(a * b) + 1))
    np.testing.assert_array_equal((ta / tb).numpy(), bf16(a / b))
    np.testing.assert_array_equal(ta.maximum(tb).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal((ta < tb).numpy(), a < b)
    # exp(x) = exp2(x * (1/ln 2)) with the product rounded to bf16 first, as true bf16 arithmetic does
    want_exp = bf16(np.exp2(bf16(a * bf16(np.float32(1 / np.log(2))))))
    np.testing.assert_allclose(ta.exp().numpy(), want_exp, rtol=1e-2)
    f = rng.standard_normal(1027).astype(np.float32)
    np.testing.assert_array_equal(Tensor(f, device=device).cast(dtypes.bfloat16).numpy(), bf16(f))
    np.testing.assert_array_equal(ta.cast(dtypes.float32).numpy(), a)
    np.testing.assert_array_equal(ta.cast(dtypes.int32).numpy(), a.astype(np.int32))


def test_bf16_reductions_and_matmul(device: str) -> None:
    rng = np.random.default_rng(1)
    x = bf16(rng.standard_normal((16, 33)).astype(np.float32))
    w = bf16(rng.standard_normal((33, 8)).astype(np.float32))
    tx, tw = Tensor(x, dtype=dtypes.bfloat16, device=device), Tensor(w, dtype=dtypes.bfloat16, device=device)
    np.testing.assert_array_equal(tx.max(axis=1).numpy(), x.max(axis=1))
    np.testing.assert_allclose(tx.sum(axis=0).numpy(), bf16(x.sum(axis=0)), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose((tx @ tw).numpy(), x @ w, rtol=3e-2, atol=5e-2)
    assert (tx @ tw).dtype == dtypes.bfloat16


def test_bf16_nan_and_ties() -> None:
    ties = np.array([1 + 2**-8, 1 + 3 * 2**-8, np.nan, -np.inf, 3.0e38], np.float32)  # halfway cases round to even
    got = Tensor(ties).cast(dtypes.bfloat16).numpy()
    np.testing.assert_array_equal(got, bf16(ties))
    assert got[0] == 1.0 and got[1] == 1 + 4 * 2**-8
