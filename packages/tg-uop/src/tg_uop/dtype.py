"""Data types: scalars, vectors and pointers, with tinygrad's promotion lattice.

>>> from tg_uop.dtype import dtypes
>>> dtypes.float32.itemsize, dtypes.float32.vec(4).itemsize
(4, 16)
>>> dtypes.least_upper(dtypes.int32, dtypes.float16)
dtypes.half
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import math
import struct
from dataclasses import dataclass
from typing import Any, ClassVar, Final

ConstType = float | int | bool


class _Interned(type):
    """Metaclass of the dtypes: building a DType equal to one that exists returns that one, so every equal pair
    of dtypes is one object and equality and hashing are identity (C speed: dtypes are hashed on every hot path,
    in every UOp's hash-consing key)."""

    _table: ClassVar[dict[tuple[object, ...], Any]] = {}

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        made = super().__call__(*args, **kwargs)
        return _Interned._table.setdefault(made._key, made)


_VECS: dict[tuple[DType, int], DType] = {}  # DType.vec's answers (dtypes are interned: the keys are identities)


@dataclass(frozen=True, eq=True)
class DType(metaclass=_Interned):
    """A scalar or vector element type. Compare with `==`; order by promotion priority.

    Interned: `DType(...)` with the fields of an existing dtype returns that dtype (so `==` is `is`).
    """

    priority: int
    itemsize: int
    name: str
    fmt: str | None  # struct format character, None for types struct cannot pack
    count: int = 1  # vector width
    _scalar: DType | None = None

    def __post_init__(self) -> None:
        # the interning key (the fields' values; the dtypes among them are interned already)
        object.__setattr__(self, "_key", (type(self), tuple(getattr(self, f.name) for f in dataclasses.fields(self))))

    __eq__ = object.__eq__  # (interned: equal dtypes are one object)
    __hash__ = object.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from its fields, so the cached hash is the unpickling process's (string hashes are salted)
        return (type(self), tuple(getattr(self, f.name) for f in dataclasses.fields(self)))

    def __repr__(self) -> str:
        if self.count > 1:
            return f"dtypes.{self.scalar().name}.vec({self.count})"
        return f"dtypes.{INVERSE_NAMES.get(self, self.name)}"

    def __lt__(self, other: DType) -> bool:
        return (self.priority, self.itemsize, self.name, self.count) < (
            other.priority,
            other.itemsize,
            other.name,
            other.count,
        )

    def vec(self, count: int) -> DType:
        """A vector of `count` elements of this scalar type."""
        if (hit := _VECS.get((self, count))) is not None:  # (asked for by the thousand while lowering)
            return hit
        if count < 1:
            raise ValueError(f"vector width must be >= 1, got {count}")
        if self.count != 1:
            raise ValueError(f"cannot vectorize the vector type {self}")
        made = self
        if count != 1 and self != dtypes.void:
            made = DType(self.priority, self.itemsize * count, f"{self.name}{count}", None, count, self)
        _VECS[(self, count)] = made
        return made

    def scalar(self) -> DType:
        return self._scalar if self._scalar is not None else self

    def ptr(self, size: int = -1, local: bool = False) -> PtrDType:
        """A pointer to this type (global memory unless `local`)."""
        return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, None, self, local, 1, size)

    @property
    def base(self) -> DType:
        return self

    @property
    def min(self) -> ConstType:
        return dtypes.min(self)

    @property
    def max(self) -> ConstType:
        return dtypes.max(self)


@dataclass(frozen=True, eq=True)
class PtrDType(DType):
    """A pointer to `_base` elements in global (or local) memory."""

    _base: DType | None = None
    local: bool = False
    v: int = 1
    size: int = -1

    @property
    def base(self) -> DType:
        assert self._base is not None
        return self._base

    def vec(self, count: int) -> DType:
        return PtrDType(
            self.priority,
            self.itemsize,
            self.name,
            self.fmt,
            self.count,
            None,
            self._base,
            self.local,
            count,
            self.size,
        )

    def ptr(self, size: int = -1, local: bool = False) -> PtrDType:
        raise TypeError("cannot take a pointer to a pointer type")

    def __repr__(self) -> str:
        where = "local" if self.local else "global"
        return f"{self.base!r}.ptr({self.size}, {where})" + (f".vec({self.v})" if self.v != 1 else "")


