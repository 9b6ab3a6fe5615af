"""Tensors on several devices: a MULTI node holds one lazy graph per device and the sharded axis.

Ops on such tensors build ordinary UOps over the whole (global) shape, so shapes, autograd and every
Tensor method work unchanged. Before scheduling, `lower` rewrites the global graph into one graph per
device: elementwise ops run shard by shard, a reduction over the sharded axis reduces locally and then
all-reduces (a COLLECTIVE node), and a movement op that would mix shards all-gathers first. Where such a
reduction's only use is to be split again along an axis (combined with a tensor sharded there), the local
results are reduce-scattered instead: each device receives only its slice of the sum. A COPY to
one device concatenates the shards there. Collectives become schedule items of their own (schedule.py),
run by collective.py (NCCL on CUDA, the host between other devices).

>>> from tg_tensor import Tensor
>>> x = Tensor([[1.0, 2.0], [3.0, 4.0]]).shard(("CPU:0", "CPU:1"), axis=0)
>>> x.device == ("CPU", "CPU:1"), [s.shape for s in x.uop.src[:-1]]
(True, [(1, 2), (1, 2)])
>>> (x * 2).sum(axis=0).tolist()
[8.0, 12.0]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from tg_runtime.device import Device, DeviceSet
from tg_tensor.engine.realizer import Holder, ScheduleItem, current
from tg_uop import GroupOp, Ops, UOp, dtypes
from tg_uop.helpers import prod
from tg_uop.uop import sint

REDUCE_NAMES = {Ops.ADD: "SUM", Ops.MAX: "MAX", Ops.MUL: "PROD"}


@dataclass(frozen=True)
class Shards:
    """A lowered multi-device value: one single-device UOp per device, split along `axis` (None: replicated)."""

    uops: tuple[UOp, ...]
    axis: int | None
    devices: DeviceSet
    partial: tuple[str, tuple[UOp, ...]] | None = None  # an all-reduce's (op, per-device inputs), while re-splittable
    resplit: Callable[[int], Shards] | None = field(default=None, compare=False)  # elementwise op of such: split it


def device_set(device: Any) -> DeviceSet | None:
    """The DeviceSet of a device name, or None for one device."""
    return device if isinstance(device, DeviceSet) else None


def is_multi(u: UOp) -> bool:
    return isinstance(u.device, DeviceSet)


def multi_node(uops: tuple[UOp, ...] | list[UOp], axis: int | None, devices: DeviceSet) -> UOp:
    """The MULTI node of these per-device shards."""
    uops = tuple(uops)
    return UOp(Ops.MULTI, uops[0].dtype, (*uops, UOp(Ops.DEVICE, arg=devices)), axis)


def bounds(size: int, n: int) -> list[tuple[int, int]]:
    """The [start, end) of each device's shard of an axis of `size` split over n devices (size % n == 0)."""
    k = size // n
    return [(i * k, (i + 1) * k) for i in range(n)]


# ---- building sharded tensors


def check_devices(devices: Any) -> DeviceSet:
    """A DeviceSet from a tuple/list of device names, with a clear error for anything else."""
    if isinstance(devices, str) and "," not in devices:
        raise TypeError(f"shard: devices must be a tuple of device names, got the single device {devices!r}")
    if not isinstance(devices, (tuple, list, str)) or len(devices) == 0:
        raise TypeError(f"shard: devices must be a non-empty tuple of device names, got {devices!r}")
    ds = DeviceSet(devices)
    for d in ds.devices:
        Device[d]  # raises for an unknown device
    return ds


def shard_uop(u: UOp, devices: Any, axis: int | None) -> UOp:
    """`u` (on one device) split over `devices` along `axis` (None: a full copy on each)."""
    if is_multi(u):
        raise ValueError(
            f"shard: the tensor is already on several devices ({u.device}); bring it to one with .to(device) first"
        )
    ds = check_devices(devices)
    n = len(ds.devices)
    shape = tuple(u.shape or ())
    if axis is not None:
        if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
            raise IndexError(f"shard: axis {axis!r} is out of range for a tensor of shape {shape}")
        axis %= len(shape)
        size = shape[axis]
        if not isinstance(size, int) or size % n != 0:
            raise RuntimeError(
                f"shard: axis {axis} of shape {shape} has size {size}, which does not split evenly over {n} devices "
                f"({', '.join(ds.devices)}); pad the tensor (e.g. .pad) to a multiple of {n} first"
            )
    parts = []
    for i, d in enumerate(ds.devices):
        part = u
        if axis is not None:
            lo, hi = bounds(int(shape[axis]), n)[i]
            part = u.shrink(tuple((lo, hi) if j == axis else (0, s) for j, s in enumerate(shape)))
        parts.append(_copy_to(part, d))
    return multi_node(parts, axis, ds)


