"""tg_nn.matvec (a few rows of x times a float matrix, with the RMS norm and the residual fused) against numpy: the
fused kernel on CL (and CUDA on a GPU machine), tg's graph on the CPU and PYTHON; the CUDA source compiled by NVRTC."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, TinyJit
from tg_nn.matvec import MAX_ROWS, SPLIT_N, _source, has_matvec, matvec, plan
from tg_runtime.ops_cuda import CUDAError, NVRTCCompiler
from tg_uop import dtypes

try:
    COMPILER: NVRTCCompiler | None = NVRTCCompiler("sm_90")
    REASON = ""
except CUDAError as e:
    COMPILER, REASON = None, str(e)


def reference(
    x: np.ndarray, w: np.ndarray, g: np.ndarray | None, r: np.ndarray | None, glu: bool = False
) -> np.ndarray:
    x64 = x.astype(np.float64)
    if g is not None:
        x64 = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-5) * g
    y = x64 @ w.astype(np.float64).T
    if glu:
        gate, up = np.split(y, 2, axis=1)
        y = gate / (1 + np.exp(-gate)) * up
    return y if r is None else y + r


# (rows of x, rows of w, width, weight dtype): one row and a batch; a small matrix (the warps of a workgroup split
# the width) and one above SPLIT_N (a warp per two rows); odd row counts (a last workgroup half full); a width of
# one 8-value read; a width that is not a multiple of the 32 lanes' reads
CASES = [
    (1, 37, 64, "float16"),
    (3, SPLIT_N + 3, 136, "float16"),
    (1, 300, 2048, "float32"),
    (2, 9, 8, "float16"),
    (MAX_ROWS, 4100, 72, "bfloat16"),
]


@pytest.mark.parametrize("m, n, k, dt", CASES)
@pytest.mark.parametrize(
    "norm, res, glu", [(False, False, False), (True, False, False), (False, True, False), (True, True, True)]
)
def test_matches_numpy(device: str, m: int, n: int, k: int, dt: str, norm: bool, res: bool, glu: bool) -> None:
    rng = np.random.default_rng(n)
    n += n % 2 if glu else 0  # (gate and up rows: an even count)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = Tensor(rng.standard_normal((n, k)).astype(np.float32), device=device).cast(getattr(dtypes, dt)).realize()
    n_out = n // 2 if glu else n
    g = rng.standard_normal(k).astype(np.float32) if norm else None
    r = rng.standard_normal((m, n_out)).astype(np.float32) if res else None
    out = matvec(
        Tensor(x, device=device),
        w,
        None if g is None else Tensor(g, device=device),
        1e-5,
        None if r is None else Tensor(r, device=device),
        glu,
    )
    assert out.shape == (m, n_out) and out.dtype == dtypes.float32
    want = reference(x, w.cast(dtypes.float32).numpy(), g, r, glu)
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_which_devices_fuse() -> None:
    assert has_matvec("CUDA", dtypes.float16, 1, 2048) and has_matvec("CL:0", dtypes.bfloat16, MAX_ROWS, 64)
    assert not has_matvec("CPU", dtypes.float16, 1, 2048)  # (the CPU: tg's graph)
    assert not has_matvec("CUDA", dtypes.float16, MAX_ROWS + 1, 2048)  # a prompt: tensor cores
    assert not has_matvec("CUDA", dtypes.float16, 1, 2044)  # not whole 16-byte reads
    assert not has_matvec("CUDA", dtypes.int8, 1, 2048)
    assert not has_matvec("CUDA:0,CUDA:1", dtypes.float16, 1, 2048)  # (a device set: tg's graph shards it)


def test_jitted_step_reads_new_inputs(device: str) -> None:
    """Captured by TinyJit, the kernel reads each call's x and residual (the decode step replays it per token)."""
    rng = np.random.default_rng(1)
    w = Tensor(rng.standard_normal((24, 16)).astype(np.float16), device=device)
    g = Tensor(rng.standard_normal(16).astype(np.float32), device=device)
    step = TinyJit(lambda x, r: matvec(x, w, g, 1e-5, r).realize())
    for i in range(4):
        x, r = rng.standard_normal((1, 16)).astype(np.float32), rng.standard_normal((1, 24)).astype(np.float32)
        got = step(Tensor(x, device=device), Tensor(r, device=device)).numpy()
        want = reference(x, w.cast(dtypes.float32).numpy(), g.numpy(), r)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-4, err_msg=f"call {i}")


def test_bad_shapes_are_named() -> None:
    with pytest.raises(ValueError, match=r"x \(1, 8\) must be \(M, K\) and w \(4, 6\)"):
        matvec(Tensor.ones(1, 8), Tensor.ones(4, 6))
    with pytest.raises(ValueError, match=r"norm weight \(6,\) must be \(8,\)"):
        matvec(Tensor.ones(1, 8), Tensor.ones(4, 8), norm=Tensor.ones(6))
    with pytest.raises(ValueError, match=r"residual \(4,\) must be \(1, 4\)"):
        matvec(Tensor.ones(1, 8), Tensor.ones(4, 8), residual=Tensor.ones(4))
    with pytest.raises(ValueError, match=r"glu needs an even number of rows of w \(gate then up\), got 5"):
        matvec(Tensor.ones(1, 8), Tensor.ones(5, 8), glu=True)


@pytest.mark.skipif(COMPILER is None, reason=f"NVRTC unavailable: {REASON}")
@pytest.mark.parametrize("dt", ["half", "__bf16", "float"])
@pytest.mark.parametrize("m, n", [(1, 16384), (4, 2048)])
def test_cuda_source_compiles(dt: str, m: int, n: int) -> None:
    assert COMPILER is not None
    types = {"half": dtypes.float16, "__bf16": dtypes.bfloat16, "float": dtypes.float32}
    for norm, res, glu in ((True, False, True), (False, True, False)):
        how = plan(m, n, 2048)
        src = _source(m, n, 2048, norm, 1e-5, res, glu, how, "CUDA", (dtypes.float32, dtypes.float32, types[dt]))
        assert src is not None
        assert COMPILER.compile(src.src)[:4] == b"\x7fELF"
