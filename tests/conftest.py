"""Shared fixtures for cross-layer tests: the device matrix (every device that can run here)."""

from __future__ import annotations

import os

import pytest

from tg_runtime import Device


def _available(name: str) -> str | None:
    """None when the device opens, else the reason it does not."""
    try:
        Device[name]
        return None
    except Exception as e:  # a missing driver or compiler: skip with the reason
        return f"{name} unavailable: {e}"


DEVICES = [d for d in os.getenv("TG_TEST_DEVICES", "PYTHON,CPU,CL").split(",") if d]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """Each device in the matrix; absent ones skip with the reason."""
    name = str(request.param)
    if name not in Device.known():
        pytest.skip(f"{name} is not a known device yet")
    if (reason := _available(name)) is not None:
        pytest.skip(reason)
    return name