def split_of(u: UOp) -> Shards | None:
    """How a tensor's graph is split over devices (None for one device): builds its per-device graphs only."""
    low = lower(u, {}) if DeviceSet.made and is_multi(u) else u
    return low if isinstance(low, Shards) else None


def _copy_to(u: UOp, device: str) -> UOp:
    if u.device == device:
        return u
    if not _has_buffer(u):  # constants, aranges: made again on the other device, nothing copied
        return _on_device(u, device)
    return UOp(Ops.COPY, u.dtype, (u, UOp(Ops.DEVICE, arg=device)))


def _has_buffer(u: UOp) -> bool:
    return any(n.op in (Ops.BUFFER, Ops.COPY, Ops.MULTI, Ops.ASSIGN, Ops.CONTIGUOUS) for n in u.toposort)


def _on_device(u: UOp, device: str) -> UOp:
    """The same buffer-free graph built on another device."""
    devs = {n: UOp(Ops.DEVICE, arg=device) for n in u.toposort if n.op is Ops.DEVICE}
    return u.substitute(devs)


def replicate(u: UOp, devices: DeviceSet) -> UOp:
    """A single-device graph as a full copy on every device of the set (axis None)."""
    return multi_node([_copy_to(u, d) for d in devices.devices], None, devices)


# ---- lowering: the global graph -> one graph per device


def lower(root: UOp, memo: dict[UOp, UOp | Shards], users: Counter[UOp] | None = None) -> UOp | Shards:
    """The per-device form of `root` (its shards, or a single-device UOp when it lives on one device).

    `users` (how many nodes, roots counted once more, read each node of every graph being lowered together):
    an all-reduced value with a single user keeps its inputs, so that a later split of it becomes a
    reduce-scatter (without `users`, every split slices the all-reduced value).
    """
    realized = current().realized
    for node in root.toposort:  # sources come first
        if node in memo:
            continue
        if (done := realized.get(node)) is not None and done is not node:  # computed by an earlier schedule
            memo[node] = lower(done, memo, users)
            continue
        if node.op is Ops.DEVICE:
            memo[node] = node
            continue
        srcs = [memo[s] for s in node.src]
        ds = device_set(node.device)
        if ds is None and not any(isinstance(s, Shards) for s in srcs):
            changed = any(s is not o for s, o in zip(srcs, node.src))
            memo[node] = UOp(node.op, node.dtype, tuple(srcs), node.arg) if changed else node  # type: ignore[arg-type]
            continue
        low = _lower_node(node, srcs, ds)
        if isinstance(low, Shards) and (low.partial or low.resplit) and (users is None or users[node] != 1):
            low = replace(low, partial=None, resplit=None)  # read elsewhere too (whole): keep the one all-reduce
        memo[node] = low
    return memo[root]


def count_users(roots: list[UOp], users: Counter[UOp] | None = None, seen: set[UOp] | None = None) -> Counter[UOp]:
    """How many nodes read each node of these graphs (each root counts one more: it is read by its tensor); given
    `users` and the nodes already counted in it (`seen`), these graphs are added to that count."""
    users = Counter() if users is None else users
    seen = set() if seen is None else seen
    users.update(roots)
    for root in roots:
        for node in root.toposort:
            if node not in seen:
                seen.add(node)
                users.update(node.src)
    return users


