"""`@function`, as tinygrad's: mark a function of tensors (a model's forward, a layer) for reuse.

tinygrad turns each call into one CALL node of the graph so that a repeated function is scheduled once; tg
has no CALL nodes, so the decorated function simply runs (values, gradients and TinyJit recordings are
those of the undecorated function; equal graphs are already one node through hash-consing). `precompile`,
`precompile_backward` and `allow_implicit` are accepted and change nothing; `grad_fxn` (a backward over
tinygrad's UOps) is refused.

>>> from tg_tensor import Tensor
>>> @function
... def affine(x: Tensor) -> Tensor:
...     return x * 2 + 1
>>> affine(Tensor([1.0, 2.0])).tolist()
[3.0, 5.0]
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

R = TypeVar("R")


class _Function(Generic[R]):
    def __init__(self, fxn: Callable[..., R]) -> None:
        self.fxn = fxn
        functools.update_wrapper(self, fxn)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return functools.partial(self.__call__, obj) if obj is not None else self

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        from tg_tensor.tensor import Tensor

        ret = self.fxn(*args, **kwargs)
        if not (isinstance(ret, Tensor) or (isinstance(ret, tuple) and all(isinstance(x, Tensor) for x in ret))):
            name = getattr(self.fxn, "__qualname__", repr(self.fxn))
            raise RuntimeError(f"function {name}: must return a Tensor or a tuple of Tensors, got {type(ret).__name__}")
        return ret


@overload
def function(
    fxn: Callable[..., R],
    *,
    precompile: bool = False,
    precompile_backward: bool = False,
    allow_implicit: bool = False,
    grad_fxn: Callable[..., Any] | None = None,
) -> _Function[R]: ...
@overload
def function(
    fxn: None = None,
    *,
    precompile: bool = False,
    precompile_backward: bool = False,
    allow_implicit: bool = False,
    grad_fxn: Callable[..., Any] | None = None,
) -> Callable[[Callable[..., R]], _Function[R]]: ...
def function(
    fxn: Callable[..., R] | None = None,
    *,
    precompile: bool = False,
    precompile_backward: bool = False,
    allow_implicit: bool = False,
    grad_fxn: Callable[..., Any] | None = None,
) -> _Function[R] | Callable[[Callable[..., R]], _Function[R]]:
    """Decorate a function of tensors; `@function` and `@function(precompile=True)` both work (see the module)."""
    if grad_fxn is not None:
        raise NotImplementedError(
            "function: grad_fxn (a backward over tinygrad's UOps) is not supported; tg differentiates the function's "
            "own Tensor ops"
        )
    if fxn is None:
        return lambda f: _Function(f)
    return _Function(fxn)
