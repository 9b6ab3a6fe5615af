"""Tensor parallelism (Megatron style): one Llama split over the devices of a device set.

Each device holds 1/n of every layer: the q, k, v rows of its heads (and their KV-cache heads), the gate and up
rows of its slice of the MLP (column-parallel), and the matching columns of the output projections wo and
down (row-parallel), whose partial products are summed by one all-reduce each (NCCL between CUDA devices, the
host between CPU devices). The norms are replicated (tiny); the embedding table lives on the first device only
(a step reads one row of it) and the embedded rows are copied to the others; the output head is split by
vocabulary rows when the vocabulary divides (each device reads 1/n of the biggest matrix) and its logits are
gathered on the first device, where sampling happens.

`plan_devices` turns `--devices`/`--tp` into a device tuple; `check_split` and `check_memory` reject a model that
cannot be split (heads the device count does not divide, devices of mixed kinds) or does not fit, before any
weight is copied; `load_shards` copies each device's slice of every matrix straight from the memory-mapped GGUF
file (no whole-model copy on the host), one thread per device.

>>> plan_devices(devices="CPU:0,CPU:1")
('CPU', 'CPU:1')
>>> shard_axis("blk.3.attn_output.weight", vocab_size=32000, n=2), shard_axis("blk.3.ffn_up.weight", 32000, 2)
(1, 0)
"""

from __future__ import annotations

import mmap
import os
import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from tg_llm.config import LlamaConfig
from tg_llm.weights import Weight
from tg_nn.gguf import gguf_read_header
from tg_nn.gguf_format import GGUFHeader, GGUFTensorInfo
from tg_runtime import Buffer, Device
from tg_tensor import Tensor
from tg_uop import DType, Ops, dtypes

__all__ = [
    "HOME",
    "fuse_split_projections",
    "check_memory",
    "check_split",
    "check_types",
    "load_shards",
    "model_bytes",
    "plan_devices",
    "shard_axis",
]

HOME = "home"  # shard_axis's answer for a tensor kept on the first device only (the embedding table)
_COLUMNS = re.compile(r"blk\.\d+\.(attn_[qkv]\.(weight|bias)|ffn_(gate|up)\.weight)$")  # split by output rows
_ROWS = re.compile(r"blk\.\d+\.(attn_output|ffn_down)\.weight$")  # split by input columns, then all-reduced
_FLOAT_FILES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
_HEADROOM = 1.05  # activations, logits and allocator slack beside the weights and the KV cache


def plan_devices(
    devices: str | Sequence[str] | None = None, tp: int | None = None, kind: str | None = None
) -> tuple[str, ...]:
    """The devices of a tensor-parallel model: `devices` ("CUDA:0,CUDA:1" or a sequence), or `tp` devices of `kind`
    (Device.DEFAULT's kind when None) numbered from 0. Devices of mixed kinds or named twice are a ValueError.

    >>> plan_devices(tp=2, kind="CPU")
    ('CPU', 'CPU:1')
    """
    if (devices is None) == (tp is None):
        raise ValueError("tensor parallel: give either devices (e.g. 'CUDA:0,CUDA:1') or tp (a device count)")
    if tp is not None:
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise ValueError(f"tensor parallel: tp={tp!r} must be a device count >= 1")
        kind = (kind or Device.DEFAULT).split(":")[0]
        names: list[str] = [f"{kind}:{i}" for i in range(tp)]
    else:
        assert devices is not None
        names = [d.strip() for d in devices.split(",")] if isinstance(devices, str) else list(devices)
        if not names or not all(isinstance(d, str) and d for d in names):
            raise ValueError(f"tensor parallel: devices={devices!r} must name one or more devices")
    canon = tuple(Device.canonicalize(d) for d in names)
    kinds = sorted({d.split(":")[0] for d in canon})
    if len(kinds) > 1:
        raise ValueError(
            f"tensor parallel: devices {', '.join(canon)} are of mixed kinds ({', '.join(kinds)}); one model's shards "
            "all-reduce within one kind (NCCL between CUDA devices, the host between CPU devices)"
        )
    if len(set(canon)) != len(canon):
        raise ValueError(f"tensor parallel: devices {', '.join(canon)}: one device is named twice")
    _check_present(canon)
    return canon