def _lower_node(node: UOp, srcs: list[UOp | Shards], ds: DeviceSet | None) -> UOp | Shards:
    op = node.op
    if op is Ops.MULTI:
        assert ds is not None
        return Shards(tuple(_single(s) for s in srcs[:-1]), node.arg, ds)
    if op is Ops.COPY:
        return _lower_copy(node, srcs[0], ds)
    assert ds is not None, f"{op} reads a tensor on several devices but lives on {node.device}"
    if op is Ops.REDUCE_AXIS:
        return _lower_reduce(node, _shards(srcs[0], ds, op))
    if op in GroupOp.Movement:
        return _lower_movement(node, _shards(srcs[0], ds, op))
    if op in GroupOp.Elementwise or op in (Ops.CONTIGUOUS, Ops.DETACH, Ops.CONST, Ops.ARANGE):
        return _lower_elementwise(node, srcs, ds)
    raise NotImplementedError(f"{op.name} on a tensor split over devices {ds} is not supported yet")


def _single(s: UOp | Shards) -> UOp:
    if isinstance(s, Shards):
        raise ValueError("a MULTI node's shard is itself on several devices")
    return s


def _shards(s: UOp | Shards, ds: DeviceSet, op: Ops) -> Shards:
    if isinstance(s, Shards):
        return s
    raise ValueError(f"{op.name}: mixes a tensor on {s.device} with tensors on {ds}; move it with .to() or .shard()")


def _per_device(node: UOp, srcs: list[UOp | Shards], ds: DeviceSet, i: int) -> UOp:
    out = []
    for s in srcs:
        if isinstance(s, Shards):
            out.append(s.uops[i])
        elif s.op is Ops.DEVICE:
            out.append(UOp(Ops.DEVICE, arg=ds.devices[i]) if isinstance(s.arg, DeviceSet) else s)
        elif s.device is not None and not isinstance(s.device, DeviceSet):
            raise ValueError(
                f"{node.op.name}: mixes a tensor on {s.device} with tensors on {ds}; move it with .to() or .shard()"
            )
        else:
            out.append(s)
    return UOp(node.op, node.dtype, tuple(out), node.arg)


def _lower_elementwise(node: UOp, srcs: list[UOp | Shards], ds: DeviceSet) -> Shards:
    sharded = [s for s in srcs if isinstance(s, Shards)]
    if any(s.devices != ds for s in sharded):
        other = next(s.devices for s in sharded if s.devices != ds)
        raise ValueError(f"{node.op.name}: operands on different device sets: {ds} and {other}")
    if node.op in (Ops.ADD, Ops.DETACH) and any(_partial_sum(s) for s in srcs) and all(_replicated(s) for s in srcs):
        return _add_partials(node, srcs, ds)  # type: ignore[arg-type]
    axis = next((s.axis for s in sharded if s.axis is not None), None)
    moved = [to_axis(s, axis) if isinstance(s, Shards) else s for s in srcs]
    out = Shards(tuple(_per_device(node, moved, ds, i) for i in range(len(ds.devices))), axis, ds)
    if axis is None and any(s.partial or s.resplit for s in sharded):  # split later: split the operands instead

        def split_along(a: int) -> Shards:
            return _lower_elementwise(node, [to_axis(s, a) if isinstance(s, Shards) else s for s in srcs], ds)

        return replace(out, resplit=split_along)
    return out


def _add_partials(node: UOp, srcs: list[Shards], ds: DeviceSet) -> Shards:
    """a + b where a is an all-reduce (SUM) is one all-reduce of the per-device a + b, with a whole b (the same on
    every device) added on the first device only (a sum is linear; a DETACH of an all-reduce is its inputs
    detached). So the gradients of replicated parameters gathered into one flat gradient (a fused optimizer)
    are reduced in one collective instead of one each."""
    inputs = []
    for i in range(len(ds.devices)):
        terms = tuple(s.partial[1][i] if s.partial is not None else s.uops[i] for s in srcs if s.partial or i == 0)
        inputs.append(terms[0] if node.op is Ops.ADD and len(terms) == 1 else UOp(node.op, node.dtype, terms))
    return replace(allreduce(Shards(tuple(inputs), None, ds), "SUM"), partial=("SUM", tuple(inputs)))


def _partial_sum(s: UOp | Shards) -> bool:
    """Is `s` a replicated all-reduce (SUM) whose per-device inputs are still at hand?"""
    return isinstance(s, Shards) and s.axis is None and s.partial is not None and s.partial[0] == "SUM"


