"""Kernels rendered and compiled in worker processes: the first step of a program compiles in seconds.

Rendering a kernel (lowering, rewrites, linearizing: Python) costs 0.1-0.3 s, and a GPU training step has a
couple of hundred distinct kernels: one after the other, minutes. Threads do not help Python, so compile_all
hands the kernels of a schedule to a pool of processes, each rendering a kernel and compiling it with the
device's compiler (NVRTC), several at once; the parent keeps the binaries and launches as usual.

The workers are forked from the program: they have its modules and need no import or start-up. They never
touch the device (no CUDA call: rendering is Python, NVRTC is a library). A device whose renderer or compiler
cannot travel to another process (an OpenCL context), or that builds kernels in batches anyway (the C
compiler: one process per batch), keeps compile_all's threads. COMPILE_WORKERS sets the pool's size (default:
the cores, at most 16; 0 or 1 turns it off); it is used from MIN_KERNELS kernels on.

>>> workers()  >= 0
True
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import pickle
from typing import TYPE_CHECKING

from tg_codegen.program_cache import get_program_cached
from tg_codegen.renderer import ProgramSpec, Renderer
from tg_uop import UOp
from tg_uop.helpers import getenv

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

    from tg_runtime.device import Compiler

MIN_KERNELS = 8  # fewer kernels than this are rendered in the program itself (a pool's hand-off costs ~ms each)


def workers() -> int:
    """How many worker processes the pool has (0: no pool)."""
    n = getenv("COMPILE_WORKERS", min(16, len(os.sched_getaffinity(0))))
    return n if n > 1 and hasattr(os, "fork") else 0


_pools: dict[int, ProcessPoolExecutor] = {}  # by process id: a forked child never uses its parent's pool


def _pool() -> ProcessPoolExecutor:
    if (pool := _pools.get(os.getpid())) is None:
        import multiprocessing  # (imported by the first pool: `import tg` stays light)
        from concurrent.futures import ProcessPoolExecutor

        _pools.clear()
        pool = _pools[os.getpid()] = ProcessPoolExecutor(workers(), mp_context=multiprocessing.get_context("fork"))
        atexit.register(_shutdown, os.getpid())  # (before the interpreter tears the pool's modules down)
    return pool


def _shutdown(pid: int) -> None:
    if pid == os.getpid() and (pool := _pools.pop(pid, None)) is not None:
        pool.shutdown(wait=True, cancel_futures=True)


_travels: dict[tuple[int, int], bool] = {}


def can_travel(renderer: Renderer, compiler: Compiler) -> bool:
    """Can this device's renderer and compiler be sent to a worker process (and is it worth it)?"""
    key = (id(renderer), id(compiler))
    if (ok := _travels.get(key)) is None:
        ok = not compiler.batches and renderer.device != "PYTHON"
        try:
            pickle.dumps((renderer, compiler))
        except Exception:  # an OpenCL context, a ctypes handle: this device builds in the program
            ok = False
        _travels[key] = ok
    return ok


def render_and_compile(ast: UOp, renderer: Renderer, compiler: Compiler) -> tuple[ProgramSpec, bytes]:
    """In a worker: the kernel's program (its UOps left out: they stay with the worker) and its binary."""
    spec = get_program_cached(ast, renderer)
    return dataclasses.replace(spec, uops=()), compiler.compile_cached(spec.src)


def submit(ast: UOp, renderer: Renderer, compiler: Compiler) -> Future[tuple[ProgramSpec, bytes]]:
    """Render and compile `ast` in a worker process."""
    return _pool().submit(render_and_compile, ast, renderer, compiler)