class dtypes:  # noqa: N801  (tinygrad's public spelling)
    """The dtype namespace: `dtypes.float32`, `dtypes.is_float(...)`, `dtypes.least_upper(...)`."""

    void: Final[DType] = DType(-1, 0, "void", None)
    bool: Final[DType] = DType(0, 1, "bool", "?")
    int8: Final[DType] = DType(1, 1, "signed char", "b")
    uint8: Final[DType] = DType(2, 1, "unsigned char", "B")
    int16: Final[DType] = DType(3, 2, "short", "h")
    uint16: Final[DType] = DType(4, 2, "unsigned short", "H")
    int32: Final[DType] = DType(5, 4, "int", "i")
    uint32: Final[DType] = DType(6, 4, "unsigned int", "I")
    int64: Final[DType] = DType(7, 8, "long", "q")
    uint64: Final[DType] = DType(8, 8, "unsigned long", "Q")
    float16: Final[DType] = DType(9, 2, "half", "e")
    bfloat16: Final[DType] = DType(10, 2, "__bf16", None)
    float32: Final[DType] = DType(11, 4, "float", "f")
    float64: Final[DType] = DType(12, 8, "double", "d")

    # aliases
    half: Final[DType] = float16
    float: Final[DType] = float32
    double: Final[DType] = float64
    uchar: Final[DType] = uint8
    ushort: Final[DType] = uint16
    uint: Final[DType] = uint32
    ulong: Final[DType] = uint64
    char: Final[DType] = int8
    short: Final[DType] = int16
    int: Final[DType] = int32
    long: Final[DType] = int64

    default_float: ClassVar[DType] = float32
    default_int: ClassVar[DType] = int32

    floats: Final[tuple[DType, ...]] = (float16, bfloat16, float32, float64)
    uints: Final[tuple[DType, ...]] = (uint8, uint16, uint32, uint64)
    sints: Final[tuple[DType, ...]] = (int8, int16, int32, int64)
    ints: Final[tuple[DType, ...]] = uints + sints
    all: Final[tuple[DType, ...]] = (bool,) + ints + floats

    @staticmethod
    def is_float(x: DType) -> builtins.bool:
        return x.scalar() in _FLOAT_SET

    @staticmethod
    def is_int(x: DType) -> builtins.bool:
        return x.scalar() in _INT_SET

    @staticmethod
    def is_unsigned(x: DType) -> builtins.bool:
        return x.scalar() in _UINT_SET

    @staticmethod
    def is_bool(x: DType) -> builtins.bool:
        return x.scalar() == dtypes.bool

    @staticmethod
    def from_py(x: Any) -> DType:
        """The dtype tinygrad gives a Python value (nested lists take the widest element)."""
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, int):
            return dtypes.default_int
        if isinstance(x, float):
            return dtypes.default_float
        if isinstance(x, (list, tuple)):
            return max((dtypes.from_py(v) for v in x), default=dtypes.default_float)
        raise TypeError(f"cannot infer a dtype from {type(x).__name__} value {x!r}")

    @staticmethod
    def as_const(val: Any, dtype: DType) -> ConstType:
        """Convert a Python value to the constant of `dtype` (wrapping ints, rounding floats)."""
        return truncate_const(val, dtype)

    @staticmethod
    def min(dtype: DType) -> ConstType:
        d = dtype.scalar()
        if dtypes.is_int(d):
            return 0 if dtypes.is_unsigned(d) else -(1 << (8 * d.itemsize - 1))
        if dtypes.is_float(d):
            return -math.inf
        return False

    @staticmethod
    def max(dtype: DType) -> ConstType:
        d = dtype.scalar()
        if dtypes.is_int(d):
            return (1 << (8 * d.itemsize)) - 1 if dtypes.is_unsigned(d) else (1 << (8 * d.itemsize - 1)) - 1
        if dtypes.is_float(d):
            return math.inf
        return True

    @staticmethod
    def least_upper(*ds: DType) -> DType:
        """The smallest dtype every one of `ds` promotes to (tinygrad's lattice)."""
        if not ds:
            raise ValueError("least_upper needs at least one dtype")
        common = set.intersection(*(_parents(d.scalar()) for d in ds))
        return min(common)

    @staticmethod
    def least_upper_float(d: DType) -> DType:
        return d if dtypes.is_float(d) else dtypes.least_upper(d, dtypes.default_float)

    @staticmethod
    def fields() -> dict[str, DType]:
        return dict(DTYPES_BY_NAME)

    @staticmethod
    def from_np(np_dtype: Any) -> DType:
        """The tg dtype for a numpy dtype (or its name)."""
        if isinstance(np_dtype, type):  # np.float32, or a Python type as numpy reads it
            name = {"bool_": "bool", "float": "float64", "int": "int64"}.get(np_dtype.__name__, np_dtype.__name__)
        else:
            name = str(getattr(np_dtype, "name", np_dtype))
        if name not in NP_NAMES:
            raise TypeError(f"numpy dtype {name!r} has no tg equivalent; supported: {sorted(NP_NAMES)}")
        return NP_NAMES[name]

    @staticmethod
    def to_np_name(dtype: DType) -> str:
        """The numpy dtype name holding `dtype` (bfloat16 is held as float32 by numpy)."""
        for k, v in NP_NAMES.items():
            if v == dtype:
                return k
        if dtype == dtypes.bfloat16:
            return "float32"
        raise TypeError(f"dtype {dtype} has no numpy equivalent")


