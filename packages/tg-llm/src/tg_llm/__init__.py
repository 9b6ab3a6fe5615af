"""tg-llm: run GGUF language models (Llama family) with tg: a model, a tokenizer, a chat CLI and a server.

>>> from tg_llm import load_model
>>> model, tokenizer = load_model("model.gguf")  # doctest: +SKIP
>>> tokenizer.decode(model.generate(tokenizer.encode("Hello"), max_new_tokens=8))  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tg_llm.model import Llama, LlamaConfig, Weight, with_context
from tg_llm.tensor_parallel import check_memory, check_split, check_types, load_shards, plan_devices
from tg_llm.tokenizer import Tokenizer
from tg_nn.gguf import GGUFError, gguf_load, gguf_read_header
from tg_nn.quant import gguf_load_quantized
from tg_runtime import Device
from tg_uop import DType, dtypes

__all__ = ["GGUFError", "Llama", "LlamaConfig", "Tokenizer", "load_model"]


def load_model(
    path: str | os.PathLike[str],
    device: str | None = None,
    dtype: DType | None = None,
    context: int | None = None,
    keep_quantized: bool = True,
    int8_activations: bool = False,
    devices: Sequence[str] | None = None,
) -> tuple[Llama, Tokenizer]:
    """The model and tokenizer of a GGUF file. `dtype` of the weights: float16 on GPUs, float32 elsewhere by
    default; `context` caps the KV cache (the file's context length when None). `keep_quantized` (the default):
    quantized matrices stay in their blocks on the device and their products are fused kernels that read the
    blocks (tg_nn.quant); False dequantizes them to `dtype` at load. `int8_activations`: those kernels round x to
    8-bit blocks on the CPU, as llama.cpp does (faster; the default keeps x in float32).

    `devices` (several devices of one kind, tg_llm.tensor_parallel.plan_devices): the model is split over them
    (tensor parallel; an F32/F16/BF16 file), each device's shards copied straight from the mapped file; a model
    that cannot be split evenly or does not fit is a ValueError before any weight is copied."""
    if devices:
        return _load_split(path, tuple(devices), dtype, context)
    device = Device.canonicalize(device) if device is not None else Device.DEFAULT
    state: dict[str, Weight]
    if keep_quantized:
        metadata, state = gguf_load_quantized(path, device)
    else:
        metadata, plain = gguf_load(path, device)
        state = dict(plain)
    if "token_embd.weight" not in state:
        raise GGUFError(f"load_model: {os.fspath(path)!r} has no token_embd.weight: not a language model")
    cfg = with_context(LlamaConfig.from_gguf(metadata, int(state["token_embd.weight"].shape[0])), context)
    if dtype is None:
        dtype = dtypes.float16 if device.split(":")[0] in ("CUDA", "CL") else dtypes.float32
    tokenizer = Tokenizer.from_gguf(metadata)
    if len(tokenizer) != cfg.vocab_size:  # every sampled id needs a text, every token an embedding row
        raise GGUFError(
            f"load_model: the vocabulary has {len(tokenizer)} tokens, but token_embd.weight has {cfg.vocab_size} rows"
        )
    return Llama(cfg, state, device, dtype, consume=True, int8_activations=int8_activations), tokenizer


def _load_split(
    path: str | os.PathLike[str], devices: tuple[str, ...], dtype: DType | None, context: int | None
) -> tuple[Llama, Tokenizer]:
    """load_model over several devices: every check first (types, split, memory), then the shards."""
    devices = plan_devices(devices=devices)  # one kind, none twice, present
    header = gguf_read_header(path)
    embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    if embd is None:
        raise GGUFError(f"load_model: {os.fspath(path)!r} has no token_embd.weight: not a language model")
    cfg = with_context(LlamaConfig.from_gguf(header.metadata, int(embd.shape[0])), context)
    if dtype is None:
        dtype = dtypes.float16 if devices[0].split(":")[0] in ("CUDA", "CL") else dtypes.float32
    tokenizer = Tokenizer.from_gguf(header.metadata)
    if len(tokenizer) != cfg.vocab_size:
        raise GGUFError(
            f"load_model: the vocabulary has {len(tokenizer)} tokens, but token_embd.weight has {cfg.vocab_size} rows"
        )
    check_types(header)
    check_split(cfg, len(devices))
    check_memory(header, cfg, devices, dtype)
    # (no reference kept here: the model frees the q/k/v and gate/up pieces as it joins them)
    return Llama(
        cfg, load_shards(path, cfg, devices, dtype, header), dtype=dtype, consume=True, devices=devices
    ), tokenizer
