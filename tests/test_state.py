"""tg_nn.state: state dicts, load_state_dict, and safetensors files (interoperable with the `safetensors` package)."""

from __future__ import annotations

import collections
import json
import mmap
import os
import struct

import numpy as np
import pytest
import safetensors.numpy as stnp

from tg import Tensor, dtypes
from tg_nn.safetensors_format import SafetensorsError
from tg_nn.state import (
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
)
from tg_tensor.engine.schedule import buffer_of

NP_DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.uint16, np.float16, np.int32, np.uint32, np.float32]
NP_DTYPES += [np.float64, np.int64, np.uint64]


def _sample(dt: type, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt is np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)


class Block:
    def __init__(self) -> None:
        self.w = Tensor(np.ones((2, 3), np.float32))
        self.b = Tensor(np.zeros(3, np.float32))


class Net:
    def __init__(self) -> None:
        self.blocks = [Block(), Block()]
        self.head = {"proj": Tensor(np.full((3, 1), 2.0, np.float32))}
        self.parent = self  # a cycle: must not recurse forever
        self.name = "net"


def test_get_state_dict_names_nested_objects() -> None:
    net = Net()
    sd = get_state_dict(net)
    assert sorted(sd) == ["blocks.0.b", "blocks.0.w", "blocks.1.b", "blocks.1.w", "head.proj"]
    assert sd["head.proj"] is net.head["proj"]
    assert sorted(get_state_dict(net, prefix="model")) == sorted(f"model.{k}" for k in sd)


def test_get_state_dict_namedtuple_and_tuples() -> None:
    Pair = collections.namedtuple("Pair", ["left", "right"])
    obj = Pair(Tensor([1.0]), (Tensor([2.0]), Tensor([3.0])))
    assert sorted(get_state_dict(obj)) == ["left", "right.0", "right.1"]


def test_get_parameters_deduplicates_shared_tensors() -> None:
    shared = Tensor([1.0, 2.0])
    model = {"a": shared, "b": [shared, Tensor([3.0])]}
    params = get_parameters(model)
    assert len(params) == 2 and params[0] is shared


def test_load_state_dict_copies_values_and_keeps_tensor_objects() -> None:
    net = Net()
    w_obj = net.blocks[0].w
    src = {k: Tensor(np.full(tuple(v.shape), 7.0, np.float64)) for k, v in get_state_dict(net).items()}
    load_state_dict(net, src)
    assert net.blocks[0].w is w_obj
    assert w_obj.dtype == dtypes.float32  # cast to the model's dtype
    np.testing.assert_array_equal(w_obj.numpy(), np.full((2, 3), 7.0, np.float32))


def test_load_state_dict_lists_every_problem_in_one_error() -> None:
    net = Net()
    sd = {k: v for k, v in get_state_dict(net).items() if k != "blocks.1.b"}
    sd["extra.weight"] = Tensor([1.0])
    sd["head.proj"] = Tensor(np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError) as e:
        load_state_dict(net, sd)
    msg = str(e.value)
    assert "missing keys: ['blocks.1.b']" in msg
    assert "unexpected keys: ['extra.weight']" in msg
    assert "head.proj: model (3, 1) != state_dict (1, 3)" in msg


def test_load_state_dict_non_strict_still_rejects_wrong_shapes() -> None:
    net = Net()
    load_state_dict(net, {"blocks.0.b": Tensor([5.0, 5.0, 5.0]), "other": Tensor([1.0])}, strict=False)
    assert net.blocks[0].b.tolist() == [5.0, 5.0, 5.0]
    with pytest.raises(ValueError, match="wrong shapes"):
        load_state_dict(net, {"blocks.0.b": Tensor([5.0])}, strict=False)


def test_load_state_dict_rejects_non_tensors() -> None:
    with pytest.raises(TypeError, match="values must be Tensors"):
        load_state_dict(Net(), {"head.proj": np.zeros((3, 1))}, strict=False)  # type: ignore[dict-item]


