"""Shared by the GPU bench scripts: a tensor's kernels scheduled but not run, compiled with chosen opts, timed.

The scripts run as `python3 bench/<script>.py`, which puts this folder on sys.path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tg import Device, Tensor
from tg_codegen import get_program
from tg_codegen.opt import Opt
from tg_runtime.runner import CompiledRunner
from tg_tensor.engine.realizer import ScheduleItem, current


def scheduled(t: Tensor) -> list[ScheduleItem]:
    """`t`'s kernels with their buffers allocated, taken out of the pending queue (the caller launches them)."""
    items = t.schedule()
    for item in items:
        current().unqueue(item)
        for buf in item.bufs:
            buf.ensure_allocated()
    return items


def compiled(item: ScheduleItem, opts: list[Opt]) -> CompiledRunner | None:
    """The item's kernel compiled with `opts` for CUDA, or None (and a '#' line saying why) when that fails."""
    try:
        return CompiledRunner(get_program(item.ast, Device["CUDA"].renderer, opts=opts))
    except Exception as e:
        print(f"# {opts}: {type(e).__name__}: {e}"[:300], flush=True)
        return None


def best_seconds(launch: Callable[[], Any], reps: int) -> float:
    """Best wall time of `launch()` over `reps` runs, synchronized on the CUDA device before and after."""
    best = float("inf")
    for _ in range(reps):
        Device["CUDA"].synchronize()
        st = time.perf_counter()
        launch()
        Device["CUDA"].synchronize()
        best = min(best, time.perf_counter() - st)
    return best
