"""Literals in generated code: negative constants, NaN, +-inf, -0.0, type minimums, unsigned, half.

Each case runs on every device against numpy, and its kernels compile with NVRTC (compile-only CUDA).
C leaves signed overflow and out-of-range float->int casts undefined, so no case relies on them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg_codegen import get_program
from tg_codegen.renderer.cstyle import ClangRenderer
from tg_codegen.renderer.cuda import CUDARenderer
from tg_codegen.renderer.opencl import OpenCLRenderer
from tg_runtime.ops_cuda import CUDAError, NVRTCCompiler
from tg_tensor.engine.realizer import current
from tg_uop import DType

try:
    NVRTC: NVRTCCompiler | None = NVRTCCompiler("sm_90")
    NVRTC_REASON = ""
except CUDAError as e:
    NVRTC, NVRTC_REASON = None, str(e)

XI = np.array([-5, -1, 0, 1, 4], np.int32)
XF = np.array([-2.5, -0.0, 0.0, 1.25, 3.0], np.float32)
XH = np.array([-2.5, -0.0, 0.0, 1.25, 3.0], np.float16)
INF, NAN = float("inf"), float("nan")
I32_MIN, I64_MIN = -(2**31), -(2**63)

Case = tuple[Callable[..., Any], Callable[..., Any]]  # (on tensors xi, xf, xh; on numpy arrays xi, xf, xh)
CASES: dict[str, Case] = {
    # issue 11's second program: an int tensor minus a float tensor full of -2.0 rendered `cast0--2.0f`
    "int_minus_full_negative": (
        lambda i, f, h: (i.reshape(5, 1, 1) - Tensor.full((5, 1, 1), -2.0, device=i.device)).permute((1, 0, 2)),
        lambda i, f, h: (i.reshape(5, 1, 1).astype(np.float32) - np.float32(-2.0)).transpose((1, 0, 2)),
    ),
    "float_minus_negative": (lambda i, f, h: f - (-2.0), lambda i, f, h: f - np.float32(-2.0)),
    "float_plus_negative": (lambda i, f, h: f + (-0.5), lambda i, f, h: f + np.float32(-0.5)),
    "negate_negative_const": (
        lambda i, f, h: -(f * 0 + (-3.0)),
        lambda i, f, h: -(f * np.float32(0) + np.float32(-3.0)),
    ),
    "int_minus_negative": (lambda i, f, h: i - (-7), lambda i, f, h: i - np.int32(-7)),
    "negative_times_negative": (lambda i, f, h: (i * -3) * -2, lambda i, f, h: (i * np.int32(-3)) * np.int32(-2)),
    "int32_min_max": (
        lambda i, f, h: i.maximum(Tensor.full((5,), I32_MIN, dtype=dtypes.int32, device=i.device)),
        lambda i, f, h: np.maximum(i, np.int32(I32_MIN)),
    ),
    "int32_min_compare": (lambda i, f, h: i > I32_MIN, lambda i, f, h: i > np.int32(I32_MIN)),
    "int32_min_to_float": (
        lambda i, f, h: (
            i.cast(dtypes.float32)
            + Tensor.full((5,), I32_MIN, dtype=dtypes.int32, device=i.device).cast(dtypes.float32)
        ),
        lambda i, f, h: i.astype(np.float32) + np.float32(I32_MIN),
    ),
    "int64_min": (
        lambda i, f, h: (
            i.cast(dtypes.int64).maximum(Tensor.full((5,), I64_MIN, dtype=dtypes.int64, device=i.device)) - (-(2**40))
        ),
        lambda i, f, h: np.maximum(i.astype(np.int64), np.int64(I64_MIN)) - np.int64(-(2**40)),
    ),
    "uint32_wraps": (
        lambda i, f, h: (i + 5).cast(dtypes.uint32) + 4294967295,
        lambda i, f, h: (i + 5).astype(np.uint32) + np.uint32(4294967295),
    ),
    "negative_int_to_uint8": (lambda i, f, h: i.cast(dtypes.uint8), lambda i, f, h: i.astype(np.uint8)),
    "negative_int_to_int8_minus": (
        lambda i, f, h: i.cast(dtypes.int8) - (-100),
        lambda i, f, h: i.astype(np.int8) - np.int8(-100),
    ),
    "negative_float_to_int": (
        lambda i, f, h: (f - 0.75).cast(dtypes.int32),
        lambda i, f, h: (f - 0.75).astype(np.int32),
    ),
    "negative_int_to_float": (
        lambda i, f, h: i.cast(dtypes.float32) * -1.5,
        lambda i, f, h: i.astype(np.float32) * -1.5,
    ),
    "plus_inf": (lambda i, f, h: f + INF, lambda i, f, h: f + np.float32(INF)),
    "minus_minus_inf": (lambda i, f, h: f - (-INF), lambda i, f, h: f - np.float32(-INF)),
    "max_minus_inf": (lambda i, f, h: f.maximum(-INF), lambda i, f, h: np.maximum(f, np.float32(-INF))),
    "nan_const": (lambda i, f, h: f * NAN - 1, lambda i, f, h: f * np.float32(NAN) - 1),
    "nan_compare": (lambda i, f, h: f != NAN, lambda i, f, h: f != np.float32(NAN)),
    "negative_zero": (
        lambda i, f, h: (f * 0 + 1).reciprocal() * (-0.0),
        lambda i, f, h: np.reciprocal(f * np.float32(0) + 1) * np.float32(-0.0),
    ),
    "one_over_negative_zero_const": (
        lambda i, f, h: (f * 0 + (-0.0)).reciprocal(),
        lambda i, f, h: np.reciprocal(f * np.float32(0) + np.float32(-0.0)),
    ),
    "bool_where_negative": (
        lambda i, f, h: (i < 0).where(-1.5, -2),
        lambda i, f, h: np.where(i < 0, np.float32(-1.5), np.float32(-2)),
    ),
    "float_to_bool_and_back": (
        lambda i, f, h: (f - 1.25).cast(dtypes.bool).cast(dtypes.int32) - 2,
        lambda i, f, h: (f - 1.25).astype(bool).astype(np.int32) - 2,
    ),
    "half_minus_negative": (lambda i, f, h: h - (-2.5), lambda i, f, h: h - np.float16(-2.5)),
    "half_inf_nan": (
        lambda i, f, h: (h + (-INF)).maximum(h * NAN),
        lambda i, f, h: np.maximum(h + np.float16(-INF), h * np.float16(NAN)),
    ),
    "half_small_negative": (lambda i, f, h: h * -0.0001, lambda i, f, h: h * np.float16(-0.0001)),
}


def _inputs(device: str) -> tuple[Tensor, Tensor, Tensor]:
    return Tensor(XI, device=device), Tensor(XF, device=device), Tensor(XH, device=device)


@pytest.mark.parametrize("case", sorted(CASES))
def test_literal_matches_numpy(case: str, device: str) -> None:
    tg_fn, np_fn = CASES[case]
    with np.errstate(all="ignore"):
        want = np.asarray(np_fn(XI, XF, XH))
    got = tg_fn(*_inputs(device)).numpy()
    assert got.dtype == want.dtype, f"{case}: dtype {got.dtype}, numpy gives {want.dtype}"
    np.testing.assert_array_equal(got, want)
    if want.dtype.kind == "f":  # -0.0 and 0.0 compare equal: check the signs too
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{case}: signs of zeros")


def _kernel_asts(t: Tensor) -> list[Any]:
    items = t.schedule()
    for item in items:
        current().unqueue(item)
    return [item.ast for item in items if item.ast.op.name == "SINK"]


@pytest.mark.skipif(NVRTC is None, reason=f"NVRTC unavailable: {NVRTC_REASON}")
@pytest.mark.parametrize("case", sorted(CASES))
def test_literal_compiles_for_cuda(case: str) -> None:
    assert NVRTC is not None
    for ast in _kernel_asts(CASES[case][0](*_inputs("PYTHON"))):
        src = get_program(ast, CUDARenderer("sm_90")).src
        assert NVRTC.compile(src)[:4] == b"\x7fELF"


# ---- the literals themselves, for every C-family renderer ----
LITERALS: list[tuple[float | int, DType]] = [
    (-2.0, dtypes.float32),
    (-0.0, dtypes.float32),
    (-INF, dtypes.float32),
    (INF, dtypes.float64),
    (NAN, dtypes.float32),
    (-1e-45, dtypes.float32),
    (-3.5, dtypes.float64),
    (-2.5, dtypes.float16),
    (-2.5, dtypes.bfloat16),
    (-7, dtypes.int32),
    (I32_MIN, dtypes.int32),
    (I64_MIN, dtypes.int64),
    (-5, dtypes.int64),
    (-1, dtypes.uint32),
    (2**64 - 1, dtypes.uint64),
    (-128, dtypes.int8),
    (-3, dtypes.int16),
]


@pytest.mark.parametrize("renderer", [ClangRenderer(), OpenCLRenderer(), CUDARenderer("sm_90")], ids=lambda r: r.device)
def test_literals_never_glue_to_an_operator(renderer: Any) -> None:
    """`a-LIT`, `a+LIT`, `-LIT`: no `--`, `+-`, `+ +`; a minimum is written as (-MAX-1); ints wrap into range."""
    for value, dt in LITERALS:
        if isinstance(renderer, OpenCLRenderer) and dt == dtypes.bfloat16:
            continue  # the CL renderer has no bfloat16
        lit = renderer.render_const(value, dt)
        for text in (f"a-{lit}", f"a+{lit}", f"-{lit}", f"a*{lit}"):
            assert not re.search(r"--|\+-|-\+|\+\s*\+|-\s+-", text), f"{dt} {value!r} renders as {lit!r}: {text}"
        if value in (I32_MIN, I64_MIN):
            assert re.fullmatch(r"\(-9223372036854775807l+-1l+\)|\(-2147483647-1\)", lit), lit
    assert ClangRenderer().render_const(-1, dtypes.uint32) == "4294967295u"
    assert ClangRenderer().render_const(-0.0, dtypes.float32) == "(-0.0f)"
    assert ClangRenderer().render_const(1 / 3, dtypes.float32) == "0.3333333432674408f"  # the float32 value
