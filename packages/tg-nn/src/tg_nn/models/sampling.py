"""The token sampler of decoder-only transformers: one function for tg_nn.models.gpt's GPT and tg_llm's Llama.

>>> import numpy as np
>>> sample(np.array([0.0, 5.0, 1.0]), temperature=0.0)
1
"""

from __future__ import annotations

import numpy as np

__all__ = ["sample"]


def sample(
    logits: np.ndarray,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    rng: np.random.Generator | None = None,
) -> int:
    """One token id from a vector of logits: the argmax at temperature 0, else a draw from softmax(logits / T) cut
    to the top k (0: all) and to the smallest set whose probability reaches top_p.
    """
    if temperature < 0 or not 0 < top_p <= 1 or top_k < 0:
        raise ValueError(
            f"sample: need temperature >= 0, 0 < top_p <= 1, top_k >= 0; got {temperature}, {top_p}, {top_k}"
        )
    if temperature == 0:
        return int(np.argmax(logits))
    z = np.asarray(logits, dtype=np.float64) / temperature
    order = np.argsort(-z, kind="stable")
    if top_k:
        order = order[:top_k]
    p = np.exp(z[order] - z[order[0]])
    p /= p.sum()
    if top_p < 1:
        keep = int(np.searchsorted(np.cumsum(p), top_p) + 1)
        order, p = order[:keep], p[:keep] / p[:keep].sum()
    return int(order[(rng or np.random.default_rng()).choice(len(p), p=p)])
