"""The model zoo: a GPT (GPT-2's layout, `gpt`; the Llama family is tg_llm.model.Llama, built from GGUF files),
what every model shares (one `KVCache`, `decode_attention` over it, one token sampler `sampling.sample`) and the
corpus the GPT example trains on (`shakespeare`, also `tg.nn.datasets.shakespeare`).

>>> from tg_nn.models import GPT, GPTConfig, KVCache, sample
>>> KVCache(1, 2, 8, 4).keys.shape, sample([0.0, 3.0], temperature=0)
((1, 2, 8, 4), 1)
"""

from tg_nn.models.gpt import GPT, GPTConfig
from tg_nn.models.kv_cache import KVCache
from tg_nn.models.sampling import sample

__all__ = ["GPT", "GPTConfig", "KVCache", "sample"]
