"""Shared fixtures for cross-layer tests: the device matrix (every device that can run here)."""

from __future__ import annotations

import os
import pathlib

import pytest

from tg_nn.datasets import MNIST_FILES
from tg_runtime import Device
from tg_tensor.engine.realizer import current


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


@pytest.fixture(autouse=True)
def _no_stale_schedule() -> None:
    """Kernels another test scheduled and never ran must not run inside the next test (it counts kernels)."""
    current().unqueue()


ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def mnist_dir() -> str:
    """MNIST_DIR, else ../shared/datasets/mnist beside the repository (as .ci/run sets it); skips when absent."""
    for candidate in (os.getenv("MNIST_DIR"), str(ROOT.parent / "shared" / "datasets" / "mnist")):
        if candidate and all(os.path.exists(os.path.join(candidate, n + ".gz")) for n in MNIST_FILES):
            return candidate
    pytest.skip("MNIST files not found: set MNIST_DIR (CI sets it to ../shared/datasets/mnist)")


@pytest.fixture
def shakespeare_dir() -> str:
    """SHAKESPEARE_DIR, else ../shared/datasets/shakespeare beside the repository; skips when absent."""
    for candidate in (os.getenv("SHAKESPEARE_DIR"), str(ROOT.parent / "shared" / "datasets" / "shakespeare")):
        if candidate and os.path.exists(os.path.join(candidate, "shakespeare.txt.gz")):
            return candidate
    pytest.skip("the Shakespeare text was not found: set SHAKESPEARE_DIR (CI: ../shared/datasets/shakespeare)")
