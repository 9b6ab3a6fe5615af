"""The GPT of tg_nn.models.gpt against a numpy reference: GPT-2 checkpoint loading, logits, gradients,
sampling, bad input, and a small model that learns Shakespeare."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from tg import Tensor, TinyJit, dtypes
from tg.nn.state import get_parameters, get_state_dict, safe_load
from tg_nn.models.gpt import GPT, GPTConfig, config_from_gpt2, load_gpt2
from tg_nn.models.sampling import sample
from tg_nn.optim import AdamW

CFG = GPTConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=8)


def random_gpt2_state(cfg: GPTConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """A GPT-2 state dict in Hugging Face's names and layouts, with random values."""
    rng = np.random.default_rng(seed)
    d, f32 = cfg.n_embd, np.float32
    s = {"wte.weight": rng.normal(0, 0.5, (cfg.vocab_size, d)), "wpe.weight": rng.normal(0, 0.5, (cfg.block_size, d))}
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        s[p + "ln_1.weight"], s[p + "ln_1.bias"] = 1 + rng.normal(0, 0.1, d), rng.normal(0, 0.1, d)
        s[p + "attn.c_attn.weight"] = rng.normal(0, 0.4, (d, 3 * d))
        s[p + "attn.c_attn.bias"] = rng.normal(0, 0.1, 3 * d)
        s[p + "attn.c_proj.weight"], s[p + "attn.c_proj.bias"] = rng.normal(0, 0.4, (d, d)), rng.normal(0, 0.1, d)
        s[p + "ln_2.weight"], s[p + "ln_2.bias"] = 1 + rng.normal(0, 0.1, d), rng.normal(0, 0.1, d)
        s[p + "mlp.c_fc.weight"], s[p + "mlp.c_fc.bias"] = rng.normal(0, 0.4, (d, 4 * d)), rng.normal(0, 0.1, 4 * d)
        s[p + "mlp.c_proj.weight"], s[p + "mlp.c_proj.bias"] = rng.normal(0, 0.4, (4 * d, d)), rng.normal(0, 0.1, d)
    s["ln_f.weight"], s["ln_f.bias"] = 1 + rng.normal(0, 0.1, d), rng.normal(0, 0.1, d)
    return {k: v.astype(f32) for k, v in s.items()}


def np_forward(s: dict[str, np.ndarray], idx: np.ndarray, cfg: GPTConfig) -> np.ndarray:
    """GPT-2's forward pass in float64 numpy: the reference."""
    s = {k: v.astype(np.float64) for k, v in s.items()}

    def ln(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + cfg.layer_norm_eps) * w + b

    def gelu(x: np.ndarray) -> np.ndarray:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    b, t = idx.shape
    nh, hd = cfg.n_head, cfg.n_embd // cfg.n_head
    x = s["wte.weight"][idx] + s["wpe.weight"][np.arange(t)]
    mask = np.tril(np.ones((t, t), bool))
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        h = ln(x, s[p + "ln_1.weight"], s[p + "ln_1.bias"])
        qkv = h @ s[p + "attn.c_attn.weight"] + s[p + "attn.c_attn.bias"]
        q, k, v = (qkv[..., j * cfg.n_embd : (j + 1) * cfg.n_embd] for j in range(3))
        q, k, v = (a.reshape(b, t, nh, hd).transpose(0, 2, 1, 3) for a in (q, k, v))
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
        att = np.where(mask, att, -np.inf)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, cfg.n_embd)
        x = x + y @ s[p + "attn.c_proj.weight"] + s[p + "attn.c_proj.bias"]
        h = ln(x, s[p + "ln_2.weight"], s[p + "ln_2.bias"])
        m = gelu(h @ s[p + "mlp.c_fc.weight"] + s[p + "mlp.c_fc.bias"])
        x = x + m @ s[p + "mlp.c_proj.weight"] + s[p + "mlp.c_proj.bias"]
    return ln(x, s["ln_f.weight"], s["ln_f.bias"]) @ s["wte.weight"].T


def np_loss(s: dict[str, np.ndarray], idx: np.ndarray, tgt: np.ndarray, cfg: GPTConfig) -> float:
    logits = np_forward(s, idx, cfg).reshape(-1, cfg.vocab_size)
    logits = logits - logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(-logp[np.arange(len(logp)), tgt.reshape(-1)].mean())


def write_hf_file(path: str, state: dict[str, np.ndarray]) -> None:
    """Write the state as the Hugging Face GPT2LMHeadModel would: `transformer.` prefix, mask buffers."""
    from safetensors.numpy import save_file

    out = {f"transformer.{k}": v for k, v in state.items()}
    for i in range(CFG.n_layer):
        out[f"transformer.h.{i}.attn.bias"] = np.tril(np.ones((1, 1, CFG.block_size, CFG.block_size), np.float32))
    out["lm_head.weight"] = state["wte.weight"]
    save_file(out, path)


