"""The graph shortcuts of matmul (`_direct_dot`) and conv2d (`movement_chain`): the same nodes as the general path
(UOps are hash-consed, so `is` compares whole graphs), and the same values as numpy."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import pytest

from tg_tensor import Tensor, chains, linalg
from tg_tensor.front import front
from tg_uop import Ops
from tg_uop.structure import structure

rng = np.random.default_rng(0)


def realized(*shape: int) -> Tensor:
    return Tensor(rng.standard_normal(shape).astype(np.float32)).realize()


def general_dot(x: Tensor, w: Tensor, monkeypatch: pytest.MonkeyPatch) -> Tensor:
    with monkeypatch.context() as m:
        m.setattr(linalg, "_direct_dot", lambda *a: None)
        return x @ w


@pytest.mark.parametrize("n,k,m", [(4, 3, 5), (7, 2, 9), (17, 33, 15), (64, 64, 64)])
def test_direct_dot_is_the_general_graph(n: int, k: int, m: int, monkeypatch: pytest.MonkeyPatch) -> None:
    x, w = realized(n, k), realized(k, m)
    assert linalg._direct_dot(x, w, None) is not None
    fast = x @ w
    assert fast.uop is general_dot(x, w, monkeypatch).uop
    np.testing.assert_allclose(fast.numpy(), x.numpy() @ w.numpy(), rtol=1e-4, atol=1e-4)


def test_direct_dot_on_transposed_operands(monkeypatch: pytest.MonkeyPatch) -> None:
    x, w = realized(9, 13), realized(11, 9)  # x.T (13, 9) @ w.T (9, 11): strided views of buffers
    fast = x.T @ w.T
    assert linalg._direct_dot(x.T, w.T, None) is not None
    assert fast.uop is general_dot(x.T, w.T, monkeypatch).uop
    np.testing.assert_allclose(fast.numpy(), x.numpy().T @ w.numpy().T, rtol=1e-4, atol=1e-4)


def general_packed_dot(x: Tensor, w: Tensor, monkeypatch: pytest.MonkeyPatch) -> Tensor:
    with monkeypatch.context() as m:
        m.setattr(linalg, "_direct_packed_dot", lambda *a: None)
        return x @ w


@pytest.mark.parametrize("n,k,m,transposed", [(48, 20, 32, False), (64, 600, 32, False), (32, 7, 48, True)])
def test_direct_packed_dot_is_the_general_graph(
    n: int, k: int, m: int, transposed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The packed product (w, and x whose rows divide into panels, copied into panels first; the size threshold
    lowered so small ones take it) built directly: the general path's nodes, numpy's values, its structure recalled
    on other buffers equal to the walked one."""
    monkeypatch.setattr(linalg, "PACK_MIN_MACS", 0)
    monkeypatch.setattr(linalg, "PACK_MIN_STRIP_BYTES", 0)

    def pair() -> tuple[Tensor, Tensor]:
        return (realized(k, n).T, realized(m, k).T) if transposed else (realized(n, k), realized(k, m))

    x, w = pair()
    panel = linalg._packs(x, w)
    assert panel and n % panel == 0, "not the packed product of both operands this test is about"
    fast = x @ w
    assert linalg._direct_packed_dot(x, w, None, panel) is not None
    assert fast.uop is general_packed_dot(x, w, monkeypatch).uop
    np.testing.assert_allclose(fast.numpy(), x.numpy() @ w.numpy(), rtol=1e-4, atol=1e-4)
    for _ in range(2):  # (the first product of these sizes above remembered its structure: recalled here)
        again, walked = operator.matmul(*pair()), general_packed_dot(*pair(), monkeypatch)
        assert structure(again.uop.src[0].src[0])[0] == structure(walked.uop.src[0].src[0])[0]


