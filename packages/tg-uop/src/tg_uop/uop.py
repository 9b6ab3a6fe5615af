"""UOp: the one IR node. Immutable and hash-consed: the same (op, dtype, src, arg) is the same object.

>>> from tg_uop import UOp, dtypes
>>> x = UOp.variable("x", 0, 10)
>>> (x + 1) is (x + 1)
True
>>> ((x * 4 + 2) // 4).simplify().render()
'x'
"""

from __future__ import annotations

import itertools
import math
import struct
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Generic, TypeVar, overload

from tg_uop.alu import PYTHON_ALU, bitcast_const, cast_const, exec_alu
from tg_uop.bounds import bounds
from tg_uop.dtype import ConstType, DType, dtypes, truncate_const
from tg_uop.helpers import all_int, prod
from tg_uop.ops import GroupOp, Ops
from tg_uop.shapes import uop_shape

__all__ = ["PYTHON_ALU", "UOp", "arg_key", "bitcast_const", "cast_const", "exec_alu", "pretty", "sint"]

_T = TypeVar("_T")
sint = int | Any  # an int or a symbolic UOp (Any keeps mypy from demanding casts everywhere)


def arg_key(arg: Any) -> Any:
    """A hashable key for an arg that keeps -0.0 apart from 0.0 and lets NaN match NaN (`==` does neither).

    >>> arg_key(-0.0) == arg_key(0.0), arg_key(float("nan")) == arg_key(float("nan"))
    (False, True)
    """
    if isinstance(arg, float):
        return ("float", struct.pack("<d", arg))
    if isinstance(arg, tuple):
        if type(arg) is tuple and plain_arg(arg):
            return (tuple, arg)  # a shape, axes, pads, (op, axes): compared as they are (as UOp's own key does)
        return tuple([arg_key(a) for a in arg])
    return (type(arg), arg)


def plain_arg(arg: tuple[Any, ...]) -> bool:
    """Whether `arg` holds only ints, strs, None, Ops and tuples of these (at any depth): values that equal only
    values of their own type, so `==` on the tuple is what its key needs (no float or bool anywhere: 1 == 1.0 ==
    True, and -0.0 == 0.0). A pad's ((0, 0), (1, 1)) or a reduce's (Ops.ADD, (2,)) is then its own key, without
    a key built per element."""
    for a in arg:
        t = type(a)
        if not (t is int or t is str or a is None or t is Ops or (t is tuple and plain_arg(a))):
            return False
    return True


