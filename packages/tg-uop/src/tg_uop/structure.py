"""The structure of a graph up to which buffers it reads: one small int per shape of graph, memoized per node.

Two graphs have one structure id when they differ only in their BUFFER leaves, read them in the same pattern
(the same buffer reached twice is one leaf, so `a * a` and `a * b` differ), and agree on everything else:
ops, dtypes, args (-0.0 apart from 0.0, NaN equal to NaN) and each leaf's dtype, size and device. A cache
keyed by the id (the scheduler's, say) binds a new graph's buffers by position: `structure(node)[1]`.

Nodes are immutable and hash-consed, so the result is cached on the node: a graph built on nodes seen before
costs only its new nodes. Ids are never reused (a full table is dropped, and then only costs misses).

>>> from tg_uop import UOp, Ops, dtypes
>>> a, b = (UOp.new_buffer("CPU", 4, dtypes.float) for _ in range(2))
>>> structure(a + b)[0] == structure(b + a)[0], structure(a + b)[0] == structure(a + a)[0]
(True, False)
>>> structure(a + b)[1] == (a, b)
True
"""

from __future__ import annotations

import functools
import itertools

from tg_uop.ops import Ops
from tg_uop.uop import UOp, arg_key, plain_arg

_ids: dict[tuple[object, ...], int] = {}  # structure key -> id (the interning table)
_counter = itertools.count()
IDS_MAX = 1 << 17
_ATTR = "_structure"  # where a node keeps its (id, leaves) in its __dict__
_LEAF_ATTR = "_leaf_structure"  # where a BUFFER node keeps its id


def structure(node: UOp) -> tuple[int, tuple[UOp, ...]]:
    """(structure id, the BUFFER leaves in order of first use) of the graph under `node`."""
    if node.op is Ops.BUFFER:
        return _leaf(node)
    if (hit := node.__dict__.get(_ATTR)) is not None:
        return hit  # type: ignore[no-any-return]
    for s in node.src:
        if s.op is not Ops.BUFFER and _ATTR not in s.__dict__:
            break
    else:  # a new node over known ones (the usual case: one op on tensors seen before)
        hit = node.__dict__[_ATTR] = _combine(node)
        return hit
    stack = [node]
    while stack:  # children first, without recursion (graphs may be deep)
        n = stack[-1]
        d = n.__dict__
        if _ATTR in d:
            stack.pop()
            continue
        pushed = False
        for s in n.src:
            if s.op is not Ops.BUFFER and _ATTR not in s.__dict__:
                stack.append(s)
                pushed = True
        if not pushed:
            stack.pop()
            d[_ATTR] = _combine(n)  # (a pure function of the immutable node)
    return node.__dict__[_ATTR]  # type: ignore[no-any-return]


def _combine(n: UOp) -> tuple[int, tuple[UOp, ...]]:
    """The structure of `n` from its sources' (computed before)."""
    arg = n.arg
    t = type(arg)
    akey = (t, arg) if t is int or arg is None or (t is tuple and plain_arg(arg)) else arg_key(arg)
    if len(n.src) == 1:  # a movement or unary op: the source's leaves, in the source's order
        src = n.src[0]
        sid, leaves = _leaf(src) if src.op is Ops.BUFFER else src.__dict__[_ATTR]
        return _intern((n.op, n.dtype, akey, sid)), leaves
    if len(n.src) == 2:  # a binary op (the usual case): no lists built
        a, b = n.src
        sa, la = _leaf(a) if a.op is Ops.BUFFER else a.__dict__[_ATTR]
        sb, lb = _leaf(b) if b.op is Ops.BUFFER else b.__dict__[_ATTR]
        if not la and not lb:
            return _intern((n.op, n.dtype, akey, (sa, sb))), ()
        if not lb or not la or (len(la) == 1 and len(lb) == 1 and la[0] is not lb[0]):  # distinct leaves
            return _intern((n.op, n.dtype, akey, (sa, sb), _spans((len(la), len(lb))))), la + lb
    parts = [_leaf(s) if s.op is Ops.BUFFER else s.__dict__[_ATTR] for s in n.src]
    sids = tuple([sid for sid, _ in parts])
    flat = [leaf for _, sub in parts for leaf in sub]
    if not flat:  # no buffer below (constants, aranges)
        return _intern((n.op, n.dtype, akey, sids)), ()
    if len(set(flat)) == len(flat):  # no leaf reached from two sources (the usual case): merged in order
        return _intern((n.op, n.dtype, akey, sids, _spans(tuple([len(sub) for _, sub in parts])))), tuple(flat)
    out: list[UOp] = []
    index: dict[UOp, int] = {}
    maps = tuple(merge_leaves(sub, out, index) for _, sub in parts)
    return _intern((n.op, n.dtype, akey, sids, maps)), tuple(out)


