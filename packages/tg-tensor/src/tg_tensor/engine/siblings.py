"""Kernels with several outputs: sibling kernels over the same loops merged into one launch.

The scheduler makes one kernel per realized node. Some of them walk exactly the same loops over the same inputs:
a training step's bias gradient (the sum of dY over the tokens) and its layer norm's weight gradient (the sum of
dY * x-hat), the two stages of each, elementwise kernels over one activation. After scheduling, `merge_siblings`
joins such kernels into one whose SINK stores every output: one launch instead of several, and the loads the
kernels share (dY above) read once. Two kernels are siblings when

- both are fresh kernels (SINKs with no in-place write and no symbolic variable) on the same device,
- every load of each reads the same loop space and each stores the same output shape (so the merged kernel has
  the loops of either, and the code generator's opts fit both),
- neither is a product of operands broadcast against each other (a matmul: its tile, tensor cores and staging
  take one reduction), and
- the later one reads nothing written by the earlier one or by any kernel between them (it runs at the earlier
  one's place), or nothing between them reads what the earlier one writes (it runs at the later one's place), and
- no memory that an assign of the same schedule overwrites is read directly by one of them at a version older
  than one that either depends on through what it reads (ordering.py places a kernel that reads the old values
  before the write; one that also needs the new ones could go nowhere). Before, a kernel reading such a memory
  at all stayed alone: in a training step whose optimizer updates the parameters in place, every kernel reading
  a weight.

At most MAX_OUTPUTS outputs and MAX_BUFFERS buffers a kernel. MERGE_SIBLINGS=0 turns the pass off.

>>> from tg_tensor import Tensor
>>> from tg_tensor.engine.realizer import current
>>> x = Tensor.ones(4, 8).contiguous().realize()
>>> items = x.sum(0).schedule((x * x).sum(0))  # two sums over the same loops: one kernel, two outputs
>>> [len(it.ast.src) for it in items]
[2]
>>> for it in items:
...     current().unqueue(it)
"""

from __future__ import annotations

from tg_runtime.device import Buffer
from tg_tensor.engine.realizer import ScheduleItem, current
from tg_uop import Ops, UOp
from tg_uop.helpers import ContextVar

MERGE_SIBLINGS = ContextVar("MERGE_SIBLINGS", 1)
MAX_OUTPUTS = 8
MAX_BUFFERS = 32

_Key = tuple[str, tuple[object, ...], tuple[object, ...]]


def _loop_key(item: ScheduleItem) -> _Key | None:
    """(device, loop shape, output shape) of a kernel that may take siblings; None for any other item."""
    ast = item.ast
    if ast.op is not Ops.SINK or item.in_place or item.var_vals or not ast.src:
        return None
    device = item.bufs[0].device
    if not isinstance(device, str) or any(s.op is not Ops.STORE for s in ast.src):
        return None
    outs = {s.src[1].arg.shape for s in ast.src}
    loads = [u.src[1].arg for u in ast.toposort if u.op is Ops.LOAD]
    spaces = {st.shape for st in loads}
    if len(outs) != 1 or len(spaces) != 1:
        return None
    (out,), (space,) = outs, spaces
    if len(out) != len(space) or not _not_a_product(loads, out, space):
        return None
    return device, space, out


def _not_a_product(views: list[object], out: tuple[object, ...], space: tuple[object, ...]) -> bool:
    """No two loads that each stay put along an output axis the other moves along (A[m, k] along n, B[n, k]
    along m: a matmul). The axes along which each load stays put must nest (a row's mean, read along the row,
    beside the row itself, is fine)."""
    kept = [a for a, (o, s) in enumerate(zip(out, space)) if o == s and s != 1]
    still: set[frozenset[int]] = set()
    for st in views:
        strides = st.real_strides()  # type: ignore[attr-defined]
        still.add(frozenset(a for a in kept if strides[a] == 0))
    return all(a <= b or b <= a for a in still for b in still)


_Versions = frozenset[tuple[int, UOp]]  # (id of an overwritten memory, the version node) pairs


def _no_newer(direct: _Versions, depends: _Versions) -> bool:
    """Is no memory that a kernel reads directly at one version also one it depends on (through what it reads) at a
    newer version? Such a kernel would have to run before that version is written (ordering.py) and after it."""
    return all(int(n.arg[0]) >= int(d.arg[0]) for mem, n in direct for m, d in depends if m == mem)


def _renumbered(ast: UOp, index: dict[int, int]) -> list[UOp]:
    """The STOREs of `ast` with each buffer argument moved to its place in the merged kernel (all at once: the new
    DEFINE_GLOBAL 1 is the old one, so a rewrite applied node by node would move it again)."""
    memo: dict[UOp, UOp] = {}
    for u in ast.toposort:
        if u.op is Ops.DEFINE_GLOBAL:
            memo[u] = UOp(Ops.DEFINE_GLOBAL, u.dtype, (), index[u.arg])
        elif u.src:
            src = tuple(memo[s] for s in u.src)
            memo[u] = u if all(a is b for a, b in zip(src, u.src)) else u.replace(src=src)
        else:
            memo[u] = u
    return [memo[s] for s in ast.src]


