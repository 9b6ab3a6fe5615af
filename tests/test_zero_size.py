"""Zero-size tensors never crash: a subprocess that allocates, views, copies, reduces and frees them many
times per device (its exit code is checked), and random programs whose shapes have 0 and 1 dims, against
numpy. FUZZ=1 runs 10,000 rounds per device and 10,000 random programs."""

from __future__ import annotations

import os
import pathlib
import random
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tg import Device, Tensor

FUZZ = bool(os.getenv("FUZZ"))
ROUNDS = 10_000 if FUZZ else 40
PROGRAMS = 10_000 if FUZZ else 120
HERE = pathlib.Path(__file__).parent


@pytest.mark.parametrize("name", ["CPU", "PYTHON", "CL", "DISK"])
def test_zero_size_rounds_exit_cleanly(name: str, tmp_path: pathlib.Path) -> None:
    if name != "DISK":
        _skip_unless_opens(name)
    cmd = [sys.executable, "-X", "faulthandler", str(HERE / "zero_size_program.py"), name, str(ROUNDS), str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, f"exit code {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip() == f"ok {name} {ROUNDS}"


def _skip_unless_opens(name: str) -> None:
    try:
        Device[name]
    except Exception as e:  # a missing driver: skip with the reason
        pytest.skip(f"{name} unavailable: {e}")


Pair = tuple[Tensor, np.ndarray]


def _shape(rng: random.Random) -> tuple[int, ...]:
    dims = [rng.choice([0, 1, 1, 2, 3]) for _ in range(rng.randint(1, 3))]
    if 0 not in dims and rng.random() < 0.8:
        dims[rng.randrange(len(dims))] = 0
    return tuple(dims)


def _movement(rng: random.Random, t: Tensor, a: np.ndarray) -> Pair:
    kind = rng.choice(["permute", "reshape", "expand", "pad", "shrink", "flip"])
    if kind == "permute":
        order = list(range(a.ndim))
        rng.shuffle(order)
        return t.permute(*order), a.transpose(order)
    if kind == "reshape":
        new = (a.size,) if a.size or rng.random() < 0.3 else (rng.randint(0, 2), 0, rng.randint(1, 3))
        return t.reshape(*new), a.reshape(new)
    if kind == "expand":
        n = rng.choice([0, 1, 2])
        return t.unsqueeze(-1).expand(*a.shape, n), np.broadcast_to(a[..., None], a.shape + (n,))
    if kind == "pad":
        arg = tuple((rng.randint(0, 1), rng.randint(0, 1)) for _ in a.shape)
        return t.pad(arg), np.pad(a, arg)
    if kind == "shrink":
        arg = []
        for s in a.shape:
            b = rng.randint(0, s)
            arg.append((b, rng.randint(b, s)))  # may shrink to nothing
        return t.shrink(tuple(arg)), a[tuple(slice(b, e) for b, e in arg)]
    axes = [ax for ax in range(a.ndim) if rng.random() < 0.5]
    return (t.flip(*axes), np.flip(a, axes)) if axes else (t, a)


def _step(rng: random.Random, pairs: list[Pair]) -> Pair:
    t, a = rng.choice(pairs)
    r = rng.random()
    if r < 0.4:
        return _movement(rng, t, a)
    if r < 0.6:
        return (t * 2 + 1, a * 2 + 1) if rng.random() < 0.5 else (1 / (t * t + 1), 1 / (a * a + 1))
    if r < 0.85 and a.ndim:
        axis = rng.randrange(a.ndim)
        kind = rng.choice(["sum", "max", "mean"])
        if kind == "max" and a.shape[axis] == 0:
            kind = "sum"  # max over nothing has no value (a ValueError, as numpy: tested separately)
        ref = getattr(a, kind)(axis=axis, keepdims=True)
        return getattr(t, kind)(axis=axis, keepdim=True), ref.astype(np.float32)
    others = [(u, b) for u, b in pairs if b.shape == a.shape and u is not t]
    if others:
        u, b = rng.choice(others)
        return (t + u, a + b) if rng.random() < 0.5 else (t * u, a * b)
    return t, a


def run_programs(device: str, seeds: range) -> None:
    for seed in seeds:
        rng = random.Random(seed)
        shape = _shape(rng)
        data = np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)
        pairs: list[Pair] = [(Tensor(data, device=device), data)]
        for _ in range(rng.randint(1, 6)):
            pairs.append(_step(rng, pairs))
        t, ref = pairs[-1]
        got = t.numpy()
        assert got.shape == ref.shape, f"seed {seed}: shape {got.shape} != {ref.shape}"
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


@pytest.mark.parametrize("name", ["CPU", "PYTHON", "CL"])
def test_random_programs_with_zero_size_dims_match_numpy(name: str) -> None:
    _skip_unless_opens(name)
    n = PROGRAMS if name == "CPU" else PROGRAMS // 3
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "mean of empty slice": nan is the expected value
        run_programs(name, range(n))


def test_max_of_empty_axis_raises_like_numpy() -> None:
    with pytest.raises(ValueError, match="size-0 axis"):
        Tensor.zeros(0, 3).max(axis=0)
    np.testing.assert_array_equal(Tensor.zeros(0, 3).max(axis=1).numpy(), np.zeros((0, 3)).max(axis=1))
