"""A Llama model's weights: float tensors or matrices kept in quantized blocks (tg_nn.quant), their products, the
joining of q/k/v and gate/up into one matrix each, and the shapes a config implies.

>>> from tg_tensor import Tensor
>>> linear(Tensor.ones(1, 4), Tensor.ones(3, 4)).tolist()
[[4.0, 4.0, 4.0]]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tg_llm.config import LlamaConfig
from tg_nn.matvec import has_matvec, matvec, rms_norm
from tg_nn.quant import QuantizedWeight, quantized_matmul
from tg_nn.util import swiglu
from tg_runtime import Device
from tg_tensor import Tensor
from tg_uop import DType, dtypes

__all__ = ["Norm", "Weight", "gated_mlp", "linear"]

Weight = Tensor | QuantizedWeight
Norm = tuple[Tensor, float]  # an RMS norm's weight and epsilon


# a prompt of more rows multiplies blocks kept quantized through a half copy of the weight on tensor cores: the fused
# kernels (tg_nn.quant_gpu) read the blocks once per 8 rows of x, the copy costs about three reads of them
UNPACK_ROWS = 16


def linear(
    x: Tensor,
    w: Weight,
    int8: bool = False,
    prompt: bool = False,
    norm: Norm | None = None,
    residual: Tensor | None = None,
    gated: bool = False,
) -> Tensor:
    """[residual +] [rms_norm(x, *norm)] @ w.T for a float matrix or one kept in quantized blocks (a fused kernel
    that reads the blocks; `int8`: with x rounded to 8-bit blocks on the CPU, as llama.cpp does).

    `prompt`: x holds a prompt's tokens (prefill). Where the device's tensor cores multiply the weights' type
    (float16, bfloat16 on a GPU), x is then rounded to that type and the products summed in float32 (compute-bound:
    the tensor cores' speed, as llama.cpp's CUDA prefill does). Otherwise, and for one token (decode, bandwidth-
    bound), float32 x multiplies the widened weights. Blocks kept quantized take the same way for a prompt of more
    than UNPACK_ROWS rows, through a half copy of the weight. A decode step's product of float weights on a GPU is
    one kernel with its norm and residual (tg_nn.matvec); elsewhere they are tg's graph around the product. With a
    `residual` (a transformer's residual stream) the sum is computed by a kernel of its own either way (realized
    when the result is: the next layer's kernels read it, not recompute it). `gated`: w joins a SwiGLU MLP's gate
    and up projections (its first and second halves of rows), and the result is silu(gate) * up."""
    if isinstance(w, Tensor) and not prompt and x.ndim == 2 and has_matvec(x.device, w.dtype, *x.shape):
        g, eps = norm if norm is not None else (None, 1e-5)
        return matvec(x, w, g, eps, residual, glu=gated)
    if norm is not None:
        x = rms_norm(x, *norm)
    unpack = prompt and int(x.shape[0]) > UNPACK_ROWS and _tensor_cores_take(x.device, dtypes.float16)
    if isinstance(w, QuantizedWeight) and not unpack and str(x.device).split(":")[0] in ("CL", "CUDA"):
        return quantized_matmul(x, w, int8, residual=residual, gated=gated)  # (both in the product's GPU kernel)
    y = _product(x, w, int8, unpack, prompt)
    if gated:
        y = swiglu(y)
    return y if residual is None else (residual + y).contiguous()


def gated_mlp(
    x: Tensor, w_gate_up: Weight, w_down: Weight, int8: bool, prompt: bool, norm: Norm, residual: Tensor
) -> Tensor:
    """residual + swiglu(rms_norm(x, *norm) @ w_gate_up.T) @ w_down.T, a SwiGLU MLP whose gate and up projections
    are one matrix (see linear for `int8` and `prompt`). Where the activation is computed is decided here: on the
    CPU with the down projection kept quantized, by the down projection's kernel as it reads gate and up (one small
    kernel fewer per layer, vector exponentials); elsewhere by the gate/up product's (tg_nn.matvec and tg_nn.quant's
    GPU kernels in a decode step, tg's graph otherwise)."""
    if isinstance(w_down, QuantizedWeight) and str(x.device).split(":")[0] == "CPU":
        gate_up = linear(x, w_gate_up, int8, prompt, norm=norm)
        return (residual + quantized_matmul(gate_up, w_down, int8, glu=True)).contiguous()
    act = linear(x, w_gate_up, int8, prompt, norm=norm, gated=True)
    return linear(act, w_down, int8, prompt, residual=residual)


