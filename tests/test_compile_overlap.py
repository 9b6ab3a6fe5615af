"""A schedule's kernels compile in batches on threads while the next ones are rendered, and each kernel runs
as soon as its own batch is built: the first kernels of a schedule run while the last ones compile."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np
import pytest

from tg import Device, Tensor
from tg_runtime import runner


def _reductions(seed: int) -> tuple[list[Tensor], list[np.ndarray]]:
    """16 reductions over arrays of 16 shapes (16 kernels no other test compiled), and numpy's answers."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((i + 3, 7 + seed % 5)).astype(np.float32) for i in range(16)]
    outs = [(Tensor(a, device="CPU") * 0.25).exp().sum(axis=0) for a in arrays]
    return outs, [np.exp(a * np.float32(0.25)).sum(axis=0) for a in arrays]


def test_first_kernels_run_while_later_batches_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = Device["CPU"].compiler
    real = compiler.compile_cached_many
    events: list[str] = []
    lock = threading.Lock()
    order = [0]

    def slow_after_the_first(srcs: list[str]) -> Any:
        with lock:
            nth = order[0]
            order[0] += 1
        if nth > 0:
            time.sleep(0.4)  # every batch but the first compiles slowly
        out = real(srcs)
        events.append(f"compiled {nth}")
        return out

    launch = runner.CompiledRunner.__call__

    def logged(self: runner.CompiledRunner, *args: Any, **kwargs: Any) -> Any:
        events.append("ran")
        return launch(self, *args, **kwargs)

    monkeypatch.setattr(compiler, "compile_cached_many", slow_after_the_first)
    monkeypatch.setattr(runner.CompiledRunner, "__call__", logged)
    outs, want = _reductions(1)
    Tensor.realize(*outs)
    assert order[0] >= 2, f"one compile batch only: {events}"
    last_compiled = max(i for i, e in enumerate(events) if e.startswith("compiled"))
    assert events.index("ran") < last_compiled, events  # a kernel ran before the last batch was built
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-5)


def test_a_failed_batch_compiles_its_kernels_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = Device["CPU"].compiler
    real = compiler.compile_cached_many

    def broken(srcs: list[str]) -> Any:
        if len(srcs) > 1:
            raise RuntimeError("the batch compiler broke")
        return real(srcs)  # (a kernel alone)

    monkeypatch.setattr(compiler, "compile_cached_many", broken)
    outs, want = _reductions(2)
    Tensor.realize(*outs)
    assert not runner._compiling  # (every batch was handed over, failed, and its kernels compiled alone)
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-5)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_waits_for_none_of_its_parents_compiles() -> None:
    key = ("CPU", Tensor([1.0], device="CPU").uop, 0)
    runner._compiling[key] = (None, None)  # type: ignore[assignment]  # (never read: only its presence matters)
    try:
        pid = os.fork()
        if pid == 0:  # the child: its parent's compiler threads do not exist here
            os._exit(0 if not runner._compiling else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
    finally:
        runner._compiling.pop(key, None)
