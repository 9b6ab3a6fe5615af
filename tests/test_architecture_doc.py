"""docs/architecture.md's tour runs: its `>>>` lines are a doctest (the page must match the code as it is)."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from tg_runtime import Device

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def test_architecture_tour_runs() -> None:
    try:
        Device["CPU"]
    except Exception as e:  # (the tour renders for, and runs on, the CPU device)
        pytest.skip(f"the CPU device is unavailable: {e}")
    result = doctest.testfile(str(DOC), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted >= 8 and result.failed == 0, result
