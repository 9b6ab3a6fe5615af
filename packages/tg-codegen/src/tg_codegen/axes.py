"""The kinds of kernel axes and of loops, as enums (a typo is an error, not a silent "not applicable").

An `AxisType` says what a kernel axis becomes: GLOBAL (an output axis: a loop on the CPU, group ids on a
GPU), THREAD (an output axis split over CPU threads), LOCAL (a workgroup dimension), GROUP (a reduce
axis across a workgroup), REDUCE (a reduce loop), UPCAST (an output axis expanded into straight-line
code), UNROLL (a reduce axis expanded), and TCM/TCN/TCK (the tile axes of a tensor-core opt).
A `RangeKind` is the kind a lowered RANGE carries (`arg=(axis, kind)`), read back by the renderers.
Both are string enums: they print, hash, compare and repr as their values (DEBUG output is unchanged).

>>> AxisType.UPCAST == "upcast", str(RangeKind.THREAD), [AxisType.GLOBAL, AxisType.REDUCE]
(True, 'thread', ['global', 'reduce'])
"""

from __future__ import annotations

from enum import StrEnum


class AxisType(StrEnum):
    def __repr__(self) -> str:
        return repr(self.value)

    GLOBAL = "global"
    THREAD = "thread"
    LOCAL = "local"
    GROUP = "group"
    REDUCE = "reduce"
    UPCAST = "upcast"
    UNROLL = "unroll"
    TCM = "tcm"
    TCN = "tcn"
    TCK = "tck"


class RangeKind(StrEnum):
    def __repr__(self) -> str:
        return repr(self.value)

    LOOP = "loop"  # an output loop
    REDUCE = "reduce"  # a loop that accumulates
    THREAD = "thread"  # a loop split over CPU threads (the C renderer puts its thread pragma before it)
