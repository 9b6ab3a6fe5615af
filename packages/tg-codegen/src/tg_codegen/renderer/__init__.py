"""Renderer base class and ProgramSpec: what a device needs to compile and launch one kernel.

>>> from tg_codegen.renderer.cstyle import ClangRenderer
>>> ClangRenderer().device
'CPU'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tg_codegen.limits import LaunchLimits
from tg_uop import DType, Ops, UOp, dtypes


class KernelParamError(ValueError):
    """A kernel's buffer parameters disagree with its AST or with the buffers it is launched with."""


def buffer_params(name: str, uops: Sequence[UOp]) -> list[UOp]:
    """The DEFINE_GLOBALs of a linear program in parameter order: `data0 .. data{n-1}`, one per buffer.

    The contract between kernel AST, renderers and launchers: buffer `i` of a launch is parameter `i`
    (DEFINE_GLOBAL number `i`). A gap in the numbering would shift every later argument, so it is refused.

    >>> from tg_uop import dtypes
    >>> g = [UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), i) for i in (1, 0)]
    >>> [u.arg for u in buffer_params("E_2", g)]
    [0, 1]
    """
    by_arg: dict[int, UOp] = {}
    for u in uops:
        if u.op is not Ops.DEFINE_GLOBAL:
            continue
        if (other := by_arg.setdefault(u.arg, u)) is not u and other.dtype != u.dtype:
            raise KernelParamError(f"kernel {name}: buffer parameter data{u.arg} is both {other.dtype} and {u.dtype}")
    args = sorted(by_arg)
    if args != list(range(len(args))):
        raise KernelParamError(
            f"kernel {name}: buffer parameters {[f'data{a}' for a in args]} have a gap; a kernel must declare "
            "data0..data{n-1}, one per buffer it is launched with, used or not (else later arguments shift)"
        )
    return [by_arg[a] for a in args]


@dataclass(frozen=True)
class ProgramSpec:
    """A rendered kernel: source, entry point, launch sizes and the buffers and variables it takes."""

    name: str
    function_name: str
    src: str
    device: str
    uops: tuple[UOp, ...] = ()
    global_size: tuple[int, ...] | None = None
    local_size: tuple[int, ...] | None = None
    globals: tuple[int, ...] = ()  # buffer parameters, always 0..n-1 (see buffer_params)
    buffer_dtypes: tuple[DType, ...] = ()  # the element dtype of each buffer parameter
    outs: tuple[int, ...] = ()
    vars: tuple[UOp, ...] = ()
    estimated_ops: int = 0
    estimated_mem: int = 0
    applied_opts: tuple[object, ...] = field(default_factory=tuple)
    shared_bytes: int = 0  # dynamic shared memory per block, given at launch (CUDA: tiles over the static 48 KiB)

    def check_buffers(self, dts: Sequence[DType]) -> None:
        """Raise KernelParamError unless a launch's buffers (given by dtype) match the parameters one for one.

        Every launcher (runner, TinyJit's recorded launches and device graphs, BEAM timing) calls this, but the
        replay of a recorded schedule (`CompiledRunner.run_replayed`): its buffers have the recorded dtypes."""
        if tuple(dts) != self.buffer_dtypes:  # (compares each pair by identity first: one C call when they match)
            want = ", ".join(f"data{i}: {dt.name}" for i, dt in enumerate(self.buffer_dtypes))
            got = ", ".join(dt.name for dt in dts)
            raise KernelParamError(
                f"kernel {self.name} takes {len(self.buffer_dtypes)} buffers ({want}) but was launched with "
                f"{len(dts)} ({got})"
            )


@dataclass(frozen=True)
class OperandLayout:
    """The layout of a big matmul's right operand w (k, m) this renderer's kernels read best (tg_tensor's matmul
    copies w so): panels of `panel` columns, each contiguous ((m/panel, k, panel), the CPU's register tile; 0: as
    stored), or contiguous along K (`k_major`: Hopper's TF32 warpgroup MMA).

    >>> from tg_codegen.renderer.cstyle import ClangRenderer
    >>> ClangRenderer().operand_layout(dtypes.float32)
    OperandLayout(panel=16, k_major=False)
    """

    panel: int = 0
    k_major: bool = False


class Renderer:
    """Turns a linear UOp program into source for one device family. Subclass per language."""

    device: str = ""
    has_local: bool = False  # GPU-style launch grid with local (workgroup) ids
    has_shared: bool = False  # local/shared memory
    has_async_copy: bool = False  # global -> shared copies without registers, waited for by group (CUDA cp.async)
    has_threads: bool = False  # CPU threads over the outermost loop (OptOps.THREAD)
    threads: int = 1  # how many CPU threads the device runs
    supports_float4: bool = False  # scalar loads of neighbouring addresses merge into wide loads (wideload.py)
    vector_bytes: int = 0  # widest vector dtype (0: none); upcast axes are packed into vectors up to this size
    limits: LaunchLimits | None = None  # per-launch limits of a GPU (threads, block/grid sizes, shared memory)
    tensor_cores: tuple[object, ...] = ()
    emulate_bf16: bool = False  # bf16 math in float32, bf16 stored as 16-bit integers (bf16.py)
    # processors that each run whole thread blocks (a GPU's SMs); 0: not a device that needs a kernel cut into many
    # blocks to be busy. The scheduler splits a long reduction to too few outputs over them (split_reduce.py).
    compute_units: int = 0

    def render(self, name: str, uops: list[UOp]) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not render programs")

    def dynamic_shared_bytes(self, uops: list[UOp]) -> int:
        """Shared memory the program's launch must ask for (0: none, or declared statically in the source)."""
        return 0

    def operand_layout(self, dtype: DType) -> OperandLayout:
        """The layout a big matmul's right operand of `dtype` is best copied into (default: as it is stored)."""
        return OperandLayout()

    def supported_dtypes(self) -> set[DType]:
        """The dtypes this renderer's programs can compute in and store (tinygrad's name for the question).

        >>> from tg_uop import dtypes
        >>> dtypes.float64 in Renderer().supported_dtypes()
        True
        """
        return set(dtypes.all)


def estimate(uops: list[UOp]) -> tuple[int, int]:
    """(ALU ops executed, bytes moved) estimated from the loop trip counts."""
    mult, ops, mem = 1, 0, 0
    for u in uops:
        if u.op is Ops.SPECIAL:
            mult *= u.arg[1]
    stack: list[int] = []
    for u in uops:
        if u.op is Ops.RANGE:
            trips = u.src[0].arg if u.src[0].op is Ops.CONST else 1
            stack.append(trips)
            mult *= trips
        elif u.op is Ops.ENDRANGE:
            mult //= stack.pop() or 1
        elif u.op in (Ops.LOAD, Ops.STORE):
            dt = u.dtype if u.op is Ops.LOAD else u.src[1].dtype
            mem += mult * dt.itemsize
        elif u.op.name in _ALU_NAMES:
            ops += mult * u.dtype.count
    return ops, mem


_ALU_NAMES = {o.name for o in Ops if o.value >= Ops.EXP2.value and o is not Ops.CAST}