def _join(a: ScheduleItem, b: ScheduleItem) -> ScheduleItem:
    """One item computing `a`'s and `b`'s outputs: outputs first (a's, then b's), then the reads (b's own ones
    after a's; a node both read is one buffer), then the constants."""
    reads = list(a.reads) + [r for r in b.reads if r not in a.reads]
    consts = list(a.consts) + [c for c in b.consts if all(c is not d for d in a.consts)]
    outs = a.bufs[: a.outputs] + b.bufs[: b.outputs]
    n_out, n_in = len(outs), len(reads)
    ia = {i: i for i in range(a.outputs)} | {a.outputs + k: n_out + k for k in range(len(a.reads))}
    ib = {i: a.outputs + i for i in range(b.outputs)}
    ib |= {b.outputs + k: n_out + reads.index(r) for k, r in enumerate(b.reads)}
    ia |= {a.outputs + len(a.reads) + k: n_out + n_in + k for k in range(len(a.consts))}
    for k, c in enumerate(b.consts):
        ib[b.outputs + len(b.reads) + k] = n_out + n_in + next(j for j, d in enumerate(consts) if d is c)
    sink = UOp(Ops.SINK, a.ast.dtype, tuple(_renumbered(a.ast, ia) + _renumbered(b.ast, ib)), a.ast.arg)
    made = current().kernel_ops  # (while VIZ records: the tensor operations of both kernels)
    if a.ast in made or b.ast in made:
        ops_a, ops_b = made.pop(a.ast, []), made.pop(b.ast, [])
        made[sink] = ops_a + [op for op in ops_b if op not in ops_a]
    by_read = {r: buf for r, buf in zip(b.reads, b.bufs[b.outputs :])} | dict(zip(a.reads, a.bufs[a.outputs :]))
    bufs: list[Buffer] = outs + [by_read[r] for r in reads]
    return ScheduleItem(
        sink,
        bufs + consts,
        outputs=n_out,
        writes=a.writes,
        also_writes=a.also_writes + tuple(w for w in (b.writes,) if w is not None) + b.also_writes,
        reads=tuple(reads),
        consts=tuple(consts),
    )


def merge_siblings(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """`items` (in an order that runs each after what it reads) with sibling kernels merged (module docstring).

    A sibling joins its host at the host's place when everything it reads is written before the host; else the
    host moves to the sibling's place when nothing between them reads what the host writes."""
    if not MERGE_SIBLINGS.value or len(items) < 2:
        return items
    # memories an assign of this schedule overwrites: no merged kernel reads one directly at a version older than
    # one it depends on through its inputs
    overwritten = {id(it.bufs[0]) for it in items if it.in_place}
    made_from: dict[UOp, _Versions] = {}  # node -> the versions of overwritten memories it was computed from

    def direct(item: ScheduleItem) -> _Versions:
        return frozenset((id(b), r) for r, b in zip(item.reads, item.bufs[item.outputs :]) if id(b) in overwritten)

    def depends(item: ScheduleItem) -> _Versions:
        return direct(item).union(*(made_from.get(r, frozenset()) for r in item.reads))

    out: list[ScheduleItem | None] = []
    open_at: dict[_Key, int] = {}  # loop key -> the place in `out` of the kernel that takes siblings of that key
    written_at: dict[UOp, int] = {}  # node -> the place in `out` of the item writing it
    last_read: dict[UOp, int] = {}  # node -> the last place in `out` of an item reading it

    def place(item: ScheduleItem, at: int) -> None:
        made = depends(item) | ({(id(item.bufs[0]), item.writes)} if item.in_place and item.writes else frozenset())
        for w in (item.writes, *item.also_writes):
            if w is not None:
                written_at[w] = at
                made_from[w] = made
        for r in item.reads:
            last_read[r] = max(last_read.get(r, -1), at)

    for item in items:
        key = _loop_key(item)
        j = open_at.get(key) if key is not None else None
        if key is not None and j is not None and (host := out[j]) is not None:
            fits = host.outputs + item.outputs <= MAX_OUTPUTS and len(host.bufs) + len(item.bufs) <= MAX_BUFFERS
            fits = fits and _no_newer(direct(host) | direct(item), depends(host) | depends(item))
            host_writes = [w for w in (host.writes, *host.also_writes) if w is not None]
            if fits and all(written_at.get(r, -1) < j for r in item.reads):
                out[j] = _join(host, item)
                place(item, j)
                continue
            if fits and not any(w in item.reads or last_read.get(w, -1) > j for w in host_writes):
                out[j] = None  # the host moves down to its sibling
                out.append(_join(host, item))
                place(host, len(out) - 1)
                place(item, len(out) - 1)
                open_at[key] = len(out) - 1
                continue
        out.append(item)
        place(item, len(out) - 1)
        if key is not None:
            open_at[key] = len(out) - 1
    return [it for it in out if it is not None]
