"""tg_nn: neural-network layers, optimizers, model state (safetensors) and datasets on top of Tensor.

>>> from tg_nn import Linear
>>> from tg_tensor import Tensor
>>> Linear(3, 2)(Tensor.ones(4, 3)).shape
(4, 2)
"""

import importlib
from types import ModuleType

from tg_nn import optim, state
from tg_nn.dropout import Dropout
from tg_nn.layers import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d, Embedding, Linear, LSTMCell
from tg_nn.norm import (
    BatchNorm,
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    LayerNorm2d,
    RMSNorm,
)

__version__ = "0.1.0"
__all__ = [
    "BatchNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "Conv1d",
    "Conv2d",
    "Dropout",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "Embedding",
    "GroupNorm",
    "InstanceNorm",
    "LSTMCell",
    "LayerNorm",
    "LayerNorm2d",
    "Linear",
    "RMSNorm",
    "optim",
    "state",
]


def __getattr__(name: str) -> ModuleType:
    """`tg_nn.datasets` is imported on first use: it pulls in urllib, ssl, tarfile and numpy."""
    if name == "datasets":
        return importlib.import_module("tg_nn.datasets")
    raise AttributeError(f"module 'tg_nn' has no attribute {name!r}")
