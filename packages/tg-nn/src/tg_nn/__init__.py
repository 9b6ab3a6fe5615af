"""tg_nn: neural-network layers, optimizers, model state (safetensors) and datasets on top of Tensor.

>>> from tg_nn import Linear
>>> from tg_tensor import Tensor
>>> Linear(3, 2)(Tensor.ones(4, 3)).shape
(4, 2)
"""

from tg_nn import datasets, state
from tg_nn.layers import Linear

__version__ = "0.1.0"
__all__ = ["Linear", "datasets", "state"]
