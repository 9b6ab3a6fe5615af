"""TinyJit recordings in a file: a second process replays the kernels without running the function again.

What a file holds (JSON after a two-line header, `TGJIT <format>` and the SHA-256 of the JSON):
  - the identity it is valid for: the file format, tg's version and a fingerprint of the stack's sources
    (tg-uop .. tg-nn) and of the jitted function's source file, the device and its renderer and compiler
    settings, the non-tensor arguments (the recording's key) and every tensor input's shape, dtype and device;
  - the rendered programs (source, launch sizes, buffer dtypes: the device's compile cache turns each into the
    binary it built before, so a second process compiles nothing);
  - the launches in order, each a program (or a copy) and its buffer slots;
  - the slots: `input` (the call's i-th tensor input), `output` (a fresh buffer per replay, returned),
    `temp` (written before it is read: an intermediate, allocated afresh), `const` (data the function made
    from the host, or tg's index ranges, stored by value), and `state`: a buffer that lives across calls
    (parameters, optimizer state, the learning rate). A state slot is stored by the names under which the
    caller's `state` mapping holds tensors on it (every name, so the aliasing of a fused optimizer's flat
    buffer is checked too), each name's view of it (movement ops: a parameter's window of that flat
    buffer), and its size and dtype; tg's own random stream is named `tg.random.key:DEV` and
    `tg.random.counter:DEV`.

Loading binds each state slot to the buffer behind the same names in the new process's `state` and refuses
(JitCacheError, naming the value and what was expected) when a name is missing, its view, size, dtype or device
differ, two slots would share one buffer, or names that shared a buffer no longer do. A buffer of the
recording that is none of the kinds above (state the caller did not name) makes `save` refuse: it could not
be bound in another process, and storing its value would freeze it.

>>> check_header(b"nonsense")
Traceback (most recent call last):
...
tg_tensor.jit_file.JitCacheError: not a TinyJit file: it starts with b'nonsense', expected b'TGJIT'
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import json
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tg_runtime.device import Buffer, Device
from tg_tensor.tensor import Tensor
from tg_uop import DType, Ops, dtypes

if TYPE_CHECKING:
    from tg_tensor.jit import _Recording

MAGIC = b"TGJIT"
FORMAT = 1
# the packages whose code a recording's kernels hold: the stack up to tg-tensor, and tg-nn's layers and optimizers
# (found by name, not imported: a file records the maths of the optimizer it was captured with)
_STACK = ("tg_uop", "tg_shape", "tg_codegen", "tg_runtime", "tg_tensor", "tg_nn")


class JitCacheError(ValueError):
    """A saved TinyJit file cannot be used here (other version, device, arguments, state; damaged), or a
    recording cannot be saved (what it holds could not be bound in another process)."""


@functools.cache
def stack_fingerprint() -> str:
    """SHA-256 of the Python sources of tg's packages up to tg-nn (those installed): another tg version or an
    edited tg gives another value."""
    h = hashlib.sha256()
    for pkg in _STACK:
        spec = importlib.util.find_spec(pkg)  # (None where a package is not installed: tg-tensor alone)
        for root in list(spec.submodule_search_locations or []) if spec else []:
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                for name in sorted(f for f in filenames if f.endswith(".py")):
                    path = os.path.join(dirpath, name)
                    h.update(f"{pkg}/{os.path.relpath(path, root)}".encode() + b"\0")
                    with open(path, "rb") as f:
                        h.update(f.read() + b"\0")
    return h.hexdigest()


def function_fingerprint(fxn: Callable[..., Any]) -> str:
    """SHA-256 of the source file that defines `fxn` (its bytecode when there is no file): an edited
    training script records again."""
    import inspect

    try:
        path = inspect.getsourcefile(fxn)
    except TypeError:
        path = None
    if path and os.path.exists(path):
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    code = getattr(fxn, "__code__", None)
    return hashlib.sha256(code.co_code if code is not None else repr(fxn).encode()).hexdigest()


def device_identity(device: str) -> str:
    """The device and what its programs depend on: renderer class and settings, compiler class and key."""
    dev = Device[device]
    rend, comp = dev.renderer, dev.compiler
    settings = sorted((k, repr(v)) for k, v in vars(rend).items())
    return (
        f"{Device.canonicalize(device)}|{type(rend).__qualname__}:{rend.device}:{settings}|"
        f"{type(comp).__qualname__}:{comp.cachekey}"
    )


@functools.cache
def _dtypes_by_name() -> dict[str, DType]:
    found = (getattr(dtypes, n) for n in dir(dtypes))
    return {dt.name: dt for dt in found if isinstance(dt, DType)}


def dtype_named(name: str) -> DType:
    """The dtype stored as `name` (JitCacheError when this tg has none of that name)."""
    if (dt := _dtypes_by_name().get(name)) is None:
        raise JitCacheError(f"unknown dtype {name!r} in the file")
    return dt


def plain(value: Any) -> Any:
    """`value` (a recording's key: tuples of strings, numbers, None) as JSON data; JitCacheError for
    anything else (an object compared by identity cannot be matched in another process)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    kind = value if isinstance(value, type) else type(value)  # (jit_args keys an object as (its type, itself))
    raise JitCacheError(
        f"a non-tensor argument of type {kind.__name__} is compared by identity, so another process "
        "cannot tell whether it is the same; pass numbers, strings or tuples of them"
    )


StateBuffers = dict[int, tuple[Buffer, dict[str, str]]]  # buffer id -> (buffer, {name: the name's view of it})


def state_buffers(state: Mapping[str, Tensor], realize: bool) -> StateBuffers:
    """The buffers behind the tensors of `state` (with tg's random stream), by id: each with the names of the
    tensors on it, in order, and each one's view of it (its movement ops: a parameter is a window of a fused
    optimizer's flat buffer). `realize`: lazy tensors are realized first (loading); else they are skipped
    (saving: a lazy tensor holds no buffer of the recording)."""
    from tg_tensor.creation import _default_state
    from tg_tensor.engine.inplace import view_chain
    from tg_tensor.engine.schedule import buffer_of
    from tg_tensor.front import front

    named: dict[str, Tensor] = {}
    for name, t in state.items():
        if not isinstance(name, str) or not isinstance(t, Tensor):
            raise TypeError(f"TinyJit state: expected a mapping of names to Tensors, got {name!r}: {type(t).__name__}")
        named[name] = t
    rng = front().random if not realize else _default_state()
    for dev in list(rng.keys) if rng is not None else []:
        named[f"tg.random.key:{dev}"], named[f"tg.random.counter:{dev}"] = rng.keys[dev], rng.counters[dev]  # type: ignore[union-attr]
    lazy = [t for t in named.values() if t.uop.base.op is not Ops.BUFFER]
    if realize and lazy:
        Tensor.realize(*lazy)
    found: StateBuffers = {}
    for name, t in sorted(named.items()):
        if isinstance(t.device, tuple) or "," in str(t.device) or (chain := view_chain(t.uop)) is None:
            continue  # (on several devices, or not a view of a buffer)
        base, ops = chain
        buf = buffer_of(base)
        found.setdefault(id(buf), (buf, {}))[1][name] = repr([(op.name, arg) for op, arg in ops])
    return found


def random_devices(slots: list[dict[str, Any]]) -> list[str]:
    """The devices whose random stream a file's state slots name (loading creates it there first)."""
    devs = {n.split(":", 1)[1] for s in slots if s["kind"] == "state" for n in s["names"] if n.startswith("tg.random.")}
    return sorted(devs)


def encode_bytes(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def decode_bytes(text: str, nbytes: int) -> bytes:
    data = base64.b64decode(text.encode("ascii"), validate=True)
    if len(data) != nbytes:
        raise JitCacheError(f"a stored constant has {len(data)} bytes, expected {nbytes}")
    return data


def write_file(path: str, payload: dict[str, Any]) -> None:
    """Write the header and `payload` to `path` atomically (a reader never sees half a file)."""
    import tempfile  # (loaded on use, as inspect: `import tg` does not need them)

    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    head = MAGIC + f" {FORMAT}\n".encode() + hashlib.sha256(body).hexdigest().encode() + b"\n"
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tgjit-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(head + body)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # (mkstemp makes it private; a cache file is as readable as any other)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_header(data: bytes) -> dict[str, Any]:
    """The payload of a file's bytes, after checking its magic, format and checksum (JitCacheError if not)."""
    if not data.startswith(MAGIC):
        raise JitCacheError(f"not a TinyJit file: it starts with {data[:8]!r}, expected {MAGIC!r}")
    first, _, rest = data.partition(b"\n")
    digest, _, body = rest.partition(b"\n")
    if first != MAGIC + f" {FORMAT}".encode():
        raise JitCacheError(f"file format {first[len(MAGIC) :].decode(errors='replace').strip()!r}, expected {FORMAT}")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise JitCacheError("checksum mismatch: the file is truncated or corrupted")
    try:
        payload = json.loads(body)
    except ValueError as e:
        raise JitCacheError(f"the file's contents are not valid JSON ({e})") from None
    if not isinstance(payload, dict):
        raise JitCacheError("the file's contents are not a recording")
    return payload


def expect(what: str, got: Any, want: Any) -> None:
    """JitCacheError naming `what` unless the file's value `got` equals this process's `want`."""
    if got != want:
        raise JitCacheError(f"{what}: the file has {_short(got)}, this process has {_short(want)}")


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 200 else text[:200] + "..."


def _buffer_entry(buf: Buffer) -> dict[str, Any]:
    return {"size": buf.size, "dtype": buf.dtype.name, "device": buf.device}


def classify(rec: _Recording, state: Mapping[str, Tensor]) -> tuple[list[dict[str, Any]], list[list[int]]]:
    """The slots of the recording's buffers and each launch's slot numbers (JitCacheError for a buffer that
    lives across calls but no name of `state` holds)."""
    from tg_tensor.engine.schedule import buffer_of
    from tg_tensor.front import front

    at: dict[tuple[int, int], dict[str, Any]] = {}
    for i, positions in enumerate(rec.input_slots):
        at.update({(li, p): {"kind": "input", "index": i} for li, p in positions})
    for j, positions in enumerate(rec.output_slots):
        at.update({(li, p): {"kind": "output", "index": j} for li, p in positions})
    temps = {id(b) for b in rec.temps}
    ranges = [t.uop.base for t in front().index_ranges.values()]  # (rng.py's 0..n-1, kept on the device)
    consts = {id(b) for b in rec.consts} | {id(buffer_of(u)) for u in ranges if u.op is Ops.BUFFER}
    named = state_buffers(state, realize=False)
    slots: list[dict[str, Any]] = []
    slot_of: dict[Any, int] = {}  # by buffer id, or (kind, index) for inputs and outputs (one slot each)
    refs: list[list[int]] = []
    for li, launch in enumerate(rec.launches):
        row = []
        for p, buf in enumerate(launch.bufs):
            entry = at.get((li, p))
            ident: Any = id(buf) if entry is None else (entry["kind"], entry["index"])
            if ident not in slot_of:
                entry = entry if entry is not None else _kind(buf, temps, consts, named, li, launch)
                slot_of[ident] = len(slots)
                slots.append({**entry, **_buffer_entry(buf)})
            row.append(slot_of[ident])
        refs.append(row)
    return slots, refs


def _kind(buf: Buffer, temps: set[int], consts: set[int], named: StateBuffers, li: int, launch: Any) -> dict[str, Any]:
    if id(buf) in temps:
        return {"kind": "temp"}
    if id(buf) in consts:
        return {"kind": "const", "data": encode_bytes(bytes(buf.as_bytes()))}
    if id(buf) in named:
        views = named[id(buf)][1]
        return {"kind": "state", "names": list(views), "views": [views[n] for n in views]}
    what = f"kernel {launch.runner.name}" if launch.runner is not None else "a copy"
    raise JitCacheError(
        f"a buffer of {buf.size} {buf.dtype.name} on {buf.device}, used by {what} (launch {li}), lives across calls "
        "but no tensor of `state` holds it, so another process could not bind it; pass the tensors the function "
        "reads and updates as state= (e.g. "
        "{**get_state_dict(model, 'model'), **get_state_dict(optimizer, 'opt')})"
    )


def _ret_template(ret: Any) -> Any:
    """The shape of a returned value as JSON: `"T"` for each tensor (JitCacheError for other objects)."""
    if isinstance(ret, Tensor):
        return "T"
    if isinstance(ret, (tuple, list)):
        return {
            "seq": type(ret).__name__,
            "items": [_ret_template(x) if isinstance(x, Tensor) else [plain(x)] for x in ret],
        }
    if isinstance(ret, dict) and all(isinstance(k, str) for k in ret):
        return {"dict": {k: _ret_template(v) if isinstance(v, Tensor) else [plain(v)] for k, v in ret.items()}}
    return [plain(ret)]


def _ret_value(template: Any) -> Any:
    """The value `_ret_template` describes, with a placeholder Tensor (replaced at each replay) per tensor."""
    if template == "T":
        return Tensor.empty(0)
    if isinstance(template, list):
        return template[0]
    if "seq" in template:
        items = [_ret_value(x) for x in template["items"]]
        return tuple(items) if template["seq"] == "tuple" else items
    return {k: _ret_value(v) for k, v in template["dict"].items()}


def identity(fxn: Callable[..., Any], devices: list[str]) -> dict[str, Any]:
    """What a file must agree with this process on (besides the call's arguments)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        tg_version = version("tg-tensor")
    except PackageNotFoundError:
        tg_version = "unknown"
    return {
        "tg_version": tg_version,
        "tg_sources": stack_fingerprint(),
        "function_source": function_fingerprint(fxn),
        "devices": {d: device_identity(d) for d in sorted(devices)},
    }


def to_payload(
    rec: _Recording, fxn: Callable[..., Any], key: tuple[Any, ...], specs: list[Any], state: Mapping[str, Tensor]
) -> dict[str, Any]:
    """The recording as a file's JSON payload (JitCacheError when some part of it cannot be saved)."""
    from tg_codegen.program_cache import spec_to_data

    if any(not isinstance(s, int) for shape, _, _ in specs for s in shape):
        raise JitCacheError("a tensor input has a symbolic shape, which a file does not store yet")
    programs: list[dict[str, Any]] = []
    program_of: dict[int, int] = {}
    launches: list[dict[str, Any]] = []
    slots, refs = classify(rec, state)
    for launch, row in zip(rec.launches, refs):
        if launch.collective is not None or launch.var_vals:
            what = "a collective (several devices)" if launch.collective is not None else "symbolic variables"
            raise JitCacheError(f"the recording holds {what}, which a file does not store yet")
        if launch.runner is None:
            launches.append({"copy": True, "slots": row})
            continue
        if id(launch.runner) not in program_of:
            if (data := spec_to_data(launch.runner.spec)) is None:
                raise JitCacheError(f"kernel {launch.runner.name} cannot be stored (its facts are not plain data)")
            program_of[id(launch.runner)] = len(programs)
            programs.append(data)
        launches.append({"program": program_of[id(launch.runner)], "device": launch.runner.device, "slots": row})
    if any(not isinstance(s, int) for _, shape in rec.output_map for s in shape):
        raise JitCacheError("a returned tensor has a symbolic shape, which a file does not store yet")
    devices = {s["device"] for s in slots} | {spec[2] for spec in specs}
    return {
        **identity(fxn, list(devices)),
        "function": getattr(fxn, "__qualname__", repr(fxn)),
        "key": plain(key),
        "inputs": [[list(shape), dt.name, dev] for shape, dt, dev in specs],
        "programs": programs,
        "launches": launches,
        "slots": slots,
        "outputs": [[i, list(shape)] for i, shape in rec.output_map],
        "output_bufs": [_buffer_entry(b) for b in rec.output_bufs],
        "ret": _ret_template(rec.ret),
    }


def check_identity(payload: dict[str, Any], fxn: Callable[..., Any], key: tuple[Any, ...], specs: list[Any]) -> None:
    """JitCacheError naming the first value the file and this process (and this call) disagree on."""
    devices = payload.get("devices")
    if not isinstance(devices, dict):
        raise JitCacheError("the file names no devices")
    for dev in devices:
        try:
            Device[dev]
        except Exception as e:  # (a device that does not open here)
            raise JitCacheError(f"device {dev!r} of the file is not available here ({e})") from None
    want = identity(fxn, list(devices))
    expect("tg version", payload.get("tg_version"), want["tg_version"])
    expect("tg source fingerprint (another tg build)", payload.get("tg_sources"), want["tg_sources"])
    expect("fingerprint of the jitted function's source file", payload.get("function_source"), want["function_source"])
    for dev, ident in want["devices"].items():
        expect(f"device {dev} (renderer, compiler)", devices[dev], ident)
    expect("non-tensor arguments", payload.get("key"), plain(key))
    inputs = payload.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != len(specs):
        n = len(inputs) if isinstance(inputs, list) else "?"
        raise JitCacheError(f"the file was recorded with {n} tensor inputs, this call has {len(specs)}")
    for i, (saved, (shape, dt, dev)) in enumerate(zip(inputs, specs)):
        expect(f"tensor input {i} (shape, dtype, device)", saved, [list(shape), dt.name, dev])


def _bind_state(slots: list[dict[str, Any]], state: Mapping[str, Tensor]) -> dict[int, Buffer]:
    """Slot number -> this process's buffer, for every state slot (JitCacheError unless each binds safely)."""
    from tg_tensor.creation import _default_state

    for dev in random_devices(slots):
        _default_state()._state(dev)
    found = state_buffers(state, realize=True).values()
    by_name = {n: buf for buf, views in found for n in views}
    view_of = {n: view for _, views in found for n, view in views.items()}
    bound: dict[int, Buffer] = {}
    owner: dict[int, str] = {}
    for k, slot in enumerate(slots):
        if slot["kind"] != "state":
            continue
        names, first = slot["names"], slot["names"][0]
        if missing := [n for n in names if n not in by_name]:
            raise JitCacheError(
                f"state tensor {missing[0]!r} ({slot['size']} {slot['dtype']} on {slot['device']} when saved) is not "
                "in `state` here (or not realized to a buffer of its own)"
            )
        if len({id(by_name[n]) for n in names}) > 1:
            raise JitCacheError(f"state tensors {names} were one buffer when saved, here they are not")
        buf = by_name[first]
        expect(f"state tensor {first!r} (buffer size, dtype, device)", [slot["size"], slot["dtype"], slot["device"]],
               [buf.size, buf.dtype.name, buf.device])  # fmt: skip
        for name, view in zip(names, slot["views"], strict=True):
            expect(f"state tensor {name!r} (its view of the buffer: movement ops)", view, view_of[name])
        if id(buf) in owner:
            raise JitCacheError(f"state tensors {owner[id(buf)]!r} and {first!r} were two buffers when saved, here one")
        owner[id(buf)], bound[k] = first, buf
    return bound


def from_payload(
    payload: dict[str, Any],
    fxn: Callable[..., Any],
    key: tuple[Any, ...],
    specs: list[Any],
    state: Mapping[str, Tensor],
    input_bufs: list[Buffer],
) -> _Recording:
    """The recording a payload holds, bound to this call's inputs and to `state` (JitCacheError if it cannot
    be: see the module docstring)."""
    check_identity(payload, fxn, key, specs)
    try:
        return _build(payload, state, input_bufs)
    except JitCacheError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RuntimeError) as e:
        raise JitCacheError(f"the recording in the file is malformed ({type(e).__name__}: {e})") from None


def _build(payload: dict[str, Any], state: Mapping[str, Tensor], input_bufs: list[Buffer]) -> _Recording:
    from tg_codegen.program_cache import spec_from_data
    from tg_runtime.runner import CompiledRunner
    from tg_tensor.jit import _Launch, _Recording  # (jit imports this module)

    slots: list[dict[str, Any]] = payload["slots"]
    state_bound = _bind_state(slots, state)
    outputs = [Buffer(e["device"], int(e["size"]), dtype_named(e["dtype"])) for e in payload["output_bufs"]]
    if shared := {id(b) for b in state_bound.values()} & {id(b) for b in input_bufs}:
        name = next(slots[k]["names"][0] for k, b in state_bound.items() if id(b) in shared)
        raise JitCacheError(f"state tensor {name!r} is also a tensor input of this call; it was not when saved")
    bufs: list[Buffer] = []
    temps: list[Buffer] = []
    consts: list[Buffer] = []
    for k, slot in enumerate(slots):
        kind, size, dt = slot["kind"], int(slot["size"]), dtype_named(slot["dtype"])
        if kind == "input":
            buf = input_bufs[slot["index"]]
            expect(f"tensor input {slot['index']} (buffer size, dtype)", [size, dt], [buf.size, buf.dtype])
        elif kind == "output":
            buf = outputs[slot["index"]]
        elif kind == "state":
            buf = state_bound[k]
        elif kind in ("temp", "const"):  # (fresh buffers: a const gets its stored value)
            buf = Buffer(slot["device"], size, dt)
            if kind == "const":
                buf.copyin(memoryview(decode_bytes(slot["data"], buf.nbytes)))
            (temps if kind == "temp" else consts).append(buf)
        else:
            raise JitCacheError(f"slot {k} has the unknown kind {kind!r}")
        bufs.append(buf)
    runners: dict[tuple[int, str], CompiledRunner] = {}
    _compile_together(payload)
    launches = []
    for entry in payload["launches"]:
        row = [bufs[k] for k in entry["slots"]]
        if entry.get("copy"):
            launches.append(_Launch(None, row))
            continue
        rkey = (int(entry["program"]), str(entry["device"]))
        if rkey not in runners:
            if (spec := spec_from_data(payload["programs"][rkey[0]])) is None:
                raise JitCacheError(f"program {rkey[0]} in the file is malformed")
            runners[rkey] = CompiledRunner(spec, None, rkey[1])
        runners[rkey].spec.check_buffers([b.dtype for b in row])
        launches.append(_Launch(runners[rkey], row))
    output_map = [(int(i), tuple(int(s) for s in shape)) for i, shape in payload["outputs"]]
    rec = _Recording(launches, outputs, output_map, _ret_value(payload["ret"]), temps, consts)
    rec.bind(input_bufs)
    return rec


def _compile_together(payload: dict[str, Any]) -> None:
    """Compile the programs that the compile cache does not hold yet, per device in as few compiler runs as it
    allows (CompiledRunner then finds every binary in the cache)."""
    srcs: dict[str, list[str]] = {}
    for entry in payload["launches"]:
        if not entry.get("copy"):
            srcs.setdefault(str(entry["device"]), []).append(str(payload["programs"][int(entry["program"])]["src"]))
    for dev, found in srcs.items():
        Device[dev].compiler.compile_cached_many(list(dict.fromkeys(found)))


def load(path: str) -> dict[str, Any]:
    """The checked payload of the file at `path` (JitCacheError when it is unreadable or damaged)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise JitCacheError(f"cannot read {path}: {e.strerror}") from None
    return check_header(data)
