"""Load GGUF files (llama.cpp's model format): metadata and tensors, quantized blocks dequantized by tg kernels.

The file is memory-mapped through the DISK device: each tensor is a window into the map, copied to the
compute device as raw bytes when it is first used. Quantized types are unpacked there by tg kernels
(bitcast, shifts, masks): nothing is dequantized in Python and the file is never read whole.

Read: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K. Any other type raises GGUFError naming it.

>>> from tg_nn.gguf import gguf_load
>>> metadata, state = gguf_load("model.gguf")  # doctest: +SKIP
>>> metadata["general.architecture"], state["token_embd.weight"].shape  # doctest: +SKIP
('llama', (32000, 4096))
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tg_nn.gguf_format import GGML_TYPES, GGUFError, GGUFHeader, GGUFTensorInfo, parse_gguf
from tg_runtime import Device, disk_buffers, map_file
from tg_tensor import Tensor
from tg_uop import DType, dtypes

__all__ = ["GGUFError", "SUPPORTED_TYPES", "dequantize", "gguf_load", "gguf_read_header"]


def _f16(b: Tensor, off: int) -> Tensor:
    """The float16 at byte `off` of every block (rows of `b`), as a float32 column (n_blocks, 1)."""
    lo = b[:, off : off + 1].cast(dtypes.uint16)
    hi = b[:, off + 1 : off + 2].cast(dtypes.uint16)
    return (lo | (hi << 8)).bitcast(dtypes.float16).cast(dtypes.float32)


def _nibbles(qs: Tensor) -> Tensor:
    """(..., n) bytes -> (..., 2, n): the low nibbles, then the high ones."""
    return Tensor.stack(qs & 0xF, qs >> 4, dim=-2)


def _q8_0(b: Tensor) -> Tensor:
    return _f16(b, 0) * b[:, 2:34].bitcast(dtypes.int8).cast(dtypes.float32)


def _q4_0(b: Tensor) -> Tensor:
    q = _nibbles(b[:, 2:18]).reshape(-1, 32).cast(dtypes.float32)
    return _f16(b, 0) * (q - 8)


def _q4_1(b: Tensor) -> Tensor:
    q = _nibbles(b[:, 4:20]).reshape(-1, 32).cast(dtypes.float32)
    return _f16(b, 0) * q + _f16(b, 2)


def _k_scales(s: Tensor) -> tuple[Tensor, Tensor]:
    """The 8 six-bit scales and 8 six-bit mins packed in the 12 bytes `s` of a Q4_K/Q5_K block, as floats."""
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = (d & 63).cat((md & 0xF) | ((d >> 2) & 48), dim=1)
    mn = (m & 63).cat((md >> 4) | ((m >> 2) & 48), dim=1)
    return sc.cast(dtypes.float32).reshape(-1, 8, 1), mn.cast(dtypes.float32).reshape(-1, 8, 1)


def _q4_k(b: Tensor) -> Tensor:
    sc, mn = _k_scales(b[:, 4:16])
    q = _nibbles(b[:, 16:144].reshape(-1, 4, 32)).reshape(-1, 8, 32).cast(dtypes.float32)
    out = _f16(b, 0).reshape(-1, 1, 1) * sc * q - _f16(b, 2).reshape(-1, 1, 1) * mn
    return out.reshape(-1, 256)


def _q5_k(b: Tensor) -> Tensor:
    sc, mn = _k_scales(b[:, 4:16])
    qh = b[:, 16:48].reshape(-1, 1, 32)
    high = Tensor.cat(*[(qh >> i) & 1 for i in range(8)], dim=1)  # bit i of qh -> sub-block i
    q = (_nibbles(b[:, 48:176].reshape(-1, 4, 32)).reshape(-1, 8, 32) | (high << 4)).cast(dtypes.float32)
    out = _f16(b, 0).reshape(-1, 1, 1) * sc * q - _f16(b, 2).reshape(-1, 1, 1) * mn
    return out.reshape(-1, 256)


def _q6_k(b: Tensor) -> Tensor:
    low = _nibbles(b[:, 0:128].reshape(-1, 2, 64)).reshape(-1, 8, 32)
    qh = b[:, 128:192].reshape(-1, 2, 1, 32)
    high = Tensor.cat(*[(qh >> s) & 3 for s in (0, 2, 4, 6)], dim=2).reshape(-1, 8, 32)
    q = (low | (high << 4)).cast(dtypes.float32).reshape(-1, 16, 16) - 32
    scales = b[:, 192:208].bitcast(dtypes.int8).cast(dtypes.float32).reshape(-1, 16, 1)
    return (_f16(b, 208).reshape(-1, 1, 1) * scales * q).reshape(-1, 256)


_QUANTS: dict[str, Callable[[Tensor], Tensor]] = {
    "Q8_0": _q8_0,
    "Q4_0": _q4_0,
    "Q4_1": _q4_1,
    "Q4_K": _q4_k,
    "Q5_K": _q5_k,
    "Q6_K": _q6_k,
}
_NATIVE: dict[str, DType] = {"F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.uint16}
SUPPORTED_TYPES = tuple(_NATIVE) + tuple(_QUANTS)


def dequantize(blocks: Tensor, type_name: str, shape: tuple[int, ...]) -> Tensor:
    """Float32 values of shape `shape` from raw uint8 bytes of ggml type `type_name` (lazy: runs on blocks' device).

    >>> from tg_uop import dtypes
    >>> raw = Tensor([0, 60] + [1] * 32, dtype=dtypes.uint8)  # Q8_0: scale 1.0 (f16 0x3c00), 32 ones
    >>> dequantize(raw, "Q8_0", (32,)).sum().item()
    32.0
    """
    if type_name not in _QUANTS:
        raise GGUFError(f"GGUF: cannot dequantize {type_name}; tg reads {', '.join(SUPPORTED_TYPES)}")
    _, block, block_bytes = next(v for v in GGML_TYPES.values() if v[0] == type_name)
    n = 1
    for s in shape:
        n *= s
    if int(blocks.numel()) * block != n * block_bytes:
        raise GGUFError(f"dequantize: {blocks.numel()} bytes of {type_name} do not hold {shape} values")
    return _QUANTS[type_name](blocks.reshape(n // block, block_bytes)).reshape(shape)


class _Source:
    """Where the bytes are: a mapping to parse, and a way to get any byte window as a tensor of a dtype."""

    def __init__(self, src: Tensor | str | os.PathLike[str]) -> None:
        self.tensor: Tensor | None = None
        if isinstance(src, Tensor):
            if src.dtype != dtypes.uint8 or src.ndim != 1:
                raise GGUFError(f"gguf_load: expected a 1-D uint8 tensor of the file, got {src.dtype} {src.shape}")
            path = src.device[5:] if src.device.startswith("DISK:") else ""
            if path and src.is_realized and os.path.getsize(path) == src.numel():  # the whole file: map it
                self.path, self.mapping = path, map_file(path)
            else:  # bytes already on a compute device: read the header through a host copy, slice the tensor
                self.tensor, self.mapping = src, memoryview(src.numpy().tobytes())
        elif isinstance(src, (str, os.PathLike)):
            self.path = os.fspath(src)
            if not os.path.isfile(self.path):
                raise FileNotFoundError(f"gguf_load: no such file: {self.path!r}")
            self.mapping = map_file(self.path)
        else:
            raise TypeError(f"gguf_load: expected a path or a uint8 Tensor, got {type(src).__name__}")

    def window(self, offset: int, count: int, dtype: DType, device: str) -> Tensor:
        if self.tensor is None:
            [buf] = disk_buffers(self.path, [(offset, count, dtype)], self.mapping)
            return Tensor.from_buffer(buf).to(device)
        raw = self.tensor[offset : offset + count * dtype.itemsize].to(device)
        if dtype.itemsize == 1:
            return raw
        wide = {2: dtypes.uint16, 4: dtypes.uint32}[dtype.itemsize]
        cols = raw.reshape(count, dtype.itemsize).cast(wide)
        word = cols[:, 0]
        for i in range(1, dtype.itemsize):
            word = word | (cols[:, i] << (8 * i))
        return word.bitcast(dtype)


def gguf_read_header(src: Tensor | str | os.PathLike[str]) -> GGUFHeader:
    """The parsed header of a GGUF file (metadata and tensor table), reading no tensor data."""
    return parse_gguf(_Source(src).mapping)


def gguf_load(
    src: Tensor | str | os.PathLike[str], device: str | None = None, keep_quantized: bool = False
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(metadata, state_dict) of a GGUF file: a path, or a uint8 Tensor of the file's bytes (DISK or not).

    Tensors are lazy and live on `device` (Device.DEFAULT when None): F32 and F16 keep their dtype,
    everything else becomes float32 when realized (load_state_dict casts to the model's dtype).
    Shapes are in numpy order: a (out, in) matrix in the file is state[name].shape == (out, in).
    With `keep_quantized`, the raw blocks of quantized tensors are copied to the device now and each
    returned tensor stays the (lazy) dequantization of them: a kernel that reads it unpacks the blocks,
    so the weights stay quantized in device memory.
    """
    source = _Source(src)
    header = parse_gguf(source.mapping)
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    state = {info.name: _tensor(source, info, dev, keep_quantized) for info in header.tensors}
    return header.metadata, state


def _tensor(source: _Source, info: GGUFTensorInfo, device: str, keep_quantized: bool = False) -> Tensor:
    name = info.type_name
    n = 1
    for s in info.shape:
        n *= s
    if name in _NATIVE:
        t = source.window(info.offset, n, _NATIVE[name], device)
        if name == "BF16":  # the top half of a float32
            t = (t.cast(dtypes.uint32) << 16).bitcast(dtypes.float32)
        return t.reshape(info.shape)
    if name not in _QUANTS:
        raise GGUFError(
            f"GGUF: tensor {info.name!r} is {name}, which tg cannot read; supported: {', '.join(SUPPORTED_TYPES)}"
        )
    raw = source.window(info.offset, info.nbytes, dtypes.uint8, device)
    if keep_quantized:
        raw = raw.contiguous().realize()
    return dequantize(raw, name, info.shape)
