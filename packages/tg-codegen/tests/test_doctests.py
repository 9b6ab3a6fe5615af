"""The examples in tg_codegen's docstrings run and give what they show (a wrong one went unnoticed before)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import tg_codegen

MODULES = sorted(m.name for m in pkgutil.walk_packages(tg_codegen.__path__, "tg_codegen."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_examples_exist() -> None:
    """The modules above hold examples at all (a collection that found none would pass vacuously)."""
    found = sum(doctest.testmod(importlib.import_module(n), optionflags=doctest.ELLIPSIS).attempted for n in MODULES)
    assert found >= 40, found
