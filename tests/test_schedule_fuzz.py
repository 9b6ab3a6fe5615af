"""Random lazy graphs (ALU ops, reductions, every movement op) against numpy: the scheduler's fusion,
the ShapeTracker and the lowerer must agree with numpy whatever the graph looks like.

FUZZ=1 runs many more graphs.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import numpy as np
import pytest

from tg import Tensor
from tg_uop import Ops, UOp

N_GRAPHS = 2000 if os.getenv("FUZZ") else 60

Pair = tuple[Tensor, np.ndarray]


def _mov(t: Tensor, u: UOp) -> Tensor:
    return Tensor(u)


def rand_movement(rng: random.Random, t: Tensor, a: np.ndarray) -> Pair:
    shape = a.shape
    kind = rng.choice(["permute", "reshape", "expand", "pad", "shrink", "flip"])
    if kind == "permute" and len(shape) > 1:
        order = list(range(len(shape)))
        rng.shuffle(order)
        return _mov(t, t.uop.permute(tuple(order))), a.transpose(order)
    if kind == "reshape" and a.size > 1:
        flat = a.size
        divisors = [d for d in range(1, flat + 1) if flat % d == 0]
        d = rng.choice(divisors)
        new = (d, flat // d) if rng.random() < 0.7 else (flat,)
        return _mov(t, t.uop.reshape(new)), a.reshape(new)
    if kind == "expand":
        new_shape = a.shape + (rng.randint(2, 3),)
        t2, a2 = Tensor(t.uop.reshape(a.shape + (1,))), a.reshape(a.shape + (1,))
        return _mov(t2, t2.uop.expand(new_shape)), np.broadcast_to(a2, new_shape)
    if kind == "pad" and shape:
        arg = tuple((rng.randint(0, 2), rng.randint(0, 2)) for _ in shape)
        return _mov(t, t.uop.pad(arg)), np.pad(a, arg)
    if kind == "shrink" and all(s > 1 for s in shape):
        arg = []
        for s in shape:
            b = rng.randint(0, s - 1)
            arg.append((b, rng.randint(b + 1, s)))
        return _mov(t, t.uop.shrink(tuple(arg))), a[tuple(slice(b, e) for b, e in arg)]
    if kind == "flip":
        axes = tuple(rng.random() < 0.5 for _ in shape)
        idx = tuple(slice(None, None, -1) if f else slice(None) for f in axes)
        return _mov(t, t.uop.flip(axes)), a[idx]
    return t, a


UNARY: list[tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = [
    (lambda x: x.relu(), lambda x: np.maximum(x, 0)),
    (lambda x: -x, np.negative),
    (lambda x: x * 2 + 1, lambda x: x * 2 + 1),
    (lambda x: 1 / (x * x + 1), lambda x: 1 / (x * x + 1)),  # f(0) != 0: padding must not fuse through it
    (lambda x: Tensor(UOp(Ops.EXP2, x.dtype, (x.uop,))), np.exp2),
]


def rand_step(rng: random.Random, pairs: list[Pair]) -> Pair:
    t, a = rng.choice(pairs)
    r = rng.random()
    if r < 0.35:
        return rand_movement(rng, t, a)
    if r < 0.6:
        f_tg, f_np = rng.choice(UNARY)
        return f_tg(t), f_np(a).astype(np.float32)
    if r < 0.8 and a.ndim:
        axis = rng.randrange(a.ndim)
        keep = rng.random() < 0.5
        if rng.random() < 0.5:
            return t.sum(axis=axis, keepdim=keep), a.sum(axis=axis, keepdims=keep)
        return t.max(axis=axis, keepdim=keep), a.max(axis=axis, keepdims=keep)
    others = [(u, b) for u, b in pairs if b.shape == a.shape and u is not t]
    if others:
        u, b = rng.choice(others)
        return (t + u, a + b) if rng.random() < 0.5 else (t * u, a * b)
    return t, a


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_random_graphs_match_numpy(device: str) -> None:
    n = N_GRAPHS if device == "CPU" else N_GRAPHS // 6
    for seed in range(n):
        rng = random.Random(seed)
        shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 3)))
        data = np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)
        pairs: list[Pair] = [(Tensor(data, device=device), data)]
        for _ in range(rng.randint(1, 6)):
            pairs.append(rand_step(rng, pairs))
        t, ref = pairs[-1]
        got = t.numpy()
        assert got.shape == ref.shape, f"seed {seed}: shape {got.shape} != {ref.shape}"
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")
