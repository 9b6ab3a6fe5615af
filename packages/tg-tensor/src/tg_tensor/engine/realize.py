"""Run a schedule: each item is a kernel launch or a copy between buffers (see Realizer.run).

>>> from tg_tensor import Tensor
>>> from tg_tensor.engine.realize import run_schedule
>>> t = Tensor([1, 2]) * 3
>>> run_schedule(t.schedule()); t.tolist()
[3, 6]
"""

from __future__ import annotations

from tg_tensor.engine.realizer import ScheduleItem, current, writes_nothing

__all__ = ["run_pending", "run_schedule", "writes_nothing"]


def run_pending() -> None:
    """Run the items that Tensor.schedule() handed out and nobody ran yet."""
    current().run_pending()


def run_schedule(items: list[ScheduleItem]) -> None:
    """Execute the items in order (Realizer.run): queued items run after the ones queued before them."""
    current().run(items)