def _product(x: Tensor, w: Weight, int8: bool, unpack: bool, prompt: bool) -> Tensor:
    if isinstance(w, QuantizedWeight):
        if unpack:  # (a long prompt: the blocks unpacked to a half matrix once, then the tensor cores)
            half = w.dequantize().cast(dtypes.float16).contiguous()
            return x.cast(dtypes.float16).dot(half.T, dtype=dtypes.float32)
        return quantized_matmul(x, w, int8)
    if prompt and x.dtype == dtypes.float32 and _tensor_cores_take(x.device, w.dtype):
        return x.cast(w.dtype).dot(w.T, dtype=dtypes.float32)
    return x @ w.T


def _tensor_cores_take(device: str, dtype: DType) -> bool:
    """Do the tensor cores of `device` (the first of a device set) multiply `dtype`?"""
    cores = Device[str(device).split(",")[0]].renderer.tensor_cores
    return any(getattr(tc, "dtype_in", None) == dtype for tc in cores)


def _tensor(w: Weight) -> Tensor:
    if isinstance(w, QuantizedWeight):
        return w.dequantize()
    return w


def _opt_tensor(w: Weight | None) -> Tensor | None:
    return None if w is None else _tensor(w)


def _storage(w: Weight) -> Tensor:
    """The tensor holding a weight's bytes (a quantized weight's blocks)."""
    return w.blocks if isinstance(w, QuantizedWeight) else w


def _nothing() -> None:
    pass


# the projections that read the same input, joined into one matrix each
_FUSED = {"qkv": ("attn_q", "attn_k", "attn_v"), "gate_up": ("ffn_gate", "ffn_up")}


def _fuse_projections(
    cfg: LlamaConfig,
    loaded: dict[str, Weight],
    lazy: frozenset[str] = frozenset(),
    release: Callable[[], None] = _nothing,
) -> dict[str, Weight]:
    """Join each layer's q, k, v weights (and gate, up) into one realized matrix ("blk.{i}.qkv", "blk.{i}.gate_up"):
    the decode step then runs one matrix-vector product for them (3 kernels fewer per layer, and bigger ones: the
    512-row k and v products of a 1B model left most SMs idle). Quantized weights of one type are joined as their
    blocks (whole rows of blocks). The GGUF names stay in `loaded`, as row ranges (views) of the joined matrix, so
    no weight is held twice. Lazy (kept-quantized) weights and groups of mixed dtypes or types stay apart."""
    fused: dict[str, Weight] = {}
    for i in range(cfg.n_layers):
        for key, group in _FUSED.items():
            names = [f"blk.{i}.{n}.weight" for n in group]
            parts = [loaded.get(n) for n in names]
            if all(isinstance(p, QuantizedWeight) for p in parts):
                qparts = [p for p in parts if isinstance(p, QuantizedWeight)]
                if len({p.qtype for p in qparts}) != 1:
                    continue
                whole_q = fused[f"blk.{i}.{key}"] = QuantizedWeight.cat(qparts)
                at = 0
                for n, w in zip(names, qparts):
                    loaded[n] = whole_q.rows(at, at + w.shape[0])
                    at += w.shape[0]
                continue
            tparts = [p for p in parts if isinstance(p, Tensor)]
            if any(n in lazy for n in names):
                continue
            if len(tparts) != len(names) or len({p.dtype for p in tparts}) != 1:
                continue
            joined = fused[f"blk.{i}.{key}"] = tparts[0].cat(*tparts[1:]).contiguous().realize()
            at = 0
            for n, t in zip(names, tparts):
                loaded[n] = joined[at : at + int(t.shape[0])]
                at += int(t.shape[0])
        release()
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
