"""Pack the lanes of one upcast axis into vector UOps (for renderers with vector types).

The lowerer expands an upcast axis into one scalar STORE per value ("lane"). `pack_stores` takes the
stores of all lanes of one axis and builds them again with vector dtypes where the lanes line up:
  - loads of consecutive addresses (same buffer, same gate) become one wide LOAD;
  - lanes that are the same scalar become a broadcast (VECTORIZE of one value);
  - the same ALU op on every lane becomes one vector op on packed sources;
  - anything else is a VECTORIZE of the scalar lanes;
  - REDUCEs with the same loops become one REDUCE into a vector accumulator;
  - a store of consecutive addresses becomes one wide STORE, else one store per lane (GEP).

>>> from tg_codegen.vectorize import pack_stores  # doctest: +SKIP
"""

from __future__ import annotations

from tg_uop import DType, GroupOp, Ops, UOp, dtypes

VECTOR_WIDTHS = (2, 4, 8, 16)


class _Packer:
    def __init__(self) -> None:
        self.memo: dict[tuple[UOp, ...], UOp] = {}
        self.scalar_memo: dict[tuple[UOp, ...], tuple[UOp, ...]] = {}

    def pack(self, lanes: tuple[UOp, ...]) -> UOp:
        if (ret := self.memo.get(lanes)) is None:
            ret = self.memo[lanes] = self._pack(lanes)
        return ret

    def _pack(self, lanes: tuple[UOp, ...]) -> UOp:
        first, n = lanes[0], len(lanes)
        vdt = _vec(first.dtype, n)
        if vdt is None:
            return UOp(Ops.VECTORIZE, first.dtype, lanes)  # never used: callers check _vec first
        if all(u is first for u in lanes):
            return UOp(Ops.VECTORIZE, vdt, lanes)
        same = all(u.op is first.op and u.arg == first.arg and len(u.src) == len(first.src) for u in lanes)
        if same and first.op is Ops.LOAD and (wide := self._wide_load(lanes, vdt)) is not None:
            return wide
        if same and first.op is Ops.REDUCE and all(u.src[1:] == first.src[1:] for u in lanes):
            val = self._pack_or_gather(tuple(u.src[0] for u in lanes))
            return UOp(Ops.REDUCE, vdt, (val, *first.src[1:]), first.arg)
        if same and (first.op in GroupOp.ALU or first.op is Ops.CAST) and _all_vec(lanes, n):
            srcs = tuple(self._pack_or_gather(tuple(u.src[i] for u in lanes)) for i in range(len(first.src)))
            return UOp(first.op, vdt, srcs, first.arg)
        if same and first.op is Ops.WHERE and all(u.src[0] is first.src[0] for u in lanes):
            # one condition for every lane: a select of two packed vectors by that scalar (`c ? a : b` in C).
            # (Not `c ? a[0] : 0.0f` per lane: gcc 12 -O2 with AVX-512 miscompiles that pattern: wrong values)
            arms = [self._pack_or_gather(tuple(u.src[i] for u in lanes)) for i in (1, 2)]
            return UOp(Ops.WHERE, vdt, (first.src[0], *arms))
        return UOp(Ops.VECTORIZE, vdt, self.scalar_lanes(lanes))

    def scalar_lanes(self, lanes: tuple[UOp, ...]) -> tuple[UOp, ...]:
        """Lanes that stay scalars (a WHERE on a bool, the bool compare itself), rebuilt on their sources' packed
        forms: a Threefry body under a dropout's compare then runs as vector ops, one GEP per lane at the end,
        instead of `n` scalar copies of the whole body."""
        if (ret := self.scalar_memo.get(lanes)) is not None:
            return ret
        first = lanes[0]
        same = all(u.op is first.op and u.arg == first.arg and len(u.src) == len(first.src) for u in lanes)
        ret = lanes
        if same and first.src and (first.op in GroupOp.ALU or first.op is Ops.CAST):
            # a WHERE's condition is rebuilt, its arms stay the scalar lanes they were (an arm read lane by lane
            # out of a packed vector under a per-lane condition is the shape gcc 12 miscompiles, see _pack)
            rebuilt = range(1) if first.op is Ops.WHERE else range(len(first.src))
            per_src = [
                self._lanes_of(tuple(u.src[i] for u in lanes)) if i in rebuilt else tuple(u.src[i] for u in lanes)
                for i in range(len(first.src))
            ]
            if any(new != tuple(u.src[i] for u in lanes) for i, new in enumerate(per_src)):
                ret = tuple(u.replace(src=tuple(src[k] for src in per_src)) for k, u in enumerate(lanes))
        self.scalar_memo[lanes] = ret
        return ret

    def _lanes_of(self, lanes: tuple[UOp, ...]) -> tuple[UOp, ...]:
        """The scalar values of `lanes`: GEPs of their packed vector where they pack, else scalars (rebuilt)."""
        if _vec(lanes[0].dtype, len(lanes)) is None:
            return self.scalar_lanes(lanes)
        packed = self.pack(lanes)
        if packed.op is Ops.VECTORIZE:
            return packed.src if packed.src != lanes else lanes
        return tuple(packed.gep(k) for k in range(len(lanes)))

    def _pack_or_gather(self, lanes: tuple[UOp, ...]) -> UOp:
        return self.pack(lanes)

    def _wide_load(self, lanes: tuple[UOp, ...], vdt: DType) -> UOp | None:
        idx0 = lanes[0].src[0]
        gates = {u.src[1:] for u in lanes}
        if len(gates) != 1 or not _consecutive([u.src[0] for u in lanes]):
            return None
        return UOp(Ops.LOAD, vdt, (idx0, *lanes[0].src[1:]))

    def store(self, lanes: tuple[UOp, ...]) -> list[UOp]:
        """Stores for one group of lanes: one wide store, or one per lane of a packed value."""
        first = lanes[0]
        values = tuple(u.src[1] for u in lanes)
        # (a loaded value's sources are an address and a gate, never vectors: a copy packs into a wide load)
        loads = all(v.op is Ops.LOAD for v in values)
        if _vec(values[0].dtype, len(lanes)) is None or not (loads or _all_vec(values, len(lanes))):
            return list(lanes)
        val = self.pack(values)
        if val.op is Ops.VECTORIZE and val.src == values:
            return list(lanes)  # nothing lined up: scalar code is as good
        gates = {u.src[2:] for u in lanes}
        if len(gates) == 1 and _consecutive([u.src[0] for u in lanes]):
            return [UOp(Ops.STORE, dtypes.void, (first.src[0], val, *first.src[2:]))]
        return [UOp(Ops.STORE, dtypes.void, (u.src[0], val.gep(i), *u.src[2:])) for i, u in enumerate(lanes)]


