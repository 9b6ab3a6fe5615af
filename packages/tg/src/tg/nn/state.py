"""tg.nn.state: re-exports tg_nn.state (tinygrad's import path)."""

from tg_nn.state import *  # noqa: F403
from tg_nn.state import __all__ as __all__