def _replicated(s: UOp | Shards) -> bool:
    return isinstance(s, Shards) and s.axis is None and (s.partial is None or s.partial[0] == "SUM")


def to_axis(s: Shards, axis: int | None) -> Shards:
    """The same value split along another axis (all-gathered first where it is split along a different one;
    reduce-scattered where it is an all-reduce that nothing else reads whole)."""
    if s.axis == axis:
        return s
    if s.axis is None and axis is not None and s.partial is not None:
        return reducescatter(Shards(s.partial[1], None, s.devices), s.partial[0], axis)
    if s.axis is None and axis is not None and s.resplit is not None:
        return s.resplit(axis)
    full = allgather(s) if s.axis is not None else s
    if axis is None:
        return full
    shape = tuple(full.uops[0].shape or ())
    n = len(s.devices.devices)
    parts = []
    for i, (lo, hi) in enumerate(bounds(int(shape[axis]), n)):
        arg = tuple((lo, hi) if j == axis else (0, d) for j, d in enumerate(shape))
        parts.append(full.uops[i].shrink(arg))
    return Shards(tuple(parts), axis, s.devices)


def _collective(kind: str, op: str, inputs: list[UOp], out_size: int, ds: DeviceSet) -> list[UOp]:
    """One COLLECTIVE node per device over these (flat, per-device) inputs."""
    flat = [u.reshape((prod(tuple(u.shape or ())),)) if len(u.shape or ()) != 1 else u for u in inputs]
    return [
        UOp(Ops.COLLECTIVE, inputs[0].dtype, (*flat, UOp(Ops.DEVICE, arg=d)), (kind, op, out_size)) for d in ds.devices
    ]


def allreduce(s: Shards, op: str) -> Shards:
    """Every device gets the elementwise `op` (SUM, MAX, PROD) of all shards."""
    shape = tuple(s.uops[0].shape or ())
    outs = _collective("allreduce", op, list(s.uops), int(prod(shape)), s.devices)
    return Shards(tuple(o.reshape(shape) for o in outs), None, s.devices)


