"""The programs in examples/ as a new user runs them: progress lines, EVAL_EVERY=0, what quickstart says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, tmp_path: Path, **env: str) -> str:
    """Run examples/`name` in a fresh process on the CPU with `env` added; its stdout (it must exit 0)."""
    full = {**os.environ, "DEV": "CPU", "JIT_CACHE": str(tmp_path / "step.tgjit"), **env}  # (not the user's cache)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, env=full, cwd=tmp_path, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_mnist_progress_before_the_first_evaluation(tmp_path: Path, mnist_dir: str) -> None:
    """A line right after the first step, no `nan` accuracy before an evaluation, EVAL_EVERY=0 tests at the end."""
    out = run_example("beautiful_mnist.py", tmp_path, MNIST_DIR=mnist_dir, STEPS="3", BS="16", EVAL_EVERY="0")
    lines = out.replace("\r", "\n").splitlines()
    first = next(line for line in lines if "/3 [" in line)
    assert first.lstrip().startswith("1/3"), first  # the first step's line, not the tenth
    assert "test accuracy -" in first
    assert "nan" not in out
    assert "test accuracy: " in lines[-1] and lines[-1].endswith("%")  # evaluated once, at the end


def test_gpt_eval_every_zero_evaluates_only_at_the_end(tmp_path: Path, shakespeare_dir: str) -> None:
    """EVAL_EVERY=0 means "only at the end" (it divided by zero after the first step), and no `val nan`."""
    out = run_example(
        "gpt_shakespeare.py", tmp_path, SHAKESPEARE_DIR=shakespeare_dir, STEPS="2", EVAL_EVERY="0", LAYERS="1",
        HEADS="2", EMBD="32", BLOCK="16", BS="4", EVAL_BATCHES="1", SAMPLE="8", LOG_EVERY="1",
        CKPT=str(tmp_path / "gpt.safetensors"),
    )  # fmt: skip
    lines = out.replace("\r", "\n").splitlines()
    progress = [line for line in lines if "] step " in line]
    assert progress and progress[0].split("] step")[1].split()[0] == "1/2"  # a line within the first step
    assert all(" val - " in line for line in progress)
    assert "nan" not in out
    assert not any(line.startswith("step ") for line in lines)  # no evaluation during training
    assert any(line.startswith("final: train loss") for line in lines)


def test_gpt_second_run_replays_the_saved_capture(tmp_path: Path, shakespeare_dir: str) -> None:
    """JIT_CACHE: the second run replays the first run's capture from its first step and trains identically."""
    settings = dict(
        SHAKESPEARE_DIR=shakespeare_dir, STEPS="3", EVAL_EVERY="0", LAYERS="1", HEADS="2", EMBD="32", BLOCK="16",
        BS="4", EVAL_BATCHES="1", SAMPLE="8", LOG_EVERY="1", CKPT=str(tmp_path / "gpt.safetensors"),
        JIT_CACHE=str(tmp_path / "gpt.tgjit"),
    )  # fmt: skip
    first, second = (run_example("gpt_shakespeare.py", tmp_path, **settings) for _ in range(2))
    assert "(its kernels compile)" in first and "(not there yet" in first
    assert "(replayed from the saved capture)" in second and "(found" in second
    # the capture is a one-time cost timed apart from training (bench/bench_gpt.py reads these lines), as is the
    # first step; a replayed capture has none
    assert "second step" in first and "(TinyJit capture), then" in first and "second step" not in second

    def losses(out: str) -> list[str]:
        lines = out.replace("\r", "\n").splitlines()
        return [line.split(" loss ")[1].split()[0] for line in lines if "] step " in line]

    assert losses(first) == losses(second) and len(losses(first)) == 3


def test_quickstart_trains_with_autograd(tmp_path: Path) -> None:
    """quickstart.py says what it does: the linear fit uses backward() (it claimed autograd "arrives later")."""
    source = (EXAMPLES / "quickstart.py").read_text()
    assert ".backward()" in source and "arrives later" not in source and "by hand" not in source
    out = run_example("quickstart.py", tmp_path)
    learned = next(line for line in out.splitlines() if line.startswith("learned"))
    w, b = (float(part.split("=")[1]) for part in learned.split()[1:3])
    assert w == pytest.approx(2.0, abs=1e-2) and b == pytest.approx(-1.0, abs=1e-2)
