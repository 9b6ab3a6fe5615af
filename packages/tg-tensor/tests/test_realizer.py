"""The Realizer owns every piece of mutable realization state in tg_tensor, and isolates it."""

from __future__ import annotations

import collections
import importlib
import pkgutil
import types
import weakref

import numpy as np

import tg_tensor
from tg_tensor import Tensor
from tg_tensor.engine.realizer import Realizer, current, fresh
from tg_uop.helpers import LRUCache

MUTABLE = (
    dict,
    list,
    set,
    bytearray,
    collections.deque,
    collections.OrderedDict,
    weakref.WeakKeyDictionary,
    weakref.WeakValueDictionary,
    weakref.WeakSet,
    LRUCache,
)

# module globals of a mutable type that are tables, filled once at import and only read after (each with why)
ALLOWED = {
    ("tg_tensor.gradient", "GRAD_RULES"): "Ops -> gradient rule: a table of functions, never written after import",
    ("tg_tensor.engine.multi", "REDUCE_NAMES"): "reduce Ops -> collective op name: a constant table",
    ("tg_tensor.engine.collective", "_REDUCE"): "collective op name -> numpy ufunc: a constant table",
    ("tg_tensor.engine.schedule", "MOVES"): "movement Ops -> ShapeTracker method: a constant table",
}


def _modules() -> list[types.ModuleType]:
    names = ["tg_tensor"] + [m.name for m in pkgutil.walk_packages(tg_tensor.__path__, "tg_tensor.")]
    return [importlib.import_module(n) for n in names]


def _offenders(mod: types.ModuleType) -> list[str]:
    """Mutable module globals of `mod` (dunders such as __all__ and __path__ are Python's, not state)."""
    return [
        name
        for name, value in vars(mod).items()
        if isinstance(value, MUTABLE) and not name.startswith("__") and (mod.__name__, name) not in ALLOWED
    ]


def test_no_mutable_module_state_outside_the_realizer() -> None:
    found = [f"{mod.__name__}.{name}" for mod in _modules() for name in _offenders(mod)]
    assert not found, f"module-level mutable state outside the Realizer (move it into Realizer): {found}"


def test_the_check_sees_a_new_registry() -> None:
    mod = importlib.import_module("tg_tensor.engine.ordering")
    mod._leak = {}  # type: ignore[attr-defined]
    try:
        assert _offenders(mod) == ["_leak"]
    finally:
        del mod._leak  # type: ignore[attr-defined]


def test_allow_list_entries_exist() -> None:
    for mod_name, name in ALLOWED:
        assert isinstance(getattr(importlib.import_module(mod_name), name), MUTABLE), (mod_name, name)


def test_fresh_realizer_is_isolated() -> None:
    outer = current()
    outer_pending = len(outer.pending)
    with fresh() as r:
        assert r is current() and r is not outer
        assert not r.realized and not r.pending and not len(r.recipes)
        t = Tensor([1.0, 2.0, 3.0]) * 2
        items = r.schedule([t])
        assert len(r.pending) == len(items) == 1
        assert len(outer.pending) == outer_pending
        r.run(items)
        assert not r.pending
        np.testing.assert_equal(t.numpy(), np.array([2.0, 4.0, 6.0], np.float32))
        assert len(r.buffers) >= 2
        assert any(x is t for x in r.live_tensors) and not any(x is t for x in outer.live_tensors)
    assert current() is outer


def test_given_realizer_is_used() -> None:
    mine = Realizer()
    with fresh(mine) as r:
        assert r is mine
        Tensor([1, 2]).sum().realize()
    assert len(mine.recipes) == 1


def test_queue_is_consumed_in_order() -> None:
    with fresh() as r:
        a = (Tensor([1.0, 2.0]) + 1).kernelize()
        b_items = r.schedule([Tensor([3.0]) * 2])
        assert len(r.pending) == 2
        r.run(b_items)  # a was queued first: it runs first, and leaves the queue
        assert not r.pending
        np.testing.assert_equal(a.numpy(), np.array([2.0, 3.0], np.float32))


def test_unqueue() -> None:
    with fresh() as r:
        items = r.schedule([Tensor([1.0]) + 1])
        r.unqueue(items[0])
        assert not r.pending
        r.schedule([Tensor([2.0]) + 1])
        r.unqueue()
        assert not r.pending


def test_schedule_item_fields_are_typed() -> None:
    with fresh() as r:
        w = Tensor([1.0, 2.0]).realize()
        old, v = w.uop.base, Tensor([5.0, 7.0]).realize()
        (item,) = r.schedule([w.assign(w + v)])
        # w is read at each element it stores: through the output, not as an input (v is one)
        assert item.in_place and item.writes is not None and item.reads == (v.uop.base,) and not item.consts
        assert item.writes.arg[0] > old.arg[0]  # a new version of the memory it overwrites
        r.run_pending()
        assert w.tolist() == [6.0, 9.0]
