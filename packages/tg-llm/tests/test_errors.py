"""Bad input: truncated or corrupt GGUF files, unsupported types and architectures, prompts over the context."""

from __future__ import annotations

import pathlib
import struct

import gguf
import numpy as np
import pytest

from tg_llm import load_model
from tg_llm.random_model import write_random_gguf
from tg_nn.gguf import GGUFError, dequantize, gguf_load, gguf_read_header
from tg_tensor import Tensor
from tg_uop import dtypes


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("m") / "m.gguf"
    write_random_gguf(path, qtype="Q8_0", context_length=16)
    return path


def test_truncated_file_names_the_tensor(model_file: pathlib.Path, tmp_path: pathlib.Path) -> None:
    data = model_file.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 100])
    with pytest.raises(GGUFError, match="truncated file: tensor 'output.weight'"):
        gguf_load(cut)
    cut.write_bytes(data[:300])  # inside the metadata
    with pytest.raises(GGUFError, match="truncated or corrupt"):
        gguf_load(cut)


def test_corrupt_headers(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.gguf"
    cases = {
        b"GGML" + bytes(20): "not a GGUF file",
        b"GGUF" + struct.pack("<IQQ", 9, 0, 0): "version 9",
        b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 0): "corrupt header",
        b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 3) + b"abc" + struct.pack("<I", 99): "unknown value",
        b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2) + b"\xff\xfe": "not valid UTF-8",
        b"": "the magic needs 4 bytes at offset 0, but the file has 0 bytes",
    }
    for blob, msg in cases.items():
        bad.write_bytes(blob)
        with pytest.raises(GGUFError, match=msg):
            gguf_load(bad)
    with pytest.raises(FileNotFoundError, match="no such file"):
        gguf_load(tmp_path / "missing.gguf")
    with pytest.raises(TypeError, match="a path or a uint8 Tensor"):
        gguf_load(3)  # type: ignore[arg-type]


def test_unsupported_quantization_is_named(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "q5.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor(
        "x",
        gguf.quants.quantize(np.ones((2, 32), np.float32), gguf.GGMLQuantizationType.Q5_0),
        raw_dtype=gguf.GGMLQuantizationType.Q5_0,
    )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()  # noqa: E702
    with pytest.raises(GGUFError, match="'x' is Q5_0, which tg cannot read; supported: F32, F16, BF16, Q8_0"):
        gguf_load(path)
    with pytest.raises(GGUFError, match="cannot dequantize IQ2_XS"):
        dequantize(Tensor([0] * 74, dtype=dtypes.uint8), "IQ2_XS", (256,))


def test_unsupported_architecture(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "gemma.gguf"
    write_random_gguf(path, arch="gemma", n_layers=1)
    with pytest.raises(ValueError, match="unsupported architecture 'gemma'; tg runs llama, mistral, qwen2, qwen3"):
        load_model(path, "CPU")


def test_prompt_longer_than_context(model_file: pathlib.Path) -> None:
    model, tok = load_model(model_file, "CPU")
    with pytest.raises(ValueError, match="positions 0..16 exceed the context of 16 tokens"):
        model.forward(list(range(17)), 0)
    with pytest.raises(ValueError, match="token 100000 is not an id"):
        model.forward([100000], 0)


def test_load_from_a_uint8_tensor(model_file: pathlib.Path) -> None:
    """A tensor of the file's bytes on a compute device reads the same as the file."""
    raw = Tensor(np.frombuffer(model_file.read_bytes(), np.uint8), device="CPU")
    meta, got = gguf_load(raw, "CPU")
    _, want = gguf_load(model_file, "CPU")
    assert meta["general.architecture"] == "llama" and got.keys() == want.keys()
    for k in ("blk.0.attn_norm.weight", "blk.1.ffn_up.weight"):
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy())


def test_random_model_bad_shape(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="dim=64 must be a multiple of Q4_K's 256-value block"):
        write_random_gguf(tmp_path / "x.gguf", qtype="Q4_K")
    with pytest.raises(ValueError, match="qtype='Q9' is not a ggml type name"):
        write_random_gguf(tmp_path / "x.gguf", qtype="Q9")


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"tokenizer.ggml.eos_token_id": 99999}, r"tokenizer.ggml.eos_token_id=99999 is not a token id \(the vocab"),
        ({"tokenizer.ggml.bos_token_id": -1}, r"tokenizer.ggml.bos_token_id=-1 is not a token id"),
        ({"llama.attention.head_count": 0}, r"llama.attention.head_count=0 in the GGUF metadata must be a positive"),
        ({"llama.attention.head_count_kv": 0}, r"llama.attention.head_count_kv=0 in the GGUF metadata must be a posi"),
        ({"llama.block_count": 0}, r"llama.block_count=0 in the GGUF metadata must be a positive integer"),
        ({"llama.attention.head_count": 5}, r"llama.embedding_length=64 is not divisible by head_count=5"),
        ({"llama.context_length": "long"}, r"llama.context_length='long' in the GGUF metadata must be a positive"),
        ({"tokenizer.ggml.pre": "tekken"}, r"tokenizer.ggml.pre='tekken' is not a pre-tokenizer tg knows \('smollm'"),
    ],
)
def test_bad_metadata_is_named_at_load(tmp_path: pathlib.Path, metadata: dict, message: str) -> None:
    """Sizes that later code divides by and ids that index the vocabulary are checked when the file loads."""
    path = tmp_path / "bad.gguf"
    write_random_gguf(path, qtype="F32", n_layers=1, context_length=16, metadata=metadata)
    with pytest.raises(ValueError, match=message):
        load_model(path, "CPU")


def test_vocabulary_and_embedding_must_agree(tmp_path: pathlib.Path) -> None:
    """Token ids the model can sample must have a text, and every token an embedding row."""
    path = tmp_path / "bad.gguf"
    write_random_gguf(path, qtype="F32", n_layers=1, context_length=16, vocab_size=500)
    tokens = gguf_read_header(path).metadata["tokenizer.ggml.tokens"]
    write_random_gguf(
        path,
        qtype="F32",
        n_layers=1,
        context_length=16,
        vocab_size=500,
        metadata={"tokenizer.ggml.tokens": tokens[:490], "tokenizer.ggml.token_type": [1] * 490},
    )
    with pytest.raises(GGUFError, match="the vocabulary has 490 tokens, but token_embd.weight has 500 rows"):
        load_model(path, "CPU")
