"""tg's Llama on tiny random GGUF models equals a numpy Llama on the weights gguf itself dequantizes."""

from __future__ import annotations

import pathlib

import gguf
import llm_reference as ref
import numpy as np
import pytest

from tg_llm import load_model
from tg_llm.random_model import write_random_gguf
from tg_nn.gguf import gguf_load

# every ggml type tg reads; K-quants need rows that are multiples of 256
QTYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"]
SHAPE = dict(dim=256, hidden_dim=256, n_heads=4, n_kv_heads=2, n_layers=2, context_length=32)


@pytest.mark.parametrize("qtype", QTYPES)
def test_dequantize_matches_gguf(tmp_path: pathlib.Path, qtype: str) -> None:
    path = str(tmp_path / "m.gguf")
    write_random_gguf(path, qtype=qtype, dim=256, hidden_dim=256, n_heads=4, n_kv_heads=2, n_layers=1, tied=True)
    _, want = ref.read_weights(path)
    _, got = gguf_load(path, "CPU")
    for name in ("token_embd.weight", "blk.0.ffn_down.weight", "blk.0.attn_norm.weight"):
        np.testing.assert_array_equal(got[name].numpy().astype(np.float32), want[name], err_msg=f"{qtype} {name}")


# the architectures' variants: GQA and rope styles, biases, per-head norms, tied heads, llama3 rope factors
VARIANTS = {
    "F32": dict(arch="llama"),
    "F16": dict(arch="qwen2", qkv_bias=True, tied=True),
    "BF16": dict(arch="qwen3", qk_norm=True),
    "Q8_0": dict(arch="llama", rope_freqs=True, tied=True),
    "Q4_0": dict(arch="mistral"),
    "Q4_1": dict(arch="qwen2", qkv_bias=True),
    "Q4_K": dict(arch="llama", tokenizer="llama"),
    "Q5_K": dict(arch="qwen3", qk_norm=True, tied=True),
    "Q6_K": dict(arch="llama", rope_theta=500000.0),
}


@pytest.mark.parametrize("qtype", QTYPES)
def test_forward_and_greedy_decode_match_numpy(tmp_path: pathlib.Path, qtype: str) -> None:
    """Weights dequantized at load (keep_quantized=False): float32 all through, tight tolerances."""
    path = str(tmp_path / "m.gguf")
    write_random_gguf(path, qtype=qtype, seed=QTYPES.index(qtype), **SHAPE, **VARIANTS[qtype])  # type: ignore[arg-type]
    meta, weights = ref.read_weights(path)
    model, tok = load_model(path, "CPU", keep_quantized=False)
    prompt = tok.encode("The quick brown fox")[:6]
    got = model.forward(prompt, 0).numpy()
    want = ref.forward(meta, weights, prompt)
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, atol=2e-4 * scale, rtol=1e-3)
    toks = list(prompt)
    for _ in range(4):  # greedy decode through the jitted one-token step; the reference recomputes everything
        nxt = int(np.argmax(ref.forward(meta, weights, toks)[-1]))
        step = model.forward([toks[-1]], len(toks) - 1).numpy()[0] if len(toks) > len(prompt) else got[-1]
        assert int(np.argmax(step)) == nxt
        toks.append(nxt)
    last = model.forward([toks[-1]], len(toks) - 1).numpy()[0]
    np.testing.assert_allclose(last, ref.forward(meta, weights, toks)[-1], atol=2e-4 * scale, rtol=1e-3)


