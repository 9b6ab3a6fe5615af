"""tg.nn: the layers of tg_nn, importable as in tinygrad (`from tg.nn.state import safe_load`).

>>> from tg import nn
>>> nn.Linear(2, 3).weight.shape
(3, 2)
"""

from tg_nn import *  # noqa: F403
from tg_nn import __all__ as __all__
