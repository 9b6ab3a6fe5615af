"""dtypes: the full set, vectors and pointers, promotion, numpy conversion, exact float rounding."""

from __future__ import annotations

import math
import os
import pickle
import random
import struct
import subprocess
import sys

import numpy as np
import pytest

from tg_uop import dtypes
from tg_uop.dtype import truncate_const


def test_full_set_with_itemsize_and_limits() -> None:
    expect = {
        dtypes.bool: (1, False, True),
        dtypes.int8: (1, -128, 127),
        dtypes.uint8: (1, 0, 255),
        dtypes.int16: (2, -(2**15), 2**15 - 1),
        dtypes.uint16: (2, 0, 2**16 - 1),
        dtypes.int32: (4, -(2**31), 2**31 - 1),
        dtypes.uint32: (4, 0, 2**32 - 1),
        dtypes.int64: (8, -(2**63), 2**63 - 1),
        dtypes.uint64: (8, 0, 2**64 - 1),
        dtypes.float16: (2, -math.inf, math.inf),
        dtypes.bfloat16: (2, -math.inf, math.inf),
        dtypes.float32: (4, -math.inf, math.inf),
        dtypes.float64: (8, -math.inf, math.inf),
    }
    assert set(expect) == set(dtypes.all)
    for d, (size, lo, hi) in expect.items():
        assert (d.itemsize, d.min, d.max) == (size, lo, hi), d


def test_vectors_and_pointers() -> None:
    v = dtypes.float.vec(4)
    assert v.itemsize == 16 and v.count == 4 and v.scalar() == dtypes.float32 and repr(v) == "dtypes.float.vec(4)"
    p = dtypes.int32.ptr()
    assert p.base == dtypes.int32 and p != dtypes.int32 and p == dtypes.int32.ptr()
    assert dtypes.half.ptr(local=True).local
    with pytest.raises(ValueError, match="vector width"):
        dtypes.float.vec(0)
    with pytest.raises(TypeError, match="pointer to a pointer"):
        p.ptr()


@pytest.mark.parametrize(
    "a,b,want",
    [
        (dtypes.bool, dtypes.int8, dtypes.int8),
        (dtypes.bool, dtypes.float16, dtypes.float16),
        (dtypes.int8, dtypes.uint8, dtypes.int16),
        (dtypes.int16, dtypes.uint16, dtypes.int32),
        (dtypes.int32, dtypes.uint32, dtypes.int64),
        (dtypes.int64, dtypes.uint64, dtypes.float16),
        (dtypes.int32, dtypes.float16, dtypes.float16),
        (dtypes.float16, dtypes.bfloat16, dtypes.float32),
        (dtypes.bfloat16, dtypes.float32, dtypes.float32),
        (dtypes.float32, dtypes.float64, dtypes.float64),
        (dtypes.uint8, dtypes.uint16, dtypes.uint16),
    ],
)
def test_promotion_lattice(a: object, b: object, want: object) -> None:
    assert dtypes.least_upper(a, b) == want and dtypes.least_upper(b, a) == want  # type: ignore[arg-type]


def test_defaults() -> None:
    assert dtypes.default_float == dtypes.float32 and dtypes.default_int == dtypes.int32
    assert dtypes.least_upper_float(dtypes.int32) == dtypes.float32
    assert dtypes.from_py(1) == dtypes.int32 and dtypes.from_py(1.0) == dtypes.float32
    assert dtypes.from_py(True) == dtypes.bool and dtypes.from_py([1, 2.0]) == dtypes.float32


def test_numpy_conversion_both_ways() -> None:
    for d in dtypes.all:
        if d == dtypes.bfloat16:
            assert dtypes.to_np_name(d) == "float32"  # numpy has no bfloat16
            continue
        name = dtypes.to_np_name(d)
        assert dtypes.from_np(np.dtype(name)) == d
        assert dtypes.from_np(np.dtype(name).type) == d
        assert np.dtype(name).itemsize == d.itemsize
    with pytest.raises(TypeError, match="complex64"):
        dtypes.from_np(np.complex64)


