"""A small on-disk key/value cache in SQLite (BEAM results, compiled binaries).

Location: `CACHEDB` if set, else `<user cache dir>/tg/cache.db`. `CACHELEVEL=0` turns it off. A cache
that cannot be opened or written (read-only directory, corrupted file) is never fatal: it warns once
and behaves as an empty cache.

>>> from tg_codegen.diskcache import diskcache_get, diskcache_put
>>> diskcache_get("doctest", "missing") is None
True
"""

from __future__ import annotations

import os
import pickle
import sqlite3
import threading
import warnings
from typing import Any

from tg_uop.helpers import CACHELEVEL, cache_dir

_conns: dict[tuple[str, int], sqlite3.Connection | None] = {}  # per file and thread (SQLite objects are per-thread)
_owner: dict[str, int] = {}


def cache_path() -> str:
    """The SQLite file in use (CACHEDB overrides the default)."""
    return os.getenv("CACHEDB") or os.path.join(cache_dir(), "cache.db")


def _warn(what: str, err: Exception) -> None:
    warnings.warn(f"tg disk cache {cache_path()!r}: {what} ({err}); continuing without it", stacklevel=3)


def _connect() -> sqlite3.Connection | None:
    path = cache_path()
    key = (path, threading.get_ident())
    if _owner.get("pid") != os.getpid():  # a forked child must not use its parent's connections
        _conns.clear()
        _owner["pid"] = os.getpid()
    if key in _conns:
        return _conns[key]
    conn: sqlite3.Connection | None = None
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        conn = sqlite3.connect(path, timeout=5.0, isolation_level=None)
        conn.execute("CREATE TABLE IF NOT EXISTS cache (tbl TEXT, key TEXT, val BLOB, PRIMARY KEY (tbl, key))")
    except (sqlite3.Error, OSError) as e:
        _warn("cannot open", e)
        conn = None
    _conns[key] = conn
    return conn


def diskcache_get(table: str, key: str) -> Any:
    """The cached value, or None (missing, disabled, or unreadable)."""
    if CACHELEVEL.value <= 0 or (conn := _connect()) is None:
        return None
    try:
        row = conn.execute("SELECT val FROM cache WHERE tbl=? AND key=?", (table, key)).fetchone()
        return pickle.loads(row[0]) if row is not None else None
    except (sqlite3.Error, pickle.UnpicklingError, EOFError, ValueError) as e:
        _warn("cannot read", e)
        _conns[(cache_path(), threading.get_ident())] = None
        return None


def diskcache_put(table: str, key: str, value: Any) -> None:
    """Store a value (silently skipped when the cache is disabled; warns when it cannot be written)."""
    if CACHELEVEL.value <= 0 or (conn := _connect()) is None:
        return
    try:
        conn.execute("REPLACE INTO cache (tbl, key, val) VALUES (?, ?, ?)", (table, key, pickle.dumps(value)))
    except sqlite3.Error as e:
        _warn("cannot write", e)
        _conns[(cache_path(), threading.get_ident())] = None


def reset_connections() -> None:
    """Forget open connections (after CACHEDB changed, or in tests)."""
    for conn in _conns.values():
        if conn is not None:
            conn.close()
    _conns.clear()