_FLOAT_SET = frozenset(dtypes.floats)
_INT_SET = frozenset(dtypes.ints)
_UINT_SET = frozenset(dtypes.uints)

_INT_RANGES: dict[DType, tuple[int, int]] = {d: (int(dtypes.min(d)), int(dtypes.max(d))) for d in dtypes.ints}

DTYPES_BY_NAME: dict[str, DType] = {
    k: v for k, v in vars(dtypes).items() if isinstance(v, DType) and not k.startswith("default")
}
INVERSE_NAMES: dict[DType, str] = {
    v: k
    for k, v in vars(dtypes).items()
    if isinstance(v, DType)
    and not k.startswith("default")
    and k
    in (
        "void",
        "bool",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "half",
        "bfloat16",
        "float",
        "double",
    )
}
NP_NAMES: dict[str, DType] = {
    "bool": dtypes.bool,
    "int8": dtypes.int8,
    "uint8": dtypes.uint8,
    "int16": dtypes.int16,
    "uint16": dtypes.uint16,
    "int32": dtypes.int32,
    "uint32": dtypes.uint32,
    "int64": dtypes.int64,
    "uint64": dtypes.uint64,
    "float16": dtypes.float16,
    "float32": dtypes.float32,
    "float64": dtypes.float64,
}

_LATTICE: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,),
    dtypes.int16: (dtypes.int32,),
    dtypes.int32: (dtypes.int64,),
    dtypes.int64: (dtypes.float16, dtypes.bfloat16),
    dtypes.uint8: (dtypes.int16, dtypes.uint16),
    dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64),
    dtypes.uint64: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,),
    dtypes.bfloat16: (dtypes.float32,),
    dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}


@functools.cache
def _parents(d: DType) -> set[DType]:
    if d not in _LATTICE:
        raise TypeError(f"dtype {d} takes no part in type promotion")
    return {d}.union(*(_parents(p) for p in _LATTICE[d]))


def _round_bf16(x: float) -> float:
    """Round a double straight to bfloat16 (8 significant bits, float32's exponent range), ties to even.

    Rounding through float32 first would round twice and can land on the wrong neighbour.
    """
    if x == 0 or math.isnan(x) or math.isinf(x):
        return x
    _, e = math.frexp(abs(x))  # abs(x) = m * 2**e with 0.5 <= m < 1
    ulp = 2.0 ** (max(e - 1, -126) - 7)  # subnormals share the smallest exponent
    y = round(abs(x) / ulp) * ulp  # exact: dividing by a power of two; round() ties to even
    return math.copysign(math.inf if y > _BF16_MAX else y, x)


_BF16_MAX = (2 - 2**-7) * 2.0**127


def _to_float(val: Any) -> float:
    try:
        return float(val)
    except OverflowError:  # an int beyond the double range
        return math.inf if val > 0 else -math.inf


def _round_float(x: float, fmt: str) -> float:
    try:
        return float(struct.unpack(fmt, struct.pack(fmt, x))[0])
    except OverflowError:
        return math.copysign(math.inf, x)


def truncate_const(val: Any, dtype: DType) -> ConstType:
    """Represent `val` exactly as `dtype` would hold it (C wrap-around for ints, IEEE rounding for floats)."""
    d = dtype.scalar()
    if type(val) is int and (rng := _INT_RANGES.get(d)) is not None and rng[0] <= val <= rng[1]:
        return val  # the common case: an int that fits
    if d == dtypes.bool:
        return bool(val)
    if dtypes.is_int(d):
        if isinstance(val, float):
            if math.isnan(val) or math.isinf(val):
                raise ValueError(f"cannot convert {val} to integer dtype {d}")
            val = int(val)
        bits = 8 * d.itemsize
        v = int(val) & ((1 << bits) - 1)
        if not dtypes.is_unsigned(d) and v >= 1 << (bits - 1):
            v -= 1 << bits
        return v
    if d == dtypes.float64:
        return _to_float(val)
    if d == dtypes.float32:
        return _round_float(_to_float(val), "<f")
    if d == dtypes.float16:
        return _round_float(_to_float(val), "<e")
    if d == dtypes.bfloat16:
        return _round_bf16(_to_float(val))
    if d == dtypes.void:
        return val  # type: ignore[no-any-return]
    raise TypeError(f"no constants of dtype {dtype}")