def _check_present(devices: tuple[str, ...]) -> None:
    """GPUs past the host's count fail here, naming the count (CPU:n devices are made on demand)."""
    if devices[0].split(":")[0] != "CUDA":
        return
    from tg_runtime.ops_cuda import device_count

    have = device_count()
    missing = [d for d in devices if (int(d.split(":")[1]) if ":" in d else 0) >= have]
    if missing:
        raise ValueError(f"tensor parallel: {', '.join(missing)} not present (this host has {have} CUDA devices)")


def check_split(cfg: LlamaConfig, n: int) -> None:
    """ValueError unless the heads, KV heads and MLP width of `cfg` divide evenly over n devices."""
    for what, size in (("attention heads", cfg.n_heads), ("KV heads", cfg.n_kv_heads), ("MLP width", cfg.hidden_dim)):
        if size % n:
            raise ValueError(
                f"tensor parallel: the model's {size} {what} do not split over {n} devices; use a device count "
                f"that divides {cfg.n_kv_heads} (the KV heads) and {cfg.n_heads}"
            )


def shard_axis(name: str, vocab_size: int, n: int) -> int | str | None:
    """How tensor `name` (a GGUF name) is placed over n devices: 0 split by rows (output features), 1 split by
    columns (input features), None replicated, HOME on the first device only."""
    if _COLUMNS.match(name):
        return 0
    if _ROWS.match(name):
        return 1
    if name == "token_embd.weight":
        return HOME
    if name == "output.weight":
        return 0 if vocab_size % n == 0 else None
    return None


def _itemsize(info: GGUFTensorInfo, dtype: DType) -> int:
    small = len(info.shape) == 1  # norms and biases: float32 whatever the weights' dtype
    return 4 if small else dtype.itemsize


def model_bytes(header: GGUFHeader, cfg: LlamaConfig, devices: Sequence[str], dtype: DType) -> list[int]:
    """Bytes each device will hold: its shards of the weights (in `dtype`; vectors in float32) and its heads of
    the KV cache (cfg.context_length positions), before the headroom check_memory adds."""
    n = len(devices)
    per = [0] * n
    tied = not any(t.name == "output.weight" for t in header.tensors)
    for t in header.tensors:
        size = int(np.prod(t.shape)) * _itemsize(t, dtype)
        where = shard_axis(t.name, cfg.vocab_size, n)
        if where == HOME:
            per[0] += size
            if tied:  # the head is a second, split copy of the table
                where = shard_axis("output.weight", cfg.vocab_size, n)
            else:
                continue
        for i in range(n):
            per[i] += size // n if isinstance(where, int) else size
    kv = 2 * cfg.n_layers * cfg.n_kv_heads // n * cfg.context_length * cfg.head_dim * dtype.itemsize
    return [p + kv for p in per]


def free_bytes(device: str) -> int | None:
    """Memory a device can still give (CUDA: the driver's free memory; host devices: MemAvailable), or None when
    the runtime cannot tell."""
    kind = device.split(":")[0]
    try:
        if kind == "CUDA":
            import ctypes

            drv = Device[device].allocator.drv  # type: ignore[attr-defined]
            drv.use()
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            if drv.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) != 0:
                return None
            return int(free.value)
        if kind in ("CPU", "PYTHON"):
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
    except (OSError, AttributeError, ValueError):
        return None
    return None