def reducescatter(s: Shards, op: str, axis: int) -> Shards:
    """Device i gets the i-th slice along `axis` of the elementwise `op` of all (whole-shape) shards."""
    shape = tuple(s.uops[0].shape or ())
    n = len(s.devices.devices)
    perm = (axis, *[i for i in range(len(shape)) if i != axis])  # the axis first: each device's slice is contiguous
    moved = perm != tuple(range(len(shape)))
    outs = _collective(
        "reducescatter", op, [u.permute(perm) if moved else u for u in s.uops], prod(shape) // n, s.devices
    )
    local = (int(shape[axis]) // n, *[shape[i] for i in perm[1:]])
    back = tuple(perm.index(i) for i in range(len(shape)))
    return Shards(tuple(o.reshape(local).permute(back) if moved else o.reshape(local) for o in outs), axis, s.devices)


def allgather(s: Shards) -> Shards:
    """Every device gets the whole tensor (the shards concatenated along the sharded axis)."""
    assert s.axis is not None
    local = tuple(s.uops[0].shape or ())
    n, a = len(s.devices.devices), s.axis
    perm = (a, *[i for i in range(len(local)) if i != a])
    moved = [u.permute(perm) if perm != tuple(range(len(local))) else u for u in s.uops]
    outs = _collective("allgather", "", moved, n * int(prod(local)), s.devices)
    whole = (local[a] * n, *[local[i] for i in perm[1:]])
    back = tuple(perm.index(i) for i in range(len(local)))
    moved_back = perm != tuple(range(len(local)))
    return Shards(
        tuple(o.reshape(whole).permute(back) if moved_back else o.reshape(whole) for o in outs), None, s.devices
    )


def _lower_reduce(node: UOp, x: Shards) -> Shards:
    rop, axes = node.arg
    local = tuple(UOp(Ops.REDUCE_AXIS, node.dtype, (u,), node.arg) for u in x.uops)
    if x.axis is None or x.axis not in axes:
        return Shards(local, x.axis, x.devices)
    if rop not in REDUCE_NAMES:
        raise NotImplementedError(f"reducing a sharded axis with {rop.name} (all-reduce does SUM, MAX, PROD)")
    return replace(allreduce(Shards(local, x.axis, x.devices), REDUCE_NAMES[rop]), partial=(REDUCE_NAMES[rop], local))


def _lower_movement(node: UOp, x: Shards) -> Shards:
    op, arg, a = node.op, node.arg, x.axis
    n = len(x.devices.devices)
    if a is None:  # an all-reduce's inputs move along (a movement of the sum is the sum of the moved inputs)
        part = x.partial and (x.partial[0], tuple(UOp(op, node.dtype, (u,), arg) for u in x.partial[1]))
        return Shards(tuple(UOp(op, node.dtype, (u,), arg) for u in x.uops), None, x.devices, part or None)
    if op is Ops.PERMUTE:
        return Shards(tuple(u.permute(arg) for u in x.uops), arg.index(a), x.devices)
    if op is Ops.EXPAND:
        local = tuple(x.uops[0].shape or ())[a]
        shape = tuple(local if i == a else s for i, s in enumerate(arg))
        return Shards(tuple(u.expand(shape) for u in x.uops), a, x.devices)
    if op is Ops.RESHAPE and (new_axis := _reshape_axis(tuple(node.src[0].shape or ()), a, tuple(arg), n)) is not None:
        shape = tuple(s // n if i == new_axis else s for i, s in enumerate(arg))
        return Shards(tuple(u.reshape(shape) for u in x.uops), new_axis, x.devices)
    if _leaves_axis(op, arg, a, tuple(node.src[0].shape or ())):
        local = tuple(x.uops[0].shape or ())[a]
        larg = tuple((0, local) if (op is Ops.SHRINK and i == a) else v for i, v in enumerate(arg))
        return Shards(tuple(UOp(op, node.dtype, (u,), larg) for u in x.uops), a, x.devices)
    full = allgather(x)  # the op mixes shards: every device gets the whole tensor first
    return Shards(tuple(UOp(op, node.dtype, (u,), arg) for u in full.uops), None, x.devices)


def _leaves_axis(op: Ops, arg: Any, a: int, shape: tuple[sint, ...]) -> bool:
    """Does a PAD, SHRINK or FLIP leave the sharded axis `a` as it is (so each device applies it to its shard)?"""
    if op is Ops.PAD:
        return bool(arg[a] == (0, 0))
    if op is Ops.SHRINK:
        return bool(arg[a] == (0, shape[a]))
    return op is Ops.FLIP and not arg[a]


def _reshape_axis(old: tuple[sint, ...], a: int, new: tuple[sint, ...], n: int) -> int | None:
    """The axis of `new` that keeps each device's elements together (prefix sizes agree, splits evenly), or None.

    (A reshape keeps the element count, so with equal prefixes the suffixes hold as many elements too, and each
    device's contiguous run of prod(old[a:]) / n elements per prefix index is the same run in `new`. Sizes may be
    symbolic: equal prefixes are then the same expression.)"""
    before = prod(old[:a])
    for i in range(len(new)):
        if _same(prod(new[:i]), before) and isinstance(new[i], int) and new[i] > 1 and new[i] % n == 0:
            return i
    return None


def _same(x: sint, y: sint) -> bool:
    """Equal sizes: equal ints, or one symbolic expression (UOps are hash-consed)."""
    return x == y if isinstance(x, int) and isinstance(y, int) else x is y


def _lower_copy(node: UOp, src: UOp | Shards, ds: DeviceSet | None) -> UOp | Shards:
    if not isinstance(src, Shards):
        assert ds is not None
        return Shards(tuple(_copy_to(src, d) for d in ds.devices), None, ds)
    target = ds.devices[0] if ds is not None else str(node.device)
    single = gather_to(src, target)
    if ds is None:
        return single
    return Shards(tuple(_copy_to(single, d) for d in ds.devices), None, ds)


def gather_to(s: Shards, device: str) -> UOp:
    """The whole tensor on one device: the shards copied there and concatenated."""
    if s.axis is None:
        i = s.devices.devices.index(device) if device in s.devices.devices else 0
        return _copy_to(s.uops[i], device)
    local = tuple(s.uops[0].shape or ())
    a, n = s.axis, len(s.devices.devices)
    total = None
    for i, u in enumerate(s.uops):
        pad = tuple((i * local[a], (n - 1 - i) * local[a]) if j == a else (0, 0) for j in range(len(local)))
        part = _copy_to(u, device).pad(pad)
        total = part if total is None else total.alu(Ops.OR if u.dtype == dtypes.bool else Ops.ADD, part)
    assert total is not None
    return total


# ---- realizing


class _Shard:
    """A per-device graph being scheduled: what the Realizer needs of a tensor (realizer.Holder), nothing more."""

    no_grad: ClassVar[bool] = True
    __slots__ = ("uop", "_lazy")

    def __init__(self, u: UOp) -> None:
        self.uop: UOp = u
        self._lazy: UOp | None = None

    @property
    def _uop(self) -> UOp:
        return self.uop


def schedule_multi(tensors: list[Holder]) -> list[ScheduleItem]:
    """Schedule tensors of which some live on several devices: lower them, schedule every device's graph."""
    memo: dict[UOp, UOp | Shards] = {}
    temps: list[_Shard] = []
    plans: list[tuple[Holder, Shards | None, int]] = []
    users = count_users([t.uop for t in tensors])
    for t in tensors:
        low = lower(t.uop, memo, users)
        plans.append((t, low if isinstance(low, Shards) else None, len(temps)))
        temps.extend(_Shard(u) for u in (low.uops if isinstance(low, Shards) else (low,)))
    items = current().schedule(temps)
    _remember_lowered(memo)
    grad_nodes = set() if type(tensors[0]).no_grad else current().grad_nodes()
    for t, sh, start in plans:
        lazy = t.uop
        if sh is None:
            t.uop = temps[start].uop
        else:
            t.uop = multi_node([tt.uop for tt in temps[start : start + len(sh.uops)]], sh.axis, sh.devices)
        if lazy.op is not Ops.MULTI and grad_nodes and any(n in grad_nodes for n in lazy.toposort):
            t._lazy = lazy  # autograd may still differentiate the global graph (kept only then: it holds buffers)
    return items


def _remember_lowered(memo: dict[UOp, UOp | Shards]) -> None:
    """Record each global node whose per-device form this schedule realized as realized itself (the MULTI of its
    shards' buffers): the per-device nodes are dropped with the schedule, and a later schedule reading the global
    node (a tensor-parallel decode step writes each layer's cache in a schedule of its own) would lower and compute
    everything under it again."""
    realized = current().realized
    for node, low in memo.items():
        if node in realized or node.op in (Ops.DEVICE, Ops.MULTI, Ops.BUFFER):
            continue
        if isinstance(low, Shards):
            if low.partial is None and low.resplit is None and all(u in realized for u in low.uops):
                realized[node] = multi_node([realized[u] for u in low.uops], low.axis, low.devices)
        elif low is not node and low in realized:
            realized[node] = realized[low]


def needs_lowering(tensors: list[Holder]) -> bool:
    """Does any of these tensors' graphs reach a tensor on several devices?"""
    if not DeviceSet.made:  # no tensor was ever put on several devices: nothing to look for
        return False
    return any(is_multi(t.uop) or any(_on_several(n) for n in t.uop.toposort) for t in tensors)


def _on_several(n: UOp) -> bool:
    return n.op is Ops.MULTI or (n.op is Ops.DEVICE and isinstance(n.arg, DeviceSet))


@dataclass
class _AssignLowering:
    """The lowering state the multi-device assigns between two schedules share (Realizer.lowerings)."""

    memo: dict[UOp, UOp | Shards] = field(default_factory=dict)
    users: Counter[UOp] = field(default_factory=Counter)  # over every graph assigned so far
    seen: set[UOp] = field(default_factory=set)


def assign_lowering(roots: list[UOp]) -> tuple[dict[UOp, UOp | Shards], Counter[UOp]]:
    """The shared memo and the users (these roots' graphs counted in) for lowering these roots."""
    st = current().lowerings().setdefault("assign", _AssignLowering())
    return st.memo, count_users(roots, st.users, st.seen)
