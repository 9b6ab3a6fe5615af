"""tg: the full stack. `from tg import Tensor, Device, dtypes, nn` mirrors tinygrad's public surface.

>>> from tg import Tensor
>>> (Tensor([1, 2, 3]) + Tensor([4, 5, 6])).tolist()
[5, 7, 9]
"""

from tg import nn
from tg_runtime import Device
from tg_tensor import JitCacheError, JitCacheWarning, JitError, Tensor, TinyJit, function
from tg_uop import Context, GlobalCounters, UOp, Variable, dtypes, getenv
from tg_uop.trace import VIZ

if VIZ.value:  # the viewer records this program and serves its page (see tg_viz)
    import tg_viz

    tg_viz.install()

__version__ = "0.1.0"
__all__ = [
    "Context",
    "Device",
    "GlobalCounters",
    "JitCacheError",
    "JitCacheWarning",
    "JitError",
    "Tensor",
    "TinyJit",
    "UOp",
    "Variable",
    "dtypes",
    "function",
    "getenv",
    "nn",
]
