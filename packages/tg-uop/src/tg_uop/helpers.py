"""Small helpers shared by every layer: environment variables, Context, counters, list utilities.

>>> from tg_uop.helpers import getenv, Context, DEBUG
>>> with Context(DEBUG=2):
...     assert DEBUG.value == 2
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

T = TypeVar("T")


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
    """Read an environment variable, converted to the type of `default` (cached).

    >>> getenv("SOME_UNSET_FLAG", 3)
    3
    """
    return type(default)(os.getenv(key, default))


class ContextVar:
    """A named setting read from the environment once and overridable with `Context`."""

    _registry: ClassVar[dict[str, ContextVar]] = {}

    def __init__(self, key: str, default: int) -> None:
        if key in ContextVar._registry:
            raise ValueError(f"ContextVar {key!r} is already defined")
        self.key = key
        self.value: int = getenv(key, default)
        ContextVar._registry[key] = self

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, other: int) -> bool:
        return self.value >= other

    def __gt__(self, other: int) -> bool:
        return self.value > other

    def __lt__(self, other: int) -> bool:
        return self.value < other

    def __le__(self, other: int) -> bool:
        return self.value <= other

    def __repr__(self) -> str:
        return f"ContextVar({self.key}={self.value})"


DEBUG = ContextVar("DEBUG", 0)
BEAM = ContextVar("BEAM", 0)
NOOPT = ContextVar("NOOPT", 0)
JIT = ContextVar("JIT", 1)
CACHELEVEL = ContextVar("CACHELEVEL", 2)
TRAINING = ContextVar("TRAINING", 0)  # Tensor.training: dropout and batch statistics (`Context(TRAINING=1)`)


class Context(contextlib.ContextDecorator):
    """Temporarily set ContextVars: `with Context(DEBUG=2): ...`."""

    def __init__(self, **kwargs: int) -> None:
        unknown = [k for k in kwargs if k not in ContextVar._registry]
        if unknown:
            raise KeyError(f"Context: unknown variable(s) {unknown}; known: {sorted(ContextVar._registry)}")
        self.kwargs = kwargs
        self.saved: dict[str, int] = {}

    def __enter__(self) -> Context:
        self.saved = {k: ContextVar._registry[k].value for k in self.kwargs}
        for k, v in self.kwargs.items():
            ContextVar._registry[k].value = v
        return self

    def __exit__(self, *exc: object) -> None:
        for k, v in self.saved.items():
            ContextVar._registry[k].value = v


K = TypeVar("K")
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """A mapping that keeps only the `maxsize` most recently used entries (caches that must not grow forever).

    >>> c = LRUCache[str, int](2)
    >>> c["a"], c["b"] = 1, 2
    >>> c.get("a"); c["c"] = 3  # "b" is now the least recently used: dropped
    1
    >>> sorted(c.keys())
    ['a', 'c']
    """

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"LRUCache: maxsize must be at least 1, got {maxsize}")
        self.maxsize, self.data = maxsize, collections.OrderedDict[K, V]()

    def get(self, key: K) -> V | None:
        if (value := self.data.get(key)) is not None:
            self.data.move_to_end(key)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.maxsize:
            self.data.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self.data

    def __len__(self) -> int:
        return len(self.data)

    def keys(self) -> list[K]:
        return list(self.data)

    def clear(self) -> None:
        self.data.clear()


class GlobalCounters:
    """Process-wide counters of work done; `GlobalCounters.reset()` zeroes them."""

    global_ops: ClassVar[int] = 0
    global_mem: ClassVar[int] = 0
    time_sum_s: ClassVar[float] = 0.0
    kernel_count: ClassVar[int] = 0
    mem_used: ClassVar[int] = 0

    @staticmethod
    def reset() -> None:
        GlobalCounters.global_ops = 0
        GlobalCounters.global_mem = 0
        GlobalCounters.time_sum_s = 0.0
        GlobalCounters.kernel_count = 0


def prod(xs: Iterable[Any], start: Any = 1) -> Any:
    """Product of the items (works for ints and UOps)."""
    ret = start
    for x in xs:
        ret = ret * x
    return ret


def all_int(xs: Iterable[Any]) -> bool:
    return all(isinstance(x, int) for x in xs)


def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
    return [x for xs in xss for x in xs]


def argsort(xs: Sequence[Any]) -> list[int]:
    return sorted(range(len(xs)), key=xs.__getitem__)


def partition(xs: Iterable[T], pred: Any) -> tuple[list[T], list[T]]:
    yes: list[T] = []
    no: list[T] = []
    for x in xs:
        (yes if pred(x) else no).append(x)
    return yes, no


def colored(text: str, color: str | None) -> str:
    """Wrap text in an ANSI color code (no-op for None)."""
    if color is None:
        return text
    codes = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"]
    return f"\u001b[{30 + codes.index(color)}m{text}\u001b[0m"


def to_function_name(name: str) -> str:
    """Turn a kernel display name into a valid C identifier."""
    return "".join(c if c.isalnum() or c == "_" else f"{ord(c):02X}" for c in name)


def cdiv(a: int, b: int) -> int:
    """C-style integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def cmod(a: int, b: int) -> int:
    """C-style modulo (the sign follows the dividend)."""
    return a - b * cdiv(a, b)


def cache_dir() -> str:
    """The user cache directory for tg (XDG_CACHE_HOME aware)."""
    base = os.getenv("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tg")