def test_gpt2_checkpoint_matches_numpy_reference(tmp_path):
    state = random_gpt2_state(CFG)
    path = str(tmp_path / "model.safetensors")
    write_hf_file(path, state)
    loaded = safe_load(path)
    cfg = config_from_gpt2(loaded, n_head=CFG.n_head)
    assert cfg == CFG
    model = load_gpt2(GPT(cfg), loaded)
    assert sorted(get_state_dict(model)) == sorted(state)
    idx = np.random.default_rng(1).integers(0, CFG.vocab_size, (3, CFG.block_size))
    got = model(Tensor(idx.astype(np.int32))).numpy()
    np.testing.assert_allclose(got, np_forward(state, idx, CFG), rtol=2e-4, atol=2e-4)
    short = idx[:, :5]  # a shorter sequence: same answer as the reference on it
    got_short = model(Tensor(short.astype(np.int32))).numpy()
    np.testing.assert_allclose(got_short, np_forward(state, short, CFG), rtol=2e-4, atol=2e-4)


def test_checkpoint_errors_name_the_key(tmp_path):
    state = random_gpt2_state(CFG)
    missing = {k: Tensor(v) for k, v in state.items() if k != "h.1.mlp.c_fc.bias"}
    with pytest.raises(ValueError, match=r"missing keys: \['h.1.mlp.c_fc.bias'\]"):
        load_gpt2(GPT(CFG), missing)
    bad = {k: Tensor(v) for k, v in state.items()}
    bad["h.0.attn.c_attn.weight"] = Tensor(state["h.0.attn.c_attn.weight"].T.copy())  # torch Linear layout
    with pytest.raises(ValueError, match=r"h\.0\.attn\.c_attn\.weight: model \(8, 24\) != state_dict \(24, 8\)"):
        load_gpt2(GPT(CFG), bad)
    extra = {k: Tensor(v) for k, v in state.items()} | {"h.7.ln_1.weight": Tensor(np.ones(8, np.float32))}
    with pytest.raises(ValueError, match="unexpected keys"):
        load_gpt2(GPT(CFG), extra)


def test_bad_input():
    model = GPT(CFG)
    with pytest.raises(ValueError, match="sequence length 9"):
        model(Tensor(np.zeros((1, 9), np.int32)))
    with pytest.raises(ValueError, match="prompt has 9 tokens"):
        model.generate([1] * 9, 1)
    with pytest.raises(ValueError, match="token 13 is not an id"):
        model.generate([1, 13], 1)
    with pytest.raises(ValueError, match="n_embd=10 must be divisible by n_head=3"):
        GPTConfig(n_embd=10, n_head=3)
    with pytest.raises(ValueError, match="block_size=0"):
        GPTConfig(block_size=0)


def test_gradients_against_numpy_finite_differences():
    """d loss / d (embedding, attention, LayerNorm, MLP weights) against central differences of the
    float64 numpy reference."""
    state = random_gpt2_state(CFG, seed=3)
    model = load_gpt2(GPT(CFG), {k: Tensor(v) for k, v in state.items()})
    rng = np.random.default_rng(4)
    idx = rng.integers(0, CFG.vocab_size, (2, 6))
    tgt = rng.integers(0, CFG.vocab_size, (2, 6))
    Tensor.training = True
    try:
        params = get_state_dict(model)
        for p in params.values():
            p.requires_grad = True
        loss = model.loss(Tensor(idx.astype(np.int32)), Tensor(tgt.astype(np.int32)))
        loss.backward()
        assert abs(loss.item() - np_loss(state, idx, tgt, CFG)) < 1e-4
        checks = [
            "wte.weight",
            "wpe.weight",
            "h.0.attn.c_attn.weight",
            "h.1.attn.c_proj.bias",
            "h.0.ln_1.weight",
            "h.1.ln_2.bias",
            "h.1.mlp.c_fc.weight",
            "ln_f.weight",
        ]
        for name in checks:
            grad = params[name].grad
            assert grad is not None, name
            g = grad.numpy()
            for flat in rng.choice(state[name].size, 3, replace=False):
                pos = np.unravel_index(flat, state[name].shape)
                eps = 1e-3
                plus = {**state, name: state[name].astype(np.float64).copy()}
                minus = {**state, name: state[name].astype(np.float64).copy()}
                plus[name][pos] += eps
                minus[name][pos] -= eps
                fd = (np_loss(plus, idx, tgt, CFG) - np_loss(minus, idx, tgt, CFG)) / (2 * eps)
                assert abs(g[pos] - fd) < 2e-3 + 2e-2 * abs(fd), (name, pos, g[pos], fd)
    finally:
        Tensor.training = False


