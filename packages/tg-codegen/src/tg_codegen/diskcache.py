"""A small on-disk key/value cache in SQLite (BEAM results, compiled binaries).

Location: `CACHEDB` if set, else `<user cache dir>/tg/cache.db`. `CACHELEVEL=0` turns it off. A cache
that cannot be opened or written (read-only directory, corrupted file) is never fatal: it warns once
and behaves as an empty cache.

Values are data, never code: bytes are stored raw after a tag and their SHA-256, anything else as JSON
(no pickle: whoever can write the file must not be able to run code in every tg process). An entry that
does not decode or whose checksum fails is reported once (naming the file) and read as missing, so the
caller computes the value again and its put rewrites the entry.

>>> from tg_codegen.diskcache import diskcache_get, diskcache_put
>>> diskcache_get("doctest", "missing") is None
True
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from typing import TYPE_CHECKING, Any

from tg_uop.helpers import CACHELEVEL, cache_dir

if TYPE_CHECKING:  # sqlite3 is imported on the first cache access, not by `import tg`
    import sqlite3

_conns: dict[tuple[str, int], sqlite3.Connection | None] = {}  # per file and thread (SQLite objects are per-thread)
_owner: dict[str, int] = {}


def cache_path() -> str:
    """The SQLite file in use (CACHEDB overrides the default)."""
    return os.getenv("CACHEDB") or os.path.join(cache_dir(), "cache.db")


_warned: set[str] = set()  # each problem is reported once per process (compile threads each connect)


def _warn(what: str, err: Exception) -> None:
    msg = f"tg disk cache {cache_path()!r}: {what} ({err}); continuing without it"
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(msg, stacklevel=3)


def _connect() -> sqlite3.Connection | None:
    import sqlite3

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
        conn = sqlite3.connect(path, timeout=5.0, isolation_level=None, check_same_thread=False)  # (reset closes all)
        _fast_commits(conn)
        conn.execute("CREATE TABLE IF NOT EXISTS cache (tbl TEXT, key TEXT, val BLOB, PRIMARY KEY (tbl, key))")
    except (sqlite3.Error, OSError) as e:
        _warn("cannot open", e)
        conn = None
    _conns[key] = conn
    return conn


def _fast_commits(conn: sqlite3.Connection) -> None:
    """Write-ahead log, synced at checkpoints only: a put costs ~0.1 ms instead of an fsync (~20 ms on this
    machine's disk, 1.5 s of a first MNIST step's 70 programs and binaries). A power cut can lose the last
    entries, never corrupt the file; a cache loses nothing by that. The WAL needs the -wal and -shm files
    beside the database: where they cannot be made the connection keeps the rollback journal."""
    import sqlite3

    try:
        conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError:
        return
    conn.execute("PRAGMA synchronous=NORMAL")


def diskcache_get(table: str, key: str) -> Any:
    """The cached value, or None (missing, disabled, or unreadable)."""
    if CACHELEVEL.value <= 0 or (conn := _connect()) is None:
        return None
    import sqlite3

    try:
        row = conn.execute("SELECT val FROM cache WHERE tbl=? AND key=?", (table, key)).fetchone()
    except sqlite3.Error as e:
        _warn("cannot read", e)
        _conns[(cache_path(), threading.get_ident())] = None
        return None
    if row is None:
        return None
    try:
        return decode_value(table, key, bytes(row[0]))
    except ValueError as e:
        _warn(f"entry {table}/{key[:16]} is not valid, recomputing it", e)
        return None


_BYTES, _JSON = b"tgB1", b"tgJ1"


def _digest(table: str, key: str, body: bytes) -> bytes:
    return hashlib.sha256(table.encode() + b"\0" + key.encode() + b"\0" + body).digest()


def encode_value(table: str, key: str, value: Any) -> bytes:
    """tag + SHA-256 of (table, key, body) + body: raw bytes, or JSON for other data (ValueError if not data).

    The checksum covers the key, so an entry copied under another key (two kernels' binaries swapped) fails.
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        tag, body = _BYTES, bytes(value)
    else:
        try:
            tag, body = _JSON, json.dumps(value).encode()
        except TypeError as e:
            raise ValueError(f"disk cache values must be bytes or JSON data: {e}") from None
    return tag + _digest(table, key, body) + body


def decode_value(table: str, key: str, blob: bytes) -> Any:
    """The value `encode_value` stored under (table, key); ValueError for anything else (a pickle, an entry
    of another key, a bad checksum, bad JSON)."""
    tag, digest, body = blob[:4], blob[4:36], blob[36:]
    if tag not in (_BYTES, _JSON):
        raise ValueError(f"unknown entry format {tag!r} (not written by this version of tg)")
    if _digest(table, key, body) != digest:
        raise ValueError("checksum mismatch (corrupt, or the entry of another key)")
    if tag == _BYTES:
        return body
    try:
        return json.loads(body.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"bad JSON: {e}") from None


def diskcache_put(table: str, key: str, value: Any) -> None:
    """Store a value (silently skipped when the cache is disabled; warns when it cannot be written)."""
    if CACHELEVEL.value <= 0 or (conn := _connect()) is None:
        return
    import sqlite3

    try:
        conn.execute(
            "REPLACE INTO cache (tbl, key, val) VALUES (?, ?, ?)", (table, key, encode_value(table, key, value))
        )
    except sqlite3.Error as e:
        _warn("cannot write", e)
        _conns[(cache_path(), threading.get_ident())] = None


def reset_connections() -> None:
    """Forget open connections (after CACHEDB changed, or in tests)."""
    for conn in _conns.values():
        if conn is not None:
            conn.close()
    _conns.clear()
    _warned.clear()
