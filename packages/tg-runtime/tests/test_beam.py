"""BEAM search: finds opts that compute the right thing, caches them on disk, survives a bad cache."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import numpy as np
import pytest

from tg_codegen import search
from tg_codegen.diskcache import reset_connections
from tg_codegen.program import get_program
from tg_runtime import Buffer, CompiledRunner
from tg_runtime.search import DeviceSearchTarget
from tg_shape import ShapeTracker, View
from tg_uop import Ops, UOp, dtypes

F32 = dtypes.float32


def _small_reduce() -> UOp:
    """out[i] = sum_j a[i, j] * 2, a of shape (16, 32)."""
    g0, g1 = (UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), i) for i in (0, 1))
    load = UOp(Ops.LOAD, F32, (g1, UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((16, 32)),)))))
    red = UOp(Ops.REDUCE_AXIS, F32, (load * UOp.const(F32, 2.0),), (Ops.ADD, (1,)))
    out_view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((16, 1)),)))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (g0, out_view, red)),))


def _search_and_check(monkeypatch: pytest.MonkeyPatch, db: Path) -> tuple[list[object], int]:
    """Run BEAM once with CACHEDB=db; returns (opts, how many searches ran), after checking the numbers."""
    monkeypatch.setenv("CACHEDB", str(db))
    reset_connections()
    calls = []
    real = search._search
    monkeypatch.setattr(search, "_search", lambda *a: calls.append(1) or real(*a))
    few = [search.Opt(search.OptOps.UPCAST, 0, 4), search.Opt(search.OptOps.UNROLL, 0, 4)]
    monkeypatch.setattr(search, "actions", lambda renderer: few)  # a short search: these tests are about the cache
    ast = _small_reduce()
    opts = search.beam_search(ast, DeviceSearchTarget("CPU", ast), 2, max_steps=1)
    a = np.random.rand(16, 32).astype(np.float32)
    out, inp = Buffer("CPU", 16, F32), Buffer("CPU", 16 * 32, F32).copyin(memoryview(a))
    CompiledRunner(get_program(ast, DeviceSearchTarget("CPU", ast).renderer, opts=opts))([out, inp])
    np.testing.assert_allclose(np.frombuffer(out.as_bytes(), np.float32), (a * 2).sum(1), rtol=1e-5)
    return list(opts), len(calls)


def test_beam_result_is_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    first, searched = _search_and_check(monkeypatch, db)
    assert searched == 1 and db.exists()
    second, searched_again = _search_and_check(monkeypatch, db)
    assert searched_again == 0, "the second BEAM of the same kernel must come from the cache"
    assert second == first


def test_cachelevel_zero_disables_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tg_uop.helpers import Context

    with Context(CACHELEVEL=0):
        _search_and_check(monkeypatch, tmp_path / "off.db")
        _, searched = _search_and_check(monkeypatch, tmp_path / "off.db")
    assert searched == 1 and not (tmp_path / "off.db").exists()


def test_corrupted_cache_warns_and_works(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    db = tmp_path / "corrupt.db"
    db.write_bytes(b"this is not an sqlite database" * 100)
    with pytest.warns(UserWarning, match="continuing without it"):
        _, searched = _search_and_check(monkeypatch, db)
    assert searched == 1


def test_unwritable_cache_location_warns_and_works(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")  # a file where the cache directory should be: fails even for root
    with pytest.warns(UserWarning, match="continuing without it"):
        _, searched = _search_and_check(monkeypatch, blocker / "cache.db")
    assert searched == 1


def test_read_only_cache_dir_works(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, searched = _search_and_check(monkeypatch, ro / "cache.db")
        assert searched == 1
        if os.geteuid() != 0:  # root ignores permissions: there the cache simply works
            assert any("continuing without it" in str(w.message) for w in caught)
    finally:
        ro.chmod(stat.S_IRWXU)


def test_starting_kernel_that_fails_falls_back_to_heuristics(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tg_codegen.heuristic import hand_coded_optimizations
    from tg_codegen.kernel import Kernel

    monkeypatch.setenv("CACHEDB", str(tmp_path / "c.db"))
    reset_connections()
    monkeypatch.setattr(search, "_time_all", lambda *a, **k: [])  # every candidate fails to compile in time
    ast = _small_reduce()
    target = DeviceSearchTarget("CPU", ast)
    opts = search.beam_search(ast, target, 2, max_steps=1)
    assert opts == hand_coded_optimizations(Kernel(ast, target.renderer))


class _FailingLaunches(DeviceSearchTarget):
    """A CPU target on which every candidate with an UPCAST fails to launch (as a GPU refuses too large a block)."""

    def time(self, spec: object, lib: bytes, runs: int, cutoff: float) -> float:
        from tg_codegen.opt import OptOps

        if any(o.op is OptOps.UPCAST for o in spec.applied_opts):  # type: ignore[attr-defined]
            raise RuntimeError("launch failed: too many resources requested")
        return super().time(spec, lib, runs, cutoff)  # type: ignore[arg-type]


def test_beam_skips_candidates_that_fail_to_launch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CACHEDB", str(tmp_path / "cache.db"))  # a fresh cache: the search must run
    reset_connections()
    few = [search.Opt(search.OptOps.UPCAST, 0, 4), search.Opt(search.OptOps.UNROLL, 0, 4)]
    monkeypatch.setattr(search, "actions", lambda renderer: few)
    ast = _small_reduce()
    opts = search.beam_search(ast, _FailingLaunches("CPU", ast), 2, max_steps=2)
    assert opts and all(o.op is not search.OptOps.UPCAST for o in opts), opts


def test_cpu_compile_fn_reaches_the_workers() -> None:
    """BEAM compiles in worker processes: the CPU target's compile function must pickle (a lock in the compiler made
    every candidate fail, and BEAM silently kept the hand-coded opts), and still compile there."""
    import pickle

    ast = _small_reduce()
    fn = pickle.loads(pickle.dumps(DeviceSearchTarget("CPU", ast).compile_fn))
    assert fn(get_program(ast, DeviceSearchTarget("CPU", ast).renderer).src)
