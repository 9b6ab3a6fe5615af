"""tg.nn.state: re-exports tg_nn.state (tinygrad's import path)."""

from tg_nn.gguf import GGUFError, gguf_load  # noqa: F401  (GGUF files, as tinygrad.nn.state.gguf_load)
from tg_nn.state import *  # noqa: F403
from tg_nn.state import __all__ as __all__
