"""Run a schedule: each item is a kernel launch or a copy between buffers.

>>> from tg_tensor.realize import run_schedule  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable

from tg_runtime.runner import compile_all, get_runner, run_copy
from tg_tensor.collective import run_collective
from tg_tensor.schedule import ScheduleItem, buffers, failed, pending, realized
from tg_uop import Ops
from tg_uop.helpers import DEBUG, GlobalCounters

# called with every item about to run, before its buffers are allocated (TinyJit records its capture here)
item_observers: list[Callable[[ScheduleItem], None]] = []


def writes_nothing(item: ScheduleItem) -> bool:
    """Does the item write no element (a kernel or copy over an empty shape)? Such items are never launched:
    a launch over zero threads is an error on some drivers, and there is nothing to compute."""
    return all(b.size == 0 for b in item.bufs[: item.outputs])


def run_pending() -> None:
    """Run the items that Tensor.schedule() handed out and nobody ran yet."""
    run_schedule(list(pending))


def run_schedule(items: list[ScheduleItem]) -> None:
    """Execute the items in order, allocating output buffers as they are first written.

    When an item fails, it and the items after it are dropped (none stays pending to fail the
    next, unrelated realize) and what they would have written is marked failed (reading it raises).
    """
    import time

    st = time.perf_counter()
    kernels = 0
    compile_all([(it.bufs[0].device, it.ast) for it in items if it.ast.op is Ops.SINK and not writes_nothing(it)])
    for i, item in enumerate(items):
        try:
            kernels += _run_one(item)
        except BaseException as e:
            _roll_back(items[i:], e)
            raise
    if DEBUG >= 1 and items:
        et = time.perf_counter() - st
        print(
            f"realize: {len(items)} items, {kernels} kernels, {et * 1e3:.2f} ms "
            f"({GlobalCounters.global_ops * 1e-9 / max(et, 1e-9):.2f} GFLOPS total counted)"
        )


def _run_one(item: ScheduleItem) -> int:
    """Run one item; 1 when it launched a kernel."""
    for i, p in enumerate(pending):
        if p is item:
            del pending[i]
            break
    if writes_nothing(item):
        return 0
    for observe in item_observers:
        observe(item)
    for b in item.bufs:
        b.ensure_allocated()
    if item.ast.op is Ops.COPY:
        run_copy(item.bufs[0], item.bufs[1])
        return 0
    if item.ast.op is Ops.COLLECTIVE:
        kind, op = item.ast.arg
        run_collective(kind, op, item.bufs[: item.outputs], item.bufs[item.outputs :])
        return 0
    get_runner(item.bufs[0].device, item.ast)(item.bufs, item.var_vals)
    return 1


def _roll_back(lost: list[ScheduleItem], error: BaseException) -> None:
    """Forget the items that did not run: off the pending list, their outputs marked failed."""
    ids = {id(item) for item in lost}
    pending[:] = [p for p in pending if id(p) not in ids]
    outs = {id(b) for item in lost for b in item.bufs[: item.outputs]}
    why = f"{type(error).__name__}: {error}"
    for u, b in list(buffers.items()):
        if id(b) in outs:
            failed[u] = why
    for node, value in list(realized.items()):  # a later graph with one of these nodes computes it again
        if value.base in failed:
            del realized[node]
