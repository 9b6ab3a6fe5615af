"""The examples in tg_uop's docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "tg_uop",
    "tg_uop.alu",
    "tg_uop.bounds",
    "tg_uop.dot",
    "tg_uop.dtype",
    "tg_uop.evaluate",
    "tg_uop.ops",
    "tg_uop.render",
    "tg_uop.rewrite",
    "tg_uop.shapes",
    "tg_uop.symbolic",
    "tg_uop.symbolic_terms",
    "tg_uop.trace",
    "tg_uop.uop",
    "tg_uop.valid",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0
