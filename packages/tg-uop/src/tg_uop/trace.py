"""Recording what the compiler does, for the viewer (VIZ=1), the DOT writer (GRAPH=1) and PROFILE=1.

Every layer reports into one process-wide `TRACE` object; nothing here knows about a viewer. When
tracing is off (the default) the only cost a `graph_rewrite` pays is one attribute check.

A *group* is one unit the viewer lists (a schedule, or one kernel); a group holds *steps* in order:
a rewrite pass (its name, the graph before and after, and every rule that fired), a graph snapshot,
or a piece of text (linear UOps, generated source).

>>> from tg_uop import UOp, dtypes, graph_rewrite, PatternMatcher, UPat, Ops
>>> from tg_uop.trace import TRACE, tracing
>>> fold = PatternMatcher([(UPat(Ops.ADD, src=(UPat.cvar("a"), UPat.cvar("b"))),
...                         lambda a, b: UOp.const(a.dtype, a.arg + b.arg))])
>>> with tracing():
...     with TRACE.group("kernel", "demo"):
...         _ = graph_rewrite(UOp.const(dtypes.int, 1) + 2, fold, name="fold")
>>> [(s.name, len(s.rules)) for s in TRACE.groups[-1].steps]
[('fold', 1)]
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tg_uop.helpers import ContextVar

if TYPE_CHECKING:
    from tg_uop.uop import UOp

VIZ = ContextVar("VIZ", 0)
HOST_WORK = frozenset({"schedule", "codegen", "compile"})  # profile events the host does (for a device)
GRAPH = ContextVar("GRAPH", 0)
PROFILE = ContextVar("PROFILE", 0)


@dataclass
class RuleFire:
    """One rule that fired in a rewrite pass: where it is defined, and the node before and after.

    `location` is `file.py:line` (what the viewer shows), `path` the file's full path (to show the rule's source);
    a hand-written pass reports its rewrites with `TRACE.fire`.
    """

    pattern: str
    location: str
    before: UOp
    after: UOp
    path: str = ""


@dataclass
class Step:
    """One step of a group: a rewrite pass (input, output, rules), a graph snapshot, or text."""

    name: str
    kind: str  # "rewrite" | "graph" | "text"
    graph: UOp | None = None  # the graph after this step (the output of a rewrite)
    before: UOp | None = None  # the input of a rewrite
    rules: list[RuleFire] = field(default_factory=list)
    text: str | None = None
    seconds: float = 0.0
    # a graph already turned into data (tg_uop.dot.graph_data): for tensor graphs, whose UOps must not be
    # kept alive by the trace (a live lazy node can be matched, and so shared, by a later realize)
    graph_data: dict[str, Any] | None = None


@dataclass
class Group:
    """A unit the viewer lists: one schedule or one kernel, with its steps and facts (device, shape, time)."""

    kind: str
    name: str
    meta: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    error: str | None = None
    generation: int = 0  # which recording (Trace.clear starts a new one) the group belongs to


@dataclass
class ProfileEvent:
    """A Chrome trace 'complete' event: a kernel launch, a copy, a compile or a compiler phase."""

    name: str
    cat: str
    device: str
    start_us: float
    dur_us: float
    args: dict[str, Any] = field(default_factory=dict)
    ph: str = "X"  # "X": a span; "C": a counter (memory in use), its value in args
    thread: str = ""  # the host thread that did it (host work: scheduling, codegen, compiles)


def _limit(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name}={raw!r} is not a limit (expected a positive integer, default {default})")
    return int(raw)


class Trace:
    """The process-wide recording. `active` turns rewrite/step recording on; `profiling` turns on events."""

    def __init__(self) -> None:
        self.active = False
        self.profiling = False
        self.groups: list[Group] = []
        self.events: list[ProfileEvent] = []
        self._stack: list[Group] = []
        self.generation = 0
        self.depth = 0  # nesting of traced graph_rewrite calls: only the outermost ones are recorded
        self.passes: list[str] | None = None  # names of the passes run, while collect_passes() is open
        self.t0 = time.perf_counter()
        self.log: list[RuleFire] | None = None  # the firings of the pass being recorded (None: no pass, or VIZ off)
        self.replaying = False  # launches now come from a TinyJit replay (marked in the profile and DEBUG=2)
        self.max_groups = _limit("VIZ_MAX_GROUPS", 20_000)
        self.max_events = _limit("VIZ_MAX_EVENTS", 2_000_000)
        self.overflow: str | None = None  # why recording stopped early (the trace grew too large to hold)
        self.origins: dict[UOp, dict[str, list[str]]] = {}  # the latest schedule's kernels: their ops, user lines
        self.mem_in_use: dict[str, int] = {}  # bytes by device, for the memory counter
        self.program_error: str | None = None  # the exception the program ended with, for the viewer's banner

    # ---- groups and steps ----
    @contextlib.contextmanager
    def group(self, kind: str, name: str, **meta: Any) -> Iterator[Group | None]:
        """Open a group that the steps recorded inside belong to (a no-op when tracing is off)."""
        if not self.active:
            yield None
            return
        if len(self.groups) >= self.max_groups:
            self._stop_recording(f"more than VIZ_MAX_GROUPS={self.max_groups} groups (kernels and schedules)")
            yield None
            return
        g = Group(kind, name, dict(meta), generation=self.generation)
        self.groups.append(g)
        self._stack.append(g)
        try:
            yield g
        except BaseException as e:
            g.error = f"{type(e).__name__}: {e}"
            raise
        finally:
            self._stack.pop()

    def _stop_recording(self, why: str) -> None:
        self.active = False
        self.overflow = f"VIZ: recording stopped after {len(self.groups)} groups: {why}; raise the limit to see more"
        print(self.overflow, file=sys.stderr, flush=True)

    def fire(self, pattern: str, before: UOp, after: UOp, location: str | None = None) -> None:
        """Report one rewrite a hand-written pass made (`before` became `after`) as a step of the pass being
        recorded (a no-op outside one; a pass checks `TRACE.log is not None` first to skip building its arguments).

        >>> from tg_uop import UOp, dtypes, run_pass
        >>> with tracing():
        ...     with TRACE.group("kernel", "demo"):
        ...         def double(u):
        ...             out = u * 2
        ...             TRACE.fire("double", u, out)
        ...             return out
        ...         _ = run_pass("double", double, UOp.const(dtypes.int, 3))
        >>> [r.pattern for r in TRACE.groups[-1].steps[-1].rules]
        ['double']
        """
        if self.log is None or before is after:
            return
        if location is None:
            frame = sys._getframe(1)
            path, line = frame.f_code.co_filename, frame.f_code.co_firstlineno  # (the pass's function)
        else:
            path, _, ln = location.rpartition(":")
            line = int(ln) if ln.isdigit() else 0
        self.log.append(RuleFire(pattern, f"{os.path.basename(path)}:{line}", before, after, path))

    @property
    def current(self) -> Group | None:
        return self._stack[-1] if self._stack else None

    def add_step(self, step: Step) -> None:
        """Append a step to the open group (steps outside any group go to a group named 'other')."""
        g = self.current
        if g is None:
            if not self.groups or self.groups[-1].kind != "other":
                self.groups.append(Group("other", "rewrites outside a kernel"))
            g = self.groups[-1]
        g.steps.append(step)

    def graph_step(self, name: str, graph: UOp) -> None:
        if self.active:
            self.add_step(Step(name, "graph", graph=graph))

    def snapshot_step(self, name: str, graph: UOp, fold_movement: bool = True) -> None:
        """Record `graph` as data now, holding no reference to its UOps."""
        if self.active:
            from tg_uop.dot import graph_data

            data = graph_data(graph, fold_movement)
            self.add_step(Step(name, "graph", graph_data=data))

    def text_step(self, name: str, text: str) -> None:
        if self.active:
            self.add_step(Step(name, "text", text=text))

    @contextlib.contextmanager
    def collect_passes(self) -> Iterator[list[str]]:
        """Collect the name of every pass (graph_rewrite or run_pass, outermost only) run inside the block.

        >>> from tg_uop import UOp, dtypes
        >>> with TRACE.collect_passes() as names:
        ...     _ = (UOp.const(dtypes.int, 1) + 2).simplify()
        >>> names
        ['simplify']
        """
        saved, self.passes = self.passes, []
        try:
            yield self.passes
        finally:
            self.passes = saved

    @contextlib.contextmanager
    def hidden(self) -> Iterator[None]:
        """Passes run inside the block are neither recorded nor listed (trials on copies of a kernel, say)."""
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    # ---- profile events ----
    def now_us(self) -> float:
        return (time.perf_counter() - self.t0) * 1e6

    def event(self, name: str, cat: str, device: str, start_us: float, dur_us: float, **args: Any) -> None:
        """Record one timed event (only when profiling)."""
        if self.profiling and self._room_for_events():
            thread = ""
            if cat in HOST_WORK:  # done by the host for `device`: drawn on the host thread that did it
                args, device, thread = {**args, "device": device}, "HOST", threading.current_thread().name
            self.events.append(ProfileEvent(name, cat, device, start_us, dur_us, args, thread=thread))

    def _room_for_events(self) -> bool:
        if len(self.events) < self.max_events:
            return True
        self.profiling = False
        self.overflow = f"PROFILE: recording stopped after {len(self.events)} events (VIZ_MAX_EVENTS={self.max_events})"
        print(self.overflow, file=sys.stderr, flush=True)
        return False

    def memory(self, device: str, delta_bytes: int) -> None:
        """Record a change of the memory in use on `device` (a counter the timeline draws; only when profiling)."""
        if self.profiling and self._room_for_events():
            now = self.mem_in_use[device] = self.mem_in_use.get(device, 0) + delta_bytes
            self.events.append(ProfileEvent("memory", "memory", device, self.now_us(), 0.0, {"bytes": now}, "C"))

    def chrome_trace(self) -> dict[str, Any]:
        """The events in Chrome's trace-event format: a process per device (and HOST), a thread track in each."""
        devices = sorted({e.device for e in self.events})
        pid = {d: i + 1 for i, d in enumerate(devices)}
        out: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": pid[d], "tid": 0, "args": {"name": d}} for d in devices
        ]
        tids: dict[tuple[str, str], int] = {}
        for e in self.events:
            if (e.device, e.thread) not in tids:
                tids[e.device, e.thread] = tid = sum(1 for d, _ in tids if d == e.device)
                name = {"name": f"{e.device} {e.thread}".rstrip()}
                out.append({"name": "thread_name", "ph": "M", "pid": pid[e.device], "tid": tid, "args": name})
            if e.ph == "C":
                out.append(
                    {"name": e.name, "ph": "C", "pid": pid[e.device], "ts": round(e.start_us, 3), "args": e.args}
                )
                continue
            out.append(
                {
                    "name": e.name,
                    "cat": e.cat,
                    "ph": "X",
                    "pid": pid[e.device],
                    "tid": tids[e.device, e.thread],
                    "ts": round(e.start_us, 3),
                    "dur": round(max(e.dur_us, 0.0), 3),
                    "args": e.args,
                }
            )
        return {"traceEvents": out, "displayTimeUnit": "ms"}

    def write_profile(self, path: str) -> str:
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)
        return path

    def clear(self) -> None:
        self.generation += 1
        self.overflow = None
        self.groups.clear()
        self.events.clear()
        self._stack.clear()
        self.origins = {}


TRACE = Trace()
# the settings decide the initial state; `tracing()` turns it on for a block (tests, tools)
TRACE.active = bool(VIZ.value)
TRACE.profiling = bool(PROFILE.value) or bool(VIZ.value)


@contextlib.contextmanager
def tracing(profile: bool = True) -> Iterator[Trace]:
    """Turn recording on for a block, starting from an empty trace, and restore the previous state."""
    saved = (TRACE.active, TRACE.profiling)
    TRACE.clear()
    TRACE.active, TRACE.profiling = True, profile or saved[1]
    try:
        yield TRACE
    finally:
        TRACE.active, TRACE.profiling = saved


def profile_path() -> str:
    """Where PROFILE=1 writes its trace: $PROFILE_PATH, else a file in the temp directory."""
    import tempfile

    return os.environ.get("PROFILE_PATH") or os.path.join(tempfile.gettempdir(), f"tg_profile_{os.getpid()}.json")


def _write_profile_at_exit() -> None:
    if TRACE.events:
        print(f"PROFILE: {len(TRACE.events)} events written to {TRACE.write_profile(profile_path())}")


if PROFILE.value:
    import atexit

    atexit.register(_write_profile_at_exit)
