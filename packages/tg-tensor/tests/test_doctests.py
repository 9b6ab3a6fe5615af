"""The examples in tg_tensor's docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "activation",
    "conv",
    "creation",
    "custom",
    "decomp",
    "disk",
    "elementwise",
    "gradient",
    "indexing",
    "inplace",
    "jit",
    "jit_file",
    "lift_consts",
    "linalg",
    "mathops",
    "movement",
    "nn",
    "ordering",
    "realize",
    "realizer",
    "reduce",
    "rng",
    "selection",
    "shaping",
    "siblings",
    "sorting",
    "source",
    "split_reduce",
    "symbolic",
    "tensor",
    "util",
    "provenance",
    "visibility",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"tg_tensor.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in tg_tensor.{name} failed"
