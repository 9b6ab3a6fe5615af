"""The GGUF container format (llama.cpp's model files): the header, the metadata and the tensor table.

Parsing is pure Python over a memoryview (a memory map of the file), checks every length against
the bytes that are there, and raises GGUFError naming what is wrong and where. No tensor data is read.

Layout (little-endian): magic `GGUF`, version (2 or 3), tensor count, metadata count, the metadata
(key, type, value), the tensor infos (name, dims with the fastest first, ggml type, offset into the
data section), padding to `general.alignment` (32 when absent), then the data section.

>>> import struct
>>> blob = b"GGUF" + struct.pack("<IQQ", 3, 0, 0)
>>> parse_gguf(memoryview(blob))
GGUFHeader(version=3, metadata={}, tensors=[], data_offset=32)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

__all__ = ["GGML_TYPES", "GGUFError", "GGUFHeader", "GGUFTensorInfo", "parse_gguf"]


class GGUFError(ValueError):
    """A GGUF file is malformed, truncated, or holds something tg cannot read."""


# ggml type id -> (name, elements per block, bytes per block). Every type of the format is named here so
# an unsupported one is reported by name; tg_nn.gguf decides which it can dequantize.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}

# metadata value type id -> struct format of a scalar (8: string, 9: array are handled apart)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_MAX_DIMS = 8


@dataclass(frozen=True)
class GGUFTensorInfo:
    """One tensor: `shape` in numpy order (slowest first, the reverse of the file's dims)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # absolute byte offset in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0] if self.ggml_type in GGML_TYPES else f"type {self.ggml_type}"


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict[str, Any]
    tensors: list[GGUFTensorInfo]
    data_offset: int


class _Reader:
    """A cursor over the file's bytes that never reads past the end without saying so."""

    def __init__(self, data: memoryview) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > self.data.nbytes:
            raise GGUFError(
                f"GGUF: truncated or corrupt file: {what} needs {n} bytes at offset {self.pos}, "
                f"but the file has {self.data.nbytes} bytes"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.unpack("<Q", f"the length of {what}")
        raw = bytes(self.take(n, what))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"GGUF: {what} at offset {self.pos - n} is not valid UTF-8 ({e})") from None

    def strings(self, count: int, what: str) -> list[str]:
        """`count` strings in a row (a vocabulary: 50k-150k of them), read without building a message per item
        (a loop of `string` took ~0.3 s of a small model's load)."""
        data, pos, end = self.data, self.pos, self.data.nbytes
        out: list[str] = []
        length = struct.Struct("<Q").unpack_from
        for i in range(count):
            n = length(data, pos)[0] if pos + 8 <= end else -1
            if n < 0 or n > end - pos - 8:
                self.pos = pos
                return out + [self.string(f"{what}[{i}]")]  # (raises: the message says which item)
            raw = bytes(data[pos + 8 : pos + 8 + n])
            pos += 8 + n
            try:
                out.append(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise GGUFError(f"GGUF: {what}[{i}] at offset {pos - n} is not valid UTF-8 ({e})") from None
        self.pos = pos
        return out

    def value(self, vtype: int, what: str) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype], what)
        if vtype == 8:
            return self.string(what)
        if vtype == 9:
            itype = self.unpack("<I", f"the item type of {what}")
            count = self.unpack("<Q", f"the length of {what}")
            if count > self.data.nbytes - self.pos:  # every item takes at least one byte
                raise GGUFError(f"GGUF: truncated or corrupt file: {what} claims {count} items at offset {self.pos}")
            if itype in _SCALARS:  # a numeric array in one unpack (vocabularies have 100k+ scores)
                fmt = _SCALARS[itype]
                size = struct.calcsize(fmt)
                raw = self.take(count * size, what)
                return list(struct.unpack(f"<{count}{fmt[1]}", raw))
            if itype == 8:
                return self.strings(count, what)
            return [self.value(itype, f"{what}[{i}]") for i in range(count)]
        raise GGUFError(f"GGUF: {what} has an unknown value type {vtype} (offset {self.pos})")


def parse_gguf(data: memoryview) -> GGUFHeader:
    """The header, metadata and tensor table of a GGUF file's bytes; raises GGUFError when malformed."""
    r = _Reader(data)
    magic = bytes(r.take(4, "the magic"))
    if magic != b"GGUF":
        raise GGUFError(f"GGUF: not a GGUF file: it starts with {magic!r}, expected b'GGUF'")
    version = r.unpack("<I", "the version")
    if version not in (2, 3):
        raise GGUFError(f"GGUF: version {version} is not supported (expected 2 or 3)")
    n_tensors = r.unpack("<Q", "the tensor count")
    n_kv = r.unpack("<Q", "the metadata count")
    if n_tensors > data.nbytes or n_kv > data.nbytes:
        raise GGUFError(f"GGUF: corrupt header: {n_tensors} tensors and {n_kv} metadata entries in {data.nbytes} bytes")
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        key = r.string(f"metadata key #{i}")
        metadata[key] = r.value(r.unpack("<I", f"the type of metadata {key!r}"), f"metadata {key!r}")
    infos = [_tensor_info(r, i) for i in range(n_tensors)]
    align = metadata.get("general.alignment", 32)
    if not isinstance(align, int) or align < 1 or align & (align - 1):
        raise GGUFError(f"GGUF: general.alignment={align!r} must be a power of two")
    data_offset = -(-r.pos // align) * align
    tensors = [_place(name, shape, t, off, data_offset, data.nbytes) for name, shape, t, off in infos]
    return GGUFHeader(version, metadata, tensors, data_offset)


def _tensor_info(r: _Reader, i: int) -> tuple[str, tuple[int, ...], int, int]:
    name = r.string(f"the name of tensor #{i}")
    n_dims = r.unpack("<I", f"the rank of tensor {name!r}")
    if n_dims > _MAX_DIMS:
        raise GGUFError(f"GGUF: tensor {name!r} has {n_dims} dimensions (at most {_MAX_DIMS})")
    dims = [r.unpack("<Q", f"dim {d} of tensor {name!r}") for d in range(n_dims)]
    ggml_type = r.unpack("<I", f"the type of tensor {name!r}")
    offset = r.unpack("<Q", f"the offset of tensor {name!r}")
    return name, tuple(reversed(dims)), ggml_type, offset


def _place(name: str, shape: tuple[int, ...], ggml_type: int, rel: int, base: int, size: int) -> GGUFTensorInfo:
    if ggml_type not in GGML_TYPES:
        raise GGUFError(f"GGUF: tensor {name!r} has an unknown ggml type {ggml_type}")
    tname, block, block_bytes = GGML_TYPES[ggml_type]
    n = 1
    for s in shape:
        n *= s
    if shape and shape[-1] % block:
        raise GGUFError(f"GGUF: tensor {name!r} ({tname}) has rows of {shape[-1]}, not a multiple of {block}")
    nbytes = n // block * block_bytes
    start = base + rel
    if start + nbytes > size:
        raise GGUFError(
            f"GGUF: truncated file: tensor {name!r} ({tname}, shape {shape}) needs bytes [{start}, {start + nbytes}) "
            f"but the file has {size} bytes"
        )
    return GGUFTensorInfo(name, shape, ggml_type, start, nbytes)
