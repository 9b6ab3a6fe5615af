# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""custom_kernel: run a kernel you wrote on tensors, as tinygrad's Tensor.custom_kernel.

`fxn` receives one placeholder per tensor (a DEFINE_GLOBAL UOp, in order: self, then the others) and
returns either a kernel AST (a SINK of stores, built with `load`/`store` below: tg compiles it like its
own kernels, on any device) or a `KernelSource` (C, OpenCL or CUDA source for the device, with the
function's name and launch sizes). The kernel runs at once on copies of the tensors (the inputs keep
their values) and custom_kernel returns those copies, written as the kernel wrote them.

A CPU kernel in C (each pointer is one tensor's contiguous data):

>>> from tg_tensor import Tensor
>>> from tg_tensor.custom import KernelSource
>>> src = '''void axpy(float* restrict out, const float* restrict x, const float* restrict y) {
...   for (int i = 0; i < 4; i++) out[i] = 2.0f * x[i] + y[i];
... }'''
>>> out, _, _ = Tensor.empty(4, device="CPU").custom_kernel(
...     Tensor([1.0, 2.0, 3.0, 4.0], device="CPU"), Tensor.ones(4, device="CPU"),
...     fxn=lambda out, x, y: KernelSource(src, "axpy"))
>>> out.tolist()
[3.0, 5.0, 7.0, 9.0]

The same as a kernel AST (runs on every device):

>>> from tg_tensor.custom import load, store
>>> out, _ = Tensor.empty(3).custom_kernel(Tensor([1.0, 2.0, 3.0]),
...     fxn=lambda out, x: store(out, (3,), load(x, (3,)) * 10))
>>> out.tolist()
[10.0, 20.0, 30.0]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tg_runtime.device import Device
from tg_runtime.runner import get_runner, run_copy
from tg_shape import ShapeTracker
from tg_tensor.schedule import buffer_of
from tg_uop import Ops, UOp, dtypes
from tg_uop.helpers import prod
from tg_uop.uop import sint

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor


@dataclass(frozen=True)
class KernelSource:
    """Device source for custom_kernel: `src` defines `name`, which takes one pointer per tensor, in order.

    global_size/local_size are the launch grid for GPU devices (the CPU calls the function once).
    """

    src: str
    name: str
    global_size: tuple[int, ...] = (1, 1, 1)
    local_size: tuple[int, ...] = (1, 1, 1)


def load(arg: UOp, shape: tuple[sint, ...]) -> UOp:
    """Read the tensor behind placeholder `arg`, as a contiguous array of `shape`, in a kernel AST."""
    return UOp(Ops.LOAD, arg.dtype.base, (arg, _view(shape)))


def store(arg: UOp, shape: tuple[sint, ...], value: UOp) -> UOp:
    """A kernel AST writing `value` (of `shape`) into the tensor behind placeholder `arg`."""
    st = UOp(Ops.STORE, dtypes.void, (arg, _view(shape), value))
    return UOp(Ops.SINK, dtypes.void, (st,))


def _view(shape: tuple[sint, ...]) -> UOp:
    return UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape(tuple(shape)))


class CustomKernelMixin:
    """Tensor.custom_kernel."""

    __slots__ = ()

    def custom_kernel(
        self: Tensor, *lst: Tensor, fxn: Callable[..., Any], grad_fxn: Callable[..., Any] | None = None
    ) -> list[Tensor]:
        """Run the kernel `fxn` returns on copies of (self, *lst); returns the copies after it ran (see module doc)."""
        tensors = [self, *lst]
        if grad_fxn is not None:
            raise NotImplementedError("custom_kernel: grad_fxn (a custom backward) is not supported by tg yet")
        for t in tensors:
            if not isinstance(t, type(self)):
                raise TypeError(f"custom_kernel: expected Tensors, got {type(t).__name__}")
        devices = sorted({t.device for t in tensors})
        if len(devices) != 1:
            raise ValueError(f"custom_kernel: all tensors must be on one device, got {devices}")
        if not callable(fxn):
            raise TypeError(f"custom_kernel: fxn must be callable, got {fxn!r}")
        placeholders = [UOp(Ops.DEFINE_GLOBAL, t.dtype.ptr(), (), i) for i, t in enumerate(tensors)]
        program = fxn(*placeholders)
        copies = [_fresh_copy(t) for t in tensors]
        bufs = [buffer_of(c.uop.base) for c in copies]
        if isinstance(program, KernelSource):
            dev = Device[devices[0]]
            prg = dev.runtime(program.name, dev.compiler.compile_cached(program.src))
            prg(*[b.opaque for b in bufs], global_size=program.global_size, local_size=program.local_size, wait=True)
        elif isinstance(program, UOp) and program.op is Ops.SINK:
            get_runner(devices[0], program)(bufs, {}, wait=True)
        else:
            raise TypeError(
                f"custom_kernel: fxn must return a kernel AST (a SINK UOp) or a KernelSource, got {program!r}"
            )
        return copies


def _fresh_copy(t: Tensor) -> Tensor:
    """A realized tensor with its own contiguous buffer holding t's values."""
    src = t.contiguous().realize()
    u = UOp.new_buffer(t.device, int(prod(t.shape)), t.dtype)
    dest = buffer_of(u)
    dest.ensure_allocated()
    if t.numel():
        run_copy(dest, buffer_of(src.uop.base))
    return type(t)(u.reshape(tuple(t.shape)))