class cached(Generic[_T]):  # noqa: N801  (spelled like the decorator it replaces)
    """functools.cached_property without its lock (3.11 takes an RLock on every first access, a large share of
    building a small graph): the value is computed once and stored in the node's __dict__, where later reads
    find it without calling this descriptor. A race computes it twice, to the same value."""

    def __init__(self, fn: Callable[[Any], _T]) -> None:
        self.fn, self.name = fn, fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> cached[_T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _T: ...
    def __get__(self, obj: object, owner: type | None = None) -> _T | cached[_T]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


class Toposort(Mapping["UOp", None]):
    """A node's ancestors (cached on the node) followed by the node itself, read as an ordered set.

    A view, not a copy: walking or testing membership costs nothing extra per access.
    """

    __slots__ = ("_ancestors", "_node")

    def __init__(self, ancestors: dict[UOp, None], node: UOp) -> None:
        self._ancestors, self._node = ancestors, node

    def __getitem__(self, key: UOp) -> None:
        if key is self._node or key in self._ancestors:
            return None
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key is self._node or key in self._ancestors

    def __iter__(self) -> Iterator[UOp]:
        yield from self._ancestors
        yield self._node

    def __len__(self) -> int:
        return len(self._ancestors) + 1


class UOpMetaClass(type):
    """UOp's metaclass: holds the hash-consing table, a weak cache from (op, dtype, src, arg key) to the live UOp
    (`UOp.__new__` looks it up; an entry leaves when its node dies)."""

    ucache: ClassVar[dict[tuple[Any, ...], weakref.ReferenceType[UOp]]] = {}


_buffer_ids = itertools.count()
_SHIFTS = frozenset({Ops.SHL, Ops.SHR})  # (their amount may have another dtype)
_INT_ONLY = frozenset({Ops.SHL, Ops.SHR, Ops.IDIV, Ops.MOD, Ops.XOR, Ops.OR, Ops.AND})


class UOp(metaclass=UOpMetaClass):
    """One node of the IR. Build with the constructors and operators; never mutate.

    Fields: `op` (an Ops), `dtype`, `src` (tuple of UOps), `arg` (op specific, hashable).
    """

    __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "__dict__")
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any

    def __new__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        # hash-consing: the live node of this (op, dtype, src, arg) if there is one, else a new node, filed.
        # (a __new__ without __init__: building a node is on every hot path, and this is its cheapest form)
        t = type(arg)
        if t is int or t is str or t is bool or arg is None:
            akey: Any = (t, arg)
        elif t is tuple and (
            (len(arg) == 2 and type(arg[0]) is int and type(arg[1]) is int)  # (a BUFFER's (id, size): no call)
            or plain_arg(arg)
        ):  # a shape, an axis order, a pad: the common tuples
            akey = (tuple, arg)  # (compared as they are, as arg_key keys them; no other arg_key starts with `tuple`)
        else:
            akey = arg_key(arg)
        key = (op, dtype, src, akey)
        cache = _UCACHE
        ref = cache.get(key)
        if ref is not None and (live := ref()) is not None:
            return live
        if not isinstance(src, tuple):
            raise TypeError(f"UOp src must be a tuple of UOps, got {type(src).__name__}")
        ret = _new_object(cls)
        _set_op(ret, op)  # (the slots' own setters: the only writes a UOp ever gets)
        _set_dtype(ret, dtype)
        _set_src(ret, src)
        _set_arg(ret, arg)

        def forget(dead: weakref.ReferenceType[UOp], key: tuple[Any, ...] = key) -> None:
            if cache.get(key) is dead:
                del cache[key]

        cache[key] = weakref.ref(ret, forget)
        return ret

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UOp is immutable (hash-consed and shared): cannot set {name!r}; use .replace()")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"UOp is immutable: cannot delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return UOp, (self.op, self.dtype, self.src, self.arg)

    def replace(self, **kwargs: Any) -> UOp:
        """A UOp like this one with some fields changed."""
        op = kwargs.get("op", self.op)
        dtype = kwargs.get("dtype", self.dtype)
        src = tuple(kwargs.get("src", self.src))
        arg = kwargs.get("arg", self.arg)
        if op is self.op and dtype is self.dtype and src == self.src and arg is self.arg:
            return self
        return UOp(op, dtype, src, arg)

    # ---- graph walking ----
    @property
    def toposort(self) -> Toposort:
        """Every node reachable from this one, sources before users (an ordered set); this node last."""
        return Toposort(self._ancestors, self)

    @cached
    def _ancestors(self) -> dict[UOp, None]:
        """toposort without this node. Cached without it: a cache holding the node itself would be a reference
        cycle, so a dead graph (and the buffers its BUFFER nodes own) would live until the cyclic GC ran."""
        visited: dict[UOp, None] = {}
        stack: list[tuple[UOp, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if node in visited:
                continue
            if expanded:
                visited[node] = None
                continue
            if node is not self and (walked := node.__dict__.get("_ancestors")) is not None:
                # a node walked before (`t * 2.5`'s cached constant view): its order, less what is placed already,
                # is what walking it would give (everything under a placed node is placed)
                for a in walked:
                    if a not in visited:
                        visited[a] = None
                visited[node] = None
                continue
            stack.append((node, True))
            for s in reversed(node.src):
                if s not in visited:
                    stack.append((s, False))
        del visited[self]
        return visited

    def substitute(self, mapping: dict[UOp, UOp], name: str | None = None) -> UOp:
        """Replace nodes by identity, rebuilding everything above them (a rewrite pass called `name`)."""
        from tg_uop.rewrite import graph_rewrite, substitute_matcher

        return graph_rewrite(self, substitute_matcher, ctx=mapping, bottom_up=True, name=name or "substitute")

    def simplify(self) -> UOp:
        """Apply the symbolic rules until nothing changes."""
        from tg_uop.rewrite import graph_rewrite
        from tg_uop.symbolic import symbolic

        return graph_rewrite(self, symbolic)

    # ---- printing ----
    def __repr__(self) -> str:
        return pretty(self)

    def render(self) -> str:
        """A short readable expression, e.g. `((x*4)+y)`."""
        from tg_uop.render import render_expr

        return render_expr(self)

    # ---- constants ----
    @staticmethod
    def const(dtype: DType, value: ConstType) -> UOp:
        """A scalar constant (vector dtypes broadcast it)."""
        if isinstance(value, UOp):
            return value
        if dtype.count > 1:
            c = UOp.const(dtype.scalar(), value)
            return UOp(Ops.VECTORIZE, dtype, (c,) * dtype.count)
        return UOp(Ops.CONST, dtype, (), truncate_const(value, dtype))

    def const_like(self, value: ConstType) -> UOp:
        """A constant with this node's dtype."""
        return UOp.const(self.dtype, value)

    @staticmethod
    def variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.int32) -> UOp:
        """A symbolic integer in [min_val, max_val]."""
        if not (isinstance(min_val, int) and isinstance(max_val, int)) or min_val > max_val:
            raise ValueError(f"variable {name!r}: need ints with min <= max, got [{min_val}, {max_val}]")
        return UOp(Ops.DEFINE_VAR, dtype, (), (name, min_val, max_val))

    def bind(self, value: int) -> UOp:
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"only a variable can be bound, not {self.op}")
        name, lo, hi = self.arg
        if not lo <= value <= hi:
            raise ValueError(f"variable {name!r}: value {value} is outside [{lo}, {hi}]")
        return UOp(Ops.BIND, self.dtype, (self, self.const_like(value)))

    def unbind(self) -> tuple[UOp, int]:
        if self.op is not Ops.BIND:
            raise TypeError(f"unbind needs a BIND, not {self.op}")
        return self.src[0], int(self.src[1].arg)

    @property
    def expr(self) -> str:
        return str(self.arg[0])

    # ---- ALU construction ----
    def alu(self, op: Ops, *src: UOp) -> UOp:
        """Build an ALU node after checking its operands' dtypes."""
        operands = (self, *src)
        if op is Ops.WHERE:
            cond, a, b = operands
            if cond.dtype.scalar() != dtypes.bool:
                raise TypeError(f"WHERE needs a bool condition, got {cond.dtype}")
            if a.dtype != b.dtype:
                raise TypeError(f"WHERE branches differ in dtype: {a.dtype} vs {b.dtype}")
            return UOp(op, a.dtype, operands)
        dtype = self.dtype
        for s in src:  # (a loop, not any(...): this runs for every node an op builds)
            if s.dtype is not dtype and s.dtype != dtype and op not in _SHIFTS:
                raise TypeError(f"{op.name}: operand dtypes differ: {', '.join(str(s.dtype) for s in operands)}")
        if op in _INT_ONLY and dtypes.is_float(self.dtype):
            raise TypeError(f"{op.name} is not defined for float dtype {self.dtype}")
        out = dtypes.bool.vec(self.dtype.count) if op in GroupOp.Comparison else self.dtype
        return UOp(op, out, operands)

    def _binop(self, op: Ops, other: UOp | ConstType, reverse: bool = False) -> UOp:
        rhs = other if isinstance(other, UOp) else self.const_like(other)
        return rhs.alu(op, self) if reverse else self.alu(op, rhs)

    def __add__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.ADD, x)

    def __radd__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.ADD, x, True)

    def __sub__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.SUB, x)

    def __rsub__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.SUB, x, True)

    def __mul__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.MUL, x)

    def __rmul__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.MUL, x, True)

    def __floordiv__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.IDIV, x)

    def __rfloordiv__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.IDIV, x, True)

    def __truediv__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.FDIV, x)

    def __mod__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.MOD, x)

    def __rmod__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.MOD, x, True)

    def __neg__(self) -> UOp:
        return self.alu(Ops.NEG)

    def __and__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.AND, x)

    def __or__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.OR, x)

    def __xor__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.XOR, x)

    def __lshift__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.SHL, x)

    def __rshift__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.SHR, x)

    def __lt__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.CMPLT, x)

    def __gt__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.CMPLT, x, True)

    def __ge__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.CMPLT, x).logical_not()

    def __le__(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.CMPLT, x, True).logical_not()

    def ne(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.CMPNE, x)

    def eq(self, x: UOp | ConstType) -> UOp:
        return self.ne(x).logical_not()

    def logical_not(self) -> UOp:
        return self.ne(True)

    def maximum(self, x: UOp | ConstType) -> UOp:
        return self._binop(Ops.MAX, x)

    def minimum(self, x: UOp | ConstType) -> UOp:
        other = x if isinstance(x, UOp) else self.const_like(x)
        return -((-self).maximum(-other))

    def where(self, a: UOp | ConstType, b: UOp | ConstType) -> UOp:
        if isinstance(a, UOp):
            bb = b if isinstance(b, UOp) else a.const_like(b)
            return self.alu(Ops.WHERE, a, bb)
        if isinstance(b, UOp):
            return self.alu(Ops.WHERE, b.const_like(a), b)
        raise TypeError("where needs at least one UOp branch")

    def cast(self, dtype: DType) -> UOp:
        return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype: DType) -> UOp:
        if dtype.itemsize != self.dtype.itemsize:
            raise TypeError(
                f"bitcast changes itemsize: {self.dtype} ({self.dtype.itemsize}) -> {dtype} ({dtype.itemsize})"
            )
        return UOp(Ops.BITCAST, dtype, (self,))

    def sink(self, *srcs: UOp) -> UOp:
        return UOp(Ops.SINK, dtypes.void, (self, *srcs))

    # ---- vectors ----
    def gep(self, i: int | tuple[int, ...]) -> UOp:
        idx = (i,) if isinstance(i, int) else i
        if self.op is Ops.VECTORIZE and len(idx) == 1:
            return self.src[idx[0]]
        return UOp(Ops.GEP, self.dtype.scalar().vec(len(idx)), (self,), idx)

    # ---- range analysis ----
    @cached
    def _min_max(self) -> tuple[ConstType, ConstType]:
        return bounds(self)

    @property
    def vmin(self) -> ConstType:
        return self._min_max[0]

    @property
    def vmax(self) -> ConstType:
        return self._min_max[1]

    def divides(self, v: int) -> UOp | None:
        """self // v when that is exact by construction, else None."""
        if self.op is Ops.CONST:
            return self.const_like(self.arg // v) if self.arg % v == 0 else None
        if self.op is Ops.ADD:
            a, b = self.src[0].divides(v), self.src[1].divides(v)
            return a + b if a is not None and b is not None else None
        if self.op is Ops.MUL:
            if (a := self.src[0].divides(v)) is not None:
                return a * self.src[1]
            if (b := self.src[1].divides(v)) is not None:
                return self.src[0] * b
        return None

    def const_factor(self) -> int:
        """The largest int known to divide this expression."""
        if self.op is Ops.CONST:
            return abs(int(self.arg)) if self.arg != 0 else 0
        if self.op is Ops.ADD:
            return math.gcd(self.src[0].const_factor(), self.src[1].const_factor())
        if self.op is Ops.MUL:
            return (
                self.src[0].const_factor() * self.src[1].const_factor()
                if self.src[1].op is Ops.CONST
                else (self.src[0].const_factor() if self.src[0].op is Ops.CONST else 1)
            )
        return 1

    # ---- tensor-level helpers ----
    @staticmethod
    def new_buffer(device: str | UOp, size: int, dtype: DType) -> UOp:
        """A fresh, distinct BUFFER node of `size` elements on `device` (a name, or its DEVICE node)."""
        dev = device if isinstance(device, UOp) else UOp(Ops.DEVICE, arg=device)
        return UOp(Ops.BUFFER, dtype, (dev,), (next(_buffer_ids), size))

    @cached
    def shape(self) -> tuple[sint, ...] | None:
        """The shape of a tensor-level or kernel-level node (None where shapes do not apply)."""
        return uop_shape(self)

    @property
    def size(self) -> sint:
        if self.shape is None:
            raise TypeError(f"{self.op} has no shape")
        return prod(self.shape)

    @cached
    def device(self) -> str | None:
        """The device a tensor-level node lives on."""
        # (a chain of new one-source nodes, a matmul's movement ops: walked down in a loop to the first node that
        # knows its device, and each given it on the way back, not one nested call per node)
        chain: list[UOp] = []
        node = self
        while len(node.src) == 1 and node.op not in _OWN_DEVICE and "device" not in node.src[0].__dict__:
            chain.append(node)
            node = node.src[0]
        d = node._own_device()
        for n in chain[1:] if node is self else [*chain[1:], node]:
            n.__dict__["device"] = d  # (as `cached` stores it; `self` is stored by `cached`)
        return d

    def _own_device(self) -> str | None:
        if self.op is Ops.DEVICE:
            return self.arg if isinstance(self.arg, str) else str(self.arg)  # (keeps a str subclass: device sets)
        if self.op in _OWN_DEVICE:
            return self.src[-1].device
        for s in self.src:
            if (d := s.device) is not None:
                return d
        return None

    @property
    def base(self) -> UOp:
        """This node with its leading movement ops stripped (not cached: caching `self` would be a cycle)."""
        node = self
        while node.op in GroupOp.Movement:
            node = node.src[0]
        return node

    # movement ops on tensor graphs (validated; return self when they are no-ops)
    def reshape(self, shape: tuple[sint, ...]) -> UOp:
        cur = self._need_shape("reshape")
        if any(not isinstance(s, UOp) and s < 0 for s in shape):
            raise ValueError(f"reshape: negative dimension in {shape}")
        if prod(cur) != prod(shape) and all_int(cur) and all_int(shape):
            raise ValueError(f"reshape: cannot reshape {cur} (size {prod(cur)}) to {shape} (size {prod(shape)})")
        return self if tuple(shape) == cur else UOp(Ops.RESHAPE, self.dtype, (self,), tuple(shape))

    def permute(self, order: tuple[int, ...]) -> UOp:
        cur = self._need_shape("permute")
        if sorted(order) != list(range(len(cur))):
            raise ValueError(f"permute: {order} is not a permutation of the axes of shape {cur}")
        return self if tuple(order) == tuple(range(len(cur))) else UOp(Ops.PERMUTE, self.dtype, (self,), tuple(order))

    def expand(self, shape: tuple[sint, ...]) -> UOp:
        cur = self._need_shape("expand")
        if len(shape) != len(cur) or any(c != s and c != 1 for c, s in zip(cur, shape)):
            raise ValueError(f"expand: cannot expand shape {cur} to {shape} (only size-1 dims expand)")
        return self if tuple(shape) == cur else UOp(Ops.EXPAND, self.dtype, (self,), tuple(shape))

    def pad(self, arg: tuple[tuple[sint, sint], ...]) -> UOp:
        cur = self._need_shape("pad")
        if len(arg) != len(cur) or any(not isinstance(x, UOp) and x < 0 for p in arg for x in p):
            raise ValueError(f"pad: {arg} must give a (before, after) pair of non-negative ints for each dim of {cur}")
        return self if all(b == 0 and a == 0 for b, a in arg) else UOp(Ops.PAD, self.dtype, (self,), tuple(arg))

    def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> UOp:
        cur = self._need_shape("shrink")
        bad = len(arg) != len(cur) or any(all_int((b, e, s)) and not 0 <= b <= e <= s for (b, e), s in zip(arg, cur))
        if bad:
            raise ValueError(f"shrink: {arg} is out of bounds for shape {cur}")
        return (
            self
            if all(b == 0 and e == s for (b, e), s in zip(arg, cur))
            else UOp(Ops.SHRINK, self.dtype, (self,), tuple(arg))
        )

    def flip(self, axes: tuple[bool, ...]) -> UOp:
        cur = self._need_shape("flip")
        if len(axes) != len(cur):
            raise ValueError(f"flip: need one flag per dim of {cur}, got {axes}")
        return self if not any(axes) else UOp(Ops.FLIP, self.dtype, (self,), tuple(axes))

    def r(self, op: Ops, axes: tuple[int, ...]) -> UOp:
        """Reduce over `axes` (kept as size-1 dims)."""
        cur = self._need_shape("reduce")
        if any(not 0 <= a < len(cur) for a in axes):
            raise ValueError(f"reduce: axes {axes} out of range for shape {cur}")
        axes = tuple(sorted(set(a for a in axes if cur[a] != 1)))
        if not axes:
            return self
        return UOp(Ops.REDUCE_AXIS, self.dtype, (self,), (op, axes))

    def _need_shape(self, what: str) -> tuple[sint, ...]:
        if self.shape is None:
            raise TypeError(f"{what}: {self.op} has no shape")
        return self.shape


_OWN_DEVICE = frozenset({Ops.DEVICE, Ops.COPY, Ops.MULTI, Ops.COLLECTIVE})  # (device not their first source's)
_UCACHE = UOpMetaClass.ucache
_new_object = object.__new__
_set_op, _set_dtype, _set_src, _set_arg = (UOp.__dict__[f].__set__ for f in ("op", "dtype", "src", "arg"))


# ---------------------------------------------------------------------------------------------
# pretty printing


def pretty(root: UOp) -> str:
    """Print a UOp graph; nodes used more than once are printed once and referred to by name."""
    users: dict[UOp, int] = {}
    for node in root.toposort:
        for s in node.src:
            users[s] = users.get(s, 0) + 1
    shared = [n for n in root.toposort if users.get(n, 0) > 1 and n.op is not Ops.CONST and n.src]
    names = {n: f"x{i}" for i, n in enumerate(shared)}

    def fmt(u: UOp, depth: int, top: bool) -> str:
        if not top and u in names:
            return names[u]
        pad = "  " * (depth + 1)
        srcs = "".join(f"\n{pad}{fmt(s, depth + 1, False)}," for s in u.src)
        src_part = f", src=({srcs})" if u.src else ""
        return f"UOp({u.op!r}, {u.dtype!r}, arg={u.arg!r}{src_part})"

    lines = [f"{names[n]} = {fmt(n, 0, True)}" for n in shared if n is not root]
    lines.append(fmt(root, 0, True))
    return "\n".join(lines)