@pytest.mark.parametrize("dt", NP_DTYPES, ids=lambda d: np.dtype(d).name)
def test_tg_file_loads_in_safetensors_and_back(tmp_path: os.PathLike[str], dt: type) -> None:
    arrays = {"x": _sample(dt, (3, 4)), "scalar": _sample(dt, ()), "empty": _sample(dt, (0, 2))}
    path = os.path.join(tmp_path, "tg.safetensors")
    safe_save({k: Tensor(v) for k, v in arrays.items()}, path, metadata={"who": "tg"})
    theirs = stnp.load_file(path)
    for k, v in arrays.items():
        np.testing.assert_array_equal(theirs[k], v)
        assert theirs[k].dtype == v.dtype and theirs[k].shape == v.shape
    # byte-identical to what the reference writer produces
    with open(path, "rb") as f:
        assert f.read() == stnp.save(arrays, metadata={"who": "tg"})


@pytest.mark.parametrize("dt", NP_DTYPES, ids=lambda d: np.dtype(d).name)
def test_safetensors_file_loads_in_tg(tmp_path: os.PathLike[str], dt: type, device: str) -> None:
    arrays = {"a": _sample(dt, (5,), 1), "b.c": _sample(dt, (2, 3, 2), 2)}
    path = os.path.join(tmp_path, "ref.safetensors")
    stnp.save_file(arrays, path)
    ours = safe_load(path)
    assert sorted(ours) == ["a", "b.c"]
    for k, v in arrays.items():
        assert ours[k].device.startswith("DISK:")
        moved = ours[k].to(device)
        assert moved.device == device
        np.testing.assert_array_equal(moved.numpy(), v)


def test_bfloat16_round_trip(tmp_path: os.PathLike[str]) -> None:
    values = np.array([1.0, -2.5, 3.140625, 0.0], np.float32)  # exact in bfloat16
    path = os.path.join(tmp_path, "bf16.safetensors")
    safe_save({"w": Tensor(values, dtype=dtypes.bfloat16)}, path)
    header = safe_load_metadata(path)[2]
    assert header["w"] == {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}
    back = safe_load(path)["w"]
    assert back.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(back.numpy(), values)  # bf16 bits widened on the host


def test_non_contiguous_tensors_are_saved_in_logical_order(tmp_path: os.PathLike[str]) -> None:
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    path = os.path.join(tmp_path, "t.safetensors")
    safe_save({"t": Tensor(base).T, "lazy": Tensor(base) * 2}, path)
    loaded = stnp.load_file(path)
    np.testing.assert_array_equal(loaded["t"], base.T)
    np.testing.assert_array_equal(loaded["lazy"], base * 2)


def test_safe_load_maps_the_file_without_copying(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "m.safetensors")
    stnp.save_file({"w": np.arange(1000, dtype=np.float32)}, path)
    t = safe_load(path)["w"]
    opaque = buffer_of(t.uop.base)._opaque
    assert isinstance(opaque, memoryview) and isinstance(opaque.obj, mmap.mmap)
    assert opaque.nbytes == 4000
    np.testing.assert_array_equal(t.numpy(), np.arange(1000, dtype=np.float32))


def test_saving_over_a_loaded_file_keeps_the_loaded_tensors_valid(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "w.safetensors")
    safe_save({"w": Tensor(np.arange(4, dtype=np.float32))}, path)
    old = safe_load(path)["w"]
    safe_save({"w": Tensor(np.zeros(1, np.float32))}, path)  # a shorter file at the same path
    np.testing.assert_array_equal(old.numpy(), np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(safe_load(path)["w"].numpy(), np.zeros(1, np.float32))


def test_safe_load_metadata_returns_header_and_metadata(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "meta.safetensors")
    safe_save({"w": Tensor([1.0, 2.0])}, path, metadata={"format": "pt", "step": "10"})
    whole, n, header = safe_load_metadata(path)
    assert header["__metadata__"] == {"format": "pt", "step": "10"}
    assert header["w"]["shape"] == [2]
    assert whole.shape == (os.path.getsize(path),) and whole.dtype == dtypes.uint8
    assert (8 + n) % 8 == 0


def test_safe_save_rejects_bad_arguments(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "bad.safetensors")
    with pytest.raises(TypeError, match="'w' is a ndarray"):
        safe_save({"w": np.zeros(2)}, path)  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="__metadata__"):
        safe_save({"__metadata__": Tensor([1.0])}, path)
    with pytest.raises(TypeError, match="metadata must be a dict of str -> str"):
        safe_save({"w": Tensor([1.0])}, path, metadata={"step": 3})  # type: ignore[dict-item]
    assert not os.listdir(tmp_path)  # nothing half-written is left behind


