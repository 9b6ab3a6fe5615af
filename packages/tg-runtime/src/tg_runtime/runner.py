"""Runners: a compiled kernel bound to its device, with the DEBUG=2 line and the global counters.

>>> from tg_runtime.runner import get_runner  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from tg_codegen.opt import Opt
from tg_codegen.program import get_program
from tg_codegen.program_cache import get_program_cached
from tg_codegen.renderer import ProgramSpec
from tg_codegen.search import beam_search
from tg_codegen.tc.cores import ALLOW_TF32
from tg_runtime import build_pool
from tg_runtime.device import Buffer, Device, Program, launcher_of, program_extra
from tg_runtime.search import DeviceSearchTarget
from tg_uop import Ops, UOp
from tg_uop.helpers import BEAM, DEBUG, GlobalCounters, LRUCache, colored, getenv
from tg_uop.trace import TRACE, Group

if TYPE_CHECKING:  # (concurrent.futures is imported by the first parallel compile, not by `import tg`)
    from concurrent.futures import Future, ThreadPoolExecutor


class CompiledRunner:
    """One kernel compiled for one device; call it with Buffers and variable values."""

    def __init__(self, spec: ProgramSpec, trace_group: Group | None = None, device: str | None = None) -> None:
        self.spec = spec
        # the device it is loaded on and launched by: `spec.device` names only the renderer's family ("CUDA" for
        # every GPU); a kernel for CUDA:1 loaded by CUDA:0 runs in GPU 0's context and reads GPU 1's memory from there
        self.device = Device.canonicalize(device) if device is not None else spec.device
        self.trace_group = trace_group  # the viewer's record of this kernel (VIZ=1), given its launch times
        self.origin: dict[str, list[str]] = {}  # (profiling) the tensor ops and user lines that made it
        dev = Device[self.device]
        st = time.perf_counter()
        start_us = TRACE.now_us()
        self.lib = dev.compiler.compile_cached(spec.src)
        self.compile_s = time.perf_counter() - st
        TRACE.event(spec.name, "compile", self.device, start_us, self.compile_s * 1e6)
        self.program: Program = dev.runtime(spec.function_name, self.lib, *program_extra(spec))
        self._launch = launcher_of(self.program, spec.global_size, spec.local_size)  # (run_replayed's launch)

    @property
    def name(self) -> str:
        return self.spec.name

    def launch_args(self, bufs: list[Buffer]) -> list[Any]:
        """The device handles to pass, one per buffer parameter; KernelParamError (naming the kernel) when
        `bufs` do not match the parameters one for one. Every launch path goes through here."""
        self.spec.check_buffers([b.dtype for b in bufs])
        handles = [b._opaque for b in bufs]  # (allocated buffers, the usual case: no property call per buffer)
        return handles if None not in handles else [b.opaque for b in bufs]

    def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int] | None = None, wait: bool = False) -> float | None:
        spec, profiling, debug = self.spec, TRACE.profiling, DEBUG.value >= 2
        vals = tuple((var_vals or {})[v] for v in spec.vars) if spec.vars else ()
        opaque = self.launch_args(bufs)
        start_us = TRACE.now_us() if profiling else 0.0
        et = self.program(
            *opaque,
            global_size=spec.global_size,
            local_size=spec.local_size,
            vals=vals,
            wait=wait or debug or profiling,
        )
        if profiling:
            self._record_launch(start_us, et or 0.0)
        GlobalCounters.kernel_count += 1
        GlobalCounters.global_ops += spec.estimated_ops
        GlobalCounters.global_mem += spec.estimated_mem
        if et is not None:
            GlobalCounters.time_sum_s += et
        if debug:
            made = [t.split(" @ ")[0] for t in self.origin.get("tensor_ops", ())]  # (the line follows: the names)
            ops = [*self.origin.get("ops", ()), *(["|", *made] if made else [])]
            print(debug_line(spec, bufs, et or 0.0, ops, self.origin.get("lines", ())))
        return et

    def run_replayed(self, bufs: list[Buffer], var_vals: dict[UOp, int]) -> None:
        """Launch on the buffers of a replayed schedule, which match the parameters by construction: a recipe
        binds buffers of the dtypes its kernels were checked and run with when it was recorded (so no
        check_buffers). Its outputs are allocated here. Counted like any launch, never timed or printed: the
        caller takes this way only while nothing watches (no DEBUG, no profiling)."""
        handles = [b._opaque if b._opaque is not None else b.ensure_allocated()._opaque for b in bufs]
        spec = self.spec
        if spec.vars:
            vals = tuple([var_vals[v] for v in spec.vars])
            self.program(*handles, global_size=spec.global_size, local_size=spec.local_size, vals=vals)
        else:
            self._launch(*handles)
        GlobalCounters.kernel_count += 1
        GlobalCounters.global_ops += spec.estimated_ops
        GlobalCounters.global_mem += spec.estimated_mem

    def _record_launch(self, start_us: float, et: float) -> None:
        spec = self.spec
        TRACE.event(
            spec.name,
            "kernel",
            self.device,
            start_us,
            et * 1e6,
            global_size=list(spec.global_size or ()),
            local_size=list(spec.local_size or ()),
            ops=spec.estimated_ops if isinstance(spec.estimated_ops, int) else 0,
            mem=spec.estimated_mem if isinstance(spec.estimated_mem, int) else 0,
            **{("computes" if k == "ops" else k): v for k, v in self.origin.items()},  # ("ops": the FLOP count)
            **({"replay": True} if TRACE.replaying else {}),
        )
        if self.trace_group is not None:
            meta = self.trace_group.meta
            meta["launches"] = meta.get("launches", 0) + 1
            meta["time_us"] = meta.get("time_us", 0.0) + et * 1e6
            if TRACE.replaying:
                meta["replays"] = meta.get("replays", 0) + 1


def debug_line(
    spec: ProgramSpec, bufs: list[Buffer], et: float, ops: Sequence[str] = (), lines: Sequence[str] = ()
) -> str:
    """`*** CPU    3 E_4          arg 3 mem 0.00 GB tm  5.00us/  0.01ms (  0.00 GFLOPS  0.0 GB/s) global=[4] MUL ADD`

    ending with `ops` (what the kernel computes, then `|` and the tensor operations it fuses: `MUL SUM | mul sum`),
    the user's source line whose realize made it (`<- train.py:12 loss.backward()`), and `(jit replay)` for a launch
    TinyJit replayed."""
    gflops = spec.estimated_ops / et * 1e-9 if et > 0 else 0.0
    gbs = spec.estimated_mem / et * 1e-9 if et > 0 else 0.0
    sizes = f"global={list(spec.global_size)}" if spec.global_size else ""
    made = f"<- {lines[0]}" if lines else ""
    tail = [t for t in (sizes, " ".join(ops), made, "(jit replay)" if TRACE.replaying else "") if t]
    return (
        f"*** {bufs[0].device if bufs else spec.device:7s} {GlobalCounters.kernel_count:4d} "
        f"{colored(f'{spec.name:18s}', 'cyan')} "
        f"arg {len(bufs):2d} mem {GlobalCounters.mem_used / 1e9:5.2f} GB tm {et * 1e6:9.2f}us/"
        f"{GlobalCounters.time_sum_s * 1e3:9.2f}ms ({gflops:8.2f} GFLOPS {gbs:6.1f} GB/s) {' '.join(tail)}"
    )


# compiled kernels by (device, AST, TF32), the most recently used KERNEL_CACHE_MAX of them (TinyJit holds its own)
_runner_cache: LRUCache[tuple[str, UOp, int], CompiledRunner] = LRUCache(getenv("KERNEL_CACHE_MAX", 1024))


def get_runner(device: str, ast: UOp) -> CompiledRunner:
    """The compiled kernel for `ast` on `device` (compiled once per process)."""
    key = (Device.canonicalize(device), ast, ALLOW_TF32.value)  # TF32 changes the kernel fp32 matmuls get
    if ast.op is Ops.CUSTOM and isinstance(ast.arg, ProgramSpec):  # a kernel written as source (source_kernel)
        if (ret := _runner_cache.get(key)) is None:
            ret = _runner_cache[key] = CompiledRunner(ast.arg, None, key[0])
        return ret
    if (ret := _runner_cache.get(key)) is None and (ret := _from_batch(key)) is None:
        opts = None
        if BEAM >= 1 and Device[key[0]].searchable:
            active, TRACE.active = TRACE.active, False  # the candidates are not the program's kernels
            try:
                opts = beam_search(ast, DeviceSearchTarget(key[0], ast), BEAM.value)
            finally:
                TRACE.active = active
        with TRACE.group("kernel", "kernel", device=key[0], **TRACE.origins.get(ast, {})) as group:
            spec = get_program_cached(ast, Device[key[0]].renderer, opts=opts)
            if group is not None:
                group.name = spec.name
            ret = _runner_cache[key] = CompiledRunner(spec, group, key[0])
    elif TRACE.active and (ret.trace_group is None or ret.trace_group.generation != TRACE.generation):
        # compiled before this recording began: record its codegen again (no compile) so the viewer lists it
        with TRACE.group("kernel", ret.spec.name, device=key[0], **TRACE.origins.get(ast, {})) as group:
            get_program(ast, Device[key[0]].renderer, opts=[o for o in ret.spec.applied_opts if isinstance(o, Opt)])
            ret.trace_group = group
    if (TRACE.profiling or DEBUG >= 2) and (origin := TRACE.origins.get(ast)) is not None:
        ret.origin = origin  # (the latest schedule that made it: its launches name it in the profile)
    return ret


_pool: dict[int, ThreadPoolExecutor] = {}  # by process id (a forked child cannot use its parent's threads)


def compile_all(kernels: list[tuple[str, UOp]]) -> None:
    """Compile the kernels (device, AST) that are not compiled yet, several at once: each is rendered here
    (Python, one at a time) and handed to a thread that runs the device compiler (a C compiler process,
    NVRTC) while the next ones are rendered. A compiler that `batches` gets them a few at a time (one C compiler
    process builds each batch). Returns once all are handed over: get_runner waits for the batch of the kernel
    it is asked for, so the first kernels of a schedule run while the last ones compile. BEAM and VIZ
    recordings compile one by one in get_runner."""
    if len(kernels) < 2 or BEAM >= 1 or TRACE.active:  # (one kernel: nothing to overlap)
        return
    todo: dict[tuple[str, UOp, int], UOp] = {}
    for device, ast in kernels:
        key = (Device.canonicalize(device), ast, ALLOW_TF32.value)
        if key not in _runner_cache and key not in _compiling:
            todo[key] = ast
    if len(todo) >= build_pool.MIN_KERNELS and build_pool.workers():
        for key in [k for k in todo if build_pool.can_travel(Device[k[0]].renderer, Device[k[0]].compiler)]:
            dev = Device[key[0]]
            _compiling[key] = (build_pool.submit(todo.pop(key), dev.renderer, dev.compiler), None)
    todo = {key: ast for key, ast in todo.items() if Device[key[0]].compiler.threadsafe}
    if len(todo) < 2:
        return
    if (pool := _pool.get(os.getpid())) is None:
        from concurrent.futures import ThreadPoolExecutor

        _pool.clear()
        pool = _pool[os.getpid()] = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="tg-compile")
    jobs: list[tuple[list[tuple[tuple[str, UOp, int], ProgramSpec]], Future[list[bytes]]]] = []
    open_batches: list[list[tuple[tuple[str, UOp, int], ProgramSpec]]] = []  # (one device each)

    def submit(batch: list[tuple[tuple[str, UOp, int], ProgramSpec]]) -> None:
        compile_many = Device[batch[0][0][0]].compiler.compile_cached_many
        jobs.append((batch, pool.submit(compile_many, [spec.src for _, spec in batch])))

    size = batch_size(len(todo), os.cpu_count() or 1)
    for key, ast in todo.items():
        spec = get_program_cached(ast, Device[key[0]].renderer)
        if not Device[key[0]].compiler.batches:
            submit([(key, spec)])
            continue
        batch = next((b for b in open_batches if b[0][0][0] == key[0]), None)
        if batch is None:
            open_batches.append(batch := [])
        # a batch builds one shared object: a second function of one name (the same loops over other maths: an
        # Adam update per parameter shape) is renamed rather than sent to a compiler run of its own
        batch.append((key, _unique_name(batch, spec)))
        if len(batch) >= size and sum(len(other.src) for _, other in batch) >= MIN_BATCH_SOURCE:
            open_batches.remove(batch)
            submit(batch)
    for batch in open_batches:
        submit(batch)
    for done, job in jobs:  # (get_runner waits for a kernel's batch: the first kernels run while the last compile)
        for key, spec in done:
            _compiling[key] = (job, spec)


# kernels compile_all handed to the compiler threads, by get_runner's key: (their batch's job, the kernel), or to
# the worker processes: (the job giving the kernel and its binary, None)
_Built = tuple[ProgramSpec, bytes]
_compiling: dict[tuple[str, UOp, int], tuple[Future[list[bytes]], ProgramSpec] | tuple[Future[_Built], None]] = {}
os.register_at_fork(after_in_child=_compiling.clear)  # (a forked child has none of its parent's threads)


def _from_batch(key: tuple[str, UOp, int]) -> CompiledRunner | None:
    """The kernel for `key` as compile_all's threads built it (after waiting for its batch), or None when they
    did not: not handed to them, a BEAM search asked for now, or its batch failed (the kernel is compiled again
    alone, and a kernel that fails to compile raises where it runs, in order)."""
    if (pending := _compiling.pop(key, None)) is None or BEAM >= 1:
        return None
    job, known = pending
    if job.exception() is not None:
        return None
    if known is not None:
        spec = known
    else:  # built by a worker process: its binary goes into this process's compile cache
        spec, lib = cast("_Built", job.result())
        Device[key[0]].compiler.remember(spec.src, lib)
    ret = _runner_cache[key] = CompiledRunner(spec, device=key[0])  # (the binary is in the compile cache now)
    return ret


# a batch is built once it has `batch_size` kernels and this much C: below it the compiler's start (~30 ms of
# CPU here) costs more than a second process gains (an optimizer's zero fills: 6 kernels of ~300 bytes)
MIN_BATCH_SOURCE = 4096


def _unique_name(batch: list[tuple[tuple[str, UOp, int], ProgramSpec]], spec: ProgramSpec) -> ProgramSpec:
    """`spec`, or a copy whose function is renamed NAME_1, NAME_2, ... when the batch has a function of its name.

    The kernels of one schedule are batched in one order, so a second process renames alike and hits the
    compile cache (the renamed source is the key)."""
    taken = {other.function_name for _, other in batch}
    if spec.function_name not in taken:
        return spec
    n = 1
    while f"{spec.function_name}_{n}" in taken:
        n += 1
    new = f"{spec.function_name}_{n}"
    src, found = re.subn(rf"\b{re.escape(spec.function_name)}\(", f"{new}(", spec.src, count=1)
    if not found:
        raise RuntimeError(f"compile_all: no function {spec.function_name} in the source of {spec.name}")
    return dataclasses.replace(spec, function_name=new, src=src)


def batch_size(kernels: int, workers: int) -> int:
    """Kernels per compiler run: two batches per worker, so the first compile while the rest are rendered
    and the last one, that nothing overlaps, is short.

    >>> batch_size(54, 2), batch_size(3, 2), batch_size(3, 16)
    (14, 1, 1)
    """
    return max(1, -(-kernels // (2 * workers)))


def clear_runner_cache() -> None:
    _runner_cache.clear()
    _compiling.clear()


def run_copy(dest: Buffer, src: Buffer) -> None:
    """Copy one buffer into another of the same size: straight from device to device where the destination's
    allocator can (`Allocator.transfer`: CPU to CPU, CUDA to CUDA), else through host bytes."""
    if dest.nbytes != src.nbytes:
        raise ValueError(f"copy: {src} and {dest} differ in size")
    start_us = TRACE.now_us()
    direct = src.nbytes > 0 and dest.allocator.transfer(dest.opaque, src.opaque, src.nbytes, src.allocator)
    if not direct:
        dest.copyin(src.as_bytes())
    if TRACE.profiling:
        TRACE.event(
            f"copy {src.nbytes} bytes {src.device} -> {dest.device}",
            "copy",
            dest.device,
            start_us,
            TRACE.now_us() - start_us,
            nbytes=src.nbytes,
        )
    if DEBUG >= 2:
        how = "direct" if direct else "via the host"
        print(f"*** {dest.device:7s}      copy {src.nbytes:8d} bytes {src.device} -> {dest.device} ({how})")