def _random_doubles(n: int) -> list[float]:
    rng = random.Random(0)
    vals = [rng.uniform(-70000, 70000) for _ in range(n)]
    vals += [rng.uniform(-1, 1) * 2.0 ** rng.randint(-30, 20) for _ in range(n)]
    vals += [65504.0, 65519.99, 65520.0, -65520.0, 6e-8, 2.98e-8, 2.99e-8, 1e-9, 0.0, -0.0, 1 / 3]
    return vals


def test_float16_and_float32_rounding_match_numpy() -> None:
    for x in _random_doubles(3000):
        with np.errstate(over="ignore"):
            f16, f32 = float(np.float16(x)), float(np.float32(x))
        assert struct.pack("<d", truncate_const(x, dtypes.float16)) == struct.pack("<d", f16), x
        assert struct.pack("<d", truncate_const(x, dtypes.float32)) == struct.pack("<d", f32), x


def _bf16_from_float32_bits(bits: int) -> float:
    """Reference: round a float32 bit pattern to bfloat16 (nearest, ties to even) with integer maths."""
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return float(struct.unpack("<f", struct.pack("<I", rounded & 0xFFFFFFFF))[0])


def test_bfloat16_rounding() -> None:
    rng = random.Random(1)
    for _ in range(5000):
        bits = rng.getrandbits(32)
        if (bits >> 23) & 0xFF == 0xFF:
            continue  # inf / nan
        x = float(struct.unpack("<f", struct.pack("<I", bits))[0])
        want = _bf16_from_float32_bits(bits)
        assert truncate_const(x, dtypes.bfloat16) == want, x
    # a double just above a bfloat16 halfway point: rounding through float32 first would give 1.0
    assert truncate_const(1 + 2**-8 + 2**-30, dtypes.bfloat16) == 1 + 2**-7
    assert truncate_const(1 + 2**-8, dtypes.bfloat16) == 1.0  # exact tie goes to even
    assert truncate_const(3.4e38, dtypes.bfloat16) == math.inf
    assert math.isnan(truncate_const(math.nan, dtypes.bfloat16))


def test_int_wraparound() -> None:
    assert truncate_const(2**31, dtypes.int32) == -(2**31)
    assert truncate_const(-1, dtypes.uint16) == 65535
    assert truncate_const(3.9, dtypes.int8) == 3 and truncate_const(-3.9, dtypes.int8) == -3
    assert truncate_const(2, dtypes.bool) is True


def test_pickle_from_another_process_keeps_hash_and_membership() -> None:
    # string hashes are salted per process: a DType unpickled here must hash like the ones made here
    code = (
        "import pickle,sys; from tg_uop import dtypes; "
        "sys.stdout.buffer.write(pickle.dumps([dtypes.float, dtypes.half.vec(4), dtypes.int.ptr()]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    blob = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, env=env).stdout
    f, h4, p = pickle.loads(blob)
    assert f == dtypes.float and hash(f) == hash(dtypes.float) and dtypes.is_float(f)
    assert h4 == dtypes.half.vec(4) and hash(h4) == hash(dtypes.half.vec(4)) and h4.scalar() == dtypes.half
    assert p == dtypes.int.ptr() and hash(p) == hash(dtypes.int.ptr())


def test_vec_is_remembered_and_still_checks_its_argument() -> None:
    assert dtypes.float.vec(4) is dtypes.float.vec(4) and dtypes.float.vec(4).count == 4
    assert dtypes.float.vec(1) is dtypes.float and dtypes.void.vec(4) is dtypes.void
    for _ in range(2):  # (a bad width raises every time, not only before the good ones are remembered)
        with pytest.raises(ValueError, match="width"):
            dtypes.float.vec(0)
        with pytest.raises(ValueError, match="vectorize"):
            dtypes.float.vec(4).vec(2)
