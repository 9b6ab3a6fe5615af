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
from tg_runtime.ops_cpu import ClangCompiler


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


class _OneByOne(ClangCompiler):
    """The C compiler without batches: like NVRTC, one kernel at a time, so compile_all hands it to processes."""

    batches = False


def _pool_device(name: str) -> Any:
    from tg_codegen.renderer.cstyle import ClangRenderer
    from tg_runtime.device import Compiled
    from tg_runtime.ops_cpu import CPUAllocator, CPUProgram

    return Compiled(name, CPUAllocator(), ClangRenderer(1), _OneByOne(), CPUProgram)


def test_kernels_render_and_compile_in_worker_processes(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """A device whose compiler builds one kernel at a time (NVRTC) gets a schedule's kernels rendered and compiled
    by forked worker processes (Python codegen in parallel), and they compute what numpy does."""
    from tg_runtime import build_pool

    monkeypatch.setenv("COMPILE_WORKERS", "2")
    monkeypatch.setenv("CACHEDB", str(tmp_path / "cache.db"))
    Device.register("POOLCPU", _pool_device)
    submitted: list[str] = []
    real = build_pool.submit

    def counting(ast: Any, renderer: Any, compiler: Any) -> Any:
        submitted.append(compiler.__class__.__name__)
        return real(ast, renderer, compiler)

    monkeypatch.setattr(build_pool, "submit", counting)
    a = np.arange(48 * 32, dtype=np.float32).reshape(48, 32)
    x = Tensor(a, device="POOLCPU")
    outs = [(x[: 48 - i] * 3 + 1).relu().sum(axis=1) for i in range(12)]  # 12 kernels of 12 shapes
    Tensor.realize(*outs)
    assert len(submitted) >= build_pool.MIN_KERNELS and set(submitted) == {"_OneByOne"}
    for i, out in enumerate(outs):
        np.testing.assert_allclose(out.numpy(), np.maximum(a[: 48 - i] * 3 + 1, 0).sum(axis=1), rtol=1e-6)
