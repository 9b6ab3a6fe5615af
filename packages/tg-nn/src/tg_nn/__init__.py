"""tg_nn: neural-network layers on top of Tensor.

>>> from tg_nn import Linear
>>> from tg_tensor import Tensor
>>> Linear(3, 2)(Tensor.ones(4, 3)).shape
(4, 2)
"""

from tg_nn.layers import Linear

__version__ = "0.1.0"
__all__ = ["Linear"]
