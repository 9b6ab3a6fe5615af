"""Write big random Llama-shaped F16 GGUF files fast (benchmarks of models no one can download here).

`write_big_gguf(path, "70b")` writes a LLaMA-2-70B-shaped model (80 layers, 8192 wide, 64 heads, 8 KV heads,
28672 FFN, vocabulary 32000: 138 GB) at the speed of the disk, with memory that stays small:
  - the GGUF layout (header, metadata, tensor table) is written here, not by the `gguf` package (which holds
    every tensor in memory and is far from disk speed);
  - the values come from one pool of 128 MiB of random 16-bit patterns masked to float16 values of magnitude
    0.0078..0.031 with a random sign (std ~0.019; one pass of a PCG64 generator and two of masks, ~0.2 s); each
    64 MiB chunk of a matrix is the pool's window at an offset of its own (so chunks differ, and the file is the
    same for the same seed), written with os.pwrite at its place by worker threads (one per core, at most 64, or
    `workers`): pwrite releases the GIL, so nothing but the disk (and the page cache) sets the pace, and a script
    calling this needs no `__main__` guard as process pools would;
  - norms are float32 near 1, written by the parent.
The vocabulary is the sentencepiece one of tg_llm.random_model, padded with unused tokens to the shape's size.
Shapes: tiny (smoke runs), 1b (Llama 3.2 1B, tied head), 7b, 13b, 34b (CodeLlama 34B), 70b. A file that already
holds the same layout is reused (`reuse=True`): only its header is read.

>>> SHAPES["70b"]["n_layers"], round(file_bytes(SHAPES["70b"]) / 1e9)
(80, 138)
>>> write_big_gguf("/tmp/70b.gguf", "70b")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from tg_llm.random_model import spm_vocab
from tg_llm.tokenizer import UNUSED

__all__ = ["SHAPES", "file_bytes", "write_big_gguf"]

SHAPES: dict[str, dict[str, Any]] = {
    "tiny": dict(dim=256, n_layers=2, n_heads=8, n_kv_heads=4, hidden_dim=512, vocab_size=1024, tied=False),
    "1b": dict(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, hidden_dim=8192, vocab_size=128256, tied=True),
    "7b": dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, hidden_dim=11008, vocab_size=32000, tied=False),
    "13b": dict(dim=5120, n_layers=40, n_heads=40, n_kv_heads=40, hidden_dim=13824, vocab_size=32000, tied=False),
    "34b": dict(dim=8192, n_layers=48, n_heads=64, n_kv_heads=8, hidden_dim=22016, vocab_size=32000, tied=False),
    "70b": dict(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, hidden_dim=28672, vocab_size=32000, tied=False),
}
ALIGN = 32  # GGUF's default alignment of tensor data
CHUNK = 64 << 20  # bytes a worker generates and writes at once
_F32, _F16 = 0, 1  # ggml types
_U32, _I32, _F32V, _STR, _ARR = 4, 5, 6, 8, 9  # GGUF metadata value types


def _tensors(shape: dict[str, Any]) -> Iterator[tuple[str, tuple[int, ...], int]]:
    """(name, numpy shape, ggml type) of every tensor, in file order."""
    d, hd = shape["dim"], shape["dim"] // shape["n_heads"]
    yield "token_embd.weight", (shape["vocab_size"], d), _F16
    for i in range(shape["n_layers"]):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", (d,), _F32
        yield p + "attn_q.weight", (shape["n_heads"] * hd, d), _F16
        yield p + "attn_k.weight", (shape["n_kv_heads"] * hd, d), _F16
        yield p + "attn_v.weight", (shape["n_kv_heads"] * hd, d), _F16
        yield p + "attn_output.weight", (d, shape["n_heads"] * hd), _F16
        yield p + "ffn_norm.weight", (d,), _F32
        yield p + "ffn_gate.weight", (shape["hidden_dim"], d), _F16
        yield p + "ffn_up.weight", (shape["hidden_dim"], d), _F16
        yield p + "ffn_down.weight", (d, shape["hidden_dim"]), _F16
    yield "output_norm.weight", (d,), _F32
    if not shape["tied"]:
        yield "output.weight", (shape["vocab_size"], d), _F16


def _nbytes(dims: tuple[int, ...], ggml_type: int) -> int:
    return int(np.prod(dims)) * (4 if ggml_type == _F32 else 2)


def _pad(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _metadata(shape: dict[str, Any], context: int) -> list[bytes]:
    """The key-value pairs (encoded) of a llama model with a sentencepiece vocabulary."""
    tokens, scores, types = spm_vocab()
    extra = shape["vocab_size"] - len(tokens)
    if extra < 0:
        raise ValueError(f"write_big_gguf: vocab_size={shape['vocab_size']} is below the {len(tokens)} tokens needed")
    tokens += [f"<unused{i}>" for i in range(extra)]
    scores += [-1e9] * extra
    types += [UNUSED] * extra

    def kv(key: str, vtype: int, payload: bytes) -> bytes:
        return _string(key) + struct.pack("<I", vtype) + payload

    def u32(key: str, v: int) -> bytes:
        return kv(key, _U32, struct.pack("<I", v))

    def f32(key: str, v: float) -> bytes:
        return kv(key, _F32V, struct.pack("<f", v))

    def array(key: str, etype: int, items: bytes, n: int) -> bytes:
        return kv(key, _ARR, struct.pack("<IQ", etype, n) + items)

    return [
        kv("general.architecture", _STR, _string("llama")),
        kv("general.name", _STR, _string("tg random")),
        u32("general.alignment", ALIGN),
        u32("llama.context_length", context),
        u32("llama.embedding_length", shape["dim"]),
        u32("llama.block_count", shape["n_layers"]),
        u32("llama.feed_forward_length", shape["hidden_dim"]),
        u32("llama.attention.head_count", shape["n_heads"]),
        u32("llama.attention.head_count_kv", shape["n_kv_heads"]),
        f32("llama.attention.layer_norm_rms_epsilon", 1e-5),
        f32("llama.rope.freq_base", 10000.0),
        kv("tokenizer.ggml.model", _STR, _string("llama")),
        array("tokenizer.ggml.tokens", _STR, b"".join(_string(t) for t in tokens), len(tokens)),
        array("tokenizer.ggml.scores", _F32V, np.asarray(scores, "<f4").tobytes(), len(scores)),
        array("tokenizer.ggml.token_type", _I32, np.asarray(types, "<i4").tobytes(), len(types)),
        u32("tokenizer.ggml.bos_token_id", 1),
        u32("tokenizer.ggml.eos_token_id", 2),
    ]


def _layout(shape: dict[str, Any], context: int) -> tuple[bytes, list[tuple[str, tuple[int, ...], int, int]]]:
    """(the header through the padding before the data, [(name, dims, type, absolute offset)])."""
    tensors, table, at = list(_tensors(shape)), [], 0
    meta = _metadata(shape, context)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta)
    placed = []
    for name, dims, ggml_type in tensors:
        file_dims = dims[::-1]  # GGUF lists the fastest axis first
        table.append(_string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *file_dims, ggml_type, at))
        placed.append((name, dims, ggml_type, at))
        at += _pad(_nbytes(dims, ggml_type))
    header = head + b"".join(table)
    header += bytes(_pad(len(header)) - len(header))
    return header, [(n, d, t, off + len(header)) for n, d, t, off in placed]


def file_bytes(shape: dict[str, Any], context: int = 4096) -> int:
    """The size of the file `write_big_gguf` writes for `shape`."""
    header, placed = _layout(shape, context)
    _, dims, t, off = placed[-1]
    return off + _pad(_nbytes(dims, t))


def _pool(seed: int) -> memoryview:
    """2 * CHUNK bytes of random float16 values (see the module doc)."""
    bits = np.random.PCG64(seed).random_raw(2 * CHUNK // 8)
    bits &= np.uint64(0x87FF87FF87FF87FF)  # sign, the exponent's low bit, the mantissa: random
    bits |= np.uint64(0x2000200020002000)  # exponent 8 or 9 of 15: magnitudes 2^-7 .. 2^-5
    return bits.view(np.uint8).data


def _fill(job: tuple[str, int, int, memoryview]) -> int:
    """Write `data` at `offset` of the file."""
    path, offset, nbytes, data = job
    view = data[:nbytes]
    fd = os.open(path, os.O_WRONLY)
    try:
        done = 0
        while done < nbytes:
            done += os.pwrite(fd, view[done:], offset + done)
    finally:
        os.close(fd)
    return nbytes


def _same_file(path: str, header: bytes, size: int) -> bool:
    if not os.path.isfile(path) or os.path.getsize(path) != size:
        return False
    with open(path, "rb") as f:
        return f.read(len(header)) == header


def write_big_gguf(
    path: str | os.PathLike[str],
    size: str | dict[str, Any] = "70b",
    context: int = 4096,
    workers: int | None = None,
    seed: int = 0,
    reuse: bool = True,
) -> bool:
    """Write a random F16 Llama of shape `size` (a SHAPES key or a dict like them) to `path`; True when written,
    False when a file of the same layout was there already (`reuse`). `workers`: threads filling the matrices
    (default: every core, at most 64). The file is written as `path`.tmp and renamed when complete."""
    shape = SHAPES[size] if isinstance(size, str) and size in SHAPES else size
    if not isinstance(shape, dict):
        raise ValueError(f"write_big_gguf: size={size!r} is not one of {', '.join(SHAPES)} or a shape dict")
    if shape["dim"] % shape["n_heads"] or shape["n_heads"] % shape["n_kv_heads"]:
        raise ValueError(f"write_big_gguf: dim, heads and kv heads of {shape} do not divide")
    path = os.fspath(path)
    header, placed = _layout(shape, context)
    total = file_bytes(shape, context)
    if reuse and _same_file(path, header, total):
        return False
    folder = os.path.dirname(os.path.abspath(path))
    free = shutil.disk_usage(folder).free + (os.path.getsize(path) if os.path.isfile(path) else 0)
    if free < total:
        raise OSError(f"write_big_gguf: {path} needs {total / 1e9:.1f} GB, {folder} has {free / 1e9:.1f} GB free")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        f.truncate(total)
        rng = np.random.default_rng(seed)
        for _, dims, ggml_type, off in placed:
            if ggml_type == _F32:
                f.seek(off)
                f.write((1.0 + 0.1 * rng.standard_normal(dims)).astype("<f4").tobytes())
    pool = _pool(seed)
    jobs: list[tuple[str, int, int, memoryview]] = []
    for _, dims, ggml_type, off in placed:
        n = _nbytes(dims, ggml_type)
        for at in range(0, n if ggml_type == _F16 else 0, CHUNK):  # each chunk the pool at an offset of its own
            start = (len(jobs) * 7_919 * 2) % CHUNK  # (even: whole float16 values)
            jobs.append((tmp, off + at, min(CHUNK, n - at), pool[start : start + CHUNK]))
    with ThreadPoolExecutor(workers or min(64, os.cpu_count() or 1)) as writers:
        for _ in writers.map(_fill, jobs):  # (raises a worker's error here)
            pass
    os.replace(tmp, path)
    return True
