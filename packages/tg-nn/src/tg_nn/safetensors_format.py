"""The safetensors file format, parsed and written with every field checked.

A file is: 8 bytes (little-endian u64) giving the header length N; N bytes of UTF-8 JSON mapping
each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}` (plus an optional
`"__metadata__"` of string pairs); then the data, with offsets relative to its start. Files written
here are byte-identical to those of the `safetensors` package: compact JSON, tensors ordered by
dtype (widest first) then name, header padded with spaces to a multiple of 8 bytes.

>>> from tg_uop import dtypes
>>> header = build_header({"w": (dtypes.float32, (2,), 8)}, None)
>>> header[8:].decode()
'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}  '
>>> [e.name for e in parse_header(header + bytes(8))[0]]
['w']
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from tg_uop import DType, dtypes

# safetensors dtype names, in the order of the format's dtype enum (files sort tensors by it, widest first)
ST_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool,
    "U8": dtypes.uint8,
    "I8": dtypes.int8,
    "I16": dtypes.int16,
    "U16": dtypes.uint16,
    "F16": dtypes.float16,
    "BF16": dtypes.bfloat16,
    "I32": dtypes.int32,
    "U32": dtypes.uint32,
    "F32": dtypes.float32,
    "F64": dtypes.float64,
    "I64": dtypes.int64,
    "U64": dtypes.uint64,
}
ST_NAMES: dict[DType, str] = {v: k for k, v in ST_DTYPES.items()}
_RANK = {name: i for i, name in enumerate(ST_DTYPES)}
MAX_HEADER = 100_000_000  # the reference implementation's limit as well


class SafetensorsError(ValueError):
    """The file is not a valid safetensors file; the message says what is wrong and where."""


@dataclass(frozen=True)
class Entry:
    """One tensor of a file: where its bytes are (absolute file offset) and what they hold."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def count(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def build_header(tensors: dict[str, tuple[DType, tuple[int, ...], int]], metadata: dict[str, str] | None) -> bytes:
    """Length prefix + padded JSON header for tensors given as name -> (dtype, shape, nbytes), in file order.

    Returns the header bytes; the data must follow in the order of `file_order(tensors)`.
    """
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    start = 0
    for name in file_order(tensors):
        dtype, shape, nbytes = tensors[name]
        header[name] = {"dtype": ST_NAMES[dtype], "shape": list(shape), "data_offsets": [start, start + nbytes]}
        start += nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-(len(text) + 8) % 8)
    return struct.pack("<Q", len(text)) + text


def file_order(tensors: dict[str, tuple[DType, tuple[int, ...], int]]) -> list[str]:
    """The order the reference writer stores tensors in: dtype rank descending, then name."""
    return sorted(tensors, key=lambda n: (-_RANK[ST_NAMES[tensors[n][0]]], n))


def parse_header(data: bytes | memoryview) -> tuple[list[Entry], dict[str, str]]:
    """Validate a whole file's header against its size; entries are returned sorted by offset.

    Raises SafetensorsError for: a file shorter than 8 bytes, a header length beyond the file,
    a header that is not a JSON object, unknown dtypes, bad shapes or offsets, offsets outside the
    data, a byte count that disagrees with dtype and shape, and overlapping tensors.
    """
    size = len(data)
    if size < 8:
        raise SafetensorsError(f"truncated file: {size} bytes, but a safetensors file starts with an 8-byte length")
    (n,) = struct.unpack("<Q", bytes(data[:8]))
    if n > MAX_HEADER or 8 + n > size:
        raise SafetensorsError(f"header length {n} goes beyond the file of {size} bytes (header at most {size - 8})")
    header = _decode_json(bytes(data[8 : 8 + n]))
    meta = _metadata(header.pop("__metadata__", None))
    entries = sorted((_entry(k, v, 8 + n, size) for k, v in header.items()), key=lambda e: (e.offset, e.nbytes))
    _check_overlaps(entries)
    return entries, meta


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict, refusing a key given twice (json.loads keeps the last; safetensors rejects it)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise SafetensorsError(f"header names tensor {k!r:.200} twice")
        out[k] = v
    return out


def _decode_json(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except UnicodeDecodeError as e:
        raise SafetensorsError(f"header is not UTF-8: {e}") from None
    except (json.JSONDecodeError, RecursionError) as e:
        raise SafetensorsError(f"header is not valid JSON: {str(e)[:200]}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"header must be a JSON object, got {type(header).__name__}")
    return header


def _metadata(meta: Any) -> dict[str, str]:
    if meta is None:
        return {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise SafetensorsError(f"__metadata__ must map strings to strings, got {str(meta)[:200]}")
    return meta


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _entry(name: str, info: Any, data_start: int, size: int) -> Entry:
    if not isinstance(info, dict):
        raise SafetensorsError(
            f"tensor {name!r}: expected an object with dtype, shape, data_offsets, got {info!r:.200}"
        )
    dtype_name, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype_name, str) or dtype_name not in ST_DTYPES:
        raise SafetensorsError(f"tensor {name!r}: unknown dtype {dtype_name!r:.100}; known: {', '.join(ST_DTYPES)}")
    if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
        raise SafetensorsError(f"tensor {name!r}: shape must be a list of non-negative ints, got {shape!r:.200}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise SafetensorsError(f"tensor {name!r}: data_offsets must be [begin, end] ints, got {offsets!r:.200}")
    begin, end = offsets
    if not 0 <= begin <= end or data_start + end > size:
        raise SafetensorsError(
            f"tensor {name!r}: data_offsets [{begin}, {end}] out of range for {size - data_start} bytes of data"
        )
    dtype = ST_DTYPES[dtype_name]
    entry = Entry(name, dtype, tuple(shape), data_start + begin, end - begin)
    if entry.count * dtype.itemsize != entry.nbytes:
        raise SafetensorsError(
            f"tensor {name!r}: {dtype_name} of shape {tuple(shape)} needs {entry.count * dtype.itemsize} bytes, "
            f"but data_offsets [{begin}, {end}] hold {end - begin}"
        )
    return entry


def _check_overlaps(entries: list[Entry]) -> None:
    for a, b in zip(entries, entries[1:]):
        if b.offset < a.offset + a.nbytes:
            raise SafetensorsError(f"tensors {a.name!r} and {b.name!r} overlap in the file")
