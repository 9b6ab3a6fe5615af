"""Kernels given as device source: the ProgramSpec a `source_kernel` node runs (see tg_tensor.custom).

>>> KernelSource("void k(float* restrict o) { o[0] = 1; }", "k").global_size
(1, 1, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from tg_codegen.renderer import ProgramSpec
from tg_uop import DType, Ops, UOp, dtypes

__all__ = ["KernelSource", "LazySource", "is_source_kernel", "source_program"]


@dataclass(frozen=True)
class KernelSource:
    """Device source for custom_kernel: `src` defines `name`, which takes one pointer per tensor, in order.

    global_size/local_size are the launch grid for GPU devices (the CPU calls the function once).
    """

    src: str
    name: str
    global_size: tuple[int, ...] = (1, 1, 1)
    local_size: tuple[int, ...] = (1, 1, 1)


@dataclass(frozen=True)
class LazySource:
    """The arg of a `source_kernel` node: `key` names the kernel (two nodes with one key and the same inputs are
    the same kernel: the schedule cache and TinyJit key on it), `make(device, dtypes)` writes its source for a
    device ("CPU", "CL:0", "CUDA:1", ...) and the dtypes of its buffers (output first), or returns None when it has
    none for that device."""

    key: Hashable
    make: Callable[[str, tuple[DType, ...]], KernelSource | None] = field(compare=False, hash=False, repr=False)


def source_program(node: UOp, dts: tuple[DType, ...]) -> UOp:
    """The item AST of a `source_kernel` node on its device: a CUSTOM UOp whose arg is the ProgramSpec to run."""
    size, lazy = node.arg
    device = node.src[-1].arg
    ks = lazy.make(device, dts)
    if ks is None:
        raise NotImplementedError(f"source_kernel {lazy.key!r}: no source for device {device}")
    if not isinstance(ks, KernelSource):
        raise TypeError(f"source_kernel {lazy.key!r}: make() must return a KernelSource or None, got {ks!r}")
    spec = ProgramSpec(
        ks.name,
        ks.name,
        ks.src,
        device.split(":")[0],
        global_size=tuple(ks.global_size),
        local_size=tuple(ks.local_size),
        globals=tuple(range(len(dts))),
        buffer_dtypes=dts,
        outs=(0,),
        estimated_mem=size * dts[0].itemsize,
    )
    return UOp(Ops.CUSTOM, dtypes.void, (), spec)


def is_source_kernel(node: UOp) -> bool:
    """Is `node` a tensor-level `source_kernel` node (not a kernel AST's inline C text)?"""
    return (
        node.op is Ops.CUSTOM
        and isinstance(node.arg, tuple)
        and len(node.arg) == 2
        and isinstance(node.arg[1], LazySource)
    )
