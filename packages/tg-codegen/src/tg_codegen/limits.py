"""What one kernel launch may use on a GPU: threads, block and grid sizes, shared memory, registers.

A Kernel checks every optimization against its renderer's `limits` (None: no limits, as on the CPU), so an
opt that would make an impossible launch is refused with a KernelOptError naming the limit; the heuristics
then try the next choice and BEAM skips it. The defaults are those of NVIDIA GPUs since Volta; the CUDA
device replaces them with what the driver reports.

>>> LaunchLimits().max_threads
1024
>>> check_threads(LaunchLimits(), [128, 10])
Traceback (most recent call last):
...
tg_codegen.opt.KernelOptError: 1280 threads per block (local sizes [128, 10]) exceeds the device's limit of 1024
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tg_codegen.opt import KernelOptError
from tg_uop.helpers import prod


@dataclass(frozen=True)
class LaunchLimits:
    """The per-launch limits of one device (CUDA names in the comments)."""

    max_threads: int = 1024  # MAX_THREADS_PER_BLOCK
    block: tuple[int, int, int] = (1024, 1024, 64)  # MAX_BLOCK_DIM_X/Y/Z
    grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)  # MAX_GRID_DIM_X/Y/Z
    shared_bytes: int = 48 * 1024  # static __shared__ memory per block (MAX_SHARED_MEMORY_PER_BLOCK)
    registers_per_block: int = 65536  # MAX_REGISTERS_PER_BLOCK (32-bit registers)
    registers_per_thread: int = 255  # the ISA's limit; beyond it values spill to local memory


def dim_groups(n: int) -> list[list[list[int]]]:
    """Ways to pack n axes into at most 3 launch dimensions, preferred first (each a list of axis groups).

    The first keeps the innermost axis alone in dimension 0 and the next in dimension 1, the rest merged.
    """
    if n == 0:
        return [[]]
    ret = [[[n - 1]] + ([[n - 2]] if n >= 2 else []) + ([list(range(n - 2))] if n >= 3 else [])]
    if n >= 2:
        ret += [[[n - 1], list(range(n - 1))], [list(range(n))]]
    return ret


def assign_dims(sizes: list[int], maxes: tuple[int, ...] | None) -> list[tuple[int, list[int]]]:
    """(dimension, axes) pairs that launch `sizes` within `maxes`; raises KernelOptError when none fits."""
    for groups in dim_groups(len(sizes)):
        totals = [int(prod(sizes[a] for a in g)) for g in groups]
        for dims in itertools.permutations(range(len(groups))):
            if maxes is None or all(t <= maxes[d] for t, d in zip(totals, dims)):
                return list(zip(dims, groups))
    raise KernelOptError(f"launch sizes {sizes} do not fit the device's per-dimension limits {maxes}")


def check_threads(limits: LaunchLimits, local_sizes: list[int]) -> None:
    """Refuse a block of more threads than the device runs (or one that fits no arrangement of its dimensions)."""
    threads = int(prod(local_sizes))
    if threads > limits.max_threads:
        sizes = f"local sizes {local_sizes}"
        raise KernelOptError(
            f"{threads} threads per block ({sizes}) exceeds the device's limit of {limits.max_threads}"
        )
    assign_dims(local_sizes, limits.block)


def check_resources(limits: LaunchLimits, threads: int, shared_bytes: int, registers: int) -> None:
    """Refuse a kernel whose shared memory or accumulator registers exceed the device's limits."""
    if shared_bytes > limits.shared_bytes:
        raise KernelOptError(
            f"needs {shared_bytes} bytes of shared memory per block; the device's limit is {limits.shared_bytes}"
        )
    if registers > limits.registers_per_thread:
        raise KernelOptError(
            f"needs {registers} accumulator registers per thread; the device's limit is {limits.registers_per_thread}"
        )
    if registers * threads > limits.registers_per_block:
        raise KernelOptError(
            f"needs {registers} registers x {threads} threads = {registers * threads} registers per block;"
            f" the device's limit is {limits.registers_per_block}"
        )
