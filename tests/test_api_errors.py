"""Bad input to the methods issue 12 added: each raises the exception type tinygrad or PyTorch raises
for the same mistake (IndexError for a dim out of range, RuntimeError/ValueError/TypeError otherwise),
with a message naming the value and what was expected."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tg import Tensor, dtypes

M = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])  # (2, 3)
V = Tensor([1.0, 2.0, 3.0])
I = Tensor([0, 1, 0])  # noqa: E741

# (call, exception type, message pattern)
CASES: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    # dims out of range: IndexError, as torch
    ("sort dim", lambda: M.sort(2), IndexError, "axis 2 is out of range"),
    ("argsort dim", lambda: M.argsort(-3), IndexError, "axis -3 is out of range"),
    ("topk dim", lambda: M.topk(1, dim=5), IndexError, "out of range"),
    ("cummax axis", lambda: M.cummax(2), IndexError, "out of range"),
    ("cummin axis", lambda: M.cummin(-3), IndexError, "out of range"),
    ("cumprod axis", lambda: M.cumprod(2), IndexError, "out of range"),
    ("logcumsumexp axis", lambda: M.logcumsumexp(2), IndexError, "out of range"),
    ("diagonal dim", lambda: M.diagonal(0, 0, 2), IndexError, "out of range"),
    ("unfold dim", lambda: M.unfold(2, 1, 1), IndexError, "out of range"),
    ("softmin axis", lambda: M.softmin(2), IndexError, "out of range"),
    ("normalize dim", lambda: M.normalize(dim=2), IndexError, "out of range"),
    ("scatter_reduce dim", lambda: V.scatter_reduce(1, I, V, "sum"), IndexError, "out of range"),
    # values out of range or wrong: RuntimeError (torch / tinygrad)
    ("topk k", lambda: M.topk(4), RuntimeError, r"k=4 is out of range for dim -1 of size 3"),
    ("topk negative k", lambda: M.topk(-1), RuntimeError, "k=-1"),
    ("diagonal same dims", lambda: M.diagonal(0, 1, -1), RuntimeError, "dim1 and dim2 are both dim 1"),
    ("unfold size", lambda: M.unfold(1, 4, 1), RuntimeError, "size 4 is larger than dim 1"),
    ("unfold step", lambda: M.unfold(1, 2, 0), RuntimeError, "step must be an int > 0, got 0"),
    ("unfold negative size", lambda: M.unfold(1, -1, 1), RuntimeError, "size must be an int >= 0, got -1"),
    ("meshgrid indexing", lambda: V.meshgrid(V, indexing="ab"), RuntimeError, "indexing must be 'ij' or 'xy'"),
    ("masked_select float mask", lambda: V.masked_select(V), RuntimeError, "expected a bool mask tensor, got"),
    ("masked_select shapes", lambda: M.masked_select(Tensor([True, False])), ValueError, "cannot be broadcast"),
    ("masked_select size", lambda: V.masked_select(V > 1, size=-1), ValueError, "size must be an int >= 0"),
    ("nonzero size", lambda: V.nonzero(size=-2), ValueError, "size must be an int >= 0"),
    ("scatter_reduce reduce", lambda: V.scatter_reduce(0, I, V, "max"), RuntimeError, "reduce must be one of"),
    ("scatter_reduce index dtype", lambda: V.scatter_reduce(0, V, V, "sum"), RuntimeError, "integer tensor"),
    ("scatter_reduce ndim", lambda: M.scatter_reduce(0, I, M, "sum"), RuntimeError, "same ndim"),
    (
        "scatter_reduce index shape",
        lambda: V.scatter_reduce(0, Tensor([0, 0, 0, 0]), V, "sum"),
        RuntimeError,
        "does not fit",
    ),
    ("multinomial ndim", lambda: Tensor([[[1.0]]]).multinomial(), RuntimeError, "1-D or 2-D"),
    ("multinomial samples", lambda: V.multinomial(0), RuntimeError, "num_samples must be a positive int, got 0"),
    ("multinomial no replacement", lambda: V.multinomial(4), RuntimeError, "cannot draw 4 samples"),
    ("randperm n", lambda: Tensor.randperm(-1), ValueError, "n must be an int >= 0, got -1"),
    ("nll_loss target dtype", lambda: M.nll_loss(Tensor([0.0, 1.0])), RuntimeError, "integer tensor"),
    ("nll_loss shapes", lambda: M.nll_loss(Tensor([0, 1, 1])), ValueError, r"input \(2, 3\) and target \(3,\)"),
    ("nll_loss weight", lambda: M.nll_loss(Tensor([0, 1]), weight=V[:2]), ValueError, r"weight must have shape \(3,\)"),
    ("nll_loss reduction", lambda: M.nll_loss(Tensor([0, 1]), reduction="avg"), ValueError, "reduction must be"),
    ("max_unpool2d shapes", lambda: M.reshape(1, 1, 2, 3).max_unpool2d(I), ValueError, "indices"),
    ("max_unpool2d dtype", lambda: M.reshape(1, 1, 2, 3).max_unpool2d(M.reshape(1, 1, 2, 3)), TypeError, "integer"),
    ("max_unpool2d ndim", lambda: V.max_unpool2d(I), ValueError, r"expected \(N, C, \*spatial\)"),
    ("qr vector", lambda: V.qr(), RuntimeError, r"expected a matrix .* got shape \(3,\)"),
    ("qr int", lambda: Tensor([[1, 2], [3, 4]]).qr(), RuntimeError, "expected a float tensor"),
    ("svd vector", lambda: V.svd(), RuntimeError, "expected a matrix"),
    ("newton_schulz vector", lambda: V.newton_schulz(1, (1.0,)), RuntimeError, "expected a matrix"),
    ("replace shape", lambda: M.replace(V), RuntimeError, r"shape \(3,\) does not match"),
    ("replace type", lambda: M.replace(3), TypeError, "expected a Tensor"),  # type: ignore[arg-type]
    ("rearrange arrow", lambda: M.rearrange("a b"), ValueError, "exactly one '->'"),
    ("rearrange names", lambda: M.rearrange("a b -> a c"), ValueError, "same axes"),
    ("rearrange split", lambda: M.rearrange("(a b) c -> a b c", a=4), ValueError, "cannot be split"),
    ("rearrange unknown size", lambda: M.rearrange("(a b) c -> a b c"), ValueError, "cannot infer"),
    ("rearrange dims", lambda: M.rearrange("a b c -> a b c"), ValueError, "3 axes on the left, the tensor 2 dims"),
    ("rearrange name", lambda: M.rearrange("a 2b -> a 2b"), ValueError, "invalid axis name"),
    ("diag 2-D", lambda: M.diag(), ValueError, r"expected a 1-D tensor, got shape \(2, 3\)"),
    ("meshgrid 2-D", lambda: V.meshgrid(M), ValueError, "0-d or 1-D"),
    ("pad_to smaller", lambda: M.pad_to(1, 3), ValueError, "smaller than the shape"),
    ("pad_to ndim", lambda: M.pad_to(3), ValueError, "1 sizes for a tensor of 2 dims"),
    ("shrink_to larger", lambda: M.shrink_to(3, 3), ValueError, "does not fit"),
    ("shrink_to type", lambda: M.shrink_to(1.5, 3), TypeError, "ints or None"),
    # dtypes
    ("cast name", lambda: M.cast("float33"), TypeError, "unknown dtype name 'float33'"),
    ("cast type", lambda: M.cast(3), TypeError, "expected a tg DType or a dtype name"),  # type: ignore[arg-type]
    ("lshift float", lambda: M.lshift(1, reverse=True), TypeError, "lshift needs an integer"),
    ("gelu approximate", lambda: M.gelu(approximate="erf"), ValueError, "approximate must be 'tanh' or 'none'"),
    ("pad mode", lambda: M.pad(((1, 1), (0, 0)), mode="wrap"), ValueError, "circular"),
    ("pad circular size", lambda: M.pad(((3, 0), (0, 0)), mode="circular"), ValueError, "larger than dim 0"),
    (
        "gqa heads",
        lambda: Tensor.ones(1, 3, 2, 2).scaled_dot_product_attention(
            Tensor.ones(1, 2, 2, 2), Tensor.ones(1, 2, 2, 2), enable_gqa=True
        ),
        ValueError,
        "3 query heads",
    ),
    ("contiguous options", lambda: M.contiguous(arg=1), TypeError, r"unexpected options \['arg'\]"),
    ("alu shapes", lambda: M.alu(__import__("tg_uop").Ops.ADD, V), ValueError, "does not broadcast"),
]

# Mistakes where tinygrad's own test suite (test_ops.py) expects tinygrad's or PyTorch's exception type. tg's
# errors are subclasses of both kinds where they differ, so code catching either keeps working.
PARITY: list[tuple[str, Callable[[], Any], tuple[type[Exception], ...], str]] = [
    ("clip no bounds", lambda: M.clip(None, None), (RuntimeError, ValueError), "at least one of min_ and max_"),
    ("div rounding", lambda: V.div(V, rounding_mode="typo"), (RuntimeError, ValueError), "rounding_mode must be"),
    ("lshift float", lambda: V << 2, (RuntimeError, TypeError), "lshift needs an integer or bool tensor"),
    ("rshift float", lambda: V >> 1, (RuntimeError, TypeError), "rshift needs an integer or bool tensor"),
    ("shift by float", lambda: I << 1.0, (RuntimeError, TypeError), "shift amount must be an integer"),
    ("shift by float tensor", lambda: I >> V, (RuntimeError, TypeError), "shift amount must be an integer"),
    ("pad mode", lambda: M.pad((1, 0), mode="typo"), (NotImplementedError, ValueError), "mode must be 'constant'"),
    ("reflect too wide", lambda: M.pad((3, 0), mode="reflect"), (RuntimeError, ValueError), "must be smaller"),
    ("flip repeated dim", lambda: M.flip((0, 0)), (RuntimeError, ValueError), r"flip: dim repeated in \(0, 0\)"),
    ("flip same dim twice", lambda: M.flip((1, -1)), (RuntimeError, ValueError), "dim repeated"),
    ("roll shifts no dims", lambda: M.roll((1, 2)), (RuntimeError, ValueError), "2 shifts need as many dims"),
    ("roll shifts vs dims", lambda: M.roll(1, (0, 1)), (RuntimeError, ValueError), "1 shifts for 2 dims"),
    ("gather ndim", lambda: M.gather(0, Tensor([1])), (RuntimeError, ValueError), r"index shape \(1,\)"),
    (
        "scatter index > self",
        lambda: Tensor.zeros(2, 3).scatter(1, Tensor.zeros(3, 2, dtype=dtypes.int32), Tensor.ones(3, 3)),
        (RuntimeError, ValueError),
        "does not fit self shape",
    ),
    (
        "scatter index > src",
        lambda: Tensor.zeros(4, 4).scatter(1, Tensor.zeros(3, 3, dtype=dtypes.int32), Tensor.ones(3, 2)),
        (RuntimeError, ValueError),
        r"larger than src shape \(3, 2\)",
    ),
    (
        "scatter src dtype",
        lambda: M.half().scatter(1, Tensor.zeros(2, 2, dtype=dtypes.int32), M),
        (RuntimeError, TypeError),
        "src dtype dtypes.float differs from self dtype dtypes.half",
    ),
    (
        "scatter_reduce src dtype",
        lambda: M.half().scatter_reduce(0, Tensor.zeros(2, 3, dtype=dtypes.int32), M, "sum"),
        (RuntimeError, TypeError),
        "src dtype",
    ),
    ("int pow negative", lambda: I**-2, (RuntimeError, ValueError), "negative power -2"),
    ("sum dtype name", lambda: V.sum(dtype=""), (AttributeError, TypeError), "unknown dtype name ''"),
    ("prod dtype name", lambda: V.prod(dtype="flaot"), (AttributeError, TypeError), "unknown dtype name 'flaot'"),
    ("kaiming nested shape", lambda: Tensor.kaiming_uniform((-3, 3), 3), (ValueError, TypeError), "must be ints"),
    ("linspace bool", lambda: Tensor.linspace(5, 10, 3, dtype="bool"), (ValueError,), "bool dtype"),
    (
        "arange overflow",
        lambda: Tensor.arange(129, dtype=dtypes.int8),
        (OverflowError,),
        "values from 0 to 128 do not fit dtypes.int8",
    ),
    ("arange overflow down", lambda: Tensor.arange(127, -130, -1, dtype=dtypes.int8), (OverflowError,), "-129"),
    ("stack list and more", lambda: Tensor.stack([V, V], V), (ValueError,), "either as one list"),
    (
        "conv kernel too big",
        lambda: Tensor.ones(1, 1, 6, 7).conv2d(Tensor.ones(6, 1, 3, 3), dilation=3),
        (RuntimeError, ValueError),
        r"kernel 3 \(dilation 3\) does not fit an input of size 6",
    ),
    (
        "cross_entropy target shape",
        lambda: Tensor.ones(4, 10).cross_entropy(Tensor.ones(4, 1)),
        (RuntimeError, ValueError),
        r"probabilities of shape \(4, 1\) for logits \(4, 10\): expected \(4, 10\)",
    ),
    (
        "cross_entropy index shape",
        lambda: Tensor.ones(4, 10).cross_entropy(Tensor([1, 2])),
        (RuntimeError, ValueError),
        r"class indices of shape \(2,\) for logits \(4, 10\): expected \(4,\)",
    ),
    (
        "einsum two ellipses",
        lambda: Tensor.einsum("...ik...,...jk->", Tensor.ones(2, 3, 4), Tensor.ones(2, 3, 4)),
        (RuntimeError, ValueError),
        "more than one '...'",
    ),
    (
        "einsum sizes",
        lambda: Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3), Tensor.ones(4, 5)),
        (RuntimeError, ValueError),
        "index 'j' has sizes 3 and 4",
    ),
    (
        "sdpa causal and mask",
        lambda: Tensor.ones(1, 2, 4).scaled_dot_product_attention(
            Tensor.ones(1, 2, 4), Tensor.ones(1, 2, 4), attn_mask=Tensor.ones(2, 2), is_causal=True
        ),
        (RuntimeError, ValueError),
        "attn_mask cannot be given with is_causal=True",
    ),
    ("one_hot -1", lambda: I.one_hot(-1), (ValueError,), "num_classes must be a non-negative int, got -1"),
    ("one_hot float", lambda: V.one_hot(3), (RuntimeError, TypeError), "one_hot needs an integer tensor"),
    ("index out of bounds", lambda: M[1, 3], (IndexError,), r"index 3 is out of bounds for dim 0 of size 3"),
    ("list index out of bounds", lambda: M[[0, 2]], (IndexError,), r"index 2 is out of bounds for dim 0 of size 2"),
]


@pytest.mark.parametrize("name,call,excs,match", PARITY, ids=[c[0] for c in PARITY])
def test_parity_exception_types(
    name: str, call: Callable[[], Any], excs: tuple[type[Exception], ...], match: str
) -> None:
    """The error is an instance of every listed type (tinygrad's and tg's former one) and names the value."""
    with pytest.raises(excs[0], match=match) as e:
        call()
    assert all(isinstance(e.value, t) for t in excs), (type(e.value).__mro__, excs)


@pytest.mark.parametrize("name,call,exc,match", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name: str, call: Callable[[], Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        call()


def test_messages_name_the_value() -> None:
    """A sample of the messages in full: which value, and what was expected."""
    with pytest.raises(RuntimeError) as e:
        M.topk(7, dim=0)
    assert str(e.value) == "topk: k=7 is out of range for dim 0 of size 2 (shape (2, 3))"
    with pytest.raises(TypeError) as t:
        Tensor([1], dtype="int33")
    assert "unknown dtype name 'int33'; expected one of" in str(t.value)
    assert Tensor([1.5]).cast("int").dtype == dtypes.int32
