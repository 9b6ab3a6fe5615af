"""tg.nn.optim: re-exports tg_nn.optim (tinygrad's import path)."""

from tg_nn.optim import *  # noqa: F403
