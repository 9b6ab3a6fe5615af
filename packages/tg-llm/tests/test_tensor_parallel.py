"""A Llama split over CPU device sets (tensor parallel) gives one device's logits and greedy tokens; models that
cannot be split or do not fit are refused before any weight is copied.

`TG_MULTI_KIND=CUDA` runs the comparisons on CUDA:0.. (all-reduces through NCCL) against CUDA:0 alone, float32
both; they skip where the host has fewer GPUs. The other tests are about the CPU.
"""

from __future__ import annotations

import io
import json
import os
import pathlib

import numpy as np
import pytest

import tg_llm
from tg_llm import load_model, tensor_parallel
from tg_llm.cli import main
from tg_llm.random_model import write_random_gguf
from tg_uop import dtypes

KIND = os.getenv("TG_MULTI_KIND", "CPU")

# 8 heads, 4 kv heads, a vocabulary of 512: splits over 2 and 4 devices (the output head split by rows too)
SHAPE = dict(dim=64, n_heads=8, n_kv_heads=4, hidden_dim=128, n_layers=2, context_length=32)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("tp") / "m.gguf")
    write_random_gguf(path, qtype="F16", vocab_size=512, **SHAPE)  # type: ignore[arg-type]
    return path


def devices(n: int) -> tuple[str, ...]:
    return tuple(f"CPU:{i}" for i in range(n))


def kind_devices(n: int) -> tuple[str, ...]:
    """n devices of KIND; skips where the host has fewer."""
    if KIND == "CUDA":
        from tg_runtime.ops_cuda import device_count

        if device_count() < n:
            pytest.skip(f"needs {n} CUDA devices, {device_count()} present")
    return tuple(f"{KIND}:{i}" for i in range(n))


def check_equal(path: str, n: int) -> None:
    devs = kind_devices(n)
    one, _ = load_model(path, devs[0], dtypes.float32)
    split, _ = load_model(path, dtype=dtypes.float32, devices=devs)
    assert split.devices == tuple([KIND] + [f"{KIND}:{i}" for i in range(1, n)]) and split.device == KIND
    prompt = [5, 9, 13, 2, 7, 11]
    np.testing.assert_allclose(split.forward(prompt, 0).numpy(), one.forward(prompt, 0).numpy(), atol=5e-5)
    for pos in range(len(prompt), len(prompt) + 3):  # the jitted decode step: eager, capture, replay
        np.testing.assert_allclose(split.forward([pos], pos).numpy(), one.forward([pos], pos).numpy(), atol=5e-5)
    assert list(split.greedy_tokens(3, 9, 8)) == list(one.greedy_tokens(3, 9, 8))


@pytest.mark.parametrize("n", [2, 4])
def test_split_equals_one_device(model_file: str, n: int) -> None:
    check_equal(model_file, n)


def test_tied_head_biases_and_unsplit_vocabulary(tmp_path: pathlib.Path) -> None:
    """qwen2 (q/k/v biases, split with their rows), a tied head, a vocabulary of 461 rows (not even: replicated)."""
    path = str(tmp_path / "q.gguf")
    write_random_gguf(path, arch="qwen2", qtype="F32", qkv_bias=True, tied=True, **SHAPE)  # type: ignore[arg-type]
    check_equal(path, 2)


def test_shards_hold_their_slices(model_file: str) -> None:
    model, _ = load_model(model_file, devices=devices(2))
    wo, wq = model.params["blk.0.attn_output.weight"], model.params["blk.0.attn_q.weight"]
    assert [s.shape for s in wo.uop.src[:-1]] == [(64, 32), (64, 32)]  # columns (input features) split
    assert [s.shape for s in wq.uop.src[:-1]] == [(32, 64), (32, 64)]  # rows (heads) split
    assert [s.shape for s in model.caches[0].keys.uop.src[:-1]] == [(1, 2, 32, 8)] * 2  # kv heads split
    assert model.embedding.device == "CPU"  # the table on the first device only


