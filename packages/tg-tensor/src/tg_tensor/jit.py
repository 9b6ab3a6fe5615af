"""TinyJit: run a function's kernels again without Python, scheduling or compiling.

The first call runs the function normally (kernels compile, lazily created state gets realized).
The second call runs it again while recording every kernel launch and copy. From the third call
on, the recording is replayed with the new call's input buffers swapped in; the function itself
is not called. Every call checks that the inputs have the shapes, dtypes and devices seen at
capture and raises JitError otherwise. Non-tensor arguments (numbers, strings, tuples, ...)
are baked into the kernels, so each set of their values gets its own recording (see
jit_args.py); tensors inside lists, tuples and dicts are inputs like the others. Returned
tensors get fresh buffers on every replay, so a result is never overwritten by the next call.
Intermediate buffers of the recording share memory where their lifetimes do not overlap (the
memory planner). `JIT=0` turns the JIT off. On devices that make graphs (CUDA; the CPU, as one call into C), a
replay is one graph launch; `JIT=2` launches the kernels one by one instead. Only the launches whose buffers
changed since their last run are rebound (a graph node update each), so a caller that passes the
same input tensors every time, refilled in place, pays for none (a decode step of an LLM reads
its position in ~10 kernels per layer).

State that the function updates must be updated in place (`Tensor.assign`, as the optimizers do),
and reading values to the host (`.numpy()`, `.item()`, `.tolist()`) inside a jitted function is an
error: the value would be frozen into the recording.

A number that changes on every call (a decode position) is passed as a bound Variable,
`Variable("pos", 1, MAX).bind(n)`, and used in shapes (`x.shrink(((0, pos),))`, `cache[:, :pos]`):
the recorded kernels take the variable as an argument, and each replay passes the call's value,
so one recording serves every value in the variable's range (tensor inputs whose shapes hold
bound Variables are compared by their variables, not their values).

>>> from tg_tensor import Tensor, TinyJit
>>> @TinyJit
... def f(x: Tensor) -> Tensor:
...     return (x * 2 + 1).sum()
>>> [f(Tensor([float(i), 1.0])).item() for i in range(4)]
[4.0, 6.0, 8.0, 10.0]
"""

from __future__ import annotations

import functools
import gc
import os
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from tg_runtime.device import (
    Buffer,
    Device,
    DeviceGraph,
    GraphCollective,
    GraphCopy,
    GraphItem,
    GraphKernel,
    GraphLaunch,
    bind_program,
)
from tg_runtime.runner import CompiledRunner, get_runner, run_copy
from tg_tensor import jit_file
from tg_tensor.engine import multi
from tg_tensor.engine.collective import run_collective
from tg_tensor.engine.inplace import pending_writes
from tg_tensor.engine.realizer import ScheduleItem, current
from tg_tensor.engine.schedule import buffer_of, recorded_view
from tg_tensor.front import front
from tg_tensor.jit_args import JitArgError, bind_value, describe_change, flatten_call
from tg_tensor.tensor import Tensor
from tg_uop import DType, Ops, UOp
from tg_uop.helpers import DEBUG, JIT, ContextVar, GlobalCounters, all_int
from tg_uop.trace import TRACE
from tg_uop.uop import sint

ReturnType = TypeVar("ReturnType")
Spec = tuple[tuple[Any, ...], DType, str]  # shape, dtype, device of one input


class JitError(RuntimeError):
    """A jitted function was called in a way its recording cannot serve (or did something it cannot record)."""


class JitCacheWarning(UserWarning):
    """A TinyJit `cache=` file was not used (it is recorded again) or could not be written."""


# how many sets of non-tensor argument values one jitted function records (each holds its own buffers)
JIT_MAX_CAPTURES = ContextVar("JIT_MAX_CAPTURES", 8)


def check_host_read(what: str) -> None:
    """Raise JitError when tensor data is read to the host inside a jitted function (called by Tensor)."""
    if running := front().jit_running:  # names of jitted functions whose Python body is running now
        raise JitError(
            f"{what} inside the jitted function {running[-1]!r}: the value would be frozen into the recording. "
            "Return the tensor from the function and read it outside."
        )


def realized_buffer(t: Tensor) -> Buffer:
    """Make `t` a realized contiguous buffer (in place) and return that Buffer."""
    if not t.is_realized:
        t.uop = t.contiguous().uop
    t.realize()
    return buffer_of(t.uop.base)


