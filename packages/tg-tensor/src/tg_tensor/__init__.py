"""tg_tensor: the lazy Tensor, its scheduler (kernel fusion) and realize.

>>> from tg_tensor import Tensor
>>> Tensor([1, 2, 3]).sum().item()
6
"""

from tg_tensor.custom import source_kernel
from tg_tensor.engine.realizer import Realizer, ScheduleItem, run_schedule
from tg_tensor.engine.schedule import create_schedule
from tg_tensor.engine.source import KernelSource
from tg_tensor.function import function
from tg_tensor.jit import JitCacheWarning, JitError, TinyJit
from tg_tensor.jit_file import JitCacheError
from tg_tensor.tensor import Tensor
from tg_uop import GlobalCounters

__version__ = "0.1.0"
__all__ = [
    "GlobalCounters",
    "JitCacheError",
    "JitCacheWarning",
    "JitError",
    "KernelSource",
    "Realizer",
    "TinyJit",
    "ScheduleItem",
    "Tensor",
    "create_schedule",
    "function",
    "run_schedule",
    "source_kernel",
]