# ---------------------------------------------------------------- malformed files


def _file(tmp_path: os.PathLike[str], header: object, data: bytes, raw_header: bytes | None = None) -> str:
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    path = os.path.join(tmp_path, "bad.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    return path


def _entry(dtype: str = "F32", shape: list[int] | None = None, offsets: list[int] | None = None) -> dict[str, object]:
    return {"dtype": dtype, "shape": shape if shape is not None else [2], "data_offsets": offsets or [0, 8]}


@pytest.mark.parametrize(
    "header, data, message",
    [
        ({"w": _entry(offsets=[0, 16])}, bytes(8), "out of range"),
        ({"w": _entry(offsets=[8, 4])}, bytes(8), "out of range"),
        ({"w": _entry(offsets=[-4, 4])}, bytes(8), "out of range"),
        ({"a": _entry(offsets=[0, 8]), "b": _entry(offsets=[4, 12])}, bytes(12), "overlap"),
        ({"w": _entry(dtype="F8_E4M3")}, bytes(8), "unknown dtype 'F8_E4M3'"),
        ({"w": _entry(dtype=3)}, bytes(8), "unknown dtype 3"),
        ({"w": _entry(shape=[3])}, bytes(8), "needs 12 bytes"),
        ({"w": _entry(shape=[-2])}, bytes(8), "non-negative ints"),
        ({"w": _entry(shape=[True, 2])}, bytes(8), "non-negative ints"),
        ({"w": {"dtype": "F32", "shape": [2]}}, bytes(8), "data_offsets must be"),
        ({"w": [1, 2]}, bytes(8), "expected an object"),
        ({"__metadata__": {"k": 1}}, b"", "__metadata__ must map strings"),
        ([1, 2], b"", "must be a JSON object"),
    ],
)
def test_malformed_headers_raise_clear_errors(tmp_path: os.PathLike[str], header: object, data: bytes, message: str):
    path = _file(tmp_path, header, data)
    with pytest.raises(SafetensorsError, match=message):
        safe_load(path)
    with pytest.raises(SafetensorsError, match=message):
        safe_load_metadata(path)


def test_truncated_files_raise(tmp_path: os.PathLike[str]) -> None:
    good = os.path.join(tmp_path, "good.safetensors")
    stnp.save_file({"w": np.arange(6, dtype=np.float32)}, good)
    blob = open(good, "rb").read()
    for cut in (0, 3, 7):
        path = os.path.join(tmp_path, f"cut{cut}.safetensors")
        open(path, "wb").write(blob[:cut])
        with pytest.raises(SafetensorsError, match="truncated file"):
            safe_load(path)
    for cut in (8, 20, len(blob) - 1):  # header or data cut short
        path = os.path.join(tmp_path, f"cut{cut}.safetensors")
        open(path, "wb").write(blob[:cut])
        with pytest.raises(SafetensorsError, match="beyond the file|out of range"):
            safe_load(path)


def test_header_length_beyond_file_and_bad_json(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "huge.safetensors")
    open(path, "wb").write(struct.pack("<Q", 2**63) + b"{}")
    with pytest.raises(SafetensorsError, match="header length 9223372036854775808 goes beyond"):
        safe_load(path)
    with pytest.raises(SafetensorsError, match="not valid JSON"):
        safe_load(_file(tmp_path, None, b"", raw_header=b"{'w': 1}"))
    with pytest.raises(SafetensorsError, match="not UTF-8"):
        safe_load(_file(tmp_path, None, b"", raw_header=b'{"\xff": 1}'))
    with pytest.raises(SafetensorsError, match="not valid JSON"):
        safe_load(_file(tmp_path, None, b"", raw_header=b"[" * 100_000 + b"]" * 100_000))