def check_memory(header: GGUFHeader, cfg: LlamaConfig, devices: Sequence[str], dtype: DType) -> None:
    """ValueError when a device has less free memory than its share of the model needs (checked where the runtime
    can tell; host devices share one memory, so their shares are added up)."""
    need = [int(b * _HEADROOM) for b in model_bytes(header, cfg, devices, dtype)]
    gb = 1e9
    if devices[0].split(":")[0] in ("CPU", "PYTHON"):
        have = free_bytes(devices[0])
        if have is not None and sum(need) > have:
            raise ValueError(
                f"tensor parallel: the model needs ~{sum(need) / gb:.1f} GB of host memory over {len(devices)} "
                f"devices, {have / gb:.1f} GB is available; use a shorter --context or a smaller model"
            )
        return
    for d, b in zip(devices, need):
        have = free_bytes(d)
        if have is not None and b > have:
            raise ValueError(
                f"tensor parallel: {d} needs ~{b / gb:.1f} GB for its share of the model over {len(devices)} devices "
                f"(weights and KV cache), it has {have / gb:.1f} GB free; use more devices or a shorter --context"
            )


def check_types(header: GGUFHeader) -> None:
    """ValueError unless every tensor of the file is F32, F16 or BF16 (split models read float files)."""
    for info in header.tensors:
        if info.type_name not in _FLOAT_FILES:
            raise ValueError(
                f"tensor parallel: tensor {info.name!r} is {info.type_name}; split models are read from F32, F16 or "
                "BF16 files (quantized files run on one device)"
            )


def _file_array(mapping: memoryview, info: GGUFTensorInfo) -> np.ndarray:
    """The tensor's bytes in the mapped file as a numpy array of its shape (no copy)."""
    check_types(GGUFHeader(0, {}, [info], 0))
    kind = info.type_name
    count = int(np.prod(info.shape))
    return np.frombuffer(mapping, dtype=_FLOAT_FILES[kind], count=count, offset=info.offset).reshape(info.shape)


def _slice(a: np.ndarray, axis: int | str | None, i: int, n: int) -> np.ndarray:
    if not isinstance(axis, int):
        return a
    size = a.shape[axis] // n
    return a[i * size : (i + 1) * size] if axis == 0 else a[:, i * size : (i + 1) * size]


_FILE_DTYPES = {"F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.uint16}


def _as_model_dtype(t: Tensor, kind: str, dtype: DType) -> Tensor:
    """A shard as it came from the file (raw bytes on its device) in the model's dtype, converted there."""
    if kind == "BF16":  # the top half of a float32
        t = (t.cast(dtypes.uint32) << 16).bitcast(dtypes.float32)
    return t if t.dtype == dtype else t.cast(dtype).contiguous().realize()


def load_shards(
    path: str | os.PathLike[str],
    cfg: LlamaConfig,
    devices: Sequence[str],
    dtype: DType,
    header: GGUFHeader | None = None,
) -> dict[str, Weight]:
    """Every weight of a GGUF file placed as shard_axis says, realized: GGUF-named tensors on several devices (the
    embedding table on the first one only; a tied head as "output.weight", a split copy of the table).

    Each device's buffers are allocated first; then one thread per device copies its slices straight from the
    mapped file (a row slice is a view of the map; a column slice is gathered into one host array of that shard
    only); a file type other than the model's dtype is converted on the device afterwards."""
    header = header or gguf_read_header(path)
    mapping = _map_private(path)
    n = len(devices)
    infos = {t.name: t for t in header.tensors}
    if "output.weight" not in infos:
        infos = {**infos, "output.weight": infos["token_embd.weight"]}
    places = {name: shard_axis(name, cfg.vocab_size, n) for name in infos}
    raw: dict[str, list[Tensor | None]] = {name: [None] * n for name in infos}
    jobs: list[list[tuple[Buffer, np.ndarray]]] = [[] for _ in devices]
    for name, info in infos.items():
        whole = _file_array(mapping, info)
        for i, d in enumerate(devices):
            if places[name] == HOME and i != 0:
                continue
            a = _slice(whole, places[name], i, n)
            buf = Buffer(d, a.size, _FILE_DTYPES[info.type_name]).ensure_allocated()  # (here, not in the threads)
            raw[name][i] = Tensor.from_buffer(buf, a.shape)
            jobs[i].append((buf, a))
    _copy_all(devices, jobs)
    out: dict[str, Weight] = {}
    for name, ts in raw.items():
        info, where = infos[name], places[name]
        want = dtypes.float32 if len(info.shape) == 1 else dtype
        shards = [_as_model_dtype(t, info.type_name, want) for t in ts if t is not None]
        if where == HOME:
            out[name] = shards[0]
        else:
            out[name] = Tensor.from_shards(shards, where if isinstance(where, int) else None)
    return out


def _map_private(path: str | os.PathLike[str]) -> memoryview:
    """The file mapped copy-on-write: its pages are the page cache's (nothing is copied, nothing is ever written),
    but the views are writable, which lets the runtimes hand them to memcpy / cuMemcpyHtoD without a host copy."""
    with open(path, "rb") as f:
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))


