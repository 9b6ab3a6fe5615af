"""tg.llm: re-exports tg_llm (GGUF models, tokenizer, chat CLI, server); `python -m tg.llm --model F.gguf`."""

from tg_llm import *  # noqa: F403
from tg_llm import __all__ as __all__
