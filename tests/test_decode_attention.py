"""tg_nn.models.decode_attention (one query per sequence over a KV cache, each at its own position) against numpy:
the fused kernels (C on the CPU, OpenCL C on CL) and the graph the other cases run."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, TinyJit
from tg_nn.models.decode_attention import decode_attention
from tg_uop import dtypes


def reference(q: np.ndarray, keys: np.ndarray, values: np.ndarray, pos: np.ndarray, scale: float) -> np.ndarray:
    b, heads, hd = q.shape
    kv = keys.shape[1]
    out = np.zeros((b, heads, hd))
    for i in range(b):
        for h in range(heads):
            kh = h // (heads // kv)
            s = keys[i, kh, : pos[i] + 1].astype(np.float64) @ q[i, h] * scale
            p = np.exp(s - s.max())
            out[i, h] = (p / p.sum()) @ values[i, kh, :, : pos[i] + 1].T
    return out


@pytest.mark.parametrize("hd", [64, 12])  # (12: not whole vectors of 8, the CPU takes the graph)
def test_matches_numpy_per_sequence_positions(device: str, hd: int) -> None:
    rng = np.random.default_rng(0)
    b, kv, group, ctx = 3, 2, 3, 21
    q = rng.standard_normal((b, kv * group, hd)).astype(np.float32)
    keys = rng.standard_normal((b, kv, ctx, hd)).astype(np.float32)
    values = rng.standard_normal((b, kv, hd, ctx)).astype(np.float32)
    pos = np.array([0, 20, 9], np.int32)  # one slot, the whole context, a tail that is not whole vectors of 8
    got = decode_attention(
        Tensor(q, device=device),
        Tensor(keys, device=device),
        Tensor(values, device=device),
        Tensor(pos, device=device),
        hd**-0.5,
    )
    assert got.shape == (b, kv * group, hd) and got.dtype == dtypes.float32
    np.testing.assert_allclose(got.numpy(), reference(q, keys, values, pos, hd**-0.5), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cache", ["float16", "float32"])
def test_half_caches_and_which_devices_fuse(device: str, cache: str) -> None:
    """A float16 cache (the GPU default) read by the fused kernel where the device has one (OpenCL and CUDA: either
    dtype; the CPU: float32), else by the graph."""
    from tg_nn.models.decode_attention import has_kernel

    rng = np.random.default_rng(2)
    b, kv, group, ctx, hd = 2, 2, 4, 304, 32
    q = rng.standard_normal((b, kv * group, hd)).astype(np.float32)
    keys = rng.standard_normal((b, kv, ctx, hd)).astype(cache)
    values = rng.standard_normal((b, kv, hd, ctx)).astype(cache)
    pos = np.array([299, 40], np.int32)  # (300 slots: more than a workgroup's 256 items, not whole reads of 8)
    args = [Tensor(a, device=device) for a in (q, keys, values, pos)]
    got = decode_attention(*args, hd**-0.5)
    family = device.split(":")[0]
    fused = family in ("CL", "CUDA") or (family == "CPU" and cache == "float32")
    assert has_kernel(device, hd, ctx, getattr(dtypes, cache)) == fused
    names = [str(it.ast.arg) for it in decode_attention(*args, hd**-0.5).schedule() if it.ast.op.name == "CUSTOM"]
    assert any("decode_attn" in n for n in names) == fused, names
    want = reference(q, keys.astype(np.float32), values.astype(np.float32), pos, hd**-0.5)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)


def test_jitted_step_reads_new_positions() -> None:
    """One captured kernel serves every position: the length is read from the positions buffer at each replay."""
    rng = np.random.default_rng(1)
    q, keys = rng.standard_normal((1, 2, 8)).astype(np.float32), rng.standard_normal((1, 1, 16, 8)).astype(np.float32)
    values = rng.standard_normal((1, 1, 8, 16)).astype(np.float32)
    qt, kt, vt = (Tensor(a, device="CPU").realize() for a in (q, keys, values))
    step = TinyJit(lambda p: decode_attention(qt, kt, vt, p, 0.5).realize())
    for p in (3, 0, 15, 7):
        pos = np.array([p], np.int32)
        np.testing.assert_allclose(
            step(Tensor(pos, device="CPU")).numpy(), reference(q, keys, values, pos, 0.5), rtol=1e-4, atol=1e-5
        )


def test_bad_shapes_are_named() -> None:
    q, k, v = Tensor.zeros(1, 4, 8), Tensor.zeros(1, 3, 16, 8), Tensor.zeros(1, 3, 8, 16)
    with pytest.raises(ValueError, match=r"kv dividing 4"):
        decode_attention(q, k, v, Tensor.zeros(1, dtype=dtypes.int32), 1.0)
    with pytest.raises(ValueError, match=r"positions must be int32 \(1,\)"):
        decode_attention(q, Tensor.zeros(1, 2, 16, 8), Tensor.zeros(1, 2, 8, 16), Tensor.zeros(2), 1.0)
