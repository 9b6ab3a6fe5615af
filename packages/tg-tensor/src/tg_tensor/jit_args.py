"""TinyJit's view of a call's arguments: the Tensor inputs, and a key of everything else.

A recording is only right for the non-tensor arguments it was made with (`f(x, 2)` bakes the 2
into its kernels), so TinyJit keeps one recording per key and records again when the key changes.
Tensors anywhere inside lists, tuples and dicts are inputs; every other value must be comparable
(hashable): numbers, strings, None, dtypes, tuples, and objects compared by identity (a model
passed as `self`). Anything else (a numpy array, a set, a list of floats in a dict...) cannot be
compared reliably and raises JitError.

A bound Variable (`Variable("pos", 1, 64).bind(5)`) is keyed by its variable (name and range), not
by its value: the value goes into the call's variable values, which the recorded kernels take as an
argument at every replay. That is the way to vary a number under TinyJit without a new recording.

>>> from tg_tensor import Tensor
>>> inputs, key, values = flatten_call((Tensor([1.0]), [2, {"k": Tensor([3.0])}]), {"scale": 0.5})
>>> len(inputs), key[1]
(2, ('arg1', ('list', (('int', 2), ('dict', (('k', ('T',)),))))))
>>> from tg_uop import Variable
>>> _, key, values = flatten_call((Variable("pos", 1, 64).bind(5),), {})
>>> key, list(values.values())
((('arg0', ('var', 'pos', 1, 64)),), [5])
"""

from __future__ import annotations

from typing import Any

from tg_tensor.tensor import Tensor
from tg_uop import Ops, UOp

_TENSOR = ("T",)


class JitArgError(TypeError):
    """An argument TinyJit cannot compare between calls (raised as JitError by TinyJit)."""


def bind_value(values: dict[UOp, int], bound: UOp, what: str) -> UOp:
    """Record the value of the bound Variable `bound` in `values` and return the variable (a JitArgError when one call
    binds it to two values)."""
    var, val = bound.unbind()
    if values.get(var, val) != val:
        raise JitArgError(f"{what}: variable {var.expr!r} is bound to two values in one call: {values[var]} and {val}")
    values[var] = val
    return var


def _key(name: str, value: Any, inputs: list[Tensor], values: dict[UOp, int]) -> Any:
    """The comparable form of `value`; Tensors found in it are appended to `inputs`, bound values to `values`."""
    if isinstance(value, Tensor):
        inputs.append(value)
        return _TENSOR
    if isinstance(value, UOp) and value.op is Ops.BIND:
        return ("var", *bind_value(values, value, f"argument {name}").arg)
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return (type(value).__name__, value)
    if isinstance(value, float):  # by bits: -0.0 is not 0.0 and nan equals nan
        return ("float", value.hex())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key(f"{name}[{i}]", v, inputs, values) for i, v in enumerate(value)))
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: repr(kv[0]))
        return ("dict", tuple((k, _key(f"{name}[{k!r}]", v, inputs, values)) for k, v in items))
    try:
        hash(value)
    except TypeError:
        raise JitArgError(
            f"argument {name} of type {type(value).__name__} cannot be compared between calls (it is not hashable), "
            "so a recording could replay with a stale value; pass it as a Tensor (Tensor(value)), an integer "
            "that changes between calls as a bound Variable (Variable('name', lo, hi).bind(value): the recorded "
            "kernels take its value at each replay), or a hashable value (a number, string, tuple)"
        ) from None
    return (type(value), value)  # compared with ==; objects without __eq__ are compared by identity


def flatten_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Tensor], tuple[Any, ...], dict[UOp, int]]:
    """The Tensor inputs of a call (positional, then keyword in name order), the key of the rest, and the
    values of the bound Variables among the arguments ({variable: value})."""
    inputs: list[Tensor] = []
    values: dict[UOp, int] = {}
    key = [(f"arg{i}", _key(str(i), a, inputs, values)) for i, a in enumerate(args)]
    key += [(k, _key(repr(k), kwargs[k], inputs, values)) for k in sorted(kwargs)]
    return inputs, tuple(key), values


def describe_change(old: tuple[Any, ...], new: tuple[Any, ...]) -> str:
    """Which arguments differ between two keys: `arg1: 2 -> 3`."""
    a, b = dict(old), dict(new)
    diffs = [f"{k}: {_show(a.get(k))} -> {_show(b.get(k))}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return ", ".join(diffs) or "the argument structure"


def _show(k: Any) -> str:
    if k is None:
        return "(absent)"
    if k[0] == "float":
        return repr(float.fromhex(k[1]))
    if k[0] in ("int", "bool", "str", "bytes", "NoneType"):
        return repr(k[1])
    if k == _TENSOR:
        return "Tensor"
    if k[0] == "var":
        return f"Variable({k[1]!r}, {k[2]}, {k[3]})"
    return repr(k[1]) if not isinstance(k[0], str) else str(k)