@dataclass
class _Launch:
    """One recorded item: a compiled kernel (or a copy when runner is None) and the buffers it takes."""

    runner: CompiledRunner | None
    bufs: list[Buffer]
    born: set[int] = field(default_factory=set)  # positions of buffers first allocated by this item
    collective: tuple[str, str, int] | None = None  # (kind, op, outputs) of a collective item (runner None)
    var_vals: dict[UOp, int] = field(default_factory=dict)  # the kernel's symbolic variables and their values

    def vals(self) -> tuple[int, ...]:
        """The variable values in the kernel's parameter order."""
        return () if self.runner is None else tuple(self.var_vals[v] for v in self.runner.spec.vars)

    def kernel(self, runner: CompiledRunner) -> GraphLaunch:
        """This launch of its kernel `runner` as graphs and bind_program take it: program, buffer arguments,
        launch sizes, variable values."""
        spec = runner.spec
        return (runner.program, runner.launch_args(self.bufs), spec.global_size, spec.local_size, self.vals())


@dataclass
class _Recording:
    launches: list[_Launch]
    output_bufs: list[Buffer]  # distinct output buffers of the capture (templates for fresh ones)
    output_map: list[tuple[int, tuple[sint, ...]]]  # per returned tensor: its output buffer and (unbound) shape
    ret: Any  # the capture call's return value (its tensors are replaced on each replay)
    temps: list[Buffer]  # buffers it writes before reading, not returned (jit_file)
    consts: list[Buffer]  # data the function made from the host (jit_file: "const")
    input_slots: list[list[tuple[int, int]]] = field(default_factory=list)  # per input: (launch, position) pairs
    output_slots: list[list[tuple[int, int]]] = field(default_factory=list)  # per output buffer: positions to refresh
    calls: list[Callable[[], Any]] = field(default_factory=list)  # each launch bound to its buffers
    graph: DeviceGraph | None = None  # all launches as one device graph (CUDA's, the CPU's C caller) where it has one
    ops: int = 0
    mem: int = 0
    kernels: int = 0

    def bind(self, input_bufs: list[Buffer]) -> None:
        """Find the positions that take each input and output buffer, allocate every buffer, bind each launch."""
        for launch in self.launches:
            for b in launch.bufs:
                b.ensure_allocated()
        self.input_slots = [_positions(self.launches, b) for b in input_bufs]
        self.output_slots = [_positions(self.launches, b) for b in self.output_bufs]
        self.calls = [_bind(launch) for launch in self.launches]
        kernels = [launch.runner.spec for launch in self.launches if launch.runner is not None]
        self.kernels = len(kernels)
        self.ops, self.mem = sum(k.estimated_ops for k in kernels), sum(k.estimated_mem for k in kernels)
        self.graph = _device_graph(self.launches) if JIT.value < 2 else None  # JIT=2: launch one by one


def _flat_tensors(ret: Any) -> list[Tensor]:
    if isinstance(ret, Tensor):
        return [ret]
    if isinstance(ret, (tuple, list)):
        return [x for x in ret if isinstance(x, Tensor)]
    if isinstance(ret, dict):
        return [x for x in ret.values() if isinstance(x, Tensor)]
    return []


def _rebuild(ret: Any, new: list[Tensor]) -> Any:
    it = iter(new)
    if isinstance(ret, Tensor):
        return next(it)
    if isinstance(ret, (tuple, list)):
        return type(ret)(next(it) if isinstance(x, Tensor) else x for x in ret)
    if isinstance(ret, dict):
        return {k: next(it) if isinstance(v, Tensor) else v for k, v in ret.items()}
    return ret


@dataclass
class _Capture:
    """The state of one recording: calls seen, the input specs, and the recording once made."""

    key: tuple[Any, ...] = ()
    cnt: int = 0
    specs: list[Spec] | None = None
    recording: _Recording | None = None
    warmup_host_data: list[bytes] = field(default_factory=list)