# with int8_activations the CPU's fused kernels round each 32-value block of the activations to 8 bits (as llama.cpp
# does): the logits of these random models move by up to ~2% of their largest value; a wrong unpacking by all of it
KEPT_ATOL = 5e-2


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("qtype", QTYPES)
def test_weights_kept_quantized_match_numpy(tmp_path: pathlib.Path, qtype: str, int8: bool) -> None:
    """The default load (weights kept in their blocks, float32 activations: the reference's tolerances and greedy
    tokens), and with int8 activations (a tolerance for their rounding): prompts and decode steps."""
    path = str(tmp_path / "m.gguf")
    write_random_gguf(path, qtype=qtype, seed=QTYPES.index(qtype), **SHAPE, **VARIANTS[qtype])  # type: ignore[arg-type]
    meta, weights = ref.read_weights(path)
    model, tok = load_model(path, "CPU", int8_activations=int8)
    prompt = tok.encode("The quick brown fox")[:6]
    want = ref.forward(meta, weights, prompt)
    scale = np.abs(want).max()
    tol = dict(atol=KEPT_ATOL * scale, rtol=0) if int8 else dict(atol=2e-4 * scale, rtol=1e-3)
    got = model.forward(prompt, 0).numpy()
    np.testing.assert_allclose(got, want, **tol)  # type: ignore[arg-type]
    np.testing.assert_allclose(model.forward(prompt, 0, all_logits=False).numpy(), want[-1:], **tol)  # type: ignore[arg-type]
    toks = list(prompt)
    for nxt in (7, 300, 11):  # decode steps at positions 6, 7, 8 through the jitted step
        toks.append(nxt)
        step = model.forward([nxt], len(toks) - 1).numpy()[0]
        want_step = ref.forward(meta, weights, toks)[-1]
        np.testing.assert_allclose(step, want_step, **tol)  # type: ignore[arg-type]
        if not int8:
            assert int(np.argmax(step)) == int(np.argmax(want_step))


def test_gguf_type_names_agree_with_gguf() -> None:
    from tg_nn.gguf_format import GGML_TYPES

    for tid, (name, block, size) in GGML_TYPES.items():  # ids and block sizes of every type gguf knows
        q = gguf.GGMLQuantizationType(tid)
        assert q.name == name and gguf.GGML_QUANT_SIZES[q] == (block, size)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K"])
def test_weights_kept_quantized_stay_in_their_blocks(tmp_path: pathlib.Path, qtype: str) -> None:
    """keep_quantized: the blocks stay on the device, and every matrix product of a decode step is one fused kernel
    that reads them (qkv, output, gate-up, down per layer, and the head): no dequantization kernel, no float copy."""
    path = str(tmp_path / "m.gguf")
    write_random_gguf(path, qtype=qtype, **SHAPE)  # type: ignore[arg-type]
    (plain, tok), (kept, _) = load_model(path, "CPU", keep_quantized=False), load_model(path, "CPU")
    assert kept.weight_bytes < plain.weight_bytes / 3  # Q8_0: 34 bytes per 32 weights, vs 4 per weight
    prompt = tok.encode("Hello there")
    a, b = kept.forward(prompt, 0).numpy(), plain.forward(prompt, 0).numpy()
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.abs(b).max())
    for pos in range(len(prompt), len(prompt) + 3):
        a, b = kept.forward([7], pos).numpy(), plain.forward([7], pos).numpy()
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.abs(b).max())
    names = [launch.runner.spec.name for launch in kept._decode.jit_cache if launch.runner is not None]
    fused = [n for n in names if n.startswith("qmm_")]
    assert len(fused) == 4 * kept.cfg.n_layers + 1, names
    assert f"qmm_f_{qtype}_1_{kept.cfg.vocab_size}_{kept.cfg.dim}" in fused  # the output head, in its blocks


def test_float16_weights_and_cache(tmp_path: pathlib.Path) -> None:
    """dtype=float16 (the GPU default): weights and KV cache in half, activations and logits in float32."""
    from tg_uop import dtypes

    path = str(tmp_path / "m.gguf")
    write_random_gguf(path, qtype="F16", **SHAPE)  # type: ignore[arg-type]
    meta, weights = ref.read_weights(path)
    model, tok = load_model(path, "CPU", dtype=dtypes.float16)  # (an F16 file: nothing to keep quantized)
    assert model.caches[0].keys.dtype == dtypes.float16 and model.params["blk.0.attn_q.weight"].dtype == dtypes.float16
    toks = tok.encode("Hello there")
    got = np.concatenate([model.forward(toks, 0).numpy(), model.forward([5], len(toks)).numpy()])
    want = ref.forward(meta, weights, toks + [5])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=5e-3 * np.abs(want).max(), rtol=1e-2)


