"""A GPT (decoder-only transformer) whose parameter names and layouts are those of Hugging Face's GPT-2
safetensors files, so a local GPT-2 checkpoint loads with `safe_load` + `load_gpt2`.

Layout as in GPT-2: token and position embeddings, pre-norm blocks (LayerNorm, causal multi-head
attention, LayerNorm, a GELU MLP), a final LayerNorm, and the output projection tied to the token
embedding. GPT-2's `Conv1D` layers keep their weight as (in, out), and so do these.

>>> from tg import Tensor
>>> from tg_nn.models.gpt import GPT, GPTConfig
>>> model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8))
>>> model(Tensor([[1, 2, 3]])).shape
(1, 3, 11)
>>> sorted(get_state_dict(model))[:3]
['h.0.attn.c_attn.bias', 'h.0.attn.c_attn.weight', 'h.0.attn.c_proj.bias']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tg_nn.layers import Embedding
from tg_nn.models.kv_cache import KVCache, causal_mask
from tg_nn.models.sampling import sample
from tg_nn.norm import LayerNorm
from tg_nn.state import get_state_dict, load_state_dict  # noqa: F401  (get_state_dict: the doctest)
from tg_nn.util import own_buffer
from tg_tensor import Tensor, TinyJit
from tg_uop import UOp, dtypes
from tg_uop.uop import sint


@dataclass(frozen=True)
class GPTConfig:
    """The shape of a GPT. GPT-2 small is (50257, 1024, 12, 12, 768)."""

    vocab_size: int = 50257
    block_size: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    layer_norm_eps: float = 1e-5
    # the dtype of the matmuls and the attention ("bfloat16", "float16": mixed precision, on tensor cores); the
    # weights, the optimizer's state, the layer norms, the softmax and the loss stay float32
    compute_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.compute_dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"GPTConfig: compute_dtype={self.compute_dtype!r} must be float32, bfloat16 or float16")
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"GPTConfig: {name}={v!r} must be a positive int")
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig: n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig: dropout={self.dropout!r} must be in [0, 1)")


class Conv1D:
    """GPT-2's linear layer: y = x @ weight + bias with weight stored as (in, out)."""

    def __init__(self, n_in: int, n_out: int, std: float = 0.02, compute_dtype: str = "float32") -> None:
        self.weight = own_buffer(Tensor.normal(n_in, n_out, std=std))
        self.bias = own_buffer(Tensor.zeros(n_out))
        self.compute_dtype = compute_dtype

    def __call__(self, x: Tensor) -> Tensor:
        return mixed_matmul(x, self.weight, self.compute_dtype) + self.bias


def mixed_matmul(x: Tensor, w: Tensor, compute_dtype: str) -> Tensor:
    """x @ w with both operands in `compute_dtype` (float32: as they are), the result float32."""
    if compute_dtype == "float32":
        return x @ w
    return (x.cast(compute_dtype) @ w.cast(compute_dtype)).float()