class TinyJit(Generic[ReturnType]):
    """Decorator: record the kernels of `fxn` on its second call and replay them from the third.

    Inputs are the Tensor arguments (positional, then keyword in name order, also inside lists,
    tuples and dicts). The other arguments select the recording: new values run the function
    (warm-up, capture) and are replayed from their third call, up to JIT_MAX_CAPTURES sets of
    values (then JitError: pass a changing number as a Tensor, or an integer as a bound Variable,
    which is keyed by its name and range and passed to the recorded kernels at each replay). Use
    `reset()` to record again.

    `cache=path` keeps the recording in a file (jit_file.py): the capture is saved there, and the first call
    of a later process whose arguments, tg version, device and function source match replays it at once
    (no warm-up call, no capture, no scheduling; the kernels come from the compile cache). `state` names the
    tensors the function reads and updates besides its inputs (parameters, optimizer state), as
    `{name: tensor}`; a file binds its buffers by these names, checking size and dtype. A file that does not
    match (another version, device, shapes; a damaged file; state it cannot bind) is not used: a
    JitCacheWarning names what differs, and the function is captured again and the file overwritten. A file
    holds one recording, the latest capture's (a function called with several sets of non-tensor arguments
    keeps only the last one's).

    >>> import tempfile, os
    >>> w = Tensor([1.0, 2.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "step.tgjit")
    >>> step = TinyJit(lambda x: (x * w).sum(), cache=path, state={"w": w})
    >>> [step(Tensor([1.0, float(i)])).item() for i in range(3)], os.path.exists(path)
    ([1.0, 3.0, 5.0], True)
    """

    def __init__(
        self,
        fxn: Callable[..., ReturnType],
        *,
        cache: str | os.PathLike[str] | None = None,
        state: Mapping[str, Tensor] | None = None,
    ) -> None:
        if not callable(fxn):
            raise TypeError(f"TinyJit: expected a function, got {type(fxn).__name__}")
        if state is not None and not isinstance(state, Mapping):
            raise TypeError(f"TinyJit: state must map names to Tensors (a dict), got {type(state).__name__}")
        for k, v in (state or {}).items():
            if not isinstance(k, str) or not isinstance(v, Tensor):
                raise TypeError(f"TinyJit: state must map names (str) to Tensors, got {k!r}: {type(v).__name__}")
        self.fxn = fxn
        self.name = getattr(fxn, "__qualname__", repr(fxn))
        self.cache = os.fspath(cache) if cache is not None else None
        self.state: Mapping[str, Tensor] = state if state is not None else {}
        self.loaded = False  # did the recording come from the cache file (no capture in this process)?
        functools.update_wrapper(self, fxn)
        self.reset()
        self.reads_cache = self.cache is not None  # (reset() stops it: recording again means not replaying the file)

    def reset(self) -> None:
        """Forget every recording: the next call runs eagerly again (a `cache=` file is not read again; the new
        capture overwrites it)."""
        self.captures: OrderedDict[tuple[Any, ...], _Capture] = OrderedDict()
        self.current = _Capture()
        self.reads_cache = False

    @property
    def recording(self) -> _Recording | None:
        """The recording of the latest call's non-tensor arguments (None before its capture)."""
        return self.current.recording

    @property
    def jit_cache(self) -> list[_Launch]:
        """The recorded launches (empty before the capture call)."""
        return self.recording.launches if self.recording is not None else []

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else functools.partial(self.__call__, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
        if not JIT.value:
            return self.fxn(*args, **kwargs)  # the plain function, as if it were not decorated
        try:
            inputs, key, var_vals = flatten_call(args, kwargs)
            for i, t in enumerate(inputs):
                _shape_values(f"tensor input {i}", t, var_vals)
        except JitArgError as e:
            raise JitError(f"{self.name}: {e}") from None
        cap = self.current = self._capture_for(key)
        specs = [_spec(t) for t in inputs]
        if cap.specs is not None:
            _check_specs(self.name, cap.specs, specs)
        cap.specs = specs
        current().run_pending()
        if multi_in := [t for t in inputs if t.uop.op is Ops.MULTI]:
            raise JitError(
                f"{self.name}: tensor input on several devices ({multi_in[0].device}); pass it on one device and "
                "shard it inside the function (`x.shard(devices, axis)`), so the recording includes the split"
            )
        # (after run_pending every queued kernel has run: an input that is a buffer already needs no realize)
        input_bufs = [buffer_of(t.uop.base) if t.is_realized else realized_buffer(t) for t in inputs]
        if len({id(b) for b in input_bufs}) != len(input_bufs):
            raise JitError(f"{self.name}: the same tensor was passed as two inputs; pass distinct tensors")
        # (while VIZ records, the function is captured again so the viewer sees its kernels being made; the file is
        # rewritten by that capture as usual)
        from_file = self.reads_cache and self.cache is not None and not var_vals and not TRACE.active
        if cap.recording is None and cap.cnt == 0 and from_file and self.cache is not None:
            cap.recording = self._load_cache(self.cache, key, specs, input_bufs)
            cap.cnt = 2 if cap.recording is not None else 0
        if cap.recording is not None:
            return self._replay(cap.recording, input_bufs, var_vals)  # type: ignore[no-any-return]
        cap.cnt += 1
        if cap.cnt == 1:
            first, _, made = self._run_recorded(input_bufs, args, kwargs)
            cap.warmup_host_data = [bytes(b.as_bytes()) for b in made]
            return first
        cap.cnt = 1  # a capture that fails is tried again (and fails again) on the next call
        _live_buffers()  # collect the warm-up's dead graph, so its cached results cannot stand in for kernels
        second, launches, made = self._run_recorded(input_bufs, args, kwargs)
        _check_host_data(self.name, cap.warmup_host_data, [bytes(b.as_bytes()) for b in made])
        cap.recording = _record(launches, input_bufs, second, made)
        cap.cnt, cap.warmup_host_data = 2, []
        if self.cache is not None:
            self._save_cache(self.cache)
        return second

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the latest recording to `path` (JitCacheError when it cannot be stored: see jit_file.py).

        >>> import tempfile, os
        >>> f = TinyJit(lambda x: x + 1)
        >>> for i in range(2): _ = f(Tensor([float(i)]))
        >>> f.save(os.path.join(tempfile.mkdtemp(), "f.tgjit"))
        """
        cap = self.current
        if cap.recording is None or cap.specs is None:
            raise JitError(f"{self.name}: nothing recorded yet (the second call records); call it twice first")
        jit_file.write_file(
            os.fspath(path), jit_file.to_payload(cap.recording, self.fxn, cap.key, cap.specs, self.state)
        )

    def _save_cache(self, path: str) -> None:
        """save() for `cache=`: a recording that cannot be stored, or a file that cannot be written, warns."""
        try:
            self.save(path)
        except (jit_file.JitCacheError, OSError) as e:
            warnings.warn(f"{self.name}: the recording is not saved to {path}: {e}", JitCacheWarning, stacklevel=3)

    def _load_cache(self, path: str, key: tuple[Any, ...], specs: list[Spec], input_bufs: list[Buffer]) -> Any:
        """The recording in the file at `path` for this call, or None (with a JitCacheWarning saying why, unless
        there is no file yet)."""
        if not os.path.exists(path):
            return None
        try:
            rec = jit_file.from_payload(jit_file.load(path), self.fxn, key, specs, self.state, input_bufs)
        except jit_file.JitCacheError as e:
            warnings.warn(
                f"{self.name}: not replaying the saved recording {path}: {e}; recording again (the file is rewritten)",
                JitCacheWarning,
                stacklevel=3,
            )
            return None
        self.loaded = True
        if DEBUG >= 1:
            print(f"{self.name}: replaying the recording saved in {path} ({rec.kernels} kernels)")
        return rec

    def _capture_for(self, key: tuple[Any, ...]) -> _Capture:
        """The capture state of these non-tensor arguments (a new one when they were not seen before)."""
        if (cap := self.captures.get(key)) is not None:
            self.captures.move_to_end(key)
            return cap
        if len(self.captures) >= JIT_MAX_CAPTURES.value:
            last = next(reversed(self.captures))
            raise JitError(
                f"{self.name}: called with {len(self.captures) + 1} different sets of non-tensor arguments (each "
                f"needs its own recording; the limit is JIT_MAX_CAPTURES={JIT_MAX_CAPTURES.value}); this call "
                f"changed {describe_change(last, key)}. Pass a value that changes between calls as a Tensor, or an "
                "integer (a length, a position) as a bound Variable, Variable('name', lo, hi).bind(value), which one "
                "recording serves for every value"
            )
        return self.captures.setdefault(key, _Capture(key))

    def _run_python(self, args: Any, kwargs: Any) -> ReturnType:
        running = front().jit_running
        running.append(self.name)
        try:
            ret = self.fxn(*args, **kwargs)
        finally:
            running.pop()
        outs = _flat_tensors(ret)
        for t in outs:
            if multi.is_multi(t.uop):
                raise JitError(
                    f"{self.name}: returns a tensor on several devices ({t.device}); return it on one device "
                    "(`t.to(device)`, e.g. a replicated loss) so each replay can hand back a fresh buffer"
                )
            if not t.is_realized:
                t.uop = t.contiguous().uop
        # assigns made inside the function (not realized there) are part of the recording
        writes = pending_writes()
        if outs or writes:
            Tensor.realize(*outs, *writes)
        return ret

    def _run_recorded(
        self, input_bufs: list[Buffer], args: Any, kwargs: Any
    ) -> tuple[ReturnType, list[_Launch], list[Buffer]]:
        """Run the function, recording every launch; also return the buffers it filled from the host."""
        launches: list[_Launch] = []

        def observe(item: ScheduleItem) -> None:
            plain = item.ast.op in (Ops.COPY, Ops.COLLECTIVE)
            runner = None if plain else get_runner(item.bufs[0].device, item.ast)
            born = {i for i, b in enumerate(item.bufs) if not b.is_allocated()}
            coll = (*item.ast.arg, item.outputs) if item.ast.op is Ops.COLLECTIVE else None
            launches.append(_Launch(runner, list(item.bufs), born, coll, dict(item.var_vals)))

        # assigns made before the call are not the function's: run them now
        if before := pending_writes():
            Tensor.realize(*before)
        existing = _live_buffers(collect=False) | {id(b) for b in input_bufs}
        with current().recording(observe):
            ret = self._run_python(args, kwargs)
        return ret, launches, _host_made(launches, existing)

    def _replay(self, rec: _Recording, input_bufs: list[Buffer], var_vals: dict[UOp, int]) -> Any:
        if rec.launches and (first := rec.launches[0].runner) is not None and first.device.startswith("CPU"):
            Device[first.device].prepare()  # (the thread pool's sleepers wake while the buffers are rebound)
        changed: set[int] = set()  # launches whose buffers or variable values differ from their last run: rebound
        for li, launch in enumerate(rec.launches):
            if launch.var_vals:  # the call's values of the variables; others keep the values they were recorded with
                new = {v: var_vals.get(v, val) for v, val in launch.var_vals.items()}
                if new != launch.var_vals:
                    launch.var_vals = new
                    changed.add(li)
        for buf, slots in zip(input_bufs, rec.input_slots):
            for li, pos in slots:
                if rec.launches[li].bufs[pos] is not buf:  # the same input buffer again keeps its launches as bound
                    rec.launches[li].bufs[pos] = buf
                    changed.add(li)
        fresh = [Buffer(b.device, b.size, b.dtype).ensure_allocated() for b in rec.output_bufs]
        for buf, slots in zip(fresh, rec.output_slots):
            for li, pos in slots:
                rec.launches[li].bufs[pos] = buf
                changed.add(li)
        if rec.graph is not None:  # rebound here, before the slow path too, so that a later replay finds them so
            for li in sorted(changed):
                launch = rec.launches[li]
                if launch.runner is not None:
                    rec.graph.update(li, launch.runner.launch_args(launch.bufs), launch.vals())
                else:  # a copy or a collective (only graphs of several devices hold those)
                    rec.graph.update(li, list(launch.bufs))
        else:
            for li in sorted(changed):
                rec.calls[li] = _bind(rec.launches[li])
        if DEBUG >= 2 or TRACE.profiling:  # the slow path, with one timed line (or profile event) per kernel
            TRACE.replaying = True  # (marked as replays in the profile, the viewer and the DEBUG=2 lines)
            try:
                for launch in rec.launches:
                    _bind(launch)() if launch.runner is None else launch.runner(launch.bufs, launch.var_vals)
            finally:
                TRACE.replaying = False
            return _rebuild(rec.ret, _outputs(rec, fresh, var_vals))
        if rec.graph is not None:
            rec.graph()
        else:
            for call in rec.calls:
                call()
        GlobalCounters.kernel_count += rec.kernels
        GlobalCounters.global_ops += rec.ops
        GlobalCounters.global_mem += rec.mem
        return _rebuild(rec.ret, _outputs(rec, fresh, var_vals))


def _outputs(rec: _Recording, fresh: list[Buffer], var_vals: dict[UOp, int]) -> list[Tensor]:
    """The returned tensors of a replay: fresh buffers in the recorded shapes, symbolic dims bound to this call."""
    bind = {v: v.bind(val) for v, val in var_vals.items()}
    return [
        Tensor(recorded_view(current().register(fresh[i]), tuple([_sub(s, bind) for s in shape])))
        for i, shape in rec.output_map
    ]


def _sub(s: sint, bind: dict[UOp, UOp]) -> sint:
    """`s` with its variables bound (by hand: a rewrite would visit the variable again inside its BIND)."""
    if not isinstance(s, UOp):
        return s
    if s.op is Ops.DEFINE_VAR:
        return bind.get(s, s)
    return s.replace(src=tuple(_sub(x, bind) for x in s.src)) if s.src else s


def _shape_values(what: str, t: Tensor, values: dict[UOp, int]) -> None:
    """Add the values of the bound Variables in `t`'s shape to `values` (one value per variable)."""
    for s in t.shape:
        for u in s.toposort if isinstance(s, UOp) else ():
            if u.op is Ops.BIND:
                bind_value(values, u, what)


def _unbound(s: sint) -> sint:
    """A shape entry with its bound Variables replaced by the variables (what a recording is compared on)."""
    if not isinstance(s, UOp):
        return s
    return s.substitute({u: u.src[0] for u in s.toposort if u.op is Ops.BIND})


def _host_made(launches: list[_Launch], existing: set[int]) -> list[Buffer]:
    """Buffers the launches read that the function filled from the host (Tensor(data) made inside it)."""
    made = {id(launch.bufs[p]) for launch in launches for p in launch.born} | existing
    return list({id(b): b for launch in launches for b in launch.bufs if id(b) not in made}.values())


def _check_host_data(name: str, warmup: list[bytes], capture: list[bytes]) -> None:
    """Host-made data is frozen into the recording: that is only right when it is the same on every call."""
    if len(warmup) != len(capture):
        return  # the calls took different paths (state created on the first call): nothing to compare
    for i, (a, b) in enumerate(zip(warmup, capture)):
        if a != b:
            raise JitError(
                f"{name}: the function creates tensor data on the host that changes between calls (host-made "
                f"buffer {i} of {len(capture)}, {len(b)} bytes, e.g. Tensor(numpy_array)); a replay would freeze "
                "it. Pass such data in as a tensor argument (random numbers: Tensor.rand draws on the device)."
            )


def _spec(t: Tensor) -> Spec:
    shape = t.shape if all_int(t.shape) else tuple(_unbound(s) for s in t.shape)  # (symbolic: without bound values)
    return (shape, t.dtype, t.device)


def _check_specs(name: str, expected: list[Spec], got: list[Spec]) -> None:
    if len(expected) != len(got):
        raise JitError(f"{name}: called with {len(got)} tensor inputs, but it was recorded with {len(expected)}")
    for i, (e, g) in enumerate(zip(expected, got)):
        if e != g:
            raise JitError(
                f"{name}: tensor input {i} has shape {g[0]}, dtype {g[1]}, device {g[2]}; the recording expects "
                f"shape {e[0]}, dtype {e[1]}, device {e[2]} (call reset() to record again)"
            )


def _bind(launch: _Launch) -> Callable[[], Any]:
    """The launch as a call with its arguments prepared (on CPU: the C function and raw pointers, ~1 us)."""
    if launch.collective is not None:
        kind, op, n = launch.collective
        return functools.partial(run_collective, kind, op, launch.bufs[:n], launch.bufs[n:])
    if launch.runner is None:
        return functools.partial(run_copy, launch.bufs[0], launch.bufs[1])
    program, opaque, global_size, local_size, vals = launch.kernel(launch.runner)
    return bind_program(program, *opaque, global_size=global_size, local_size=local_size, vals=vals)


def _device_graph(launches: list[_Launch]) -> DeviceGraph | None:
    """One graph of every launch when they are all kernels of one device that makes graphs (CUDA), else one graph
    per device where the devices' kind makes those (`_multi_device_graph`)."""
    devices = {launch.runner.device if launch.runner is not None else None for launch in launches}
    if len(devices) != 1 or None in devices:
        return _multi_device_graph(launches)
    (device,) = devices
    graph_launches = [launch.kernel(launch.runner) for launch in launches if launch.runner is not None]
    return Device[str(device)].graph(graph_launches) if graph_launches else None


def _multi_device_graph(launches: list[_Launch]) -> DeviceGraph | None:
    """The launches of several devices of one kind, with the copies and collectives between them, as a graph the
    kind makes (CUDA: a data-parallel step with its NCCL all-reduces, one CUDA graph), or None where it has none."""
    items: list[GraphItem] = []
    for launch in launches:
        if launch.collective is not None:
            kind, op, n = launch.collective
            items.append(GraphCollective(kind, op, launch.bufs[:n], launch.bufs[n:]))
        elif launch.runner is None:
            items.append(GraphCopy(launch.bufs[0], launch.bufs[1]))
        else:
            items.append(GraphKernel(str(launch.runner.device), launch.kernel(launch.runner)))
    devices = {b.device for launch in launches for b in launch.bufs}
    if not items or len({d.split(":")[0] for d in devices}) != 1:
        return None
    try:
        return Device[next(iter(devices))].multi_graph(items)
    except RuntimeError as e:  # (a driver or NCCL that cannot capture this: the replay still runs, launch by launch)
        warnings.warn(
            f"TinyJit: no graph for this multi-device step ({e}); its launches are replayed one by one", stacklevel=2
        )
        return None


def _record(launches: list[_Launch], input_bufs: list[Buffer], ret: Any, made: list[Buffer]) -> _Recording:
    """Find the input and output positions in the launches and plan the intermediate buffers."""
    outs = _flat_tensors(ret)
    born = {id(launch.bufs[p]) for launch in launches for p in launch.born}
    out_bufs = list({id(b): b for b in (buffer_of(t.uop.base) for t in outs)}.values())
    if any(id(b) not in born and b.size for b in out_bufs):  # an empty result is computed by no kernel
        raise JitError(
            "a jitted function must return tensors it computes, not its inputs or existing state "
            "(their buffers would be shared between calls); return `t.contiguous()` instead"
        )
    index = {id(b): i for i, b in enumerate(out_bufs)}
    output_map = [(index[id(buffer_of(t.uop.base))], tuple(_unbound(s) for s in t.shape)) for t in outs]
    keep = {id(b) for b in input_bufs} | {id(b) for b in out_bufs} | _live_buffers()
    plan_memory(launches, born - keep)
    # buffers the recording writes before it reads them (not returned): a file allocates them afresh
    temps = {id(b): b for launch in launches for b in launch.bufs if id(b) in born and id(b) not in index}
    rec = _Recording(launches, out_bufs, output_map, ret, list(temps.values()), made)
    rec.bind(input_bufs)
    return rec


def _positions(launches: list[_Launch], buf: Buffer) -> list[tuple[int, int]]:
    return [(li, p) for li, launch in enumerate(launches) for p, b in enumerate(launch.bufs) if b is buf]


def _live_buffers(collect: bool = True) -> set[int]:
    """Buffers still reachable from some tensor (after collecting garbage): state, not intermediates."""
    if collect:  # twice: values dropped by weak-key callbacks of the first pass are cycles the second frees
        gc.collect()
        gc.collect()
    return {id(b) for b in list(current().buffers.values())}


def plan_memory(launches: list[_Launch], free_ids: set[int]) -> int:
    """Let intermediate buffers (ids in `free_ids`) share storage when their lifetimes do not overlap.

    Buffers of the same device, size and dtype are merged greedily in the order they are first
    written; returns how many buffers were saved.
    """
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    by_id: dict[int, Buffer] = {}
    for li, launch in enumerate(launches):
        for b in launch.bufs:
            if id(b) in free_ids:
                first.setdefault(id(b), li)
                last[id(b)] = li
                by_id[id(b)] = b
    pool: dict[tuple[str, int, DType], list[tuple[int, Buffer]]] = {}  # key -> (free after launch, buffer)
    replace: dict[int, Buffer] = {}
    for bid in sorted(first, key=first.__getitem__):
        b = by_id[bid]
        slots = pool.setdefault((b.device, b.size, b.dtype), [])
        reuse = next((i for i, (free_at, _) in enumerate(slots) if free_at < first[bid]), None)
        if reuse is None:
            slots.append((last[bid], b))
            continue
        target = slots[reuse][1]
        slots[reuse] = (last[bid], target)
        replace[bid] = target
    for launch in launches:
        launch.bufs = [replace.get(id(b), b) for b in launch.bufs]
    return len(replace)
