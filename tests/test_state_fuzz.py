"""Fuzz: 1,000 mutated safetensors headers. Each either loads (and every tensor reads back within the file)
or raises SafetensorsError; nothing else may escape, and the interpreter must survive.
"""

from __future__ import annotations

import json
import os
import random
import re
import struct

import numpy as np
import safetensors.numpy as stnp

from tg_nn.safetensors_format import SafetensorsError
from tg_nn.state import safe_load

DTYPES = ["F32", "F16", "BF16", "I64", "U8", "BOOL", "F64", "I8", "XX", "f32", ""]
NUMBERS = [0, 1, 2, 3, 7, 8, 12, 16, 23, 24, 31, -1, -8, 2**31, 2**32 + 4, 2**63, 2**64 + 1, 10**30]


def _valid_file() -> bytes:
    arrays = {
        "weight": np.arange(12, dtype=np.float32).reshape(3, 4),
        "bias": np.arange(3, dtype=np.int64),
        "mask": np.array([True, False, True]),
        "half": np.ones((2, 2), np.float16),
    }
    return stnp.save(arrays, metadata={"format": "np", "note": "fuzz"})


def _mutate_text(text: str, rng: random.Random) -> str:
    kind = rng.randrange(7)
    if kind == 0:  # replace one number
        nums = list(re.finditer(r"-?\d+", text))
        if nums:
            m = rng.choice(nums)
            return text[: m.start()] + str(rng.choice(NUMBERS)) + text[m.end() :]
    if kind == 1:  # replace one dtype
        return re.sub(r'"(F32|I64|BOOL|F16)"', lambda _: json.dumps(rng.choice(DTYPES)), text, count=1)
    if kind == 2:  # delete a span
        i = rng.randrange(len(text))
        return text[:i] + text[i + rng.randrange(1, 8) :]
    if kind == 3:  # insert junk
        i = rng.randrange(len(text))
        return text[:i] + rng.choice(['"', "{", "}", "[", "]", ",", ":", "null", "1e400", "\\u0000", "\xff"]) + text[i:]
    if kind == 4:  # swap two characters
        i, j = rng.randrange(len(text)), rng.randrange(len(text))
        chars = list(text)
        chars[i], chars[j] = chars[j], chars[i]
        return "".join(chars)
    if kind == 5:  # change a shape to something else
        return re.sub(r'"shape":\[[^\]]*\]', lambda _: f'"shape":{json.dumps([rng.choice(NUMBERS)])}', text, count=1)
    return (
        text.replace('"data_offsets"', '"data_offset"', 1) if rng.random() < 0.5 else text[: rng.randrange(len(text))]
    )


def _mutated(blob: bytes, rng: random.Random) -> bytes:
    n = struct.unpack("<Q", blob[:8])[0]
    text, data = blob[8 : 8 + n].decode(), blob[8 + n :]
    for _ in range(rng.randrange(1, 4)):
        text = _mutate_text(text, rng)
    raw = text.encode("utf-8", errors="surrogateescape")
    length = len(raw)
    if rng.random() < 0.1:  # lie about the header length
        length = rng.choice([0, 1, length - 1, length + 1, len(raw) + len(data) + 1, 2**64 - 1])
    if rng.random() < 0.1:  # cut the data short
        data = data[: rng.randrange(len(data) + 1)]
    return struct.pack("<Q", length) + raw + data


def test_fuzz_1000_mutated_headers(tmp_path: os.PathLike[str]) -> None:
    blob = _valid_file()
    rng = random.Random(1234)
    loaded = rejected = 0
    for i in range(1000):
        path = os.path.join(tmp_path, f"f{i}.safetensors")
        with open(path, "wb") as f:
            f.write(_mutated(blob, rng))
        size = os.path.getsize(path)
        try:
            tensors = safe_load(path)
        except SafetensorsError:
            rejected += 1
            continue
        for t in tensors.values():  # everything that loads must read back from inside the file
            arr = t.numpy()
            assert arr.nbytes <= size
        loaded += 1
        os.unlink(path)
    print(f"fuzz: {loaded} loaded, {rejected} rejected")
    assert loaded + rejected == 1000
    assert rejected > 500 and loaded > 10, (loaded, rejected)  # the mutations exercise both outcomes
