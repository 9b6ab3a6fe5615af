"""Public Tensor methods are documented (at least 90% of them), and their examples run as doctests."""

from __future__ import annotations

import importlib.util
import inspect
import pathlib
from typing import Any

from tg_tensor import Tensor

MIN_COVERAGE = 0.90


def _public() -> dict[str, Any]:
    """name -> the function (or property getter) behind each public attribute of Tensor that is code."""
    out = {}
    for name in dir(Tensor):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(Tensor, name)
        fn = attr.fget if isinstance(attr, property) else getattr(attr, "__func__", attr)
        if callable(fn):
            out[name] = fn
    return out


def _doc(fn: Any) -> str:
    return (getattr(fn, "__doc__", None) or "").strip()


def test_public_methods_are_documented() -> None:
    public = _public()
    missing = sorted(n for n, fn in public.items() if not _doc(fn))
    coverage = 1 - len(missing) / len(public)
    assert len(public) > 200, "the check must see the whole Tensor surface"
    assert coverage >= MIN_COVERAGE, f"{coverage:.0%} of {len(public)} public Tensor methods documented; add: {missing}"


def test_examples_run_as_doctests() -> None:
    """Every module holding a documented example of a Tensor method is run by test_doctests."""
    spec = importlib.util.spec_from_file_location("doctests", pathlib.Path(__file__).with_name("test_doctests.py"))
    assert spec is not None and spec.loader is not None
    doctests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(doctests)
    with_examples = {n: fn for n, fn in _public().items() if ">>>" in _doc(fn)}
    assert len(with_examples) >= len(_public()) // 2
    not_run = sorted(
        f"{n} ({fn.__module__})"
        for n, fn in with_examples.items()
        if fn.__module__.startswith("tg_tensor.") and fn.__module__.removeprefix("tg_tensor.") not in doctests.MODULES
    )
    assert not not_run, f"examples that no doctest runs (add the module to test_doctests.MODULES): {not_run}"