def test_sampling():
    rng = np.random.default_rng(0)
    logits = np.array([0.0, 5.0, 1.0, 4.9])
    assert sample(logits, 0.0, rng=rng) == 1
    draws = {sample(logits, 1.0, top_k=2, rng=rng) for _ in range(200)}
    assert draws == {1, 3}  # top-k keeps the two best only
    with pytest.raises(ValueError, match="top_k=0"):
        GPT(CFG).generate([1], 1, top_k=0)


def test_generate_greedy_matches_full_forward():
    model = load_gpt2(GPT(CFG), {k: Tensor(v) for k, v in random_gpt2_state(CFG, 5).items()})
    out = model.generate([1, 2, 3], 4, temperature=0.0)
    state = random_gpt2_state(CFG, 5)
    toks = [1, 2, 3]
    for _ in range(4):
        toks.append(int(np.argmax(np_forward(state, np.array([toks[-CFG.block_size :]]), CFG)[0, -1])))
    assert out == toks


def test_small_gpt_learns_shakespeare(shakespeare_dir):
    from tg.nn.datasets import shakespeare

    Tensor.manual_seed(0)
    train, _, vocab = shakespeare(shakespeare_dir)
    data = train[:20000].numpy()
    cfg = GPTConfig(vocab_size=len(vocab), block_size=32, n_layer=2, n_head=2, n_embd=32)
    model = GPT(cfg)
    opt = AdamW(get_parameters(model), lr=3e-3, weight_decay=0.0)
    rng = np.random.default_rng(0)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = model.loss(x, y)
            loss.backward()
            opt.step()
        return loss.realize()

    losses = []
    for _ in range(40):
        starts = rng.integers(0, len(data) - cfg.block_size - 1, 16)
        x = np.stack([data[s : s + cfg.block_size] for s in starts])
        y = np.stack([data[s + 1 : s + cfg.block_size + 1] for s in starts])
        losses.append(step(Tensor(x, dtype=dtypes.int32), Tensor(y, dtype=dtypes.int32)).item())
    assert losses[0] > math.log(len(vocab)) - 0.5  # starts near uniform
    assert np.mean(losses[-5:]) < 3.3, losses  # and learns the character frequencies and more
    assert os.path.isdir(shakespeare_dir)


def test_kv_cache_logits_and_greedy_generation_match_no_cache():
    cfg = GPTConfig(vocab_size=13, block_size=16, n_layer=2, n_head=2, n_embd=8)
    state = random_gpt2_state(cfg, seed=7)
    model = load_gpt2(GPT(cfg), {k: Tensor(v) for k, v in state.items()})
    prompt = [3, 1, 4, 1, 5]
    model.reset_cache(1)
    got = model.forward_cached(Tensor([prompt], dtype=dtypes.int32), Tensor([0], dtype=dtypes.int32)).numpy()
    np.testing.assert_allclose(got, np_forward(state, np.array([prompt]), cfg), rtol=2e-4, atol=2e-4)
    toks = list(prompt)
    for tok in (9, 2, 6):  # one token at a time at positions 5, 6, 7
        step = model.forward_cached(Tensor([[tok]], dtype=dtypes.int32), Tensor([len(toks)], dtype=dtypes.int32))
        toks.append(tok)
        want = np_forward(state, np.array([toks]), cfg)[0, -1]
        np.testing.assert_allclose(step.numpy()[0, 0], want, rtol=2e-4, atol=2e-4)
    cached = model.generate_cached(prompt, 11, temperature=0.0)
    assert cached == model.generate(prompt, 11, temperature=0.0)
    assert len(set(cached[len(prompt) :])) > 1  # a real sequence, not one repeated token


def test_kv_cache_decode_step_compiles_once():
    from tg_runtime.runner import _runner_cache

    cfg = GPTConfig(vocab_size=13, block_size=32, n_layer=2, n_head=2, n_embd=8)
    model = load_gpt2(GPT(cfg), {k: Tensor(v) for k, v in random_gpt2_state(cfg, seed=8).items()})
    model.generate_cached([1, 2, 3], 4, temperature=0.0)
    kernels = len(_runner_cache)
    model.generate_cached([4, 5, 6], 20, temperature=1.0, seed=1)  # 16 more positions: the same kernels
    assert len(_runner_cache) == kernels
    with pytest.raises(ValueError, match=r"prompt \(3 tokens\) plus 30 new tokens exceed the context"):
        model.generate_cached([1, 2, 3], 30)
