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
    "engine.inplace",
    "jit",
    "jit_file",
    "engine.lift_consts",
    "linalg",
    "mathops",
    "movement",
    "nn",
    "engine.ordering",
    "engine.realizer",
    "reduce",
    "rng",
    "selection",
    "shaping",
    "engine.siblings",
    "sorting",
    "engine.source",
    "engine.split_reduce",
    "engine.symbolic",
    "tensor",
    "engine.util",
    "engine.provenance",
    "visibility",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"tg_tensor.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in tg_tensor.{name} failed"
