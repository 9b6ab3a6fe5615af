"""The examples in tg_llm's docstrings (and tg_nn's GGUF reader's) run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "tg_llm.model",
    "tg_llm.config",
    "tg_llm.weights",
    "tg_llm.tokenizer",
    "tg_llm.generate",
    "tg_llm.tensor_parallel",
    "tg_llm.big_model",
    "tg_nn.gguf",
    "tg_nn.gguf_format",
    "tg_nn.quant",
    "tg_nn.quant_cpu",
    "tg_nn.quant_cpu_float",
    "tg_nn.quant_gpu",
    "tg_nn.models.kv_cache",
    "tg_nn.models.sampling",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, f"{result.failed} of {result.attempted} failed in {name}"