class Attention:
    """Causal multi-head self-attention with GPT-2's fused q/k/v projection (`c_attn`)."""

    def __init__(self, cfg: GPTConfig) -> None:
        self.n_head, self.n_embd, self.dropout = cfg.n_head, cfg.n_embd, cfg.dropout
        self.c_attn = Conv1D(cfg.n_embd, 3 * cfg.n_embd, compute_dtype=cfg.compute_dtype)
        proj_std = 0.02 / math.sqrt(2 * cfg.n_layer)
        self.c_proj = Conv1D(cfg.n_embd, cfg.n_embd, std=proj_std, compute_dtype=cfg.compute_dtype)
        self.compute_dtype = cfg.compute_dtype

    def __call__(self, x: Tensor, cache: KVCache | None = None, pos: sint = 0) -> Tensor:
        """Attention over `x` (batch, time, embd); with `cache`, the keys and values of `x` are written
        into it at positions `pos`..`pos`+time-1 (an int or a bound Variable) and the queries attend to the cached
        positions 0..pos+time-1, each to those <= its own."""
        b, t, c = (int(s) for s in x.shape)
        hd = c // self.n_head
        # (split along the features, as GPT-2 does: the gradient of q, k and v is then one (b, t, 3c) buffer, the
        # plain matmul operand of c_attn's two gradient matmuls; indexing a (3, b, heads, t, hd) view left it in
        # that layout, read through a view that no matmul tile takes)
        q, k, v = (u.reshape(b, t, self.n_head, hd).transpose(1, 2) for u in self.c_attn(x).split(c, dim=-1))
        if cache is None:
            # heads-major copies (in the compute dtype): the attention's six matmuls (three in the backward) then read
            # plain (t, head_dim) operands; through the split's strided views they ran at a fifth of the speed
            q, k, v = (u.cast(self.compute_dtype).contiguous() for u in (q, k, v))
        if cache is None and self.compute_dtype != "float32":
            y = _mixed_causal_attention(q, k, v, self.compute_dtype)
        elif cache is None:
            y = q.scaled_dot_product_attention(k, v, is_causal=True)
        else:
            keys, values = cache.update(k, v, pos)
            mask = causal_mask(pos, t, device=x.device) if t > 1 else None  # (one query sees every row it reads)
            y = q.scaled_dot_product_attention(keys, values, attn_mask=mask)
        y = y.permute(0, 2, 1, 3).reshape(b, t, c)
        if cache is None:
            # c_proj and its weight gradient then read a plain (b*t, c) operand, not the heads' layout (a decode
            # step's one position is in that layout already: no copy kernel there)
            y = y.contiguous()
        return self.c_proj(y).dropout(self.dropout)


def _mixed_causal_attention(q: Tensor, k: Tensor, v: Tensor, compute_dtype: str) -> Tensor:
    """Causal attention with its two products in `compute_dtype` and the softmax in float32 (the result float32)."""
    t, hd = int(q.shape[-2]), int(q.shape[-1])
    scores = (q.cast(compute_dtype) @ k.cast(compute_dtype).transpose(-2, -1)).float() / math.sqrt(hd)
    causal = Tensor.ones(t, t, dtype=dtypes.bool, device=q.device).tril()
    weights = causal.where(scores, -math.inf).softmax(-1)
    return (weights.cast(compute_dtype) @ v.cast(compute_dtype)).float()


class MLP:
    def __init__(self, cfg: GPTConfig) -> None:
        self.c_fc = Conv1D(cfg.n_embd, 4 * cfg.n_embd, compute_dtype=cfg.compute_dtype)
        self.c_proj = Conv1D(
            4 * cfg.n_embd, cfg.n_embd, std=0.02 / math.sqrt(2 * cfg.n_layer), compute_dtype=cfg.compute_dtype
        )
        self.dropout = cfg.dropout

    def __call__(self, x: Tensor) -> Tensor:
        return self.c_proj(self.c_fc(x).gelu()).dropout(self.dropout)


class Block:
    """x + attn(ln_1(x)), then + mlp(ln_2(x)) (pre-norm, as GPT-2)."""

    def __init__(self, cfg: GPTConfig) -> None:
        self.ln_1 = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.attn = Attention(cfg)
        self.ln_2 = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.mlp = MLP(cfg)

    def __call__(self, x: Tensor, cache: KVCache | None = None, pos: sint = 0) -> Tensor:
        x = x + self.attn(self.ln_1(x), cache, pos)
        return x + self.mlp(self.ln_2(x))


