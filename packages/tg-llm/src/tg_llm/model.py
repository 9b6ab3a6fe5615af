"""A Llama-family transformer (Llama 2/3, Mistral, Qwen2/3) built from a GGUF file's metadata and tensors.

RMSNorm, rotary position embeddings (the model's theta, linear scaling or llama3's per-frequency
factors), grouped-query attention, a SwiGLU MLP, a tied or separate output head. Parameter names are
the GGUF ones (`blk.0.attn_q.weight`, ...), weights (out, in) as in the file.

The KV cache has a fixed shape (context length) and the position is an int32 Tensor, not a shape: a
write selects slots pos..pos+t-1 with a mask and a read masks the slots after each query, so the one
TinyJit-captured decode step serves every position with no recompiles (tg has no symbolic shapes).
The token embedding is looked up on the host (a row copy per token) so that decode reads each weight
once, never the whole embedding table.

>>> cfg = LlamaConfig(vocab_size=16, dim=8, n_layers=1, n_heads=2, n_kv_heads=1, hidden_dim=16, context_length=8)
>>> model = Llama(cfg)
>>> model.forward([1, 2, 3], start_pos=0).shape
(3, 16)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tg_tensor import Tensor, TinyJit
from tg_tensor.schedule import buffer_of
from tg_uop import DType, Ops, dtypes

__all__ = ["ARCHITECTURES", "Llama", "LlamaConfig"]

# architecture -> rotary style: "norm" rotates adjacent pairs (x[2i], x[2i+1]); "neox" rotates halves
ARCHITECTURES = {"llama": "norm", "mistral": "norm", "qwen2": "neox", "qwen3": "neox"}


@dataclass(frozen=True)
class LlamaConfig:
    """The shape and constants of a model; `from_gguf` reads them from a file's metadata."""

    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden_dim: int
    context_length: int
    head_dim: int = 0  # 0: dim // n_heads
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_style: str = "norm"
    rope_linear_factor: float = 1.0
    architecture: str = "llama"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "hidden_dim", "context_length"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"LlamaConfig: {name}={v!r} must be a positive int")
        if self.head_dim == 0:
            if self.dim % self.n_heads:
                raise ValueError(f"LlamaConfig: dim={self.dim} is not divisible by n_heads={self.n_heads}")
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"LlamaConfig: n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"LlamaConfig: head_dim={self.head_dim} must be even for rotary embeddings")
        if self.rope_style not in ("norm", "neox"):
            raise ValueError(f"LlamaConfig: rope_style={self.rope_style!r} must be 'norm' or 'neox'")

    @classmethod
    def from_gguf(cls, metadata: dict[str, Any], vocab_size: int) -> LlamaConfig:
        """The config in a GGUF file's metadata (`vocab_size`: rows of token_embd.weight)."""
        arch = metadata.get("general.architecture")
        if arch not in ARCHITECTURES:
            raise ValueError(f"Llama: unsupported architecture {arch!r}; tg runs {', '.join(sorted(ARCHITECTURES))}")

        def get(key: str, default: Any = None) -> Any:
            v = metadata.get(f"{arch}.{key}", default)
            if v is None:
                raise ValueError(f"Llama: the GGUF metadata has no {arch}.{key}")
            return v

        def count(key: str, default: Any = None) -> int:  # a size: checked before anything divides by it
            v = get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Llama: {arch}.{key}={v!r:.80} in the GGUF metadata must be a positive integer")
            return v

        n_heads = count("attention.head_count")
        scaling = metadata.get(f"{arch}.rope.scaling.type", "none")
        factor = 1.0
        if scaling == "linear":
            factor = float(get("rope.scaling.factor"))
        elif scaling not in ("none", None):
            raise ValueError(f"Llama: rope scaling {scaling!r} is not supported (tg reads none, linear, llama3)")
        dim = count("embedding_length")
        if f"{arch}.attention.key_length" not in metadata and dim % n_heads:
            raise ValueError(f"Llama: {arch}.embedding_length={dim} is not divisible by head_count={n_heads}")
        head_dim = count("attention.key_length", dim // n_heads)
        rope_dims = count("rope.dimension_count", head_dim)
        if rope_dims != head_dim:
            raise ValueError(f"Llama: partial rotary embeddings ({rope_dims} of {head_dim} dims) are not supported")
        return cls(
            vocab_size=vocab_size,
            dim=dim,
            n_layers=count("block_count"),
            n_heads=n_heads,
            n_kv_heads=count("attention.head_count_kv", n_heads),
            hidden_dim=count("feed_forward_length"),
            context_length=count("context_length"),
            head_dim=head_dim,
            norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
            rope_theta=float(get("rope.freq_base", 1e4)),
            rope_style=ARCHITECTURES[arch],
            rope_linear_factor=factor,
            architecture=arch,
        )


ARGMAX_CHUNK = 256


def argmax_rows(x: Tensor) -> Tensor:
    """The index of the first maximum of each row of x (t, n), int32 (t,): `x.argmax(-1)`, in two stages.

    The rows are cut into chunks of 256 (padded with -inf): the first maximum of each chunk, then the first
    chunk holding the row's maximum. A 128k-long argmax reduced in one go leaves a GPU with one workgroup
    per row (the decode step's took 194 us per token on an H100, 11% of the step); chunked, each stage has
    hundreds of workgroups or a short reduction.

    >>> argmax_rows(Tensor([[1.0, 7.0, 7.0, 2.0], [0.0, -1.0, 3.0, 3.0]])).tolist()
    [1, 2]
    """
    t, n = (int(s) for s in x.shape)
    chunks = -(-n // ARGMAX_CHUNK)
    chunks = -(-chunks // 32) * 32  # the second stage's length: a multiple of a warp
    padded = x.pad(((0, 0), (0, chunks * ARGMAX_CHUNK - n)), value=-math.inf).reshape(t, chunks, ARGMAX_CHUNK)
    peak = padded.max(-1)  # (t, chunks)
    first = padded.argmax(-1) + Tensor.arange(chunks, device=x.device).reshape(1, chunks) * ARGMAX_CHUNK
    best = peak.max(-1, keepdim=True)
    return (peak == best).where(first, chunks * ARGMAX_CHUNK).min(-1).cast(dtypes.int32)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / rms(x) * weight over the last axis. The 1/rms factors are realized by the sum's kernel, so that for one
    row (a decode step) the scaling is cheap enough to fuse into the matrix-vector product that reads it."""
    return x * (x.square().mean(-1, keepdim=True) + eps).rsqrt().contiguous() * weight


def rope(x: Tensor, cos: Tensor, sin: Tensor, style: str) -> Tensor:
    """Rotate x (..., t, head_dim) by the angles whose cos/sin are (t, head_dim/2)."""
    half = int(x.shape[-1]) // 2
    if style == "norm":
        pairs = x.reshape(*x.shape[:-1], half, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        return Tensor.stack(a * cos - b * sin, a * sin + b * cos, dim=-1).reshape(x.shape)
    a, b = x[..., :half], x[..., half:]
    return (a * cos - b * sin).cat(a * sin + b * cos, dim=-1)


class KVCache:
    """One layer's keys and values for every position of the context, updated in place (fixed shapes).

    Stored in `dtype` (the weights' dtype: float16 on GPUs halves the bytes a step reads and rewrites). The
    values are stored transposed, (kv_heads, head_dim, context): `weights @ values` then reduces along
    contiguous memory, as the scores' `q @ keys.T` does (GPU: 16-byte loads, a warp per output row; read with a
    stride of head_dim, one decode step's kernel took 14 us per layer on an H100).
    """

    def __init__(self, n_kv_heads: int, context: int, head_dim: int, device: str, dtype: DType) -> None:
        self.keys = Tensor.zeros(n_kv_heads, context, head_dim, dtype=dtype, device=device).contiguous().realize()
        self.values = Tensor.zeros(n_kv_heads, head_dim, context, dtype=dtype, device=device).contiguous().realize()
        self.context = context

    def write(self, k: Tensor, v: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Store k, v (kv_heads, t, head_dim) at the slots `positions` (t,); return the updated keys and values,
        both (kv_heads, context, head_dim) (the values a transposed view of their storage)."""
        t = int(k.shape[1])
        k, v = k.cast(self.keys.dtype), v.cast(self.values.dtype)
        slots = Tensor.arange(self.context, device=k.device).reshape(1, self.context)
        if t == 1:  # a decode step: one masked write each, which codegen turns into a store to the slot only
            at = slots == positions.reshape(1, 1)
            self.keys.assign(at.reshape(1, self.context, 1).where(k, self.keys))
            self.values.assign(at.reshape(1, 1, self.context).where(v.transpose(-2, -1), self.values))
            return self.keys, self.values.transpose(-2, -1)
        select = (slots == positions.reshape(t, 1)).cast(k.dtype)  # (t, context): row i goes to slot positions[i]
        written = select.sum(0).reshape(1, self.context, 1) > 0
        moved_k = select.T.reshape(1, self.context, t) @ k
        moved_v = select.T.reshape(1, self.context, t) @ v
        self.keys.assign(written.where(moved_k, self.keys))
        self.values.assign(written.reshape(1, 1, self.context).where(moved_v.transpose(-2, -1), self.values))
        return self.keys, self.values.transpose(-2, -1)


class Block:
    def __init__(
        self, cfg: LlamaConfig, params: dict[str, Tensor], i: int, fused: dict[str, Tensor] | None = None
    ) -> None:
        p = f"blk.{i}."
        self.cfg = cfg
        self.attn_norm, self.ffn_norm = params[p + "attn_norm.weight"], params[p + "ffn_norm.weight"]
        self.wq, self.wk, self.wv = (params[p + f"attn_{n}.weight"] for n in "qkv")
        self.bq, self.bk, self.bv = (params.get(p + f"attn_{n}.bias") for n in "qkv")
        self.q_norm, self.k_norm = params.get(p + "attn_q_norm.weight"), params.get(p + "attn_k_norm.weight")
        self.wo = params[p + "attn_output.weight"]
        self.w_gate, self.w_up, self.w_down = (params[p + f"ffn_{n}.weight"] for n in ("gate", "up", "down"))
        # q, k, v (and gate, up) as row ranges of one matrix when _fuse_projections joined them: one matmul each
        self.wqkv, self.w_gate_up = (fused or {}).get(p + "qkv"), (fused or {}).get(p + "gate_up")

    def project(self, x: Tensor, fused: Tensor | None, *ws: Tensor) -> tuple[Tensor, ...]:
        """x @ w.T for each of `ws`: one matmul, split by columns, when `fused` holds their rows in order."""
        if fused is None:
            return tuple(x @ w.T for w in ws)
        out, ret, at = x @ fused.T, [], 0
        for w in ws:
            n = int(w.shape[0])
            ret.append(out[:, at : at + n])
            at += n
        return tuple(ret)

    def attention(self, x: Tensor, cache: KVCache, positions: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        cfg = self.cfg
        t, hd, kv, group = int(x.shape[0]), cfg.head_dim, cfg.n_kv_heads, cfg.n_heads // cfg.n_kv_heads
        q, k, v = self.project(x, self.wqkv, self.wq, self.wk, self.wv)
        if self.bq is not None and self.bk is not None and self.bv is not None:
            q, k, v = q + self.bq, k + self.bk, v + self.bv
        q = q.reshape(t, cfg.n_heads, hd).permute(1, 0, 2)  # (heads, t, hd)
        k = k.reshape(t, kv, hd).permute(1, 0, 2)
        v = v.reshape(t, kv, hd).permute(1, 0, 2)
        if self.q_norm is not None and self.k_norm is not None:  # qwen3: RMSNorm of each head
            q, k = rms_norm(q, self.q_norm, cfg.norm_eps), rms_norm(k, self.k_norm, cfg.norm_eps)
        q, k = rope(q, cos, sin, cfg.rope_style), rope(k, cos, sin, cfg.rope_style)
        keys, values = cache.write(k, v, positions)
        slots = Tensor.arange(cache.context, device=x.device).reshape(1, cache.context)
        visible = slots <= positions.reshape(t, 1)  # (t, context)
        q = q.reshape(kv, group * t, hd)  # the heads sharing one kv head, side by side
        scores = (q @ keys.transpose(-2, -1)).reshape(kv, group, t, cache.context) / math.sqrt(hd)
        weights = visible.where(scores, -math.inf).softmax(-1).reshape(kv, group * t, cache.context)
        out = (weights @ values).reshape(cfg.n_heads, t, hd).permute(1, 0, 2).reshape(t, cfg.n_heads * hd)
        return out @ self.wo.T

    def __call__(self, x: Tensor, cache: KVCache, positions: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        # the residual stream is realized (the add fused into the matvec before it): left lazy, layer i's norm
        # kernels would re-add all 2i earlier outputs
        attn = self.attention(rms_norm(x, self.attn_norm, self.cfg.norm_eps), cache, positions, cos, sin)
        x = (x + attn).contiguous()
        h = rms_norm(x, self.ffn_norm, self.cfg.norm_eps)
        gate, up = self.project(h, self.w_gate_up, self.w_gate, self.w_up)
        return (x + (gate.silu() * up) @ self.w_down.T).contiguous()


class Llama:
    """The model. `forward(tokens, start_pos)` -> logits (t, vocab) of one sequence, extending the KV cache.

    `params` are the GGUF-named tensors (moved to `device`, cast to `dtype`); without them the weights
    are random (normal, std 0.02), which the tests and benchmarks use.
    """

    def __init__(
        self,
        cfg: LlamaConfig,
        params: dict[str, Tensor] | None = None,
        device: str | None = None,
        dtype: DType = dtypes.float32,
        quantized: frozenset[str] = frozenset(),
    ) -> None:
        self.cfg = cfg
        params = dict(params) if params is not None else _random_params(cfg)
        missing = [k for k in _param_shapes(cfg, "output.weight" in params) if k not in params]
        if missing:
            raise ValueError(f"Llama: the model file lacks the tensors {missing[:8]}")
        first = params["token_embd.weight"]
        self.device = device or first.device
        if self.device.startswith("DISK"):
            raise ValueError("Llama: pass a compute device (DISK holds files only)")
        self.dtype = dtype
        norms = ("norm.weight", "bias")  # small vectors: kept in float32 whatever the weights' dtype
        # `quantized`: lazy dequantizations of raw blocks already on the device, kept lazy so that the
        # matmuls reading them unpack the blocks (the weights stay quantized in memory)
        kept = {k: v for k, v in params.items() if k in quantized and k != "token_embd.weight"}
        loaded = {
            k: v.to(self.device)
            .cast(dtypes.float32 if k.endswith(norms) or k == "rope_freqs.weight" else dtype)
            .contiguous()
            for k, v in params.items()
            if k not in kept
        }
        Tensor.realize(*loaded.values())
        fused = _fuse_projections(cfg, loaded)
        loaded |= kept
        self.params = loaded
        for k, shape in _param_shapes(cfg, "output.weight" in loaded).items():
            if loaded[k].shape != shape:
                raise ValueError(f"Llama: tensor {k!r} has shape {loaded[k].shape}, expected {shape} from the metadata")
        # the embedding table on the host, for row lookups (decode never reads the whole table on the device)
        self.embed_host = loaded["token_embd.weight"].numpy()
        self.output = loaded.get("output.weight", loaded["token_embd.weight"])  # tied when the file has no head
        self.output_norm = loaded["output_norm.weight"]
        self.blocks = [Block(cfg, loaded, i, fused) for i in range(cfg.n_layers)]
        self.inv_freq = Tensor(_inv_freq(cfg, loaded.get("rope_freqs.weight")), device=self.device).realize()
        kv = (cfg.n_kv_heads, cfg.context_length, cfg.head_dim)
        self.caches = [KVCache(*kv, self.device, dtype) for _ in self.blocks]
        self._decode = TinyJit(self._step)
        # the decode step's inputs, refilled in place each step: the same buffers every replay, so the jitted
        # step rebinds none of the kernels that read them (a CUDA graph node update each, ~200 per token)
        self._decode_x = Tensor.empty(1, cfg.dim, device=self.device).realize()
        self._decode_pos = Tensor.empty(1, dtype=dtypes.int32, device=self.device).realize()
        # greedy_tokens' chained steps: the token and position each step reads and advances, and the token it
        # chose at each position, all on the device (so steps queue without the host in between)
        self._chain_token = Tensor.zeros(1, dtype=dtypes.int32, device=self.device).contiguous().realize()
        self._chain_pos = Tensor.zeros(1, dtype=dtypes.int32, device=self.device).contiguous().realize()
        self._chain_out = (
            Tensor.zeros(cfg.context_length, dtype=dtypes.int32, device=self.device).contiguous().realize()
        )
        self._chain = TinyJit(self._step_chain)
        self._prefill: dict[int, TinyJit[Tensor]] = {}  # one jitted prefill step per padded length

    def logits(self, x: Tensor, positions: Tensor) -> Tensor:
        """Lazy logits (t, vocab) of the embedded tokens x (t, dim) at `positions` (t,); assigns the caches."""
        angles = positions.cast(dtypes.float32).reshape(-1, 1) * self.inv_freq.reshape(1, -1)
        cos, sin = angles.cos(), angles.sin()
        for block, cache in zip(self.blocks, self.caches):
            x = block(x, cache, positions, cos, sin)
        return (rms_norm(x, self.output_norm, self.cfg.norm_eps) @ self.output.T).cast(dtypes.float32)

    def _step(self, x: Tensor, positions: Tensor) -> Tensor:
        """`logits`, realized with the caches (the function TinyJit captures)."""
        logits = self.logits(x, positions)
        Tensor.realize(logits, *[c.keys for c in self.caches], *[c.values for c in self.caches])
        return logits

    def _step_chain(self) -> Tensor:
        """One greedy step on the device state: embed `_chain_token`, run the step at `_chain_pos`, record the
        argmax in `_chain_out[pos]`, make it the next token and advance the position (what TinyJit captures)."""
        token, pos = self._chain_token, self._chain_pos
        x = self.params["token_embd.weight"][token].cast(dtypes.float32)  # one row read (a direct gather)
        chosen = argmax_rows(self.logits(x, pos))
        slots = Tensor.arange(self.cfg.context_length, device=self.device)
        self._chain_out.assign((slots == pos).where(chosen, self._chain_out))
        token.assign(chosen)
        pos.assign(pos + 1)
        Tensor.realize(self._chain_out, token, pos, *[c.keys for c in self.caches], *[c.values for c in self.caches])
        return chosen

    def greedy_tokens(self, token: int, start_pos: int, n: int, chunk: int = 16) -> Iterator[int]:
        """The next `n` greedy tokens after `token` at `start_pos` (the argmax of `forward`'s logits, step by step).

        The steps are chained on the device: each reads the token and position the one before wrote, so the host
        queues `chunk` of them without waiting and reads their tokens once per chunk (one copy of a few bytes):
        the GPU does not idle through the host's part of every step. Stopping the iteration early leaves cache
        slots written past the last token read, which no later query reads before a step overwrites them.

        >>> cfg = LlamaConfig(16, 8, n_layers=1, n_heads=2, n_kv_heads=1, hidden_dim=16, context_length=8)
        >>> first = int(Llama(cfg).forward([3], 0).numpy()[0].argmax())
        >>> next(Llama(cfg).greedy_tokens(3, 0, 2)) == first
        True
        """
        if not isinstance(n, int) or n < 1 or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"greedy_tokens: n={n!r} and chunk={chunk!r} must be positive ints")
        self._check_positions(n, start_pos)
        if not 0 <= token < self.cfg.vocab_size:
            raise ValueError(f"Llama: token {token!r} is not an id in 0..{self.cfg.vocab_size - 1}")
        buffer_of(self._chain_token.uop.base).copyin(np.array([token], dtype=np.int32).data)
        buffer_of(self._chain_pos.uop.base).copyin(np.array([start_pos], dtype=np.int32).data)
        done = 0
        while done < n:
            k = min(chunk, n - done)
            for _ in range(k):
                self._chain()
            chosen = self._chain_out.numpy()
            yield from (int(t) for t in chosen[start_pos + done : start_pos + done + k])
            done += k

    def _check_positions(self, n: int, start_pos: int) -> None:
        ctx = self.cfg.context_length
        if start_pos < 0 or start_pos + n > ctx:
            raise ValueError(f"Llama: positions {start_pos}..{start_pos + n - 1} exceed the context of {ctx} tokens")

    def _fill_decode_inputs(self, token: int, start_pos: int) -> None:
        row = self._embed_rows([token])
        buffer_of(self._decode_x.uop.base).copyin(row.data)
        buffer_of(self._decode_pos.uop.base).copyin(np.array([start_pos], dtype=np.int32).data)

    def _embed_rows(self, tokens: list[int]) -> np.ndarray:
        bad = [t for t in tokens if not isinstance(t, (int, np.integer)) or not 0 <= t < self.cfg.vocab_size]
        if bad:
            raise ValueError(f"Llama: token {bad[0]!r} is not an id in 0..{self.cfg.vocab_size - 1}")
        return np.ascontiguousarray(self.embed_host[np.asarray(tokens, dtype=np.int64)], dtype=np.float32)

    def embed(self, tokens: list[int]) -> Tensor:
        """The embedding rows (len(tokens), dim) of `tokens`, float32 on the model's device."""
        return Tensor(self._embed_rows(tokens), device=self.device)

    def forward(self, tokens: list[int], start_pos: int) -> Tensor:
        """Logits (len(tokens), vocab) of `tokens` at positions start_pos.. (prefill: all in one pass).

        One token goes through the jitted decode step (the same kernels at every position). A longer
        chunk is padded to a power of two (when the context has room), so prompts of any length reuse a
        few jitted prefill steps: the padding writes cache slots after the last real token, which no
        query reads before a later step overwrites them.
        """
        if not tokens:
            raise ValueError("Llama: forward needs at least one token")
        n, ctx = len(tokens), self.cfg.context_length
        self._check_positions(n, start_pos)
        if n == 1:
            self._fill_decode_inputs(tokens[0], start_pos)
            return self._decode(self._decode_x, self._decode_pos)
        x = self.embed(tokens)
        size = max(8, 1 << (n - 1).bit_length())
        if start_pos + size > ctx:
            size = n
        x = x.pad(((0, size - n), (0, 0))) if size > n else x
        positions = Tensor(list(range(start_pos, start_pos + size)), dtype=dtypes.int32, device=self.device)
        if size not in self._prefill:
            self._prefill[size] = TinyJit(self._step)
        return self._prefill[size](x.contiguous().realize(), positions)[:n]

    def reset(self) -> None:
        """Nothing to clear: positions after the ones written are never read (kept for API symmetry)."""

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights a decode step reads (all but the host embedding, which the tied head reads)."""
        read = [v for k, v in self.params.items() if k != "token_embd.weight" or "output.weight" not in self.params]
        bufs = {u for t in read for u in t.uop.toposort if u.op is Ops.BUFFER}  # fused matrices counted once
        unbuffered = sum(
            int(t.numel()) * t.dtype.itemsize for t in read if not any(u.op is Ops.BUFFER for u in t.uop.toposort)
        )
        return sum(int(u.arg[1]) * u.dtype.itemsize for u in bufs) + unbuffered


# the projections that read the same input, joined into one matrix each
_FUSED = {"qkv": ("attn_q", "attn_k", "attn_v"), "gate_up": ("ffn_gate", "ffn_up")}


def _fuse_projections(cfg: LlamaConfig, loaded: dict[str, Tensor]) -> dict[str, Tensor]:
    """Join each layer's q, k, v weights (and gate, up) into one realized matrix ("blk.{i}.qkv", "blk.{i}.gate_up"):
    the decode step then runs one matrix-vector product for them (3 kernels fewer per layer, and bigger ones: the
    512-row k and v products of a 1B model left most SMs idle). The GGUF names stay in `loaded`, as row ranges
    (views) of the joined matrix, so no weight is held twice. Weights kept quantized (absent from `loaded`) and
    groups of mixed dtypes stay apart."""
    fused: dict[str, Tensor] = {}
    for i in range(cfg.n_layers):
        for key, group in _FUSED.items():
            names = [f"blk.{i}.{n}.weight" for n in group]
            if not all(n in loaded for n in names) or len({loaded[n].dtype for n in names}) != 1:
                continue
            parts = [loaded[n] for n in names]
            whole = fused[f"blk.{i}.{key}"] = parts[0].cat(*parts[1:]).contiguous().realize()
            at = 0
            for n, w in zip(names, parts):
                loaded[n] = whole[at : at + int(w.shape[0])]
                at += int(w.shape[0])
    return fused


def _inv_freq(cfg: LlamaConfig, factors: Tensor | None) -> np.ndarray:
    half = cfg.head_dim // 2
    inv = 1.0 / (cfg.rope_theta ** (np.arange(half, dtype=np.float64) * 2 / cfg.head_dim))
    inv /= cfg.rope_linear_factor
    if factors is not None:  # llama3-style scaling: the file stores a divisor per frequency
        f = factors.numpy().astype(np.float64).reshape(-1)
        if f.shape != (half,):
            raise ValueError(f"Llama: rope_freqs.weight has {f.size} values, expected {half}")
        inv /= f
    return inv.astype(np.float32)


def _param_shapes(cfg: LlamaConfig, separate_head: bool) -> dict[str, tuple[int, ...]]:
    hd, d = cfg.head_dim, cfg.dim
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (cfg.vocab_size, d), "output_norm.weight": (d,)}
    if separate_head:
        shapes["output.weight"] = (cfg.vocab_size, d)
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        shapes |= {
            p + "attn_norm.weight": (d,),
            p + "ffn_norm.weight": (d,),
            p + "attn_q.weight": (cfg.n_heads * hd, d),
            p + "attn_k.weight": (cfg.n_kv_heads * hd, d),
            p + "attn_v.weight": (cfg.n_kv_heads * hd, d),
            p + "attn_output.weight": (d, cfg.n_heads * hd),
            p + "ffn_gate.weight": (cfg.hidden_dim, d),
            p + "ffn_up.weight": (cfg.hidden_dim, d),
            p + "ffn_down.weight": (d, cfg.hidden_dim),
        }
    return shapes


def _random_params(cfg: LlamaConfig, seed: int = 0) -> dict[str, Tensor]:
    rng = np.random.default_rng(seed)
    out = {}
    for k, shape in _param_shapes(cfg, separate_head=True).items():
        a = 1 + 0.1 * rng.standard_normal(shape) if k.endswith("norm.weight") else 0.02 * rng.standard_normal(shape)
        out[k] = Tensor(a.astype(np.float32))
    return out


def with_context(cfg: LlamaConfig, context: int | None) -> LlamaConfig:
    """`cfg` with its context cut to `context` tokens (a smaller KV cache); None keeps the file's."""
    if context is None:
        return cfg
    if not 1 <= context:
        raise ValueError(f"Llama: context={context} must be >= 1")
    return replace(cfg, context_length=min(context, cfg.context_length))