def _vec(dt: DType, n: int) -> DType | None:
    if n not in VECTOR_WIDTHS or dt.count != 1 or dt == dtypes.bool or dt == dtypes.void:
        return None
    if not (dtypes.is_float(dt) or dtypes.is_int(dt)) or dt.itemsize not in (4, 8):
        return None
    return dt.vec(n)


def _all_vec(lanes: tuple[UOp, ...], n: int) -> bool:
    """Every lane's sources can be vectors of this width (no bools, no pointers)."""
    return all(_vec(s.dtype, n) is not None for u in lanes for s in u.src) and _vec(lanes[0].dtype, n) is not None


def _split_offset(x: UOp) -> tuple[UOp | None, int]:
    """x as (base, constant offset); base None when x is a constant."""
    if x.op is Ops.CONST:
        return None, int(x.arg)
    if x.op is Ops.ADD and x.src[1].op is Ops.CONST:
        return x.src[0], int(x.src[1].arg)
    if x.op is Ops.ADD and x.src[0].op is Ops.CONST:
        return x.src[1], int(x.src[0].arg)
    return x, 0


def _consecutive(indexes: list[UOp]) -> bool:
    """INDEX nodes of one buffer at addresses a, a+1, a+2, ..."""
    buf = indexes[0].src[0]
    base, off = _split_offset(indexes[0].src[1])
    for i, idx in enumerate(indexes[1:], start=1):
        if idx.op is not Ops.INDEX or idx.src[0] is not buf:
            return False
        b, o = _split_offset(idx.src[1])
        if b is not base or o != off + i:
            return False
    return True


def pack_stores(groups: list[list[UOp]]) -> list[UOp]:
    """Each group holds the scalar stores of the lanes of one vector; returns the stores to emit."""
    packer = _Packer()
    ret: list[UOp] = []
    for lanes in groups:
        ret.extend(packer.store(tuple(lanes)) if len(lanes) > 1 else lanes)
    return ret
