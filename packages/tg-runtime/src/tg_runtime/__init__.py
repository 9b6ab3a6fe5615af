"""tg_runtime: devices. Device registry, Buffer, Allocator / Compiler / Program, CPU and PYTHON backends.

>>> from tg_runtime import Device
>>> Device.canonicalize("python")
'PYTHON'
"""

from tg_runtime.device import Allocator, Buffer, Compiled, Compiler, Device, DeviceUnavailableError, Program
from tg_runtime.ops_disk import DiskError, disk_buffers, map_file
from tg_runtime.runner import CompiledRunner, get_runner, run_copy

__version__ = "0.1.0"
__all__ = [
    "Allocator",
    "Buffer",
    "Compiled",
    "CompiledRunner",
    "Compiler",
    "Device",
    "DeviceUnavailableError",
    "DiskError",
    "Program",
    "disk_buffers",
    "get_runner",
    "map_file",
    "run_copy",
]
