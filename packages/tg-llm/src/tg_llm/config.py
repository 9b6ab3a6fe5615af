"""The shape and constants of a Llama-family model (Llama 2/3, Mistral, Qwen2/3), read from GGUF metadata.

>>> LlamaConfig(vocab_size=16, dim=8, n_layers=1, n_heads=2, n_kv_heads=1, hidden_dim=16, context_length=8).head_dim
4
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

__all__ = ["ARCHITECTURES", "LlamaConfig", "with_context"]

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


def with_context(cfg: LlamaConfig, context: int | None) -> LlamaConfig:
    """`cfg` with its context cut to `context` tokens (a smaller KV cache); None keeps the file's."""
    if context is None:
        return cfg
    if not 1 <= context:
        raise ValueError(f"Llama: context={context} must be >= 1")
    return replace(cfg, context_length=min(context, cfg.context_length))
