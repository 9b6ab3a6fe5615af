"""The canonical index forms: each expression must simplify to exactly its minimal form.

Every row is also checked by brute force, so a wrong "minimal form" cannot hide here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from tg_uop import Ops, UOp, dtypes
from tg_uop.evaluate import evaluate_many

x = UOp.variable("x", 0, 100)
y = UOp.variable("y", 0, 3)
z = UOp.variable("z", 0, 7)
w = UOp.variable("w", -5, 5)
i = UOp.variable("i", 0, 15)
j = UOp.variable("j", 0, 15)

TABLE: list[tuple[str, Callable[[], UOp], str]] = [
    ("(x*4+y)//4", lambda: (x * 4 + y) // 4, "x"),
    ("(x*4+y)%4", lambda: (x * 4 + y) % 4, "y"),
    ("(x+8)%4", lambda: (x + 8) % 4, "(x%4)"),
    ("(x+8)//4", lambda: (x + 8) // 4, "((x//4)+2)"),
    ("x//1", lambda: x // 1, "x"),
    ("x%1", lambda: x % 1, "0"),
    ("x*1", lambda: x * 1, "x"),
    ("x+0", lambda: x + 0, "x"),
    ("x*0", lambda: x * 0, "0"),
    ("x-x", lambda: x - x, "0"),
    ("(x+3)+5", lambda: (x + 3) + 5, "(x+8)"),
    ("(x*2)*3", lambda: (x * 2) * 3, "(x*6)"),
    ("x*2+x*3", lambda: x * 2 + x * 3, "(x*5)"),
    ("x+x", lambda: x + x, "(x*2)"),
    ("(x//4)*4+x%4", lambda: (x // 4) * 4 + x % 4, "x"),
    ("((x//4)%5)*4+x%4", lambda: ((x // 4) % 5) * 4 + x % 4, "(x%20)"),
    ("(x//2)//3", lambda: (x // 2) // 3, "(x//6)"),
    ("(x%12)%4", lambda: (x % 12) % 4, "(x%4)"),
    ("(x%12)//4", lambda: (x % 12) // 4, "((x//4)%3)"),
    ("y%4", lambda: y % 4, "y"),
    ("y//4", lambda: y // 4, "0"),
    ("(y+4)//4", lambda: (y + 4) // 4, "1"),
    ("(x*6+y*3)//3", lambda: (x * 6 + y * 3) // 3, "((x*2)+y)"),
    ("(x*4+y)//2", lambda: (x * 4 + y) // 2, "((x*2)+(y//2))"),
    ("(x*6+4)%3", lambda: (x * 6 + 4) % 3, "1"),
    ("(x*8+z)%8", lambda: (x * 8 + z) % 8, "z"),
    ("(x*8+z)//8", lambda: (x * 8 + z) // 8, "x"),
    ("(x*4+y)<8", lambda: (x * 4 + y) < 8, "(x<2)"),
    ("(x*4)<9", lambda: (x * 4) < 9, "(x<3)"),
    ("(x+3)<10", lambda: (x + 3) < 10, "(x<7)"),
    ("x<0", lambda: x < 0, "False"),
    ("x<101", lambda: x < 101, "True"),
    ("max(x,0)", lambda: x.maximum(0), "x"),
    ("max(y,4)", lambda: y.maximum(4), "4"),
    ("where(x<0,y,z)", lambda: (x < 0).where(y, z), "z"),
    ("(x<5)&(x<3)", lambda: (x < 5) & (x < 3), "(x<3)"),
    ("(x<5)&(x<5)", lambda: (x < 5) & (x < 5), "(x<5)"),
    ("(x>=5)&(x<5)", lambda: (x >= 5) & (x < 5), "False"),
    ("(x//4)<3", lambda: (x // 4) < 3, "(x<12)"),
    ("(x*2+z*2)//4", lambda: (x * 2 + z * 2) // 4, "((x+z)//2)"),
    ("(x*2+z*2)%4", lambda: (x * 2 + z * 2) % 4, "(((x+z)%2)*2)"),
    ("w//8", lambda: w // 8, "0"),
    ("w%8", lambda: w % 8, "w"),
    ("(w*4)//4", lambda: (w * 4) // 4, "w"),
    ("(w+8)%4", lambda: (w + 8) % 4, "((w+8)%4)"),
    ("x-(x-y)", lambda: x - (x - y), "y"),
    ("(x+y)-y", lambda: (x + y) - y, "x"),
    ("(i*16+j)//16*16+(i*16+j)%16", lambda: ((i * 16 + j) // 16) * 16 + (i * 16 + j) % 16, "((i*16)+j)"),
    ("((i*16+j)//4)%4", lambda: ((i * 16 + j) // 4) % 4, "(j//4)"),
    ("x*-1*-1", lambda: x * -1 * -1, "x"),
    ("-(-x)", lambda: x.alu(Ops.NEG).alu(Ops.NEG), "x"),
    ("(w<w+y)&(w*6<0)", lambda: (w < w + y) & (w * 6 < 0), "((w<(w+y))&(w<0))"),  # FUZZ found: keep non-constant bounds
    ("x<x", lambda: x < x, "False"),
    ("x!=x", lambda: x.ne(x), "False"),
    ("(x<5)!=True!=True", lambda: (x < 5).ne(True).ne(True), "(x<5)"),
]


def test_table_is_large_enough() -> None:
    assert len(TABLE) >= 30


@pytest.mark.parametrize("name,build,minimal", TABLE, ids=[row[0] for row in TABLE])
def test_canonical_form(name: str, build: Callable[[], UOp], minimal: str) -> None:
    expr = build()
    simplified = expr.simplify()
    assert simplified.render() == minimal
    variables = [v for v in expr.toposort if v.op.name == "DEFINE_VAR"]
    points = list(itertools.product(*(range(v.arg[1], v.arg[2] + 1) for v in variables)))
    env = {v: [p[k] for p in points] for k, v in enumerate(variables)}
    assert evaluate_many(expr, env) == evaluate_many(simplified, env)


def test_and_chain_keeps_clauses_it_cannot_compare() -> None:
    f = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("f", 0, 1))
    e = ((f >= 1.0) & (x >= 3) & (x >= 5)).simplify()
    assert e.render() == "(((f<1.0)!=True)&((x<5)!=True))"


def test_a_sum_nested_thousands_deep_is_split_in_order() -> None:
    from tg_uop.symbolic_terms import split_add

    terms = [UOp.variable(f"v{k}", 0, 3) for k in range(3000)]
    total = terms[0]
    for t in terms[1:]:
        total = total + t  # (a left-deep chain: each sum's first source is the sum before it)
    assert split_add(total) == terms
    assert split_add(total + 5)[-1].arg == 5 and len(split_add(total + 5)) == 3001
