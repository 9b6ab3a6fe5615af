"""Rendered programs cached on disk by kernel AST: a second run of a program skips codegen (and, with the
binary cache of its device, the compiler), so it starts training in well under a second.

The key is a SHA-256 of everything the rendered program depends on: the AST (its repr, as BEAM's cache),
the renderer (class, device, instance settings, launch limits), the optimizations asked for (None: the
heuristics), every ContextVar setting (NOOPT, TF32, ...) and `TC`, and a fingerprint of the source code of
tg-uop, tg-shape and tg-codegen: an edited or upgraded code generator never loads a program rendered by
another. Programs with symbolic variables, for the PYTHON device (which runs the UOps themselves) and any
whose facts are not plain data are not cached. CACHELEVEL=0 turns it off with the rest of the disk cache.

>>> from tg_codegen.program_cache import codegen_fingerprint
>>> len(codegen_fingerprint())
64
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any

from tg_codegen.diskcache import diskcache_get, diskcache_put
from tg_codegen.opt import Opt, OptOps
from tg_codegen.program import get_program
from tg_codegen.renderer import ProgramSpec, Renderer
from tg_uop import DType, UOp, dtypes
from tg_uop.helpers import DEBUG, ContextVar
from tg_uop.trace import TRACE

# settings that change what is printed or cached, never the program
_NOT_CODEGEN = frozenset({"DEBUG", "VIZ", "GRAPH", "CACHELEVEL", "JIT", "PROFILE", "BEAM"})
_PACKAGES = ("tg_uop", "tg_shape", "tg_codegen")


@functools.cache
def codegen_fingerprint() -> str:
    """SHA-256 of the Python sources of the packages that turn an AST into source code."""
    import importlib.util

    h = hashlib.sha256()
    for pkg in _PACKAGES:
        spec = importlib.util.find_spec(pkg)
        for root in list(spec.submodule_search_locations or []) if spec else []:
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                for name in sorted(f for f in filenames if f.endswith(".py")):
                    path = os.path.join(dirpath, name)
                    h.update(os.path.relpath(path, root).encode() + b"\0")
                    with open(path, "rb") as f:
                        h.update(f.read() + b"\0")
    return h.hexdigest()


def program_key(ast: UOp, renderer: Renderer, opts: list[Opt] | tuple[Opt, ...] | None) -> str:
    settings = sorted((k, v.value) for k, v in ContextVar._registry.items() if k not in _NOT_CODEGEN)
    rend = f"{type(renderer).__module__}.{type(renderer).__qualname__}:{renderer.device}:{renderer.limits!r}"
    desc = (
        f"{codegen_fingerprint()}\n{rend}:{sorted(vars(renderer).items())!r}\n{settings!r}:TC={os.getenv('TC')}"
        f"\n{opts!r}\n{ast!r}"
    )
    return hashlib.sha256(desc.encode()).hexdigest()


@functools.cache
def _dtypes_by_name() -> dict[str, DType]:
    """The scalar dtypes by their C name ("float", "unsigned int", ...)."""
    found = (getattr(dtypes, n) for n in dir(dtypes))
    return {dt.name: dt for dt in found if isinstance(dt, DType)}


def _to_data(spec: ProgramSpec) -> dict[str, Any] | None:
    """The spec as JSON data, or None when some fact of it is not plain data."""
    if spec.vars or any(_dtypes_by_name().get(dt.name) != dt for dt in spec.buffer_dtypes):
        return None
    if not all(isinstance(o, Opt) and isinstance(o.arg, (int, type(None))) for o in spec.applied_opts):
        return None
    opts = [[o.op.name, o.axis, o.arg] for o in spec.applied_opts if isinstance(o, Opt)]
    return {
        "name": spec.name,
        "function_name": spec.function_name,
        "src": spec.src,
        "device": spec.device,
        "global_size": spec.global_size,
        "local_size": spec.local_size,
        "globals": spec.globals,
        "buffer_dtypes": [dt.name for dt in spec.buffer_dtypes],
        "outs": spec.outs,
        "estimated_ops": spec.estimated_ops,
        "estimated_mem": spec.estimated_mem,
        "applied_opts": opts,
        "shared_bytes": spec.shared_bytes,
    }


def _size(v: Any) -> tuple[int, ...] | None:
    return None if v is None else tuple(int(x) for x in v)


def _from_data(data: Any) -> ProgramSpec | None:
    """The spec stored by `_to_data`; None for anything else (the program is rendered again)."""
    try:
        bufs = [_dtypes_by_name()[str(n)] for n in data["buffer_dtypes"]]
        return ProgramSpec(
            name=str(data["name"]),
            function_name=str(data["function_name"]),
            src=str(data["src"]),
            device=str(data["device"]),
            global_size=_size(data["global_size"]),
            local_size=_size(data["local_size"]),
            globals=tuple(int(g) for g in data["globals"]),
            buffer_dtypes=tuple(bufs),
            outs=tuple(int(o) for o in data["outs"]),
            estimated_ops=int(data["estimated_ops"]),
            estimated_mem=int(data["estimated_mem"]),
            applied_opts=tuple(Opt(OptOps[str(op)], axis, arg) for op, axis, arg in data["applied_opts"]),
            shared_bytes=int(data.get("shared_bytes", 0)),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def spec_to_data(spec: ProgramSpec) -> dict[str, Any] | None:
    """The rendered program as JSON data (what the disk cache stores), or None when some fact of it is not
    plain data (symbolic variables, an unusual dtype): such a program cannot be saved and loaded.

    >>> from tg_codegen.renderer import ProgramSpec
    >>> data = spec_to_data(ProgramSpec(name="E_1", function_name="E_1", src="void E_1() {}", device="CPU"))
    >>> spec_from_data(data).src
    'void E_1() {}'
    """
    return _to_data(spec)


def spec_from_data(data: Any) -> ProgramSpec | None:
    """The program stored by `spec_to_data`; None when `data` is not such a record."""
    return _from_data(data)


def get_program_cached(ast: UOp, renderer: Renderer, opts: list[Opt] | tuple[Opt, ...] | None = None) -> ProgramSpec:
    """`get_program(ast, renderer, opts=opts)`, read from the disk cache when it was rendered before.

    Rendered afresh (and not cached) while a VIZ recording runs or DEBUG >= 3 prints codegen's steps."""
    if TRACE.active or DEBUG >= 3 or renderer.device == "PYTHON":
        return get_program(ast, renderer, opts=opts)
    key = program_key(ast, renderer, opts)
    if (hit := _from_data(diskcache_get("program", key))) is not None:
        return hit
    spec = get_program(ast, renderer, opts=opts)
    if (data := _to_data(spec)) is not None:
        diskcache_put("program", key, data)
    return spec
