"""The on-disk cache holds data, never code: pickles are not loaded, swapped or garbled entries are recomputed."""

from __future__ import annotations

import os
import pickle
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from tg_codegen import search
from tg_codegen.diskcache import decode_value, diskcache_get, diskcache_put, encode_value, reset_connections
from tg_codegen.program import get_program
from tg_runtime import Buffer, CompiledRunner, Device, DeviceUnavailableError
from tg_runtime.search import DeviceSearchTarget
from tg_shape import ShapeTracker, View
from tg_uop import Ops, UOp, dtypes

F32 = dtypes.float32


class _Payload:
    """Unpickling this writes a file: the cache must never do it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (exec, (f"open({self.path!r}, 'w').write('pwned')",))


def _ast() -> UOp:
    g0, g1 = (UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), i) for i in (0, 1))
    load = UOp(Ops.LOAD, F32, (g1, UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((16, 32)),)))))
    red = UOp(Ops.REDUCE_AXIS, F32, (load * UOp.const(F32, 2.0),), (Ops.ADD, (1,)))
    out_view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((16, 1)),)))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (g0, out_view, red)),))


def _beam(monkeypatch: pytest.MonkeyPatch, db: Path) -> int:
    """BEAM the small reduce with CACHEDB=db, check its numbers; returns how many searches ran."""
    monkeypatch.setenv("CACHEDB", str(db))
    reset_connections()
    calls = []
    real = search._search
    monkeypatch.setattr(search, "_search", lambda *a: calls.append(1) or real(*a))
    few = [search.Opt(search.OptOps.UPCAST, 0, 4), search.Opt(search.OptOps.UNROLL, 0, 4)]
    monkeypatch.setattr(search, "actions", lambda renderer: few)
    ast = _ast()
    opts = search.beam_search(ast, DeviceSearchTarget("CPU", ast), 2, max_steps=1)
    a = np.random.rand(16, 32).astype(np.float32)
    out, inp = Buffer("CPU", 16, F32), Buffer("CPU", 16 * 32, F32).copyin(memoryview(a))
    CompiledRunner(get_program(ast, DeviceSearchTarget("CPU", ast).renderer, opts=opts))([out, inp])
    np.testing.assert_allclose(np.frombuffer(out.as_bytes(), np.float32), (a * 2).sum(1), rtol=1e-5)
    return len(calls)


def _set_beam_entry(db: Path, blob: bytes) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE cache SET val=? WHERE tbl='beam'", (blob,))
        assert conn.total_changes == 1


def test_crafted_pickle_entry_is_not_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    db, marker = tmp_path / "cache.db", tmp_path / "pwned.txt"
    assert _beam(monkeypatch, db) == 1
    _set_beam_entry(db, pickle.dumps(_Payload(str(marker))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _beam(monkeypatch, db) == 1  # the entry is refused and the search runs again
    assert not marker.exists(), "the cache unpickled an entry"
    messages = [str(w.message) for w in caught if "disk cache" in str(w.message)]
    assert len(messages) == 1 and str(db) in messages[0], messages
    assert _beam(monkeypatch, db) == 0  # the entry was rewritten


@pytest.mark.parametrize(
    "entry",
    [
        b"\x00garbage",
        encode_value("beam", "wrong key", [["UPCAST", 0, 4]]),
        b"tgJ1" + b"\x00" * 32 + b"[[1, 2, 3]]",
    ],
)
def test_garbled_beam_entries_are_searched_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, entry: bytes) -> None:
    db = tmp_path / "cache.db"
    assert _beam(monkeypatch, db) == 1
    _set_beam_entry(db, entry)
    with pytest.warns(UserWarning, match="disk cache"):
        assert _beam(monkeypatch, db) == 1
    assert _beam(monkeypatch, db) == 0


@pytest.mark.parametrize("opts", [[["NOPE", 0, 4]], [["UPCAST", 9, 4]], [["UPCAST", 0, -1]], [[0]], {"a": 1}])
def test_garbage_beam_options_are_searched_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, opts: object) -> None:
    """Valid entries holding options that are not options (or do not apply to the kernel): a warning, a search."""
    db = tmp_path / "cache.db"
    assert _beam(monkeypatch, db) == 1
    with sqlite3.connect(db) as conn:
        (key,) = conn.execute("SELECT key FROM cache WHERE tbl='beam'").fetchone()
    _set_beam_entry(db, encode_value("beam", key, opts))
    with pytest.warns(UserWarning, match="BEAM entry"):
        assert _beam(monkeypatch, db) == 1
    assert _beam(monkeypatch, db) == 0


def test_entries_are_bound_to_their_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CACHEDB", str(tmp_path / "c.db"))
    reset_connections()
    diskcache_put("bin", "a", b"binary of a")
    diskcache_put("bin", "b", b"binary of b")
    assert diskcache_get("bin", "a") == b"binary of a"
    with sqlite3.connect(tmp_path / "c.db") as conn:  # swap the two entries
        rows = dict(conn.execute("SELECT key, val FROM cache WHERE tbl='bin'").fetchall())
        conn.execute("UPDATE cache SET val=? WHERE key='a'", (rows["b"],))
        conn.execute("UPDATE cache SET val=? WHERE key='b'", (rows["a"],))
    with pytest.warns(UserWarning, match="not valid"):
        assert diskcache_get("bin", "a") is None
    with pytest.raises(ValueError, match="checksum"):
        decode_value("bin", "a", rows["b"])


SWAP_SCRIPT = """
import sys
import numpy as np
from tg import Tensor
x = Tensor(np.arange(8, dtype=np.float32), device="CL")
print((x + 1).tolist(), (x * 2).tolist())
"""


def test_swapped_cl_binaries_keep_results_right(tmp_path: Path) -> None:
    """Two kernels named E_8 with their cached binaries swapped: results stay right (the entries are refused)."""
    try:
        Device["CL"]
    except DeviceUnavailableError as e:  # no pyopencl, or no OpenCL platform (a bare machine)
        pytest.skip(str(e))
    env = {**os.environ, "CACHEDB": str(tmp_path / "cl.db"), "DEV": "CL"}
    want = [[float(i + 1) for i in range(8)], [float(i * 2) for i in range(8)]]
    first = subprocess.run([sys.executable, "-c", SWAP_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    with sqlite3.connect(tmp_path / "cl.db") as conn:
        rows = conn.execute("SELECT key, val FROM cache WHERE tbl='cl_binary'").fetchall()
        assert len(rows) >= 2
        for (key, _), (_, val) in zip(rows, rows[1:] + rows[:1]):  # every entry gets another kernel's binary
            conn.execute("UPDATE cache SET val=? WHERE tbl='cl_binary' AND key=?", (val, key))
    second = subprocess.run([sys.executable, "-c", SWAP_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout.strip().splitlines()[-1] == f"{want[0]} {want[1]}"
    assert second.stderr.count("disk cache") >= 1


def test_entries_are_committed_through_a_write_ahead_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Puts go to a write-ahead log (no fsync per entry) and are visible at once to another connection, and to
    another process after this one closed its connections."""
    db = tmp_path / "c.db"
    monkeypatch.setenv("CACHEDB", str(db))
    reset_connections()
    try:
        diskcache_put("bin", "a", b"binary of a")
        with sqlite3.connect(db) as other:
            assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            assert decode_value("bin", "a", other.execute("SELECT val FROM cache WHERE key='a'").fetchone()[0]) == (
                b"binary of a"
            )
    finally:
        reset_connections()
    code = "from tg_codegen.diskcache import diskcache_get; print(diskcache_get('bin', 'a'))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "CACHEDB": str(db)}
    )
    assert out.returncode == 0 and out.stdout.strip() == "b'binary of a'", out.stderr[-2000:]
