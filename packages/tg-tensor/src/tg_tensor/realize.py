"""Run a schedule: each item is a kernel launch or a copy between buffers.

>>> from tg_tensor.realize import run_schedule  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable

from tg_runtime.runner import get_runner, run_copy
from tg_tensor.schedule import ScheduleItem, pending
from tg_uop import Ops
from tg_uop.helpers import DEBUG, GlobalCounters

# called with every item about to run, before its buffers are allocated (TinyJit records its capture here)
item_observers: list[Callable[[ScheduleItem], None]] = []


def run_pending() -> None:
    """Run the items that Tensor.schedule() handed out and nobody ran yet."""
    run_schedule(list(pending))


def run_schedule(items: list[ScheduleItem]) -> None:
    """Execute the items in order, allocating output buffers as they are first written."""
    import time

    st = time.perf_counter()
    kernels = 0
    for item in items:
        for i, p in enumerate(pending):
            if p is item:
                del pending[i]
                break
        for observe in item_observers:
            observe(item)
        for b in item.bufs:
            b.ensure_allocated()
        if item.ast.op is Ops.COPY:
            run_copy(item.bufs[0], item.bufs[1])
            continue
        get_runner(item.bufs[0].device, item.ast)(item.bufs, item.var_vals)
        kernels += 1
    if DEBUG >= 1 and items:
        et = time.perf_counter() - st
        print(
            f"realize: {len(items)} items, {kernels} kernels, {et * 1e3:.2f} ms "
            f"({GlobalCounters.global_ops * 1e-9 / max(et, 1e-9):.2f} GFLOPS total counted)"
        )