class GPT:
    """The model: `model(idx)` maps (batch, time) token ids to (batch, time, vocab) logits."""

    def __init__(self, cfg: GPTConfig) -> None:
        self.config = cfg
        self.wte = Embedding(cfg.vocab_size, cfg.n_embd)
        self.wte.weight = own_buffer(Tensor.normal(cfg.vocab_size, cfg.n_embd, std=0.02))
        self.wpe = Embedding(cfg.block_size, cfg.n_embd)
        self.wpe.weight = own_buffer(Tensor.normal(cfg.block_size, cfg.n_embd, std=0.01))
        self.h = [Block(cfg) for _ in range(cfg.n_layer)]
        self.ln_f = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self._window_step: TinyJit[Tensor] | None = None
        self._decode_step: TinyJit[Tensor] | None = None
        self.caches: list[KVCache] = []

    def __call__(self, idx: Tensor) -> Tensor:
        if idx.ndim != 2:
            raise ValueError(f"GPT: expected token ids of shape (batch, time), got {idx.shape}")
        t = int(idx.shape[1])
        if not 1 <= t <= self.config.block_size:
            raise ValueError(f"GPT: sequence length {t} must be in 1..block_size={self.config.block_size}")
        pos = Tensor.arange(t, device=idx.device).reshape(1, t)
        x = (self.wte(idx) + self.wpe(pos)).dropout(self.config.dropout)
        for block in self.h:
            x = block(x)
        return mixed_matmul(self.ln_f(x), self.wte.weight.T, self.config.compute_dtype)

    def forward_cached(self, idx: Tensor, pos: sint | Tensor) -> Tensor:
        """Logits of `idx` (batch, t) at positions pos..pos+t-1, reading and extending the KV caches (see
        `reset_cache`); `pos` an int or a bound Variable (one jitted step for every position: the attention reads
        pos+t cache rows, a symbolic length), or an int32 Tensor of shape (1,) (read to the host). Realizes the
        logits and the caches."""
        if not self.caches:
            raise RuntimeError("forward_cached: call reset_cache(batch) first")
        if isinstance(pos, Tensor):
            pos = int(pos.reshape(-1)[0].item())
        t = int(idx.shape[1])
        offs = Tensor.arange(t, device=idx.device).reshape(1, t) + pos
        x = self.wte(idx) + self.wpe(offs)
        for block, cache in zip(self.h, self.caches):
            x = block(x, cache, pos)
        logits = self.ln_f(x) @ self.wte.weight.T
        Tensor.realize(logits, *[c.keys for c in self.caches], *[c.values for c in self.caches])
        return logits

    def reset_cache(self, batch: int = 1) -> None:
        """Empty KV caches (kv_cache.KVCache, one per layer) for `batch` sequences of up to block_size tokens."""
        cfg = self.config
        hd = cfg.n_embd // cfg.n_head
        if self.caches and int(self.caches[0].keys.shape[0]) == batch:
            for c in self.caches:  # in place: a captured decode step keeps reading these buffers
                c.clear()
            return
        device = self.wte.weight.device
        self.caches = [KVCache(batch, cfg.n_head, cfg.block_size, hd, device) for _ in range(cfg.n_layer)]
        self._decode_step = None

    def generate_cached(
        self,
        prompt: list[int],
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
    ) -> list[int]:
        """As `generate`, with a KV cache: the prompt in one pass, then one jitted step per token (the
        same kernels at every position, reading the cache up to that position only). The prompt plus the new
        tokens must fit in block_size."""
        _check_args(prompt, self.config, temperature, top_k)
        if len(prompt) + max_new_tokens > self.config.block_size:
            raise ValueError(
                f"generate_cached: the prompt ({len(prompt)} tokens) plus {max_new_tokens} new tokens exceed the "
                f"context (block_size={self.config.block_size}); use generate() to slide the window"
            )
        rng = np.random.default_rng(seed)
        self.reset_cache(1)
        if self._decode_step is None:
            self._decode_step = TinyJit(lambda idx, pos: self.forward_cached(idx, pos))
        toks = list(prompt)
        logits = self.forward_cached(Tensor([prompt], dtype=dtypes.int32), 0)
        row = logits[0, len(prompt) - 1].numpy().astype(np.float64)
        for i in range(max_new_tokens):
            toks.append(sample(row, temperature, top_k or 0, rng=rng))
            if i == max_new_tokens - 1:
                break
            pos = UOp.variable("pos", 0, self.config.block_size - 1).bind(len(toks) - 1)
            row = self._decode_step(Tensor([[toks[-1]]], dtype=dtypes.int32), pos)[0, 0].numpy().astype(np.float64)
        return toks

    def loss(self, idx: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy of the next-token predictions (nats per token)."""
        logits = self(idx)
        return logits.reshape(-1, self.config.vocab_size).sparse_categorical_crossentropy(targets.reshape(-1))

    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
    ) -> list[int]:
        """Sample `max_new_tokens` after `prompt` (greedy when temperature == 0), without a cache.

        Every step runs the model on a window of exactly block_size tokens (the prompt so far, padded
        on the right): causal attention makes the padding invisible to the positions read, and one
        window shape means the kernels are compiled once for the whole generation.
        """
        _check_args(prompt, self.config, temperature, top_k)
        if len(prompt) > self.config.block_size:
            raise ValueError(
                f"generate: the prompt has {len(prompt)} tokens, more than the context (block_size="
                f"{self.config.block_size}); crop it to its last {self.config.block_size} tokens"
            )
        rng = np.random.default_rng(seed)
        toks = list(prompt)
        bs = self.config.block_size
        if self._window_step is None:  # one shape for every step: captured once, replayed per token
            self._window_step = TinyJit(lambda idx: self(idx).realize())
        for _ in range(max_new_tokens):
            window = toks[-bs:]
            idx = Tensor([window + [0] * (bs - len(window))], dtype=dtypes.int32)
            logits = self._window_step(idx)[0, len(window) - 1].numpy().astype(np.float64)
            toks.append(sample(logits, temperature, top_k or 0, rng=rng))
        return toks


def _check_args(prompt: list[int], cfg: GPTConfig, temperature: float, top_k: int | None) -> None:
    """generate's arguments: the sampler (tg_nn.models.sampling.sample) takes top_k 0 for all, generate None."""
    if not prompt:
        raise ValueError("generate: the prompt must hold at least one token")
    bad = [t for t in prompt if not isinstance(t, (int, np.integer)) or not 0 <= t < cfg.vocab_size]
    if bad:
        raise ValueError(f"generate: token {bad[0]!r} is not an id in 0..{cfg.vocab_size - 1}")
    if temperature < 0:
        raise ValueError(f"generate: temperature={temperature!r} must be >= 0")
    if top_k is not None and top_k < 1:
        raise ValueError(f"generate: top_k={top_k!r} must be >= 1 (None: all tokens)")


# ---- Hugging Face GPT-2 checkpoints ----
_IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers some GPT-2 files carry


def gpt2_keys(state: dict[str, Any]) -> dict[str, Any]:
    """A GPT-2 state dict with the names this model uses: `transformer.` prefixes dropped, the causal
    mask buffers and a tied `lm_head.weight` removed."""
    out: dict[str, Any] = {}
    for k, v in state.items():
        name = k.removeprefix("transformer.")
        if name.endswith(_IGNORED_SUFFIXES) or name == "lm_head.weight":
            continue
        out[name] = v
    return out


def load_gpt2(model: GPT, state: dict[str, Tensor]) -> GPT:
    """Load a Hugging Face GPT-2 state dict (e.g. `safe_load("model.safetensors")`) into `model`.

    Raises ValueError naming every missing, unexpected or mis-shaped key.
    """
    load_state_dict(model, gpt2_keys(state), strict=True)
    return model


def config_from_gpt2(state: dict[str, Tensor], n_head: int) -> GPTConfig:
    """The GPTConfig of a GPT-2 state dict (the head count is not in the file: pass it)."""
    s = gpt2_keys(state)
    for key in ("wte.weight", "wpe.weight"):
        if key not in s:
            raise KeyError(f"config_from_gpt2: the state dict has no {key!r}")
    vocab, n_embd = (int(d) for d in s["wte.weight"].shape)
    n_layer = len({k.split(".")[1] for k in s if k.startswith("h.")})
    return GPTConfig(vocab, int(s["wpe.weight"].shape[0]), n_layer, n_head, n_embd)


__all__ = ["GPT", "GPTConfig", "config_from_gpt2", "gpt2_keys", "load_gpt2"]
