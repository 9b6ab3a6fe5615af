"""TinyJit and non-tensor arguments: a changed number re-records (never a stale replay), tensors inside
lists and dicts are inputs, arguments that cannot be compared raise JitError, the number of recordings
is bounded."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Context, JitError, Tensor, TinyJit, Variable


def _x(i: int) -> np.ndarray:
    return np.arange(4, dtype=np.float32) + i


def test_changed_scalar_argument_never_returns_the_old_result(device: str) -> None:
    calls: list[float] = []

    @TinyJit
    def f(x: Tensor, k: float) -> Tensor:
        calls.append(k)
        return (x * k).realize()

    ks = [2, 2, 2, 2, 3, 3, 3, 2, 0.5, 3, -0.0]
    for i, k in enumerate(ks):
        np.testing.assert_allclose(f(Tensor(_x(i), device=device), k).numpy(), _x(i) * k)
    assert calls == [2, 2, 3, 3, 0.5, -0.0]  # each value: warm-up and capture, then replays
    assert len(f.captures) == 4


def test_keyword_arguments_are_part_of_the_key() -> None:
    @TinyJit
    def f(x: Tensor, *, scale: float = 1.0, shift: int = 0) -> Tensor:
        return x * scale + shift

    for i in range(12):
        scale, shift = (1.5, 0) if i % 3 else (2.0, i % 2)
        out = f(Tensor(_x(i)), scale=scale, shift=shift)
        np.testing.assert_allclose(out.numpy(), _x(i) * scale + shift)


def test_int_and_float_and_bool_of_equal_value_are_different_keys() -> None:
    @TinyJit
    def f(x: Tensor, k: object) -> Tensor:
        return x + 1 if isinstance(k, bool) else (x * k if isinstance(k, int) else x - k)

    for i in range(3):
        for k in (1, 1.0, True):
            expect = _x(i) + 1 if isinstance(k, bool) else (_x(i) * k if isinstance(k, int) else _x(i) - k)
            np.testing.assert_allclose(f(Tensor(_x(i)), k).numpy(), expect)


def test_tensors_inside_lists_and_dicts_are_inputs() -> None:
    @TinyJit
    def f(xs: list[Tensor], d: dict[str, object]) -> Tensor:
        w = d["w"]
        assert isinstance(w, Tensor)
        return (xs[0] + xs[1] * w).sum() * float(d["k"])  # type: ignore[arg-type]

    for i in range(6):
        k = 2.0 if i < 4 else 3.0
        a, b, w = _x(i), _x(10 * i), _x(-i)
        out = f([Tensor(a), Tensor(b)], {"w": Tensor(w), "k": k})
        np.testing.assert_allclose(out.item(), (a + b * w).sum() * k, rtol=1e-6)


def test_nested_containers() -> None:
    @TinyJit
    def f(args: tuple[list[Tensor], dict[str, tuple[int, Tensor]]]) -> Tensor:
        (xs, d) = args
        n, t = d["a"]
        return xs[0] * n + t

    for i in range(5):
        n = 2 if i < 3 else 5
        out = f(([Tensor(_x(i))], {"a": (n, Tensor(_x(i + 1)))}))
        np.testing.assert_allclose(out.numpy(), _x(i) * n + _x(i + 1))


def test_unhashable_argument_raises_jit_error_saying_how_to_pass_it() -> None:
    @TinyJit
    def f(x: Tensor, a: object) -> Tensor:
        return x + 1

    with pytest.raises(JitError, match=r"f: argument 1 of type ndarray.*not hashable.*as a Tensor.*bound Variable"):
        f(Tensor(_x(0)), np.ones(3))
    with pytest.raises(JitError, match=r"f: argument 1\[0\] of type set"):
        f(Tensor(_x(0)), [{1, 2}])


def test_hashable_objects_are_compared_by_value_or_identity() -> None:
    class Model:
        def __init__(self, k: float) -> None:
            self.k = k

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return x * self.k

    m2, m3 = Model(2.0), Model(3.0)
    for i in range(4):
        np.testing.assert_allclose(m2(Tensor(_x(i))).numpy(), _x(i) * 2)
        np.testing.assert_allclose(m3(Tensor(_x(i))).numpy(), _x(i) * 3)


def test_too_many_recordings_raise_naming_the_argument() -> None:
    @TinyJit
    def f(x: Tensor, step: int) -> Tensor:
        return x + step

    with Context(JIT_MAX_CAPTURES=3):
        for step in range(3):
            np.testing.assert_allclose(f(Tensor(_x(0)), step).numpy(), _x(0) + step)
        with pytest.raises(
            JitError, match=r"4 different sets.*JIT_MAX_CAPTURES=3.*arg1: 2 -> 3.*as a Tensor.*bound Variable"
        ):
            f(Tensor(_x(0)), 3)
        f.reset()
        np.testing.assert_allclose(f(Tensor(_x(0)), 3).numpy(), _x(0) + 3)


def test_bound_variables_are_keyed_by_name_and_range_not_value() -> None:
    @TinyJit
    def f(x: Tensor, n: object) -> Tensor:
        return x.shrink(((0, n),)).sum()

    x = Tensor(np.arange(12, dtype=np.float32))
    for i in range(1, 6):  # one recording for every value
        assert f(x, Variable("n", 1, 12).bind(i)).item() == sum(range(i))
    assert len(f.captures) == 1
    with Context(JIT_MAX_CAPTURES=1):  # another range is another variable: its own recording
        with pytest.raises(JitError, match=r"arg1: Variable\('n', 1, 12\) -> Variable\('n', 2, 12\)"):
            f(x, Variable("n", 2, 12).bind(3))


def test_jit_0_ignores_the_arguments() -> None:
    @TinyJit
    def f(x: Tensor, a: object) -> Tensor:
        return x + 1

    with Context(JIT=0):
        assert f(Tensor([1.0]), np.ones(2)).tolist() == [2.0]
