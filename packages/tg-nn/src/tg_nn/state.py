"""Model state: find a model's tensors, save them to safetensors files and load them back.

>>> import os, tempfile
>>> from tg_nn import Linear
>>> from tg_nn.state import get_state_dict, safe_save, safe_load, load_state_dict
>>> model = Linear(3, 2)
>>> sorted(get_state_dict(model))
['bias', 'weight']
>>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
>>> safe_save(get_state_dict(model), path)
>>> load_state_dict(Linear(3, 2), safe_load(path))
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from tg_nn.safetensors_format import ST_NAMES, SafetensorsError, build_header, file_order, parse_header
from tg_runtime import disk_buffers, map_file
from tg_tensor import Tensor

__all__ = [
    "SafetensorsError",
    "get_parameters",
    "get_state_dict",
    "load_state_dict",
    "safe_load",
    "safe_load_metadata",
    "safe_save",
]


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from `obj` through attributes, dicts, lists and tuples, by dotted name.

    >>> class Net:
    ...     def __init__(self): self.layers = [Linear(2, 2)]
    >>> from tg_nn import Linear
    >>> sorted(get_state_dict(Net()))
    ['layers.0.bias', 'layers.0.weight']
    """
    return dict(_walk(obj, prefix, set()))


def _walk(obj: Any, name: str, seen: set[int]) -> Iterator[tuple[str, Tensor]]:
    if isinstance(obj, Tensor):
        yield name, obj
        return
    if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return
    seen.add(id(obj))  # objects that refer back to a parent are visited once
    if hasattr(obj, "_asdict"):  # namedtuple
        obj = obj._asdict()
    elif not isinstance(obj, (dict, list, tuple)) and hasattr(obj, "__dict__"):
        obj = vars(obj)
    if isinstance(obj, dict):
        items: Any = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return
    for key, value in items:
        yield from _walk(value, f"{name}.{key}" if name else str(key), seen)


def get_parameters(obj: Any) -> list[Tensor]:
    """The distinct tensors of `obj` (each once, even when shared), in state-dict order.

    >>> from tg_nn import Linear
    >>> [p.shape for p in get_parameters(Linear(3, 2))]
    [(2, 3), (2,)]
    """
    ret: dict[int, Tensor] = {}
    for t in get_state_dict(obj).values():
        ret.setdefault(id(t), t)
    return list(ret.values())


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True) -> None:
    """Copy `state_dict`'s tensors into the model's tensors (moved to their device, cast to their dtype).

    Missing and unexpected keys are an error when `strict`; a shape mismatch always is. Every problem
    is listed in one ValueError. The model's Tensor objects are kept (an optimizer holding them still works).
    """
    if not isinstance(state_dict, dict):
        raise TypeError(
            f"load_state_dict: state_dict must be a dict of name -> Tensor, got {type(state_dict).__name__}"
        )
    targets = get_state_dict(model)
    missing = sorted(k for k in targets if k not in state_dict)
    unexpected = sorted(k for k in state_dict if k not in targets)
    wrong = [
        f"{k}: model {targets[k].shape} != state_dict {_shape(state_dict[k])}"
        for k in targets
        if k in state_dict and _shape(state_dict[k]) != targets[k].shape
    ]
    problems = ([f"missing keys: {missing}"] if strict and missing else []) + (
        [f"unexpected keys: {unexpected}"] if strict and unexpected else []
    )
    problems += [f"wrong shapes: {wrong}"] if wrong else []
    if problems:
        raise ValueError("load_state_dict: " + "; ".join(problems))
    loaded = [k for k in targets if k in state_dict]
    for k in loaded:  # in place: optimizers and TinyJit recordings that hold these buffers see the new values
        target = targets[k]
        target.assign(state_dict[k].to(target.device).cast(target.dtype))
    if loaded:
        Tensor.realize(*[targets[k] for k in loaded])


def _shape(t: Any) -> Any:
    if not isinstance(t, Tensor):
        raise TypeError(f"load_state_dict: values must be Tensors, got {type(t).__name__}")
    return t.shape


def safe_save(tensors: dict[str, Tensor], path: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> None:
    """Write tensors to a safetensors file (readable by the `safetensors` package).

    The file is written next to its destination and renamed into place, so a file that is memory-mapped
    by an earlier safe_load is never changed under it.
    """
    _check_save_args(tensors, metadata)
    specs = {
        k: (t.dtype, tuple(int(s) for s in t.shape), int(t.numel()) * t.dtype.itemsize) for k, t in tensors.items()
    }
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(build_header(specs, metadata))
            for name in file_order(specs):
                f.write(tensors[name].tobytes())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _check_save_args(tensors: Any, metadata: Any) -> None:
    if not isinstance(tensors, dict):
        raise TypeError(f"safe_save: tensors must be a dict of name -> Tensor, got {type(tensors).__name__}")
    for k, t in tensors.items():
        if not isinstance(k, str) or k == "__metadata__":
            raise ValueError(f"safe_save: tensor names must be strings other than '__metadata__', got {k!r}")
        if not isinstance(t, Tensor):
            raise TypeError(f"safe_save: {k!r} is a {type(t).__name__}, not a Tensor")
        if t.dtype not in ST_NAMES:
            raise ValueError(f"safe_save: {k!r} has dtype {t.dtype}, which safetensors cannot store")
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise TypeError(f"safe_save: metadata must be a dict of str -> str, got {metadata!r:.200}")


def safe_load(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """The tensors of a safetensors file, on the `DISK:<path>` device: memory-mapped, nothing copied yet.

    Move them with `.to(device)` (load_state_dict does it for you); `.numpy()` reads them directly.
    Raises SafetensorsError when the file is malformed.
    """
    mapping = map_file(path)
    try:
        entries, _ = parse_header(mapping)
    except SafetensorsError as e:
        raise SafetensorsError(f"{os.fspath(path)}: {e}") from None
    bufs = disk_buffers(path, [(e.offset, e.count, e.dtype) for e in entries], mapping)
    return {e.name: Tensor.from_buffer(b, e.shape) for e, b in zip(entries, bufs)}


def safe_load_metadata(path: str | os.PathLike[str]) -> tuple[Tensor, int, dict[str, Any]]:
    """tinygrad's triple: the whole file as a uint8 DISK tensor, the header length, and the validated header
    (each tensor's dtype, shape and data_offsets, and `__metadata__` when present).
    """
    mapping = map_file(path)
    parse_header(mapping)  # validates everything before the raw JSON is handed out
    n = int.from_bytes(mapping[:8], "little")
    header = json.loads(bytes(mapping[8 : 8 + n]).decode())
    return Tensor.from_file(path, shape=(mapping.nbytes,)), n, header
