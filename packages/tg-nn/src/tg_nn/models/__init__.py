"""The model zoo and what its models share: a GPT (GPT-2's layout, `gpt`), one KV cache (`kv_cache.KVCache`), one
attention over it for decoding (`decode_attention`), one token sampler (`sampling.sample`) and the corpus the GPT
example trains on (`shakespeare`, also `tg.nn.datasets.shakespeare`). The Llama family (Llama 2/3, Mistral, Qwen)
is tg_llm.model.Llama: it is built from GGUF files and uses the same cache and sampler.

>>> from tg_nn.models import GPT, GPTConfig, KVCache, sample
>>> KVCache(1, 2, 8, 4).keys.shape, sample([0.0, 3.0], temperature=0)
((1, 2, 8, 4), 1)
"""

from tg_nn.models.gpt import GPT, GPTConfig
from tg_nn.models.kv_cache import KVCache
from tg_nn.models.sampling import sample

__all__ = ["GPT", "GPTConfig", "KVCache", "sample"]
