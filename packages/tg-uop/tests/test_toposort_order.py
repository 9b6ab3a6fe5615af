"""toposort reuses the order of nodes walked before; the order must be exactly what a plain walk gives."""

from __future__ import annotations

import random

from tg_uop import Ops, UOp, dtypes


def _plain_walk(root: UOp) -> list[UOp]:
    """Sources before users, depth first, first source first (what toposort promises), without any cache."""
    out: dict[UOp, None] = {}

    def visit(n: UOp) -> None:
        if n in out:
            return
        for s in n.src:
            visit(s)
        out[n] = None

    visit(root)
    return list(out)


def test_toposort_matches_a_plain_walk_when_parts_were_walked_before() -> None:
    rng = random.Random(7)
    for trial in range(400):
        nodes = [UOp(Ops.CONST, dtypes.int32, (), 1000 * trial + i) for i in range(3)]
        for _ in range(rng.randint(1, 14)):
            srcs = tuple(rng.choice(nodes) for _ in range(rng.randint(1, 3)))
            op = {1: Ops.NEG, 2: Ops.ADD, 3: Ops.MULACC}[len(srcs)]
            n = UOp(op, dtypes.int32, srcs)
            if rng.random() < 0.4:  # some inner nodes cache their order first
                _ = n.toposort
            nodes.append(n)
        root = nodes[-1]
        assert list(root.toposort) == _plain_walk(root), trial


def test_toposort_of_a_chain_deeper_than_the_recursion_limit() -> None:
    n = UOp(Ops.CONST, dtypes.int32, (), 0)
    chain = [n]
    for i in range(5000):
        n = UOp(Ops.ADD, dtypes.int32, (n, UOp(Ops.CONST, dtypes.int32, (), i + 1)))
        chain.append(n)
        if i == 2500:
            _ = n.toposort
    topo = list(n.toposort)
    assert len(topo) == 5001 + 5000 and topo[-1] is n
    pos = {u: i for i, u in enumerate(topo)}
    assert all(pos[s] < pos[u] for u in topo for s in u.src)
