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

`source_kernel` is the lazy form for one output: a node of the graph that the scheduler gives a kernel of its own
(its inputs realized first), that TinyJit records and replays like any kernel, and whose source is asked for per
device when it is scheduled (C for the CPU, OpenCL C, CUDA C; None where there is none for that device):

>>> from tg_tensor.custom import source_kernel
>>> def twice(device, dtypes_):
...     return KernelSource("void twice(float* restrict o, const float* restrict x) "
...                         "{ for (int i = 0; i < 3; i++) o[i] = 2 * x[i]; }", "twice")
>>> source_kernel((3,), dtypes.float32, [Tensor([1.0, 2.0, 3.0], device="CPU")], "twice", twice).tolist()
[2.0, 4.0, 6.0]

The same as a kernel AST (runs on every device):

>>> from tg_tensor.custom import load, store
>>> out, _ = Tensor.empty(3).custom_kernel(Tensor([1.0, 2.0, 3.0]),
...     fxn=lambda out, x: store(out, (3,), load(x, (3,)) * 10))
>>> out.tolist()
[10.0, 20.0, 30.0]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

from tg_runtime.device import Device
from tg_runtime.runner import get_runner, run_copy
from tg_shape import ShapeTracker
from tg_tensor.engine.schedule import buffer_of
from tg_tensor.engine.source import KernelSource, LazySource
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.helpers import prod
from tg_uop.uop import sint

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor


def source_kernel(
    shape: tuple[int, ...],
    dtype: DType,
    inputs: Sequence[Tensor],
    key: Hashable,
    make: Callable[[str, tuple[DType, ...]], KernelSource | None],
) -> Tensor:
    """A lazy tensor of `shape` and `dtype` computed by a kernel you wrote (see the module doc and LazySource).

    The kernel takes one pointer per buffer: the output (contiguous, row-major), then each input, contiguous.
    Scheduling it on a device `make` has no source for raises NotImplementedError naming the kernel and device.
    """
    from tg_tensor.tensor import Tensor as T

    if not inputs:
        raise ValueError(f"source_kernel {key!r}: needs at least one input tensor (it takes the device from them)")
    devices = sorted({t.device for t in inputs})
    if len(devices) != 1:
        raise ValueError(f"source_kernel {key!r}: all inputs must be on one device, got {devices}")
    if not all(isinstance(s, int) and s >= 0 for s in shape):
        raise ValueError(f"source_kernel {key!r}: shape {shape} must be non-negative ints")
    size = int(prod(shape))
    srcs = tuple(t.uop for t in inputs) + (UOp(Ops.DEVICE, arg=devices[0]),)
    return T(UOp(Ops.CUSTOM, dtype, srcs, (size, LazySource(key, make))).reshape(tuple(shape)))


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