def _copy_all(devices: Sequence[str], jobs: list[list[tuple[Buffer, np.ndarray]]]) -> None:
    """Copy each device's arrays into its buffers, the devices in parallel (one thread each); errors re-raised."""
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            for buf, a in jobs[i]:
                host = np.ascontiguousarray(a)  # (a view of the map where the slice is contiguous)
                buf.copyin(host.reshape(-1).view(np.uint8).data)
            Device[devices[i]].synchronize()
        except BaseException as e:  # noqa: BLE001 (raised again in the caller's thread)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), name=f"tg-llm load {d}") for i, d in enumerate(devices)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


_JOINED = {"qkv": ("attn_q", "attn_k", "attn_v"), "gate_up": ("ffn_gate", "ffn_up")}


def fuse_split_projections(n_layers: int, loaded: dict[str, Any], n: int, release: Any = None) -> dict[str, Tensor]:
    """Join each layer's q, k, v rows (and gate, up) into one matrix per device ("blk.{i}.qkv", "blk.{i}.gate_up"),
    as tg_llm.weights._fuse_projections does on one device: device d holds [q_d; k_d; v_d], its heads' rows of
    each, so one matrix-vector product per device serves the three (3 kernels fewer per layer and device, and
    bigger ones). The GGUF names stay in `loaded` as views of the joined matrix (each again the whole matrix,
    split by rows); `Block.project` cuts the product's columns per device. `release()` runs after each layer.

    >>> from tg_tensor import Tensor
    >>> devs = ("CPU:0", "CPU:1")
    >>> w = {f"blk.0.{k}.weight": Tensor.full((4, 2), float(i)).shard(devs, 0) for i, k in enumerate(_JOINED["qkv"])}
    >>> fused = fuse_split_projections(1, w, 2)
    >>> fused["blk.0.qkv"][:, 0].tolist(), w["blk.0.attn_k.weight"][:, 0].tolist()
    ([0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 1.0, 1.0])
    """
    fused: dict[str, Tensor] = {}
    for i in range(n_layers):
        for key, group in _JOINED.items():
            names = [f"blk.{i}.{g}.weight" for g in group]
            if any(k not in loaded for k in names):
                continue
            parts = [loaded[k] for k in names]
            if not all(isinstance(p, Tensor) and p.uop.op is Ops.MULTI and p.uop.arg == 0 for p in parts):
                continue
            if len({p.dtype for p in parts}) != 1:
                continue
            per_device = [Tensor.cat(*[Tensor(p.uop.src[d]) for p in parts]).contiguous().realize() for d in range(n)]
            joined = fused[f"blk.{i}.{key}"] = Tensor.from_shards(per_device, 0)
            rows, cols = int(joined.shape[0]) // n, int(joined.shape[1])
            at = 0
            for k, p in zip(names, parts):
                m = int(p.shape[0]) // n
                loaded[k] = joined.reshape(n, rows, cols)[:, at : at + m].reshape(n * m, cols)
                at += m
            del parts
        if release is not None:
            release()
    return fused