def test_bad_input_is_refused_before_any_copy(model_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_copy(*_: object) -> None:
        raise AssertionError("a weight was copied")

    monkeypatch.setattr(tg_llm, "load_shards", no_copy)
    with pytest.raises(ValueError, match="8 attention heads do not split over 3 devices"):
        load_model(model_file, devices=devices(3))
    with pytest.raises(ValueError, match="mixed kinds"):
        load_model(model_file, devices=("CPU:0", "PYTHON"))
    with pytest.raises(ValueError, match="one device is named twice"):
        tensor_parallel.plan_devices(["CPU:0", "CPU"])
    with pytest.raises(ValueError, match="either devices"):
        tensor_parallel.plan_devices()
    monkeypatch.setattr(tensor_parallel, "free_bytes", lambda device: 1000)
    with pytest.raises(ValueError, match="needs ~0.0 GB of host memory over 2 devices, 0.0 GB is available"):
        load_model(model_file, devices=devices(2))


def test_memory_estimate(model_file: str) -> None:
    header = tensor_parallel.gguf_read_header(model_file)
    cfg = tg_llm.LlamaConfig.from_gguf(header.metadata, 512)
    one = tensor_parallel.model_bytes(header, cfg, devices(1), tg_llm.dtypes.float16)[0]
    two = tensor_parallel.model_bytes(header, cfg, devices(2), tg_llm.dtypes.float16)
    embedding = 512 * 64 * 2
    assert two[0] - two[1] == embedding and 2 * two[1] + embedding == one + 5 * 64 * 4  # 5 float32 norms on each


def test_quantized_file_is_refused(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "q8.gguf")
    write_random_gguf(path, qtype="Q8_0", **SHAPE)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is Q8_0; split models are read from F32, F16 or BF16 files"):
        load_model(path, devices=devices(2))


def test_cli_benchmark_with_tp(model_file: str) -> None:
    out = io.StringIO()
    assert (
        main(
            ["--model", model_file, "--tp", "2", "--device", "CPU", "--benchmark", "2", "--prompt-tokens", "4"],
            stdout=out,
        )
        == 0
    )
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [x["bench"] for x in lines][:3] == ["llm_load", "llm_prefill", "llm_decode"]
    assert lines[0]["params"]["device"] == "CPU,CPU:1" and lines[0]["value"] > 0


def test_cli_rejects_conflicting_flags(model_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--model", model_file, "--tp", "2", "--devices", "CPU:0,CPU:1"])
    assert "give one of them" in capsys.readouterr().err
    assert main(["--model", model_file, "--devices", "CPU:0,CPU:1,CPU:2", "--prompt", "hi"]) == 1
    assert "do not split over 3 devices" in capsys.readouterr().err


def test_decode_step_work(model_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode step runs two all-reduces per layer (after wo and after down), computes each layer once (the
    sharded KV-cache writes do not recompute the layers before them) and copies no cache to keep old values."""
    import tg_tensor.engine.inplace
    import tg_tensor.engine.realizer

    model, _ = load_model(model_file, devices=devices(2))
    model.forward([1, 2, 3], 0)
    kinds: list[str] = []
    copies: list[object] = []
    run, copy = tg_tensor.engine.realizer.run_collective, tg_tensor.engine.inplace.create_copy_kernel
    monkeypatch.setattr(
        tg_tensor.engine.realizer, "run_collective", lambda kind, *a: kinds.append(kind) or run(kind, *a)
    )
    monkeypatch.setattr(tg_tensor.engine.inplace, "create_copy_kernel", lambda *a: copies.append(a) or copy(*a))
    model.forward([4], 3)  # the jitted step's first (eager) run
    assert kinds == ["allreduce"] * 2 * model.cfg.n_layers and not copies


def test_big_model_writer(tmp_path: pathlib.Path) -> None:
    """tg_llm.big_model's hand-written GGUF: gguf's reader agrees on every tensor, tg loads it whole and split, and
    a second call reuses the file."""
    import gguf

    from tg_llm.big_model import file_bytes, write_big_gguf

    shape = dict(dim=64, n_layers=2, n_heads=8, n_kv_heads=4, hidden_dim=128, vocab_size=512, tied=False)
    path = str(tmp_path / "big.gguf")
    assert write_big_gguf(path, shape, context=32, workers=2) and not write_big_gguf(path, shape, context=32)
    assert pathlib.Path(path).stat().st_size == file_bytes(shape, 32)
    reader = gguf.GGUFReader(path)
    _, state = tensor_parallel.gguf_read_header(path), tg_llm.gguf_load(path, "CPU")[1]
    for t in reader.tensors:
        np.testing.assert_array_equal(np.asarray(t.data).reshape(state[t.name].shape), state[t.name].numpy())
    q = state["blk.0.attn_q.weight"].numpy()
    assert 0.0078 <= np.abs(q).min() and np.abs(q).max() < 0.032 and len({q[0, 0], q[1, 0], q[2, 0]}) > 1
    check_equal(path, 2)
