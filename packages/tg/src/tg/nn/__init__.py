"""tg.nn: the layers of tg_nn, importable as in tinygrad (`from tg.nn.state import safe_load`).

>>> from tg import nn
>>> nn.Linear(2, 3).weight.shape
(3, 2)
"""

import importlib
from types import ModuleType

from tg_nn import *  # noqa: F403
from tg_nn import __all__ as __all__


def __getattr__(name: str) -> ModuleType:
    """`tg.nn.datasets` is imported on first use (it pulls in urllib, ssl, tarfile and numpy)."""
    if name == "datasets":
        return importlib.import_module("tg.nn.datasets")
    raise AttributeError(f"module 'tg.nn' has no attribute {name!r}")
