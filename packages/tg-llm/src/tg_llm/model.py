"""A Llama-family transformer (Llama 2/3, Mistral, Qwen2/3) built from a GGUF file's metadata and tensors.

RMSNorm, rotary position embeddings (the model's theta, linear scaling or llama3's per-frequency
factors), grouped-query attention, a SwiGLU MLP, a tied or separate output head. Parameter names are
the GGUF ones (`blk.0.attn_q.weight`, ...), weights (out, in) as in the file.

The KV cache (tg_nn.models.kv_cache.KVCache) holds the whole context, and the position is a bound Variable: a step
writes its rows at `start` and its attention reads the first `start + t` rows only (a symbolic length), so one
TinyJit-captured decode step serves every position with no recompiles, at a cost that grows with the position,
not with the context. Weights may be tg_nn.quant.QuantizedWeight (GGUF blocks kept as they are): their products
are fused dequantize-and-multiply kernels. The token embedding is a gather of the rows a step needs, on the
device (a decode step never reads the whole table, except through a tied output head).

>>> cfg = LlamaConfig(vocab_size=16, dim=8, n_layers=1, n_heads=2, n_kv_heads=1, hidden_dim=16, context_length=8)
>>> model = Llama(cfg)
>>> model.forward([1, 2, 3], start_pos=0).shape
(3, 16)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tg_llm.config import ARCHITECTURES, LlamaConfig, with_context
from tg_llm.tensor_parallel import HOME, check_split, fuse_split_projections, shard_axis
from tg_llm.weights import (
    Norm,
    Weight,
    _fuse_projections,
    _inv_freq,
    _opt_tensor,
    _param_shapes,
    _random_params,
    _storage,
    _tensor,
    gated_mlp,
    linear,
)
from tg_nn.gguf import dequantize
from tg_nn.matvec import rms_norm
from tg_nn.models.decode_attention import decode_attention, has_kernel
from tg_nn.models.kv_cache import KVCache, causal_mask
from tg_nn.quant import QuantizedWeight
from tg_runtime import Device
from tg_runtime.device import DeviceSet
from tg_tensor import Tensor, TinyJit
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.uop import sint

__all__ = ["ARCHITECTURES", "Llama", "LlamaConfig", "Weight", "linear", "with_context"]

ARGMAX_CHUNK = 256
# prompt chunks up to this many tokens (after padding) run through a captured step (TinyJit: one per padded length,
# from position 0 and from a bound position): a chat turn's prefill is then a replay, not a schedule of every
# layer's kernels in Python (~0.2 s for SmolLM2's 30 layers on a 2-core CPU, more than its arithmetic). Longer
# chunks run layer by layer: a capture holds every layer's intermediates until it is planned (SmolLM2's peak
# resident memory +74 MB at 32 tokens, +155 MB at 64), and keeps its planned buffers while the model lives. That
# limit is the CPU's (host memory); on other devices every padded length up to the context is captured (a 1B
# model's 512-token prefill on an H200: 152 ms scheduled layer by layer, 45 ms replayed).
PREFILL_JIT_MAX = 32


def is_split(t: Tensor) -> bool:
    """Is `t` a tensor on several devices (sharded or replicated)?"""
    return isinstance(t.device, DeviceSet)


def _is_realized_split(t: Tensor) -> bool:
    return t.uop.op is Ops.MULTI and all(s.base.op is Ops.BUFFER for s in t.uop.src[:-1])


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


def rope(x: Tensor, cos: Tensor, sin: Tensor, style: str) -> Tensor:
    """Rotate x (..., t, head_dim) by the angles whose cos/sin are (t, head_dim/2)."""
    half = int(x.shape[-1]) // 2
    if style == "norm":
        pairs = x.reshape(*x.shape[:-1], half, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        return Tensor.stack(a * cos - b * sin, a * sin + b * cos, dim=-1).reshape(x.shape)
    a, b = x[..., :half], x[..., half:]
    return (a * cos - b * sin).cat(a * sin + b * cos, dim=-1)


class Block:
    def __init__(
        self,
        cfg: LlamaConfig,
        params: dict[str, Weight],
        i: int,
        fused: dict[str, Weight] | None = None,
        int8: bool = False,
        split: int = 0,
    ) -> None:
        p = f"blk.{i}."
        self.cfg, self.int8 = cfg, int8
        self.split = split  # devices the layer is split over (0: one device)
        self.attn_norm, self.ffn_norm = _tensor(params[p + "attn_norm.weight"]), _tensor(params[p + "ffn_norm.weight"])
        self.wq, self.wk, self.wv = (params[p + f"attn_{n}.weight"] for n in "qkv")
        self.bq, self.bk, self.bv = (_opt_tensor(params.get(p + f"attn_{n}.bias")) for n in "qkv")
        self.q_norm = _opt_tensor(params.get(p + "attn_q_norm.weight"))
        self.k_norm = _opt_tensor(params.get(p + "attn_k_norm.weight"))
        self.wo = params[p + "attn_output.weight"]
        self.w_gate, self.w_up, self.w_down = (params[p + f"ffn_{n}.weight"] for n in ("gate", "up", "down"))
        # q, k, v (and gate, up) as row ranges of one matrix when _fuse_projections joined them: one matmul each
        self.wqkv, self.w_gate_up = (fused or {}).get(p + "qkv"), (fused or {}).get(p + "gate_up")

    def project(
        self, x: Tensor, fused: Weight | None, *ws: Weight, realize: bool = False, prompt: bool = False, norm: Norm
    ) -> tuple[Tensor, ...]:
        """rms_norm(x, *norm) @ w.T for each of `ws`: one matmul, split by columns, when `fused` holds their rows in
        order (on a split layer, `realize`: the product is realized first, for readers scheduled apart; `prompt`: x
        is a prompt's tokens, weights.linear, which fuses the norm where it can)."""
        if fused is None:
            x = rms_norm(x, *norm)
            return tuple(linear(x, w, self.int8, prompt) for w in ws)
        out, ret, at = linear(x, fused, self.int8, prompt, norm=norm), [], 0
        if self.split:  # the columns of each device's product are its rows of q, k, v side by side
            out = out.realize() if realize else out
            t, k = int(out.shape[0]), self.split
            per_device = out.reshape(t, k, int(out.shape[1]) // k)
            for w in ws:
                m = int(w.shape[0]) // k
                ret.append(per_device[:, :, at : at + m].reshape(t, k * m))
                at += m
            return tuple(ret)
        for w in ws:
            n = int(w.shape[0])
            ret.append(out[:, at : at + n])
            at += n
        return tuple(ret)

    def qkv(self, x: Tensor, cos: Tensor, sin: Tensor, prompt: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """The rotated queries (heads, t, hd), realized, and the keys and values (kv_heads, t, hd) of the attention
        norm of x (t, dim)."""
        cfg = self.cfg
        t, hd, kv = int(x.shape[0]), cfg.head_dim, cfg.n_kv_heads
        # (split over devices: realized, as the sharded KV cache's writes are scheduled apart and would each compute
        # the product again)
        ws, norm = (self.wq, self.wk, self.wv), (self.attn_norm, cfg.norm_eps)
        q, k, v = self.project(x, self.wqkv, *ws, realize=bool(self.split), prompt=prompt, norm=norm)
        if self.bq is not None and self.bk is not None and self.bv is not None:
            q, k, v = q + self.bq, k + self.bk, v + self.bv
        q = q.reshape(t, cfg.n_heads, hd).permute(1, 0, 2)  # (heads, t, hd)
        k = k.reshape(t, kv, hd).permute(1, 0, 2)
        v = v.reshape(t, kv, hd).permute(1, 0, 2)
        if self.q_norm is not None and self.k_norm is not None:  # qwen3: RMSNorm of each head
            q, k = rms_norm(q, self.q_norm, cfg.norm_eps), rms_norm(k, self.k_norm, cfg.norm_eps)
        # (q realized: fused into the scores' kernel, its rotation would be recomputed for every key read)
        return rope(q, cos, sin, cfg.rope_style).contiguous(), rope(k, cos, sin, cfg.rope_style), v

    def attention(self, x: Tensor, cache: KVCache, start: sint, cos: Tensor, sin: Tensor) -> Tensor:
        """x plus the attention of its norm (the residual stream after attention)."""
        cfg = self.cfg
        t, hd, kv, group = int(x.shape[0]), cfg.head_dim, cfg.n_kv_heads, cfg.n_heads // cfg.n_kv_heads
        q, k, v = self.qkv(x, cos, sin, prompt=t > 1)
        keys, values = cache.update(k.reshape(1, kv, t, hd), v.reshape(1, kv, t, hd), start)
        one_device = "," not in x.device  # (a device set's name has commas)
        if t == 1 and one_device and has_kernel(x.device, hd, cfg.context_length, cache.keys.dtype):  # one kernel
            position = (Tensor.zeros(1, dtype=dtypes.int32, device=x.device) + start).cast(dtypes.int32)
            out = decode_attention(q.reshape(1, cfg.n_heads, hd), cache.keys, cache.values, position, hd**-0.5)
            return linear(out.reshape(1, cfg.n_heads * hd), self.wo, self.int8, residual=x)
        n = start + t  # the positions read: 0..start+t-1 (symbolic when start is a Variable)
        keys, values = keys.reshape(kv, n, hd), values.reshape(kv, n, hd)
        q = q.reshape(kv, group * t, hd)  # the heads sharing one kv head, side by side
        scores = (q @ keys.transpose(-2, -1)).reshape(kv, group, t, n) / math.sqrt(hd)
        if t > 1:  # (one query sees every slot it reads)
            scores = causal_mask(start, t, device=x.device).where(scores, -math.inf)
        # (the probabilities realized: fused into the product with the values, each exp would be taken head_dim times)
        weights = scores.softmax(-1).contiguous().reshape(kv, group * t, n)
        out = (weights @ values).reshape(cfg.n_heads, t, hd).permute(1, 0, 2).reshape(t, cfg.n_heads * hd)
        return linear(out, self.wo, self.int8, t > 1, residual=x)

    def batched_attention(
        self, x: Tensor, cache: KVCache, starts: list[UOp], positions: Tensor, cos: Tensor, sin: Tensor
    ) -> Tensor:
        """Attention of x (B, dim), one token of each of B sequences: row b is cache row b's token at position
        starts[b] (a bound Variable; `positions` holds the same numbers, int32 (B,)): its keys and values are written
        there and it attends to that row's slots 0..starts[b] (tg_nn.models.decode_attention)."""
        cfg = self.cfg
        b, hd, kv = int(x.shape[0]), cfg.head_dim, cfg.n_kv_heads
        q, k, v = self.qkv(x, cos, sin)  # (heads, B, hd), (kv, B, hd): the B tokens side by side
        cache.write_rows(k.permute(1, 0, 2).reshape(b, kv, 1, hd), v.permute(1, 0, 2).reshape(b, kv, 1, hd), starts)
        out = decode_attention(q.permute(1, 0, 2), cache.keys, cache.values, positions, hd**-0.5)
        return linear(out.reshape(b, cfg.n_heads * hd), self.wo, self.int8, residual=x)

    def __call__(self, x: Tensor, cache: KVCache, start: sint, cos: Tensor, sin: Tensor) -> Tensor:
        # the residual stream is realized (the add fused into the matvec before it): left lazy, layer i's norm
        # kernels would re-add all 2i earlier outputs
        return self.mlp(self.attention(x, cache, start, cos, sin), prompt=int(x.shape[0]) > 1)

    def batched(
        self, x: Tensor, cache: KVCache, starts: list[UOp], positions: Tensor, cos: Tensor, sin: Tensor
    ) -> Tensor:
        """The layer on x (B, dim), one token of each of B sequences (see batched_attention)."""
        return self.mlp(self.batched_attention(x, cache, starts, positions, cos, sin))

    def mlp(self, x: Tensor, prompt: bool = False) -> Tensor:
        """x (the residual stream after attention, realized) plus the SwiGLU MLP of its norm, realized (`prompt`: x
        is a prompt's tokens, weights.linear)."""
        norm = (self.ffn_norm, self.cfg.norm_eps)
        if self.w_gate_up is not None and not self.split:  # one product for gate and up (weights.gated_mlp)
            return gated_mlp(x, self.w_gate_up, self.w_down, self.int8, prompt, norm, residual=x)
        gate, up = self.project(x, self.w_gate_up, self.w_gate, self.w_up, prompt=prompt, norm=norm)
        return linear(gate.silu() * up, self.w_down, self.int8, prompt, residual=x)


class Llama:
    """The model. `forward(tokens, start_pos)` -> logits (t, vocab) of one sequence, extending the KV cache.

    `params` are the GGUF-named tensors (moved to `device`, cast to `dtype`), or QuantizedWeight matrices (kept in
    their blocks; tg_nn.quant.gguf_load_quantized); without them the weights are random (normal, std 0.02), which
    the tests and benchmarks use. `consume` empties the `params` dict it was given (load_model's own: the pieces
    joined into one matrix are then freed as the load goes, not held twice until it ends). `int8_activations`:
    the products with quantized weights round x to 8-bit blocks on the CPU (llama.cpp's numerics, faster; the
    logits move by ~0.5% per layer's worth of products, enough to change a greedy answer).
    """

    def __init__(
        self,
        cfg: LlamaConfig,
        params: dict[str, Weight] | None = None,
        device: str | None = None,
        dtype: DType = dtypes.float32,
        quantized: frozenset[str] = frozenset(),
        consume: bool = False,
        int8_activations: bool = False,
        devices: Sequence[str] | None = None,
    ) -> None:
        self.cfg = cfg
        # tensor parallel: the devices the layers are split over (tg_llm.tensor_parallel); () for one device
        self.devices: tuple[str, ...] = tuple(Device.canonicalize(d) for d in devices) if devices else ()
        if self.devices:
            check_split(cfg, len(self.devices))
            device = self.devices[0]  # where the tokens go in and the logits come out
        given = params
        params = dict(params) if params is not None else dict(_random_params(cfg))
        if consume and given is not None:  # the caller's dict would keep each loaded piece alive until it returns
            given.clear()
        missing = [k for k in _param_shapes(cfg, "output.weight" in params) if k not in params]
        if missing:
            raise ValueError(f"Llama: the model file lacks the tensors {missing[:8]}")
        first = params["token_embd.weight"]
        self.device = device or (first.blocks if isinstance(first, QuantizedWeight) else first).device
        if self.device.startswith("DISK"):
            raise ValueError("Llama: pass a compute device (DISK holds files only)")
        self.dtype = dtype
        # where the layers compute: the device, or the set of devices they are split over
        self.compute: str = DeviceSet(self.devices) if self.devices else self.device
        loaded = self._load(params, quantized)
        del params  # (the caller's dict may still hold the lazy copies; they hold no memory)
        fused: dict[str, Weight] = {}
        if self.devices:  # joined per device (each device's rows of q, k and v side by side; the parts freed)
            fused.update(fuse_split_projections(cfg.n_layers, loaded, len(self.devices), self._release))
        else:
            fused = _fuse_projections(cfg, loaded, quantized, self._release)
        self._realize_weights(loaded, quantized)
        self.params = loaded
        for k, shape in _param_shapes(cfg, "output.weight" in loaded).items():
            if tuple(loaded[k].shape) != shape:
                raise ValueError(f"Llama: tensor {k!r} has shape {loaded[k].shape}, expected {shape} from the metadata")
        self.embedding = loaded["token_embd.weight"]
        self.output = loaded.get("output.weight", self.embedding)  # tied when the file has no head
        self.output_norm = _tensor(loaded["output_norm.weight"])
        self.int8_activations = int8_activations
        self.blocks = [Block(cfg, loaded, i, fused, int8_activations, len(self.devices)) for i in range(cfg.n_layers)]
        inv_freq = _inv_freq(cfg, _opt_tensor(loaded.get("rope_freqs.weight")))
        self.inv_freq = Tensor(inv_freq, device=self.compute).realize()
        self.caches = [
            KVCache(1, cfg.n_kv_heads, cfg.context_length, cfg.head_dim, self.device, dtype, self.devices)
            for _ in self.blocks
        ]
        self._decode = TinyJit(self._step)
        # the decode step's token, refilled in place each step: the same buffer every replay, so the jitted step
        # rebinds none of the kernels that read it (a CUDA graph node update each)
        self._decode_tok = Tensor.zeros(1, dtype=dtypes.int32, device=self.device).contiguous().realize()
        # greedy_tokens' chained steps: the token each step reads and advances, and the token it chose at each
        # position, on the device (so steps queue without the host in between)
        self._chain_token = Tensor.zeros(1, dtype=dtypes.int32, device=self.device).contiguous().realize()
        self._chain_out = (
            Tensor.zeros(cfg.context_length, dtype=dtypes.int32, device=self.device).contiguous().realize()
        )
        self._chain = TinyJit(self._step_chain)
        # captured prefills by (padded length, from position 0)
        self._prefills: dict[tuple[int, bool], TinyJit[Tensor]] = {}
        self._calls: dict[int, int] = {}  # calls of each jitted step, by id (the first two allocate, then replays)
        self._release()

    def _load(self, params: dict[str, Weight], quantized: frozenset[str]) -> dict[str, Weight]:
        """The weights on the device, lazy where they are plain copies (realized after _fuse_projections joined
        them, so no piece is held twice, even for a moment): QuantizedWeight blocks as they are; `quantized` names
        (lazy dequantizations of blocks already on the device) left lazy, so the kernels reading them unpack the
        blocks; float16 matrices of a float32 model in their 16 bits (the matmuls widen them); the rest cast to the
        model's dtype."""
        norms = ("norm.weight", "bias")  # small vectors: kept in float32 whatever the weights' dtype
        out: dict[str, Weight] = {}
        if self.devices:
            return self._load_split(params)
        for k, v in params.items():
            if isinstance(v, QuantizedWeight):
                out[k] = QuantizedWeight(v.blocks.to(self.device), v.qtype, v.shape)
            elif k in quantized and k != "token_embd.weight":
                out[k] = v
            else:
                small = k.endswith(norms) or k == "rope_freqs.weight"
                keep16 = v.dtype == dtypes.float16 and self.dtype == dtypes.float32 and not small and v.ndim == 2
                out[k] = (
                    v.to(self.device) if keep16 else v.to(self.device).cast(dtypes.float32 if small else self.dtype)
                )
        return out

    def _load_split(self, params: dict[str, Weight]) -> dict[str, Weight]:
        """The weights placed over `devices` as tg_llm.tensor_parallel.shard_axis says (tensors on one device are
        split here; ones load_shards placed already are kept), cast to the model's dtype (vectors to float32)."""
        n, out = len(self.devices), dict[str, Weight]()
        if "output.weight" not in params:  # a tied head: a split copy of the table (which stays on device 0)
            params = {**params, "output.weight": params["token_embd.weight"]}
        for k, v in params.items():
            if isinstance(v, QuantizedWeight):
                raise ValueError(f"Llama: {k!r} is quantized ({v.qtype}); a split model needs float weights")
            want = dtypes.float32 if v.ndim == 1 else self.dtype
            where = shard_axis(k, self.cfg.vocab_size, n)
            if is_split(v):
                placed = v
            elif where == HOME:
                placed = v.to(self.device)
            else:
                placed = v.shard(self.devices, where if isinstance(where, int) else None)
            out[k] = placed if placed.dtype == want else placed.cast(want)
        return out

    def _realize_weights(self, loaded: dict[str, Weight], quantized: frozenset[str]) -> None:
        """Realize every weight that is still a lazy copy or cast, one at a time (each its final buffer)."""
        for k, w in loaded.items():
            t = _storage(w)
            if k in quantized and k != "token_embd.weight" or t.uop.base.op is Ops.BUFFER or _is_realized_split(t):
                continue
            t = t.realize() if t.uop.op is Ops.COPY else t.contiguous().realize()  # (a copy writes its own buffer)
            loaded[k] = QuantizedWeight(t, w.qtype, w.shape) if isinstance(w, QuantizedWeight) else t

    def _release(self) -> None:
        """Return the buffers freed so far (the unjoined weights of a load, a step's eager and capture runs) to the
        system instead of keeping them for reuse: the model allocates little once its steps are captured."""
        for d in self.devices or (self.device,):
            Device[d].allocator.release()

    def _run(self, jit: TinyJit[Any], *args: Any) -> Any:
        """Call a jitted step; after its first two calls (eager, then captured), release the freed buffers."""
        out = jit(*args)
        calls = self._calls[id(jit)] = self._calls.get(id(jit), 0) + 1
        if calls <= 2:
            self._release()
        return out

    def embed_tokens(self, tokens: Tensor) -> Tensor:
        """The float32 embedding rows (t, dim) of the int32 token ids `tokens` (t,), gathered on the device."""
        table = self.embedding
        if isinstance(table, QuantizedWeight):
            rows = table.blocks.reshape(self.cfg.vocab_size, -1)[tokens]
            return dequantize(rows, table.qtype, (int(tokens.shape[0]), self.cfg.dim))
        rows = table[tokens].cast(dtypes.float32)
        return rows.shard(self.devices) if self.devices else rows  # (split: the rows copied to every device)

    def logits(self, x: Tensor, start: sint, last: sint | None = None, each_layer: bool = False) -> Tensor:
        """Lazy logits (t, vocab) of the embedded tokens x (t, dim) at positions start..start+t-1 (`start`: an int
        or a bound Variable); assigns the caches. With `last`, the logits (1, vocab) of row `last` only (the
        output head, the biggest matrix, then multiplies one row). `each_layer` realizes each block's output as it
        comes (the same kernels; a prompt's intermediate buffers then live for one layer, not for all of them)."""
        t = int(x.shape[0])
        positions = (Tensor.arange(t, device=self.compute) + start).cast(dtypes.float32)
        angles = positions.reshape(-1, 1) * self.inv_freq.reshape(1, -1)
        cos, sin = angles.cos(), angles.sin()
        for block, cache in zip(self.blocks, self.caches):
            x = block(x, cache, start, cos, sin)
            # (split over devices, each layer's output is realized too: the KV-cache writes of a sharded cache are
            # scheduled on their own, and a lazy residual stream would be computed again for each of them)
            if each_layer or self.devices:
                x = x.realize()
        if last is not None:
            x = x[last : last + 1]
        norm = (self.output_norm, self.cfg.norm_eps)
        out = linear(x, self.output, self.int8_activations, int(x.shape[0]) > 1, norm=norm).cast(dtypes.float32)
        return out.to(self.device) if self.devices else out  # (split: each device's vocabulary rows gathered)

    def _cache_tensors(self) -> list[Tensor]:
        return [c.keys for c in self.caches] + [c.values for c in self.caches]

    def _step(self, tokens: Tensor, start: sint, last: sint | None = None) -> Tensor:
        """`logits` of the token ids at `start`, realized with the caches (the function TinyJit captures)."""
        logits = self.logits(self.embed_tokens(tokens), start, last, each_layer=int(tokens.shape[0]) > 1)
        Tensor.realize(logits, *self._cache_tensors())
        return logits

    def _step_chain(self, start: UOp) -> Tensor:
        """One greedy step on the device state: embed `_chain_token`, run the step at `start`, record the argmax in
        `_chain_out[start]` and make it the next token (what TinyJit captures)."""
        token = self._chain_token
        chosen = argmax_rows(self.logits(self.embed_tokens(token), start))
        self._chain_out[start : start + 1].assign(chosen)
        token.assign(chosen)
        Tensor.realize(self._chain_out, token, *self._cache_tensors())
        return chosen

    def _position(self, name: str, value: int, t: int) -> UOp:
        return UOp.variable(name, 0, self.cfg.context_length - t).bind(value)

    def greedy_tokens(self, token: int, start_pos: int, n: int, chunk: int = 16) -> Iterator[int]:
        """The next `n` greedy tokens after `token` at `start_pos` (the argmax of `forward`'s logits, step by step).

        The steps are chained on the device: each reads the token the one before wrote, so the host queues `chunk`
        of them without waiting and reads their tokens once per chunk (one copy of a few bytes): the GPU does not
        idle through the host's part of every step. Stopping the iteration early leaves cache slots written past
        the last token read, which no later query reads before a step overwrites them.

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
        self._chain_token.copyin(np.array([token], dtype=np.int32).data)
        done = 0
        while done < n:
            k = min(chunk, n - done)
            for i in range(k):
                self._run(self._chain, self._position("pos", start_pos + done + i, 1))
            chosen = self._chain_out.numpy()
            yield from (int(t) for t in chosen[start_pos + done : start_pos + done + k])
            done += k

    def _check_positions(self, n: int, start_pos: int) -> None:
        ctx = self.cfg.context_length
        if start_pos < 0 or start_pos + n > ctx:
            raise ValueError(f"Llama: positions {start_pos}..{start_pos + n - 1} exceed the context of {ctx} tokens")

    def _check_tokens(self, tokens: list[int]) -> None:
        bad = [t for t in tokens if not isinstance(t, (int, np.integer)) or not 0 <= t < self.cfg.vocab_size]
        if bad:
            raise ValueError(f"Llama: token {bad[0]!r} is not an id in 0..{self.cfg.vocab_size - 1}")

    def embed(self, tokens: list[int]) -> Tensor:
        """The embedding rows (len(tokens), dim) of `tokens`, float32 on the model's device."""
        self._check_tokens(tokens)
        return self.embed_tokens(Tensor(np.asarray(tokens, dtype=np.int32), device=self.device))

    def forward(self, tokens: list[int], start_pos: int, all_logits: bool = True) -> Tensor:
        """Logits (len(tokens), vocab) of `tokens` at positions start_pos.. (prefill: all in one pass); with
        `all_logits=False` those of the last token only, (1, vocab) (what generation needs: a prompt's other rows
        skip the output head).

        One token goes through the jitted decode step (the same kernels at every position). A longer chunk is
        padded to a power of two (when the context has room), so prompts of any length reuse the kernels of a few
        lengths: the padding writes cache slots after the last real token, which no query reads before a later
        step overwrites them. With `all_logits=False`, a padded chunk replays a captured step (the logits are then
        that capture's buffer, overwritten by its next call, as the decode step's are): on the CPU a chunk of up to
        PREFILL_JIT_MAX tokens, elsewhere any. A longer chunk on the CPU is not jitted: it runs layer by layer, each
        layer's intermediate buffers freed (and reused by the next) as it goes (a TinyJit recording would hold every
        layer's until captured).
        """
        if not tokens:
            raise ValueError("Llama: forward needs at least one token")
        n, ctx = len(tokens), self.cfg.context_length
        self._check_positions(n, start_pos)
        self._check_tokens(tokens)
        if n == 1:
            self._decode_tok.copyin(np.array(tokens, dtype=np.int32).data)
            logits: Tensor = self._run(self._decode, self._decode_tok, self._position("pos", start_pos, 1))
            return logits
        size = max(8, 1 << (n - 1).bit_length())
        if start_pos + size > ctx:
            size = n
        ids = Tensor(np.asarray(tokens + [0] * (size - n), dtype=np.int32), device=self.device).realize()
        # a prompt from position 0 has static shapes (codegen optimizes fixed-size attention better than symbolic);
        # a continuation reads start + size rows through a bound Variable (the same kernels for every start)
        start: sint = 0 if start_pos == 0 else self._position("start", start_pos, size)
        if all_logits:
            return self._step(ids, start)[:n]
        last = UOp.variable("last", 0, size - 1).bind(n - 1)
        jit_max = PREFILL_JIT_MAX if self.device.split(":")[0] == "CPU" else ctx  # (memory: see PREFILL_JIT_MAX)
        if size > jit_max or size != max(8, 1 << (n - 1).bit_length()) or self.devices:
            return self._step(ids, start, last)
        jit = self._prefills.setdefault((size, start_pos == 0), TinyJit(self._step))
        out: Tensor = self._run(jit, ids, start, last)
        return out

    def reset(self) -> None:
        """Nothing to clear: positions after the ones written are never read (kept for API symmetry)."""

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights a decode step reads (all but the embedding table, unless it is the output head)."""
        tied = "output.weight" not in self.params
        read = [_storage(v) for k, v in self.params.items() if k != "token_embd.weight" or tied]
        bufs = {u for t in read for u in t.uop.toposort if u.op is Ops.BUFFER}  # fused matrices counted once
        unbuffered = sum(
            int(t.numel()) * t.dtype.itemsize for t in read if not any(u.op is Ops.BUFFER for u in t.uop.toposort)
        )
        return sum(int(u.arg[1]) * u.dtype.itemsize for u in bufs) + unbuffered
