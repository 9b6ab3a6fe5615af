"""Kernel optimizations: `Opt(op, axis, arg)` actions applied to a Kernel one at a time.

Axis numbering (`Opt.axis`) depends on the op:
  UPCAST, LOCAL, THREAD, SWAP  -> the n-th output (global) loop axis
  UNROLL, GROUP, GROUPTOP,
  KBLOCK                       -> the n-th reduce loop axis
  PADTO                        -> the n-th loop axis, outputs first then reduces
  NOLOCALS, STAGE              -> no axis (None)
`arg` is the split amount (0 means the whole axis for UPCAST/UNROLL; the block length for KBLOCK), the other axis
for SWAP, and for STAGE the tiles in flight (0 or 1: one slot per tile; 2-4: pipelined copies, tc/stage.py).

>>> Opt(OptOps.UPCAST, 0, 4)
Opt(op=OptOps.UPCAST, axis=0, arg=4)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto


class OptOps(Enum):
    """The kinds of kernel optimization."""

    TC = auto()  # tensor cores: declared here, implemented by the GPU backends
    UPCAST = auto()  # split an output axis; the inner part becomes straight-line (vector) code
    UNROLL = auto()  # split a reduce axis; the inner part is unrolled
    LOCAL = auto()  # split an output axis into a workgroup (local) dimension
    GROUP = auto()  # split a reduce axis across a workgroup, partials combined in local memory
    GROUPTOP = auto()  # like GROUP, taking the outer part of the axis
    NOLOCALS = auto()  # forbid local dimensions
    PADTO = auto()  # pad an axis up to a multiple of arg (loads and stores are masked)
    SWAP = auto()  # swap two output axes (loop order)
    THREAD = auto()  # split an output axis over CPU threads
    STAGE = auto()  # stage the reduction's shared operand tiles in shared memory (tc/stage.py)
    KBLOCK = auto()  # cut a reduce axis into blocks looped outside the output loops (CPU cache blocking, kblock.py)

    def __repr__(self) -> str:
        return f"OptOps.{self.name}"


@dataclass(frozen=True)
class Opt:
    """One optimization action.

    >>> Opt(OptOps.UNROLL, 0, 4).op is OptOps.UNROLL
    True
    """

    op: OptOps
    axis: int | None = None
    arg: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.op, OptOps):
            raise TypeError(f"Opt.op must be an OptOps, got {self.op!r}")
        if self.axis is not None and (not isinstance(self.axis, int) or self.axis < 0):
            raise ValueError(f"Opt.axis must be a non-negative int or None, got {self.axis!r}")
        if not isinstance(self.arg, int) or self.arg < 0:
            raise ValueError(f"Opt.arg must be a non-negative int, got {self.arg!r}")


class KernelOptError(Exception):
    """An optimization that does not apply to this kernel (or this device)."""
