"""BEAM search: find a kernel's opts by timing candidates on the real device.

Codegen cannot import the runtime, so the runtime hands in a `SearchTarget`: its renderer, a picklable
compile function (run in worker processes with a timeout) and a way to time a compiled program.
Each step extends every kernel in the beam by one action, renders and compiles the children in
parallel, times them, and keeps the `width` fastest; the search stops when a step finds nothing faster.
Results are cached on disk (see diskcache: CACHEDB, CACHELEVEL).

>>> from tg_codegen.search import beam_search  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import sys
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from tg_codegen.diskcache import cache_path, diskcache_get, diskcache_put
from tg_codegen.heuristic import hand_coded_optimizations
from tg_codegen.kernel import Kernel
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_codegen.program import program_for_kernel
from tg_codegen.renderer import ProgramSpec, Renderer
from tg_codegen.tc.cores import ALLOW_TF32
from tg_uop import UOp
from tg_uop.helpers import DEBUG, getenv

if TYPE_CHECKING:  # multiprocessing and concurrent.futures are imported by a search, not by `import tg`
    from concurrent.futures import Future, ProcessPoolExecutor


class SearchTarget(Protocol):
    """What BEAM needs from a device (implemented by the runtime)."""

    renderer: Renderer

    @property
    def compile_fn(self) -> Callable[[str], bytes]: ...

    def time(self, spec: ProgramSpec, lib: bytes, runs: int, cutoff: float) -> float: ...


def actions(renderer: Renderer) -> list[Opt]:
    """Every single-step action BEAM tries (those that do not apply are skipped)."""
    ret = [Opt(OptOps.UPCAST, a, n) for a in range(5) for n in (0, 2, 3, 4, 8, 16)]
    ret += [Opt(OptOps.UNROLL, a, n) for a in range(4) for n in (0, 2, 3, 4, 8)]
    ret += [Opt(OptOps.SWAP, a, b) for a in range(3) for b in range(a + 1, 4)]
    ret += [Opt(OptOps.PADTO, a, 16) for a in range(3)]
    if renderer.has_threads and renderer.threads > 1:
        ret += [Opt(OptOps.THREAD, a, renderer.threads * m) for a in range(3) for m in (1, 2, 4, 8)]
    if not renderer.has_local:  # CPU cache blocking of a long reduction (kblock.py)
        ret += [Opt(OptOps.KBLOCK, 0, n) for n in (256, 512)]
    if renderer.has_local:
        ret += [Opt(OptOps.LOCAL, a, n) for a in range(3) for n in (2, 4, 8, 16, 32)]
        ret += [Opt(op, a, n) for op in (OptOps.GROUP, OptOps.GROUPTOP) for a in range(2) for n in (8, 16, 32)]
        ret += [Opt(OptOps.NOLOCALS)]
    if renderer.has_local and renderer.has_shared:
        ret += [Opt(OptOps.STAGE, None, depth) for depth in (0, 2, 3)]
    if renderer.tensor_cores:  # (arg 1: Hopper's warpgroup MMA, which needs a pipelined STAGE to lower)
        ret += [Opt(OptOps.TC, a, t) for a in range(2) for t in range(2)]
    return ret


def fuzz_opts(k: Kernel, heuristic: list[Opt], seed: int) -> list[Opt]:
    """`heuristic` (or, for half the kernels, no opts), a KBLOCK where one applies (3 times in 4), then up to 4 random
    actions that apply: BEAM's, and small KBLOCK and THREAD amounts that fit small kernels. The generator is seeded
    by `seed` and the kernel's AST, so a program's kernels get the same opts every run (OPT_FUZZ;
    tests/test_codegen_fuzz.py uses it)."""
    import random

    rng = random.Random(f"{seed}:{hashlib.sha256(repr(k.ast).encode()).hexdigest()}")
    acts = actions(k.opts)
    acts += [Opt(OptOps.KBLOCK, a, n) for a in range(2) for n in (2, 3, 4, 8)]
    acts += [Opt(OptOps.THREAD, a, n) for a in range(3) for n in (2, 3, 4)] if k.opts.has_threads else []
    work = k.copy().apply_opts(heuristic if rng.random() < 0.5 else [])
    if rng.random() < 0.75:  # (few kernels can take a KBLOCK: a plain sum stored as it is; most that can do)
        work.apply_first([Opt(OptOps.KBLOCK, 0, n) for n in rng.sample((2, 3, 4, 8), 4)])
    for _ in range(rng.randint(1, 4)):
        for act in rng.sample(acts, len(acts)):
            if work.apply_first([act]):
                break
    return list(work.applied_opts)


def children(k: Kernel, acts: list[Opt]) -> list[Kernel]:
    ret = []
    for act in acts:
        child = k.copy()
        try:
            child.apply_opt(act)
        except KernelOptError:
            continue
        ret.append(child)
    return ret


def _render_compile(k: Kernel, compile_fn: Callable[[str], bytes]) -> tuple[ProgramSpec, bytes]:
    spec = program_for_kernel(k)
    return spec, compile_fn(spec.src)


def cache_key(ast: UOp, renderer: Renderer, width: int) -> str:
    desc = f"{type(renderer).__name__}:{renderer.device}:{renderer.threads}:{width}:{renderer.limits}"
    desc += f":tf32={ALLOW_TF32.value}\n{ast!r}"
    return hashlib.sha256(desc.encode()).hexdigest()


def beam_search(ast: UOp, target: SearchTarget, width: int, max_steps: int | None = None) -> list[Opt]:
    """The opts BEAM finds for `ast` (cached on disk); at most `max_steps` steps (env BEAM_MAX_STEPS, 12)."""
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"beam width must be an int >= 1, got {width!r}")
    key = cache_key(ast, target.renderer, width)
    if (hit := _opts_from_data(diskcache_get("beam", key))) is not None:
        try:
            Kernel(ast, target.renderer).apply_opts(hit)  # a cached list that does not apply is searched again
            return hit
        except KernelOptError as e:
            warnings.warn(
                f"tg disk cache {cache_path()!r}: BEAM entry does not apply ({e}); searching again", stacklevel=2
            )
    steps = max_steps if max_steps is not None else getenv("BEAM_MAX_STEPS", 12)
    opts = _search(Kernel(ast, target.renderer), target, width, steps)
    diskcache_put("beam", key, [[o.op.name, o.axis, o.arg] for o in opts])
    return opts


def _opts_from_data(data: Any) -> list[Opt] | None:
    """Opts from a cached [[op name, axis, arg], ...]; None (search again) when the entry is not that."""
    if data is None:
        return None
    try:
        return [Opt(OptOps[name], axis, arg) for name, axis, arg in data]
    except (KeyError, TypeError, ValueError) as e:
        warnings.warn(
            f"tg disk cache {cache_path()!r}: BEAM entry {data!r:.100} is not valid ({e!r}); searching again",
            stacklevel=3,
        )
        return None


def _search(base: Kernel, target: SearchTarget, width: int, steps: int) -> list[Opt]:
    st = time.perf_counter()
    acts = actions(target.renderer)
    # start from the hand-coded opts (their children are the promising ones), and from the plain kernel only
    # when the heuristics found nothing: timing dozens of untiled variants of a big kernel is what makes search slow
    heuristic = base.copy().apply_opts(hand_coded_optimizations(base))
    seeds = [heuristic] if heuristic.applied_opts else [base]
    with _pool() as pool:
        beam = _time_all(seeds, target, pool, float("inf"), timeout=getenv("BEAM_TIMEOUT", 10.0) * 6)
        if not beam:  # even the starting kernel did not compile in time: keep the hand-coded opts
            print(f"BEAM: {base.name}: the starting kernel failed; using the hand-coded opts", file=sys.stderr)
            return list(heuristic.applied_opts)
        for step in range(1, steps + 1):
            seen = {tuple(k.applied_opts) for k, _ in beam}
            cands = [c for k, _ in beam for c in children(k, acts) if tuple(c.applied_opts) not in seen]
            cands = list({tuple(c.applied_opts): c for c in cands}.values())
            timed = _time_all(cands, target, pool, beam[0][1])
            _progress(step, len(cands), timed[:1] or beam[:1], time.perf_counter() - st)
            if not timed or timed[0][1] >= beam[0][1] * 0.99:
                break
            beam = sorted(beam + timed, key=lambda x: x[1])[:width]
    print(f"BEAM: {base.name} -> {beam[0][0].applied_opts} in {time.perf_counter() - st:.1f} s", file=sys.stderr)
    return list(beam[0][0].applied_opts)


def _pool() -> ProcessPoolExecutor:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(
        max_workers=getenv("BEAM_WORKERS", 0) or None, mp_context=multiprocessing.get_context(method)
    )


def _time_all(
    kernels: list[Kernel], target: SearchTarget, pool: ProcessPoolExecutor, best: float, timeout: float | None = None
) -> list[tuple[Kernel, float]]:
    """Compile all in parallel (skipping failures and timeouts: BEAM_TIMEOUT s each), time each; fastest first."""
    from concurrent.futures import TimeoutError as FutureTimeout

    timeout = timeout if timeout is not None else getenv("BEAM_TIMEOUT", 10.0)
    futures: list[tuple[Kernel, Future[tuple[ProgramSpec, bytes]]]] = [
        (k, pool.submit(_render_compile, k, target.compile_fn)) for k in kernels
    ]
    ret: list[tuple[Kernel, float]] = []
    for k, fut in futures:
        try:
            spec, lib = fut.result(timeout=timeout)
        except FutureTimeout:
            fut.cancel()
            continue
        except Exception as e:  # a candidate that fails to render or compile is skipped
            if DEBUG >= 2:
                print(f"BEAM: skipping {k.applied_opts}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        try:
            et = target.time(spec, lib, runs=3, cutoff=best * 1.5)
        except Exception as e:  # a candidate that fails to launch (too many registers for its workgroup, ...)
            if DEBUG >= 2:
                print(f"BEAM: skipping {k.applied_opts}: launch failed: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        best = min(best, et)
        ret.append((k, et))
    return sorted(ret, key=lambda x: x[1])


def _progress(step: int, n: int, best: list[tuple[Kernel, float]], elapsed: float) -> None:
    k, et = best[0]
    print(
        f"BEAM step {step}: {n:4d} candidates, best {et * 1e3:9.3f} ms {k.applied_opts} ({elapsed:.1f} s)",
        file=sys.stderr,
    )