@pytest.mark.parametrize("operands", ["distinct", "same", "transposed"])
def test_direct_dot_structure_is_the_walked_one(operands: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The structure `_direct_dot` gives its graph (recalled after the first product of these sizes) is the one the
    schedule cache would walk: the general path's graph on other buffers of the same shapes and aliasing."""

    def pair() -> tuple[Tensor, Tensor]:
        x = realized(6, 6)
        return {"distinct": (x, realized(6, 6)), "same": (x, x), "transposed": (x.T, realized(6, 6).T)}[operands]

    for _ in range(2):  # (the first computes and remembers it, the second recalls it)
        fast = operator.matmul(*pair())
        walked = general_dot(*pair(), monkeypatch)
        assert fast.uop.src[0] is not walked.uop.src[0]
        assert structure(fast.uop.src[0])[0] == structure(walked.uop.src[0])[0]
        assert len(structure(fast.uop.src[0])[1]) == (1 if operands == "same" else 2)


@pytest.mark.parametrize(
    "case",
    ["lazy", "half", "vector", "row", "batched", "dtype", "no_grad"],
)
def test_direct_dot_leaves_other_cases_to_the_general_path(case: str) -> None:
    x, w, dtype = realized(8, 6), realized(6, 5), None
    if case == "lazy":
        x = x + 1
    elif case == "half":
        x, w = x.half().realize(), w.half().realize()
    elif case == "vector":
        w = realized(6)
    elif case == "row":
        x = realized(1, 6)
    elif case == "batched":
        x = realized(2, 8, 6)
    elif case == "dtype":
        dtype = Tensor.empty(1).dtype
    if case == "no_grad":
        Tensor.no_grad = True
        try:
            assert linalg._direct_dot(x, w, dtype) is None
        finally:
            Tensor.no_grad = False
    else:
        assert linalg._direct_dot(x, w, dtype) is None
    np.testing.assert_allclose((x @ w).numpy(), x.numpy() @ w.numpy(), rtol=1e-2, atol=1e-2)


CONVS: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((2, 3, 9, 9), (4, 3, 3, 3), {"padding": 1}),
    ((1, 4, 11, 7), (6, 2, 3, 2), {"groups": 2, "stride": 2, "padding": (1, 0)}),
    ((2, 2, 10, 10), (3, 2, 3, 3), {"dilation": 2, "padding": (1, 2, 0, 1)}),
    ((2, 3, 13), (5, 3, 4), {"stride": 3}),
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), {"padding": 1}),
]


@pytest.mark.parametrize("xs,ws,kw", CONVS)
def test_conv_replayed_chain_is_the_built_graph(xs: tuple[int, ...], ws: tuple[int, ...], kw: dict[str, Any]) -> None:
    front().movement_chains.clear()
    x, w, x2 = realized(*xs), realized(*ws), realized(*xs)
    built = x.conv2d(w, **kw)  # recorded
    assert built.uop is x.conv2d(w, **kw).uop  # replayed on the same input
    replayed = x2.conv2d(w, **kw)  # replayed on another buffer of that shape
    front().movement_chains.clear()
    assert replayed.uop is x2.conv2d(w, **kw).uop  # built again by the Tensor methods


@pytest.mark.parametrize("lazy", [False, True])
def test_conv_chain_under_no_grad_and_on_lazy_input(lazy: bool) -> None:
    xs, ws, kw = CONVS[1]
    x, w = realized(*xs), realized(*ws)
    src = (x * 2) if lazy else x
    front().movement_chains.clear()
    Tensor.no_grad = True
    try:
        first = src.conv2d(w, **kw)
        again = src.conv2d(w, **kw)
    finally:
        Tensor.no_grad = False
    assert again.uop is first.uop
    with_grad = src.conv2d(w, **kw)  # another key: no DETACH nodes
    assert Ops.DETACH not in {u.op for u in with_grad.uop.toposort} or not lazy
    np.testing.assert_allclose(again.numpy(), with_grad.numpy(), rtol=1e-5, atol=1e-5)


def test_conv_values_match_numpy_when_replayed() -> None:
    x, w = realized(2, 3, 8, 7), realized(4, 3, 3, 3)
    x.conv2d(w, padding=1).realize()
    got = x.conv2d(w, padding=1).numpy()  # replayed chain
    xp = np.pad(x.numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 4, 8, 7), np.float32)
    for i in range(3):
        for j in range(3):
            want += np.einsum("nchw,oc->nohw", xp[:, :, i : i + 8, j : j + 7], w.numpy()[:, :, i, j])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_chain_of_other_ops_is_always_built() -> None:
    x = realized(3, 4)
    first = chains.movement_chain(x, ("test-not-a-chain",), lambda t: (t + 1).permute(1, 0))
    again = chains.movement_chain(x, ("test-not-a-chain",), lambda t: (t + 1).permute(1, 0))
    assert again.uop is first.uop
    np.testing.assert_allclose(again.numpy(), (x.numpy() + 1).T)
