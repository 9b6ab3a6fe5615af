"""Write random Llama-style GGUF files (tests and benchmarks: no weights can be downloaded here).

Needs the `gguf` package (llama.cpp's writer): `pip install gguf`. The weights are random (normal,
std 0.02; norms near 1) in one ggml type for every matrix; Q8_0/Q4_0/Q4_1 are quantized by gguf's own
quantizer, the K-quants (which gguf cannot quantize) get random blocks with sane scales. The
vocabulary is a byte-level BPE ("gpt2", llama3-style special tokens) or a sentencepiece one ("llama")
whose merges are learned from a built-in paragraph, padded with unused tokens to `vocab_size`.

>>> from tg_llm.random_model import write_random_gguf  # doctest: +SKIP
>>> write_random_gguf("/tmp/tiny.gguf", dim=64, n_layers=2, qtype="Q8_0")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import numpy as np

from tg_llm.pretokenizer import pre_tokenizer
from tg_llm.tokenizer import BYTE, CONTROL, NORMAL, UNUSED, byte_encoder

__all__ = ["CORPUS", "bpe_vocab", "spm_vocab", "write_random_gguf"]

CORPUS = (
    "The quick brown fox jumps over the lazy dog. A tiny model learns nothing, but it runs the same code as a "
    "large one: the tokenizer splits the text, the transformer reads the tokens, and the sampler writes new ones. "
    "Hello, world! Numbers like 12345 and 2026 are split into digits; émigré café naïve déjà vu are accented."
)
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


def bpe_vocab(n_merges: int = 200, corpus: str = CORPUS) -> tuple[list[str], list[str], list[int]]:
    """(tokens, merges, token types) of a byte-level BPE learned on `corpus` (split by llama3's pre-tokenizer)."""
    enc = byte_encoder()
    words = Counter("".join(enc[b] for b in w.encode()) for w in pre_tokenizer("llama-bpe").split(corpus))
    seqs = {w: list(w) for w in words}
    tokens = [enc[b] for b in range(256)]
    merges: list[str] = []
    for _ in range(n_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for w, parts in seqs.items():
            for a, b in zip(parts, parts[1:]):
                pairs[(a, b)] += words[w]
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        tokens.append(a + b)
        for parts in seqs.values():
            i = 0
            while i < len(parts) - 1:
                if parts[i] == a and parts[i + 1] == b:
                    parts[i : i + 2] = [a + b]
                i += 1
    types = [NORMAL] * len(tokens) + [CONTROL] * len(SPECIALS)
    return tokens + SPECIALS, merges, types


def spm_vocab(n_pieces: int = 200, corpus: str = CORPUS) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types) of a sentencepiece-style vocab: <unk> <s> </s>, 256 byte tokens, pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, CONTROL, CONTROL] + [BYTE] * 256
    scores = [0.0] * len(tokens)
    text = "▁" + corpus.replace(" ", "▁")
    chars = sorted(set(text))
    pieces: list[str] = list(chars)
    seq = list(text)
    for _ in range(n_pieces):
        pairs = Counter(zip(seq, seq[1:]))
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        pieces.append(a + b)
        i, out = 0, []
        while i < len(seq):
            if i < len(seq) - 1 and seq[i] == a and seq[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(seq[i])
                i += 1
        seq = out
    for rank, p in enumerate(pieces):
        tokens.append(p)
        scores.append(-float(rank) if len(p) > 1 else -1000.0 - rank)
        types.append(NORMAL)
    return tokens, scores, types


# Q8_0 matrices of at least this many values get random blocks, not gguf's quantizer (minutes for a 1B model)
_BIG = 1 << 22


def _random_quant(rows: int, cols: int, qtype: Any, rng: np.random.Generator) -> np.ndarray:
    """Random K-quant (or Q8_0) blocks (uint8, one row of blocks per matrix row) whose scales keep values ~0.02."""
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)

    def put_f16(at: int, lo: float, hi: float) -> None:
        raw[:, at : at + 2] = rng.uniform(lo, hi, size=(raw.shape[0], 1)).astype(np.float16).view(np.uint8)

    if qtype.name == "Q8_0":
        put_f16(0, 1e-4, 3e-4)  # d; the 32 int8 values stay uniform random
    elif qtype.name in ("Q4_K", "Q5_K"):
        put_f16(0, 1e-4, 3e-4)  # d
        put_f16(2, 1e-4, 3e-4)  # dmin
    elif qtype.name == "Q6_K":
        put_f16(208, 2e-5, 6e-5)
    return raw.reshape(rows, cols // block * size)


def _encode_weight(rows: int, cols: int, qtype: Any, rng: np.random.Generator) -> tuple[np.ndarray, Any]:
    """A random (rows, cols) matrix, values ~0.02, in ggml type `qtype` (raw blocks and their type)."""
    import gguf

    q = gguf.GGMLQuantizationType
    if qtype in (q.Q4_K, q.Q5_K, q.Q6_K) or (qtype == q.Q8_0 and rows * cols >= _BIG):
        return _random_quant(rows, cols, qtype, rng), qtype  # random blocks: no quantizer to run
    a = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(0.02)
    if qtype in (q.F32, q.F16):
        return a.astype(np.float32 if qtype == q.F32 else np.float16), None
    if qtype == q.BF16:
        return gguf.quants.quantize(a, q.BF16), q.BF16
    return gguf.quants.quantize(a, qtype), qtype


def _value_type(value: bool | int | float | str) -> Any:
    import gguf

    t = gguf.GGUFValueType
    if isinstance(value, (bool, str, float)):
        return {bool: t.BOOL, str: t.STRING, float: t.FLOAT32}[type(value)]
    return t.INT32 if value < 0 else t.UINT32


def write_random_gguf(
    path: str | os.PathLike[str],
    *,
    arch: str = "llama",
    dim: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    n_kv_heads: int = 2,
    hidden_dim: int = 128,
    context_length: int = 64,
    vocab_size: int | None = None,
    qtype: str = "F32",
    tokenizer: str = "gpt2",
    tied: bool = False,
    seed: int = 0,
    rope_theta: float = 10000.0,
    rope_freqs: bool = False,
    qkv_bias: bool = False,
    qk_norm: bool = False,
    metadata: dict[str, bool | int | float | str | list[Any]] | None = None,
) -> None:
    """Write a random model of the given shape to `path` as GGUF (every matrix in ggml type `qtype`).
    `metadata`: keys written last, replacing the ones of the same name (to make corrupt files)."""
    try:
        import gguf
    except ImportError as e:
        raise ImportError("write_random_gguf needs the gguf package: pip install gguf") from e
    rng = np.random.default_rng(seed)
    if tokenizer == "gpt2":
        tokens, merges, types = bpe_vocab()
        scores: list[float] = []
    elif tokenizer == "llama":
        tokens, scores, types = spm_vocab()
        merges = []
    else:
        raise ValueError(f"write_random_gguf: tokenizer={tokenizer!r} must be 'gpt2' or 'llama'")
    vocab = vocab_size or len(tokens)
    if vocab < len(tokens):
        raise ValueError(f"write_random_gguf: vocab_size={vocab} is smaller than the {len(tokens)} tokens needed")
    tokens += [f"<unused{i}>" for i in range(vocab - len(tokens))]
    types += [UNUSED] * (vocab - len(types))
    scores += [-1e9] * (vocab - len(scores)) if scores else []

    w = gguf.GGUFWriter(os.fspath(path), arch)
    w.add_context_length(context_length)
    w.add_embedding_length(dim)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(hidden_dim)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(rope_theta)
    w.add_tokenizer_model(tokenizer)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if tokenizer == "gpt2":
        w.add_tokenizer_pre("llama-bpe")
        w.add_token_merges(merges)
        w.add_bos_token_id(tokens.index("<|begin_of_text|>"))
        w.add_eos_token_id(tokens.index("<|eot_id|>"))
        w.add_chat_template(LLAMA3_TEMPLATE)
    else:
        w.add_token_scores(scores)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
    if qtype not in gguf.GGMLQuantizationType.__members__:
        raise ValueError(f"write_random_gguf: qtype={qtype!r} is not a ggml type name (e.g. 'F16', 'Q8_0', 'Q4_K')")
    qt = gguf.GGMLQuantizationType[qtype]
    block = gguf.GGML_QUANT_SIZES[qt][0]
    for what, size in (("dim", dim), ("hidden_dim", hidden_dim)):
        if size % block:
            raise ValueError(f"write_random_gguf: {what}={size} must be a multiple of {qtype}'s {block}-value block")
    hd = dim // n_heads

    def matrix(name: str, rows: int, cols: int) -> None:
        data, raw = _encode_weight(rows, cols, qt, rng)
        w.add_tensor(name, data, raw_dtype=raw)

    def vector(name: str, n: int, around: float) -> None:
        w.add_tensor(name, (around + 0.1 * rng.standard_normal(n)).astype(np.float32))

    matrix("token_embd.weight", vocab, dim)
    for i in range(n_layers):
        p = f"blk.{i}."
        vector(p + "attn_norm.weight", dim, 1.0)
        matrix(p + "attn_q.weight", n_heads * hd, dim)
        matrix(p + "attn_k.weight", n_kv_heads * hd, dim)
        matrix(p + "attn_v.weight", n_kv_heads * hd, dim)
        if qkv_bias:
            for n, size in (("q", n_heads * hd), ("k", n_kv_heads * hd), ("v", n_kv_heads * hd)):
                vector(p + f"attn_{n}.bias", size, 0.0)
        if qk_norm:
            vector(p + "attn_q_norm.weight", hd, 1.0)
            vector(p + "attn_k_norm.weight", hd, 1.0)
        matrix(p + "attn_output.weight", dim, n_heads * hd)
        vector(p + "ffn_norm.weight", dim, 1.0)
        matrix(p + "ffn_gate.weight", hidden_dim, dim)
        matrix(p + "ffn_up.weight", hidden_dim, dim)
        matrix(p + "ffn_down.weight", dim, hidden_dim)
    vector("output_norm.weight", dim, 1.0)
    if not tied:
        matrix("output.weight", vocab, dim)
    if rope_freqs:
        w.add_tensor("rope_freqs.weight", rng.uniform(1.0, 8.0, hd // 2).astype(np.float32))
    for key, value in (metadata or {}).items():
        if isinstance(value, list):
            w.add_array(key, value)
        else:
            w.add_key_value(key, value, _value_type(value))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
