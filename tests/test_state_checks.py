"""safe_load refuses duplicate tensor names; GlobalCounters.mem_used stays consistent around DISK buffers."""

from __future__ import annotations

import gc
import json
import pathlib
import struct

import numpy as np
import pytest

from tg import GlobalCounters, Tensor
from tg.nn.state import SafetensorsError, safe_load, safe_save


def test_duplicate_tensor_names_are_rejected_naming_key_and_file(tmp_path: pathlib.Path) -> None:
    """json keeps the last of two equal keys; the safetensors package (and tg) reject the file."""
    entry = '"w":{{"dtype":"F32","shape":[1],"data_offsets":[{},{}]}}'
    header = ("{" + entry.format(0, 4) + "," + entry.format(4, 8) + "}").encode()
    path = tmp_path / "dup.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + struct.pack("<2f", 1.0, 2.0))
    assert json.loads(header)["w"]["data_offsets"] == [4, 8]  # what a plain json read silently takes
    with pytest.raises(SafetensorsError, match=rf"{path.name}: header names tensor 'w' twice"):
        safe_load(path)


def test_mem_used_stays_consistent_after_loading(tmp_path: pathlib.Path) -> None:
    """DISK buffers are windows of a mapped file: never added to mem_used, so never subtracted either."""
    path = tmp_path / "m.safetensors"
    safe_save({"a": Tensor(np.arange(1000, dtype=np.float32)), "b": Tensor(np.ones(10, np.float32))}, str(path))
    gc.collect()
    before = GlobalCounters.mem_used
    loaded = safe_load(path)
    assert GlobalCounters.mem_used == before
    np.testing.assert_array_equal(loaded["a"].to("CPU").numpy(), np.arange(1000, dtype=np.float32))
    del loaded
    gc.collect()
    assert GlobalCounters.mem_used == before >= 0