def test_greedy_tokens_and_fused_projections(tmp_path: pathlib.Path) -> None:
    """Llama.greedy_tokens (steps chained on the device) gives forward's greedy tokens; q, k, v and gate, up are
    each one joined matrix whose row ranges are the file's tensors, and weight_bytes counts every weight once."""
    path = str(tmp_path / "m.gguf")
    write_random_gguf(path, qtype="F32", **SHAPE)  # type: ignore[arg-type]
    (a, _), (b, _) = load_model(path, "CPU"), load_model(path, "CPU")
    _, want = ref.read_weights(path)
    blk = a.blocks[0]
    assert blk.wqkv is not None and blk.w_gate_up is not None
    np.testing.assert_array_equal(blk.wqkv.numpy(), np.concatenate([want[f"blk.0.attn_{n}.weight"] for n in "qkv"]))
    np.testing.assert_array_equal(a.params["blk.0.attn_k.weight"].numpy(), want["blk.0.attn_k.weight"])
    assert a.weight_bytes == sum(w.nbytes for k, w in want.items() if k != "token_embd.weight") + (
        want["token_embd.weight"].nbytes if "output.weight" not in want else 0
    )
    prompt = [5, 9, 2]
    tok = int(a.forward(prompt, 0).numpy()[-1].argmax())
    assert int(b.forward(prompt, 0).numpy()[-1].argmax()) == tok
    want = []
    for pos in range(len(prompt), len(prompt) + 9):
        want.append(int(a.forward([want[-1] if want else tok], pos).numpy()[0].argmax()))
    stream = b.greedy_tokens(tok, len(prompt), 9, chunk=4)
    first = [next(stream) for _ in range(5)]  # stopped inside its second chunk, then continued by a new call
    stream.close()
    assert first + list(b.greedy_tokens(first[-1], len(prompt) + 5, 4, chunk=3)) == want
    with pytest.raises(ValueError, match="exceed the context"):
        next(b.greedy_tokens(1, 30, 5))


