"""Brute force: the simplified expression equals the original at every point of small variable ranges.

CI checks a few thousand random expressions; FUZZ=1 checks 20x more.
"""

from __future__ import annotations

import itertools
import os
import random

import pytest

from tg_uop import UOp, dtypes
from tg_uop.evaluate import evaluate_many

VARS = [
    UOp.variable("a", 0, 5),
    UOp.variable("b", 0, 3),
    UOp.variable("c", -3, 4),
    UOp.variable("d", 1, 3),
]


def all_points(variables: list[UOp]) -> dict[UOp, list[int]]:
    """Every combination of the variables' values, as parallel lists for evaluate_many."""
    ranges = [range(v.arg[1], v.arg[2] + 1) for v in variables]
    points = list(itertools.product(*ranges))
    return {v: [p[i] for p in points] for i, v in enumerate(variables)}


def int_leaf(rng: random.Random) -> UOp:
    if rng.random() < 0.7:
        return rng.choice(VARS)
    return UOp.const(dtypes.int32, rng.randint(-6, 12))


def int_expr(rng: random.Random, depth: int) -> UOp:
    """A random int32 expression; divisors are non-zero constants so C never leaves a result undefined."""
    if depth == 0 or rng.random() < 0.2:
        return int_leaf(rng)
    kind = rng.randrange(10)
    x = int_expr(rng, depth - 1)
    if kind <= 1:
        return x + int_expr(rng, depth - 1)
    if kind == 2:
        return x - int_expr(rng, depth - 1)
    if kind == 3:
        return x * rng.choice([-2, -1, 2, 3, 4, 6, 8])
    if kind == 4:
        return x * int_expr(rng, depth - 1)
    if kind == 5:
        return x // rng.choice([1, 2, 3, 4, 6, 8, 12, -2, -3])
    if kind == 6:
        return x % rng.choice([1, 2, 3, 4, 6, 8, 12, -3])
    if kind == 7:
        return x.maximum(int_expr(rng, depth - 1))
    if kind == 8:
        return bool_expr(rng, 1).where(x, int_expr(rng, depth - 1))
    return -x


def bool_expr(rng: random.Random, depth: int) -> UOp:
    """A random bool expression built from comparisons of int expressions."""
    kind = rng.randrange(6)
    if depth == 0 or kind <= 1:
        return int_expr(rng, 2) < int_expr(rng, 1)
    if kind == 2:
        return int_expr(rng, 2).ne(int_expr(rng, 1))
    if kind == 3:
        return bool_expr(rng, depth - 1) & bool_expr(rng, depth - 1)
    if kind == 4:
        return bool_expr(rng, depth - 1) | bool_expr(rng, depth - 1)
    return bool_expr(rng, depth - 1).ne(True)


SCALE = 20 if os.getenv("FUZZ") else 1
POINTS = all_points(VARS)


def _check(exprs: list[UOp]) -> list[str]:
    mismatches = []
    for e in exprs:
        s = e.simplify()
        want, got = evaluate_many(e, POINTS), evaluate_many(s, POINTS)
        if want != got:
            bad = next(i for i, (w, g) in enumerate(zip(want, got)) if w != g)
            at = {v.arg[0]: POINTS[v][bad] for v in VARS}
            mismatches.append(f"{e.render()} -> {s.render()} at {at}: {want[bad]} != {got[bad]}")
    return mismatches


@pytest.mark.parametrize("seed", range(4))
def test_int_expressions(seed: int) -> None:
    rng = random.Random(seed)
    exprs = [int_expr(rng, rng.randint(1, 4)) for _ in range(600 * SCALE)]
    assert _check(exprs) == []


@pytest.mark.parametrize("seed", range(2))
def test_bool_expressions(seed: int) -> None:
    rng = random.Random(1000 + seed)
    exprs = [bool_expr(rng, rng.randint(0, 3)) for _ in range(400 * SCALE)]
    assert _check(exprs) == []


def test_index_like_expressions() -> None:
    """Sums of scaled variables under div and mod: the shapes index maths takes."""
    rng = random.Random(7)
    exprs = []
    for _ in range(800 * SCALE):
        terms = [v * rng.choice([1, 2, 3, 4, 6, 8]) for v in rng.sample(VARS, rng.randint(1, 3))]
        e = terms[0]
        for t in terms[1:]:
            e = e + t
        e = e + rng.randint(-4, 9)
        for _ in range(rng.randint(1, 3)):
            e = e // rng.choice([2, 3, 4, 8]) if rng.random() < 0.5 else e % rng.choice([2, 3, 4, 6, 8])
            if rng.random() < 0.3:
                e = e * rng.choice([2, 4]) + rng.choice(VARS)
        exprs.append(e)
    assert _check(exprs) == []