@functools.cache
def _spans(lengths: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """merge_leaves' positions for sources whose leaves are all distinct: consecutive runs of these lengths."""
    out, start = [], 0
    for k in lengths:
        out.append(tuple(range(start, start + k)))
        start += k
    return tuple(out)


def merge_leaves(sub: tuple[UOp, ...], leaves: list[UOp], index: dict[UOp, int]) -> tuple[int, ...]:
    """Append the new ones of `sub` to `leaves` (`index` maps each leaf to its position); each one's position."""
    out = []
    for leaf in sub:
        if (i := index.get(leaf)) is None:
            i = index[leaf] = len(leaves)
            leaves.append(leaf)
        out.append(i)
    return tuple(out)


# (template, the sources' structure ids, where each source's leaves go) -> the structure id of a node built so
_templates: dict[tuple[object, ...], int] = {}


def structure_as(node: UOp, template: tuple[object, ...], sources: tuple[UOp, ...]) -> None:
    """Give `node`, built from `sources` by the caller in a way that `template` names in full (an op and its sizes,
    say), its structure: walked for the first node of each template over sources of these structures, then recalled
    (a matmul's eight new nodes: one dictionary look-up instead of eight node keys). Nothing to do where the node has
    its structure already.

    >>> from tg_uop import UOp, Ops, dtypes
    >>> a, b = (UOp.new_buffer("CPU", 4, dtypes.float) for _ in range(2))
    >>> first, second = (x * 2 + x for x in (a, b))
    >>> structure_as(first, ("2x+x",), (a,)); structure_as(second, ("2x+x",), (b,))
    >>> structure(first)[0] == structure(second)[0], structure(second)[1] == (b,)
    (True, True)
    """
    if _ATTR in node.__dict__:
        return
    parts = [structure(s) for s in sources]
    if len(parts) == 2 and len(parts[0][1]) == 1 and len(parts[1][1]) == 1:  # (two operands on a buffer each)
        (sa, (a,)), (sb, (b,)) = parts
        key: tuple[object, ...] = (template, (sa, sb), a is b)
        leaves: tuple[UOp, ...] = (a,) if a is b else (a, b)
    else:
        found: list[UOp] = []
        index: dict[UOp, int] = {}
        maps = tuple(merge_leaves(sub, found, index) for _, sub in parts)
        key, leaves = (template, tuple(sid for sid, _ in parts), maps), tuple(found)
    if (known := _templates.get(key)) is not None:
        node.__dict__[_ATTR] = (known, leaves)
        return
    sid, walked = structure(node)
    if walked == leaves:  # (the node's leaves are its sources' in order: recalled from now on)
        if len(_templates) >= IDS_MAX:
            _templates.clear()
        _templates[key] = sid


def _leaf(buf: UOp) -> tuple[int, tuple[UOp, ...]]:
    # (only the id is kept on the node: a cached (id, (buf,)) would hold the node itself, a cycle only the GC frees)
    if (sid := buf.__dict__.get(_LEAF_ATTR)) is None:
        sid = buf.__dict__[_LEAF_ATTR] = _intern(("BUF", buf.dtype, buf.arg[1], buf.src[0].arg if buf.src else None))
    return sid, (buf,)


def _intern(key: tuple[object, ...]) -> int:
    if (sid := _ids.get(key)) is None:
        if len(_ids) >= IDS_MAX:
            _ids.clear()
            _templates.clear()  # (ids are never reused: a recalled id would only miss, but it would never go)
        sid = _ids[key] = next(_counter)
    return sid
