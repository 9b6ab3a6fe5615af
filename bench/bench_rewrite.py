"""Benchmark of the symbolic rewriter on realistic index expressions (conv2d and matmul views).

Prints one JSON line per figure: {"bench", "impl", "value", "unit", "params"}.

    uv run python bench/bench_rewrite.py                    # everything
    uv run python bench/bench_rewrite.py --trace-overhead   # the cost of the VIZ tracing hook only
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import time
from typing import Any

from tg_shape import ShapeTracker, View
from tg_uop import Ops, PatternMatcher, UOp, dtypes, graph_rewrite
from tg_uop.symbolic import symbolic


class CountingMatcher(PatternMatcher):
    """The symbolic rules, counting every rewrite that fires."""

    def __init__(self, pm: PatternMatcher) -> None:
        super().__init__(pm.patterns)
        self.fired = 0

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        ret = super().rewrite(uop, ctx)
        if ret is not None:
            self.fired += 1
        return ret


def ranges(shape: tuple[int, ...], tag: str) -> list[UOp]:
    """RANGE loop variables as the lowerer makes them (the tag keeps expressions distinct)."""
    return [
        UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, s),), (k, tag)) if s > 1 else UOp.const(dtypes.int32, 0)
        for k, s in enumerate(shape)
    ]


def pool(t: ShapeTracker, k: tuple[int, int], stride: int) -> ShapeTracker:
    """The sliding windows of the last two dims as movement ops: (..., H, W) -> (..., oh, ow, kh, kw)."""
    *pre, h, w = t.shape
    n = len(pre)
    o = [(i - kk) // stride + 1 for i, kk in zip((h, w), k)]
    e = [math.ceil(kk * (i + 1) / i) for kk, i in zip(k, (h, w))]
    t = t.reshape((*pre, 1, h, 1, w)).expand((*pre, e[0], h, e[1], w)).reshape((*pre, e[0] * h, e[1] * w))
    t = t.shrink(tuple((0, s) for s in pre) + ((0, k[0] * (h + 1)), (0, k[1] * (w + 1))))
    t = t.reshape((*pre, k[0], h + 1, k[1], w + 1))
    t = t.shrink(tuple((0, s) for s in pre) + ((0, k[0]), (0, o[0] * stride), (0, k[1]), (0, o[1] * stride)))
    t = t.reshape((*pre, k[0], o[0], stride, k[1], o[1], stride))
    t = t.shrink(tuple((0, s) for s in pre) + ((0, k[0]), (0, o[0]), (0, 1), (0, k[1]), (0, o[1]), (0, 1)))
    t = t.reshape((*pre, k[0], o[0], k[1], o[1]))
    return t.permute((*range(n), n + 1, n + 3, n, n + 2))


def conv_trackers() -> list[ShapeTracker]:
    """Input views of conv2d for a grid of sizes: pad, then the pooled windows, then the kernel layout."""
    out = []
    for bs, cin, hw, kk, pad, stride in itertools.product(
        (1, 4), (3, 16, 64), (8, 14, 28, 32), (1, 3, 5), (0, 1), (1, 2)
    ):
        if hw + 2 * pad < kk:
            continue
        t = ShapeTracker.from_shape((bs, cin, hw, hw)).pad(((0, 0), (0, 0), (pad, pad), (pad, pad)))
        t = pool(t, (kk, kk), stride)  # (bs, cin, oh, ow, kh, kw)
        oh = t.shape[2]
        t = t.reshape((bs, 1, cin, oh, oh, kk, kk)).expand((bs, 8, cin, oh, oh, kk, kk))
        out.append(t.permute((0, 1, 3, 4, 2, 5, 6)))
    return out


def matmul_trackers() -> list[ShapeTracker]:
    """Operand views of matmul, with the reshapes that upcasting and local tiling make."""
    out = []
    for m, n, kd, up in itertools.product((16, 64, 128, 256), (16, 96), (32, 256), (2, 4)):
        a = ShapeTracker.from_shape((m, kd)).reshape((m, 1, kd)).expand((m, n, kd))
        b = ShapeTracker.from_shape((kd, n)).permute((1, 0)).reshape((1, n, kd)).expand((m, n, kd))
        for t in (a, b):
            out.append(t.reshape((m // up, up, n // up, up, kd // 8, 8)).permute((0, 2, 4, 1, 3, 5)))
            out.append(t.permute((2, 0, 1)).reshape((kd * m * n,)).reshape((kd, m, n)))
            out.append(t.reshape((m * n, kd)).shrink(((0, m * n), (1, kd))).pad(((0, 0), (0, 1))))
    return out


def index_expressions(run: int = 0) -> list[UOp]:
    """index and valid of every tracker, unsimplified; `run` gives fresh loop variables (nothing cached)."""
    exprs = []
    for k, t in enumerate(conv_trackers() + matmul_trackers()):
        shape = tuple(int(s) for s in t.shape)
        index, valid = t.to_indexed_uops_raw(ranges(shape, f"run{run}_e{k}"))
        exprs += [index, valid]
    return exprs


def emit(bench: str, value: float, unit: str, **params: Any) -> None:
    print(json.dumps({"bench": bench, "impl": "tg", "value": round(value, 6), "unit": unit, "params": params}))


def bench_rewrites(runs: int = 3) -> None:
    rates, times = [], []
    for run in range(runs):
        exprs = index_expressions(run)
        pm = CountingMatcher(symbolic)
        start = time.perf_counter()
        for e in exprs:
            graph_rewrite(e, pm)
        times.append(time.perf_counter() - start)
        rates.append(pm.fired / times[-1])
    nodes = sum(len(e.toposort) for e in exprs)
    params = {"exprs": len(exprs), "nodes": nodes, "rewrites": pm.fired, "runs": runs}
    emit("rewrite_index_exprs", statistics.median(rates), "rewrites/s", **params)
    emit("rewrite_index_exprs_time", statistics.median(times), "s", **params)


def bench_conv_view(repeats: int = 20) -> None:
    shape, strides = (16, 1, 16, 62, 62, 3, 3, 3), (12288, 0, 0, 64, 1, 4096, 64, 1)
    times = []
    for k in range(repeats):  # a fresh set of loop variables each time: nothing is cached
        start = time.perf_counter()
        st = ShapeTracker((View.create(shape, strides),))
        index, valid = st.to_indexed_uops(ranges(shape, f"conv{k}"))
        times.append(time.perf_counter() - start)
    params = {"shape": shape, "strides": strides, "index": index.render(), "repeats": repeats}
    emit("conv_view_index_build_simplify", statistics.median(times) * 1e3, "ms", **params)
    emit("conv_view_index_build_simplify_first", times[0] * 1e3, "ms", shape=shape, strides=strides)


def bench_trace_overhead(rounds: int = 9) -> None:
    """graph_rewrite with the tracing hook off vs the rewriter called directly (no hook), vs tracing on.

    The three are interleaved round by round, so machine noise hits each alike;
    each round's expressions are rewritten by all three, the first to run rotating; the ratio is the
    median over rounds of each mode's time over no_hook's on the same expressions.
    """
    from tg_uop.rewrite import _Rewriter
    from tg_uop.trace import tracing

    def no_hook(exprs: list[UOp]) -> None:
        for e in exprs:
            _Rewriter(symbolic, None, False).run(e)

    def hook_off(exprs: list[UOp]) -> None:
        for e in exprs:
            graph_rewrite(e, symbolic)

    def tracing_on(exprs: list[UOp]) -> None:
        with tracing(profile=False):
            for e in exprs:
                graph_rewrite(e, symbolic)

    modes = {"no_hook": no_hook, "hook_off": hook_off, "tracing_on": tracing_on}
    times: dict[str, list[float]] = {m: [] for m in modes}
    names = list(modes)
    for r in range(rounds):
        exprs = index_expressions(1000 + r)  # one set per round, rewritten by every mode
        for m in names[r % 3 :] + names[: r % 3]:  # who goes first (colder caches) rotates
            start = time.perf_counter()
            modes[m](exprs)
            times[m].append(time.perf_counter() - start)
    ratios = {m: statistics.median(t / b for t, b in zip(times[m], times["no_hook"])) for m in names}
    for m in names:
        med = statistics.median(times[m])
        emit(f"trace_overhead_{m}", med * 1e3, "ms", rounds=rounds, ratio_to_no_hook=round(ratios[m], 4))


if __name__ == "__main__":
    import sys

    if "--trace-overhead" in sys.argv:
        bench_trace_overhead()
    else:
        bench_rewrites()
        bench_conv_view()
        bench_trace_overhead()
