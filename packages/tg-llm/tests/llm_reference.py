"""A numpy Llama (the reference the tests compare tg with): weights read and dequantized by the gguf package."""

from __future__ import annotations

from typing import Any

import gguf
import numpy as np


def read_weights(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(metadata, float32 weights in numpy order) of a GGUF file, with gguf's own reader and dequantizer."""
    r = gguf.GGUFReader(path)
    meta = {}
    for f in r.fields.values():
        if f.types and f.types[0] == gguf.GGUFValueType.STRING and len(f.types) == 1:
            meta[f.name] = bytes(f.parts[f.data[0]]).decode()
        elif len(f.types) == 1:
            meta[f.name] = f.parts[f.data[0]][0].item()
    ws = {}
    for t in r.tensors:
        shape = tuple(int(s) for s in reversed(t.shape.tolist()))
        ws[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
    return meta, ws


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, pos: np.ndarray, inv: np.ndarray, neox: bool) -> np.ndarray:
    ang = pos[:, None] * inv[None, :]  # (t, hd/2)
    c, s = np.cos(ang), np.sin(ang)
    out = np.empty_like(x)
    if neox:
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
        out[..., :h], out[..., h:] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., 0::2], x[..., 1::2]
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


def forward(meta: dict[str, Any], w: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    """Logits (t, vocab) of `tokens` from position 0, causal attention, no cache."""
    arch = meta["general.architecture"]
    n_heads, n_kv = meta[f"{arch}.attention.head_count"], meta[f"{arch}.attention.head_count_kv"]
    eps, theta = meta[f"{arch}.attention.layer_norm_rms_epsilon"], meta[f"{arch}.rope.freq_base"]
    neox = arch in ("qwen2", "qwen3")
    x = w["token_embd.weight"][tokens].astype(np.float64)
    t, dim = x.shape
    hd = dim // n_heads
    inv = 1.0 / theta ** (np.arange(hd // 2) * 2 / hd)
    if "rope_freqs.weight" in w:
        inv = inv / w["rope_freqs.weight"]
    pos = np.arange(t, dtype=np.float64)
    causal = np.tril(np.ones((t, t), bool))
    for i in range(meta[f"{arch}.block_count"]):
        p = f"blk.{i}."
        h = _rms(x, w[p + "attn_norm.weight"], eps)
        q, k, v = (h @ w[p + f"attn_{n}.weight"].T + w.get(p + f"attn_{n}.bias", 0) for n in "qkv")
        q = q.reshape(t, n_heads, hd).transpose(1, 0, 2)
        k = k.reshape(t, n_kv, hd).transpose(1, 0, 2)
        v = v.reshape(t, n_kv, hd).transpose(1, 0, 2)
        if p + "attn_q_norm.weight" in w:
            q, k = _rms(q, w[p + "attn_q_norm.weight"], eps), _rms(k, w[p + "attn_k_norm.weight"], eps)
        q, k = _rope(q, pos, inv, neox), _rope(k, pos, inv, neox)
        k, v = np.repeat(k, n_heads // n_kv, axis=0), np.repeat(v, n_heads // n_kv, axis=0)
        s = np.where(causal, q @ k.transpose(0, 2, 1) / np.sqrt(hd), -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        att = (s / s.sum(-1, keepdims=True)) @ v
        x = x + att.transpose(1, 0, 2).reshape(t, n_heads * hd) @ w[p + "attn_output.weight"].T
        h = _rms(x, w[p + "ffn_norm.weight"], eps)
        g = h @ w[p + "ffn_gate.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    head = w.get("output.weight", w["token_embd.weight"])
    return np.asarray(_rms(x, w["output_norm.weight"], eps) @ head.T)