def test_argmax_rows_matches_numpy() -> None:
    from tg_llm.model import argmax_rows
    from tg_tensor import Tensor

    rng = np.random.default_rng(1)
    for shape in [(1, 128256), (3, 1000), (2, 256), (1, 5)]:
        a = rng.standard_normal(shape).astype(np.float32)
        a[0, [shape[1] // 3, shape[1] - 1]] = 9.0  # a tie across chunks: the first index wins, as numpy's
        np.testing.assert_array_equal(argmax_rows(Tensor(a)).numpy(), a.argmax(-1), err_msg=str(shape))


def test_decode_reads_the_cache_up_to_its_position(tmp_path: pathlib.Path) -> None:
    """One captured decode step serves every position, and its attention kernels take the position as a variable
    (they read pos + 1 cache rows, not the whole context): the same recording at positions 3..20 of a 64 context."""
    from tg_runtime.runner import _runner_cache

    path = str(tmp_path / "m.gguf")
    write_random_gguf(path, qtype="F32", **{**SHAPE, "context_length": 64})  # type: ignore[arg-type]
    model, _ = load_model(path, "CPU")
    for pos in range(3):
        model.forward([5], pos)
    compiled = len(_runner_cache)
    steps = [model.forward([5 + pos % 3], pos).numpy() for pos in range(3, 21)]
    assert len(_runner_cache) == compiled and len(model._decode.captures) == 1
    with_pos = [launch for launch in model._decode.jit_cache if launch.runner and launch.runner.spec.vars]
    assert len(with_pos) >= 2 * model.cfg.n_layers  # (the scores and the weighted values of each layer, at least)
    assert all(v.arg[0] == "pos" for launch in with_pos for v in launch.runner.spec.vars)
    assert all(s.shape == (1, model.cfg.vocab_size) for s in steps)


def test_captured_prefill_gives_the_logits_of_the_uncaptured_one(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompt chunks of up to PREFILL_JIT_MAX padded tokens replay a captured step (one per padded length, from 0 or
    from a bound position): every call (warm-up, capture, replays with other tokens and positions) gives the logits
    of a model that runs them uncaptured, to the last bit, and its cache rows (the decode step after them agrees)."""
    import tg_llm.model

    path = str(tmp_path / "m.gguf")
    write_random_gguf(path, qtype="Q4_1", **{**SHAPE, "context_length": 64})  # type: ignore[arg-type]
    captured, _ = load_model(path, "CPU")
    plain, _ = load_model(path, "CPU")
    rng = np.random.default_rng(0)
    for start, n in ((0, 5), (0, 7), (0, 3), (0, 12), (9, 4), (17, 6), (3, 8), (0, 30), (20, 10), (5, 11)):
        tokens = [int(t) for t in rng.integers(0, captured.cfg.vocab_size, n)]
        monkeypatch.setattr(tg_llm.model, "PREFILL_JIT_MAX", 0)
        want = plain.forward(tokens, start, all_logits=False).numpy()
        after = plain.forward([7], start + n).numpy()
        monkeypatch.undo()
        got = captured.forward(tokens, start, all_logits=False).numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
        assert got.argmax() == want.argmax()
        np.testing.assert_allclose(captured.forward([7], start + n).numpy(), after, rtol=0, atol=1e-5)
    assert {8, 16, 32} <= {size for size, _ in captured._prefills} and not plain._prefills


@pytest.mark.parametrize("qtype", ["F16", "Q8_0"])
def test_gpu_decode_products_are_fused_kernels(tmp_path: pathlib.Path, qtype: str) -> None:
    """On a GPU device (OpenCL here, through PoCL) a decode step's products are one kernel each, the norms (half
    weights: tg_nn.matvec), the residual adds and the SwiGLU activation inside them (blocks kept quantized too:
    tg_nn.quant's GPU kernels), and its logits and greedy tokens are the numpy Llama's."""
    from tg_runtime import Device
    from tg_runtime.device import DeviceUnavailableError
    from tg_uop import dtypes

    try:
        Device["CL"]
    except DeviceUnavailableError as e:  # (no OpenCL platform: the bare-machine pass)
        pytest.skip(str(e))
    path = str(tmp_path / "m.gguf")
    write_random_gguf(path, qtype=qtype, **SHAPE)  # type: ignore[arg-type]
    meta, weights = ref.read_weights(path)
    model, _ = load_model(path, "CL", dtype=dtypes.float16, keep_quantized=qtype != "F16")
    got, tokens = [model.forward([5, 9, 2], 0).numpy()], [5, 9, 2]
    for _ in range(3):
        tokens.append(int(got[-1][-1].argmax()))
        got.append(model.forward([tokens[-1]], len(tokens) - 1).numpy())
    want = ref.forward(meta, weights, tokens)
    np.testing.assert_allclose(np.concatenate(got), want, atol=5e-3 * np.abs(want).max(), rtol=1e-2)
    chained = list(model.greedy_tokens(tokens[-1], len(tokens) - 1, 2))  # (the captured decode step)
    assert chained[0] == int(got[-1][0].argmax())
    names = [launch.runner.spec.name for launch in model._chain.jit_cache if launch.runner is not None]
    layers = SHAPE["n_layers"]
    if qtype == "F16":
        kinds = {"matvec_half_1_512_256_norm": layers, "matvec_half_1_512_256_norm_glu": layers}
        kinds |= {"matvec_half_1_256_256_res": 2 * layers}  # (q/k/v; gate/up; o and down)
        assert f"matvec_half_1_{model.cfg.vocab_size}_256_norm" in names, names  # (the head, after the final norm)
    else:
        kinds = {"qmm_Q8_0_1_512_256_glu": layers, "qmm_Q8_0_1_256_256_res": 2 * layers}
    for name, count in kinds.items():
        assert names.count(name) == count, names
