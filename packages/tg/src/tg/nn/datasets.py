"""tg.nn.datasets: re-exports tg_nn.datasets (tinygrad's import path)."""

from tg_nn.datasets import *  # noqa: F403
