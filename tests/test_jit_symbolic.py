"""TinyJit over bound Variables: one recording replays for every value, the kernels taking it as an argument."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, TinyJit, Variable
from tg_runtime.runner import _runner_cache
from tg_tensor.jit import JitError
from tg_uop import UOp


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_jitted_shrink_sum_replays_for_every_value_with_the_same_kernels(device: str):
    a = np.arange(1, 33, dtype=np.float32)
    x = Tensor(a, device=device)

    def step(x: Tensor, n: object) -> Tensor:
        s = x.shrink(((0, n),))
        return (s * 2 + 1).sum() + Tensor.ones(n, device=device).sum()

    jitted = TinyJit(step)
    launches, compiled = [], []
    for i in (3, 4, 9, 17, 32, 1, 5):
        n = Variable("n", 1, 32).bind(i)
        got = jitted(x, n).item()
        assert got == pytest.approx(step(x, n).item())  # the unjitted result
        assert got == pytest.approx(float((a[:i] * 2 + 1).sum() + i))  # numpy
        launches.append(len(jitted.jit_cache))
        compiled.append(len(_runner_cache))
    assert launches[0] == 0 and len(set(launches[1:])) == 1, launches  # recorded once, on the second call
    assert len(set(compiled[1:])) == 1, compiled  # no kernel compiled for a new value
    assert len(jitted.captures) == 1  # the Variable is keyed by name and range, not by value


def test_jitted_decode_attention_over_a_symbolic_length(device: str):
    rng = np.random.default_rng(1)
    K = rng.standard_normal((16, 8)).astype(np.float32)
    V = rng.standard_normal((16, 8)).astype(np.float32)
    k, v = Tensor(K, device=device), Tensor(V, device=device)

    def attend(q: Tensor, pos: object) -> tuple[Tensor, Tensor]:
        scores = q @ k[:pos].T / 8**0.5  # (1, pos)
        return scores.softmax(-1) @ v[:pos], scores

    jitted = TinyJit(attend)
    counts = []
    for n in (2, 3, 7, 11, 16):
        pos = Variable("pos", 1, 16).bind(n)
        Q = rng.standard_normal((1, 8)).astype(np.float32)
        out, scores = jitted(Tensor(Q, device=device), pos)
        eager_out, _ = attend(Tensor(Q, device=device), pos)
        ref = Q @ K[:n].T / 8**0.5
        assert scores.shape == (1, pos)  # a returned symbolic shape is bound to this call's value
        np.testing.assert_allclose(scores.numpy(), ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out.numpy(), _softmax(ref) @ V[:n], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out.numpy(), eager_out.numpy(), rtol=1e-6, atol=1e-6)
        counts.append((len(jitted.jit_cache), len(_runner_cache)))
    assert len(set(counts[1:])) == 1, counts


def test_jitted_kv_cache_step_writes_and_reads_a_growing_prefix():
    # a decode step: write this position's row with assign, attend over rows [0, pos]
    rng = np.random.default_rng(2)
    cache = Tensor.zeros(8, 4).contiguous().realize()
    ref = np.zeros((8, 4), np.float32)

    @TinyJit
    def step(row: Tensor, pos: UOp) -> Tensor:
        cache[pos : pos + 1] = row
        return cache[: pos + 1].sum(axis=0)

    for i in range(6):
        r = rng.standard_normal((1, 4)).astype(np.float32)
        out = step(Tensor(r), Variable("pos", 0, 7).bind(i))
        ref[i] = r[0]
        np.testing.assert_allclose(out.numpy(), ref[: i + 1].sum(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cache.numpy(), ref)
    assert len(step.captures) == 1


def test_tensor_input_with_a_symbolic_shape_is_compared_by_its_variable():
    a = np.arange(10, dtype=np.float32)
    base = Tensor(a)

    @TinyJit
    def double(x: Tensor) -> Tensor:
        return x * 2

    for n in (2, 3, 5, 8):
        out = double(base[: Variable("n", 1, 10).bind(n)])
        np.testing.assert_allclose(out.numpy(), a[:n] * 2)
    assert len(double.captures) == 1


def test_bound_variable_changes_never_return_the_old_result():
    @TinyJit
    def f(x: Tensor, n: object) -> Tensor:
        return x.shrink(((0, n),)).sum()

    x = Tensor(np.arange(10, dtype=np.float32))
    results = [f(x, Variable("n", 1, 10).bind(i)).item() for i in (2, 2, 2, 7, 3)]
    assert results == [1.0, 1.0, 1.0, 21.0, 3.0]


def test_one_variable_bound_to_two_values_in_one_call_is_refused():
    @TinyJit
    def f(x: Tensor, a: object, b: object) -> Tensor:
        return x.shrink(((0, a),)).sum() + x.shrink(((0, b),)).sum()

    x = Tensor(np.arange(10, dtype=np.float32))
    with pytest.raises(JitError, match=r"'n' is bound to two values in one call: 2 and 3"):
        f(x, Variable("n", 1, 10).bind(2), Variable("n", 1, 10).bind(3))
