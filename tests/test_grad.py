"""Autograd: every differentiable Tensor method against central finite differences in float64.

GRAD_CASES lists the differentiable methods this file covers; NOT_DIFFERENTIABLE lists the rest.
test_every_method_is_classified fails when a public Tensor method is in neither, so a new op must
come with its gradient check (or a reason it has none).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg import Tensor, dtypes

F = Callable[..., Tensor]
RNG = np.random.default_rng(1234)


def _r(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape)


def _pos(*shape: int) -> np.ndarray:
    return _r(*shape, lo=0.3, hi=2.0)


def _unit(*shape: int) -> np.ndarray:
    return _r(*shape, lo=-0.8, hi=0.8)


def _idx(values: list[Any]) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def _dropout(x: Tensor) -> Tensor:
    Tensor.manual_seed(7)  # the same mask on every evaluation
    with Tensor.train():
        return x.dropout(0.4)


U = (2, 3)
# method name: (function of the input tensors, input arrays; int arrays get no gradient)
GRAD_CASES: dict[str, tuple[F, list[np.ndarray]]] = {
    # elementwise
    "neg": (lambda x: x.neg(), [_r(*U)]),
    "abs": (lambda x: x.abs(), [_r(*U)]),
    "sign": (lambda x: x.sign(), [_r(*U)]),
    "reciprocal": (lambda x: x.reciprocal(), [_pos(*U)]),
    "sqrt": (lambda x: x.sqrt(), [_pos(*U)]),
    "rsqrt": (lambda x: x.rsqrt(), [_pos(*U)]),
    "exp": (lambda x: x.exp(), [_r(*U)]),
    "exp2": (lambda x: x.exp2(), [_r(*U)]),
    "log": (lambda x: x.log(), [_pos(*U)]),
    "log2": (lambda x: x.log2(), [_pos(*U)]),
    "sin": (lambda x: x.sin(), [_r(*U)]),
    "cos": (lambda x: x.cos(), [_r(*U)]),
    "tan": (lambda x: x.tan(), [_unit(*U)]),
    "asin": (lambda x: x.asin(), [_unit(*U)]),
    "acos": (lambda x: x.acos(), [_unit(*U)]),
    "atan": (lambda x: x.atan(), [_r(*U)]),
    "sinh": (lambda x: x.sinh(), [_r(*U)]),
    "cosh": (lambda x: x.cosh(), [_r(*U)]),
    "tanh": (lambda x: x.tanh(), [_r(*U)]),
    "asinh": (lambda x: x.asinh(), [_r(*U)]),
    "acosh": (lambda x: x.acosh(), [_pos(*U) + 1.2]),
    "atanh": (lambda x: x.atanh(), [_unit(*U)]),
    "erf": (lambda x: x.erf(), [_r(*U)]),
    "relu": (lambda x: x.relu(), [_r(*U)]),
    "relu6": (lambda x: x.relu6(), [_r(*U) * 4]),
    "leaky_relu": (lambda x: x.leaky_relu(0.2), [_r(*U)]),
    "elu": (lambda x: x.elu(), [_r(*U)]),
    "celu": (lambda x: x.celu(0.7), [_r(*U)]),
    "selu": (lambda x: x.selu(), [_r(*U)]),
    "gelu": (lambda x: x.gelu(), [_r(*U)]),
    "quick_gelu": (lambda x: x.quick_gelu(), [_r(*U)]),
    "silu": (lambda x: x.silu(), [_r(*U)]),
    "swish": (lambda x: x.swish(), [_r(*U)]),
    "mish": (lambda x: x.mish(), [_r(*U)]),
    "softplus": (lambda x: x.softplus(), [_r(*U)]),
    "softsign": (lambda x: x.softsign(), [_r(*U)]),
    "sigmoid": (lambda x: x.sigmoid(), [_r(*U)]),
    "logsigmoid": (lambda x: x.logsigmoid(), [_r(*U)]),
    "hardsigmoid": (lambda x: x.hardsigmoid(), [_r(*U) * 3]),
    "hardswish": (lambda x: x.hardswish(), [_r(*U) * 3]),
    "hardtanh": (lambda x: x.hardtanh(), [_r(*U)]),
    "square": (lambda x: x.square(), [_r(*U)]),
    "clip": (lambda x: x.clip(-1.0, 0.5), [_r(*U)]),
    "clamp": (lambda x: x.clamp(-0.5, None), [_r(*U)]),
    "floor": (lambda x: x.floor(), [_r(*U)]),
    "ceil": (lambda x: x.ceil(), [_r(*U)]),
    "round": (lambda x: x.round(), [_r(*U)]),
    "trunc": (lambda x: x.trunc(), [_r(*U)]),
    "add": (lambda x, y: x.add(y), [_r(*U), _r(3)]),
    "sub": (lambda x, y: x.sub(y), [_r(*U), _r(2, 1)]),
    "mul": (lambda x, y: x.mul(y), [_r(*U), _r(3)]),
    "div": (lambda x, y: x.div(y), [_r(*U), _pos(3)]),
    "idiv": (lambda x, y: x.idiv(y) * x, [_r(*U), _pos(*U)]),
    "mod": (lambda x, y: x.mod(y), [_r(*U) * 3, _pos(*U)]),
    "pow": (lambda x, y: x.pow(y), [_pos(*U), _r(*U)]),
    "maximum": (lambda x, y: x.maximum(y), [_r(*U), _r(*U)]),
    "minimum": (lambda x, y: x.minimum(y), [_r(*U), _r(*U)]),
    "lerp": (lambda x, y, w: x.lerp(y, w), [_r(*U), _r(*U), _r(*U)]),
    "where": (lambda c, x, y: (c > 0).where(x, y), [_idx([[1, -1, 0], [0, 2, 1]]), _r(*U), _r(3)]),
    "cast": (lambda x: x.cast(dtypes.float32).cast(dtypes.float64), [_r(*U)]),
    "float": (lambda x: x.float().double(), [_r(*U)]),
    "double": (lambda x: x.double() * x, [_r(*U)]),
    "half": (lambda x: x.half().double(), [np.array([0.5, -1.25, 2.0])]),
    "contiguous": (lambda x: x.contiguous() * x, [_r(*U)]),
    "clone": (lambda x: x.clone() * 2, [_r(*U)]),
    "to": (lambda x: x.to(x.device) * x, [_r(*U)]),
    # reductions
    "sum": (lambda x: x.sum(1), [_r(2, 3)]),
    "prod": (lambda x: x.prod(0), [_r(2, 3)]),
    "max": (lambda x: x.max(1), [_r(2, 3)]),
    "min": (lambda x: x.min(), [_r(2, 3)]),
    "mean": (lambda x: x.mean((0, 1)), [_r(2, 3)]),
    "var": (lambda x: x.var(1), [_r(2, 3)]),
    "std": (lambda x: x.std(0, correction=0), [_r(3, 2)]),
    "var_mean": (lambda x: sum(x.var_mean(1), x.zeros_like().sum(1)), [_r(2, 3)]),
    "std_mean": (lambda x: x.std_mean()[0] + x.std_mean()[1] * 2, [_r(2, 3)]),
    "logsumexp": (lambda x: x.logsumexp(1), [_r(2, 3)]),
    "softmax": (lambda x: x.softmax(), [_r(2, 3)]),
    "log_softmax": (lambda x: x.log_softmax(0), [_r(2, 3)]),
    "cumsum": (lambda x: x.cumsum(1), [_r(2, 3)]),
    "cummax": (lambda x: x.cummax(1)[0], [_r(2, 3)]),
    # movement and indexing
    "reshape": (lambda x: x.reshape(3, 2) * Tensor([[1.0], [2.0], [3.0]], device=x.device, dtype=x.dtype), [_r(*U)]),
    "view": (lambda x: x.view(6), [_r(*U)]),
    "permute": (lambda x: x.permute(1, 0), [_r(*U)]),
    "transpose": (lambda x: x.transpose(), [_r(*U)]),
    "expand": (lambda x: x.expand(2, 2, 3), [_r(1, 3)]),
    "flatten": (lambda x: x.flatten(), [_r(*U)]),
    "unflatten": (lambda x: x.unflatten(1, (3, 1)), [_r(*U)]),
    "squeeze": (lambda x: x.squeeze(0), [_r(1, 3)]),
    "unsqueeze": (lambda x: x.unsqueeze(1), [_r(*U)]),
    "pad": (lambda x: x.pad((1, 2), value=0.5), [_r(*U)]),
    "shrink": (lambda x: x.shrink(((0, 1), (1, 3))), [_r(*U)]),
    "flip": (lambda x: x.flip(1), [_r(*U)]),
    "repeat": (lambda x: x.repeat(2, 1), [_r(*U)]),
    "repeat_interleave": (lambda x: x.repeat_interleave(2, 1), [_r(*U)]),
    "cat": (lambda x, y: x.cat(y, dim=1), [_r(2, 1), _r(2, 2)]),
    "stack": (lambda x, y: x.stack(y, dim=0), [_r(*U), _r(*U)]),
    "split": (lambda x: x.split(2, 1)[1], [_r(*U)]),
    "chunk": (lambda x: x.chunk(2, 1)[0], [_r(*U)]),
    "roll": (lambda x: x.roll(1, 1), [_r(*U)]),
    "triu": (lambda x: x.triu(), [_r(3, 3)]),
    "tril": (lambda x: x.tril(-1), [_r(3, 3)]),
    "getitem": (lambda x: x[1, ::-2], [_r(2, 3)]),
    "getitem_advanced": (lambda x: x[[1, 0, 1], 1:], [_r(2, 3)]),
    "gather": (lambda x, i: x.gather(1, i), [_r(2, 3), _idx([[2, 0], [1, 1]])]),
    "scatter": (lambda x, i, s: x.scatter(1, i, s), [_r(2, 3), _idx([[2], [0]]), _r(2, 1)]),
    "masked_fill": (lambda x: x.masked_fill(x > 0, 1.5), [_r(*U)]),
    # linear algebra and nn
    "dot": (lambda x, w: x.dot(w), [_r(2, 3), _r(3, 2)]),
    "matmul": (lambda x, w: x.matmul(w), [_r(2, 2, 3), _r(3)]),
    "linear": (lambda x, w, b: x.linear(w, b), [_r(2, 3), _r(3, 2), _r(2)]),
    "einsum": (lambda x, w: Tensor.einsum("ij,kj->ik", x, w), [_r(2, 3), _r(2, 3)]),
    "conv2d": (lambda x, w, b: x.conv2d(w, b, padding=1, stride=2), [_r(1, 2, 3, 3), _r(2, 2, 2, 2), _r(2)]),
    "conv_transpose2d": (lambda x, w: x.conv_transpose2d(w, stride=2), [_r(1, 1, 2, 2), _r(1, 2, 2, 2)]),
    "max_pool2d": (lambda x: x.max_pool2d(2, stride=1), [_r(1, 1, 3, 3)]),
    "avg_pool2d": (lambda x: x.avg_pool2d(2, padding=1), [_r(1, 1, 3, 3)]),
    "layernorm": (lambda x: x.layernorm(), [_r(2, 4)]),
    "layernorm_affine": (lambda x, w, b: x.layernorm(weight=w, bias=b), [_r(2, 4), _r(4), _r(4)]),
    "layernorm_axes": (lambda x, w: x.layernorm((0, 2), weight=w), [_r(2, 3, 4), _r(2, 1, 4)]),
    "batchnorm": (lambda x, w, b: x.batchnorm(w, b, x.mean((0, 2)), w.abs() + 0.5), [_r(2, 2, 2), _r(2), _r(2)]),
    "dropout": (_dropout, [_r(2, 4)]),
    "sequential": (lambda x: x.sequential([Tensor.relu, lambda t: t * 2, Tensor.exp]), [_r(*U)]),
    "scaled_dot_product_attention": (
        lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
        [_r(1, 2, 3), _r(1, 3, 3), _r(1, 3, 2)],
    ),
    "interpolate": (lambda x: x.interpolate((3, 5)), [_r(1, 1, 2, 3)]),
    "cross_entropy": (lambda x: x.cross_entropy(Tensor([2, 0], device=x.device), label_smoothing=0.1), [_r(2, 3)]),
    "sparse_categorical_crossentropy": (
        lambda x: x.sparse_categorical_crossentropy(Tensor([2, -1, 0], device=x.device)),
        [_r(3, 3)],
    ),
    "binary_crossentropy": (
        lambda x: x.sigmoid().binary_crossentropy(Tensor([1.0, 0.0, 1.0], device=x.device)),
        [_r(3)],
    ),
    "binary_crossentropy_logits": (
        lambda x: x.binary_crossentropy_logits(Tensor([1.0, 0.0, 1.0], device=x.device)),
        [_r(3)],
    ),
}

NOT_DIFFERENTIABLE = set(
    # comparisons, logic, bits, integer and index results
    "eq ne isnan isinf isfinite logical_and logical_not logical_or logical_xor bitwise_and bitwise_or bitwise_xor "
    "bitwise_not lshift rshift argmax argmin any all one_hot int long bool bitcast "
    # creation, randomness, modes
    "full zeros ones empty arange linspace eye rand randn randint normal uniform scaled_uniform glorot_uniform "
    "kaiming_uniform kaiming_normal manual_seed full_like zeros_like ones_like empty_like rand_like randn_like "
    "from_buffer from_file copyin tobytes "
    "train test inference_mode "
    # realization, data access, autograd itself, in-place updates
    "realize schedule kernelize numpy tolist item data numel element_size nbytes size is_floating_point "
    "requires_grad_ "
    "backward gradient detach assign".split()
)
COVERED_ALIASES = {"getitem_advanced": "getitem", "getitem": "__getitem__"}

# the methods issue 12 added for tinygrad parity (sorting.py, shaping.py, mathops.py, selection.py, decomp.py)
GRAD_CASES.update(
    {
        "sort": (lambda x: x.sort(1, descending=True)[0], [_r(2, 4)]),
        "topk": (lambda x: x.topk(2, dim=0)[0], [_r(3, 2)]),
        "cummin": (lambda x: x.cummin(1)[0], [_r(2, 3)]),
        "cumprod": (lambda x: x.cumprod(1), [_r(2, 3)]),
        "logcumsumexp": (lambda x: x.logcumsumexp(1), [_r(2, 3)]),
        "diag": (lambda x: x.diag(), [_r(3)]),
        "diagonal": (lambda x: x.diagonal(1, 0, 2), [_r(3, 2, 4)]),
        "unfold": (lambda x: x.unfold(1, 2, 1), [_r(2, 4)]),
        "meshgrid": (lambda x, y: x.meshgrid(y)[0] * x.meshgrid(y)[1], [_r(2), _r(3)]),
        "pad_to": (lambda x: x.pad_to(3, 5), [_r(*U)]),
        "shrink_to": (lambda x: x.shrink_to(1, None), [_r(*U)]),
        "rearrange": (lambda x: x.rearrange("a (b c) -> c a b", c=2), [_r(2, 4)]),
        "copysign": (lambda x: x.copysign(Tensor([1.0, -1.0, 2.0], device=x.device)), [_r(*U)]),
        "fmod": (lambda x: x.fmod(0.7), [_r(*U)]),
        "log10": (lambda x: x.log10(), [_pos(*U)]),
        "logaddexp": (lambda x, y: x.logaddexp(y), [_r(*U), _r(*U)]),
        "softmin": (lambda x: x.softmin(0), [_r(*U)]),
        "normalize": (lambda x: x.normalize(dim=1), [_r(*U)]),
        "nll_loss": (lambda x: x.log_softmax(1).nll_loss(Tensor([0, 2], device=x.device)), [_r(*U)]),
        "scatter_reduce": (
            lambda x, s: x.scatter_reduce(0, Tensor([[1, 0, 1]], device=x.device), s, "sum"),
            [_r(*U), _r(1, 3)],
        ),
        "masked_select": (lambda x: x.masked_select(Tensor([True, False, True], device=x.device)), [_r(*U)]),
        "max_unpool2d": (lambda x: x.max_unpool2d(Tensor([[[[3]]]], device=x.device)), [_r(1, 1, 1, 1)]),
        "qr": (lambda x: x.qr()[1], [_r(3, 2)]),
        "svd": (lambda x: x.svd()[1], [_r(3, 2)]),
        "newton_schulz": (lambda x: x.newton_schulz(2, (3.4445, -4.7750, 2.0315)), [_r(2, 3)]),
        "contiguous_backward": (lambda x: x.contiguous_backward() * 2, [_r(*U)]),
        "alu": (lambda x: x.alu(__import__("tg_uop").Ops.MUL, x), [_r(*U)]),
        "const_like": (lambda x: x + x.const_like(2.0), [_r(*U)]),
        "shard": (lambda x: _two_devices(x).exp().sum(1).to(x.device), [_r(4, 3)]),
        "shard_like": (lambda x: (x * 2).shard_like(_two_devices(x)).sum(0).to(x.device), [_r(4, 3)]),
        "from_shards": (lambda x: Tensor.from_shards(_halves(x), 0).exp().to(x.device), [_r(4, 3)]),
    }
)
NOT_DIFFERENTIABLE |= set(
    "argsort nonzero isclose allclose short bfloat16 multinomial randperm invalids max_numel replace to_ shard_ const "
    "custom_kernel".split()
)


def _two_devices(x: Tensor) -> Tensor:
    """x split over two devices of its kind (CPU ones for CL, which may have one device)."""
    kind = _kind(x)
    return x.to(kind).shard((kind, f"{kind}:1"), axis=0)


def _kind(x: Tensor) -> str:
    return x.device.split(":")[0] if not x.device.startswith("CL") else "CPU"


def _halves(x: Tensor) -> list[Tensor]:
    """x's two halves (along axis 0) on two devices of its kind, as Tensor.from_shards takes them."""
    kind = _kind(x)
    return [x[:2].to(kind), x[2:].to(f"{kind}:1")]


def _public_methods() -> set[str]:
    return {n for n, v in inspect.getmembers(Tensor) if not n.startswith("_") and callable(v)}


def test_every_method_is_classified() -> None:
    covered = {COVERED_ALIASES.get(n, n) for n in GRAD_CASES} | NOT_DIFFERENTIABLE
    missing = sorted(_public_methods() - covered)
    assert not missing, f"Tensor methods with neither a gradient check nor a NOT_DIFFERENTIABLE entry: {missing}"


def _loss(fn: F, arrays: list[np.ndarray], weights: np.ndarray | None, device: str) -> tuple[Tensor, list[Tensor]]:
    ts = [Tensor(a, device=device, requires_grad=a.dtype == np.float64) for a in arrays]
    out = fn(*ts)
    w = Tensor(weights if weights is not None else np.ones(out.shape), device=device)
    return (out * w).sum(), ts


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradient_matches_finite_differences(device: str, name: str) -> None:
    """Directional central differences: (f(x + eps v) - f(x - eps v)) / 2 eps == <grad, v> for random v."""
    fn, arrays = GRAD_CASES[name]
    rng = np.random.default_rng(len(name))
    out_shape = fn(*[Tensor(a, device=device) for a in arrays]).shape
    weights = rng.uniform(0.5, 1.5, out_shape)
    loss, ts = _loss(fn, arrays, weights, device)
    diff = [i for i, a in enumerate(arrays) if a.dtype == np.float64]
    grads = loss.gradient(*[ts[i] for i in diff])
    eps = {"cast": 1e-2, "float": 1e-2, "half": 0.25}.get(name, 1e-6)  # float32/half round the input
    rtol = 2e-3 if name == "half" else 1e-4  # the half cast rounds the gradient too
    for i, g in zip(diff, grads):
        assert g.shape == arrays[i].shape and g.dtype == dtypes.float64
        analytic = g.numpy()
        for _ in range(2):
            v = rng.choice([-1.0, 1.0], arrays[i].shape) * rng.uniform(0.5, 1.0, arrays[i].shape)
            plus = [a + eps * v if k == i else a for k, a in enumerate(arrays)]
            minus = [a - eps * v if k == i else a for k, a in enumerate(arrays)]
            numeric = (_loss(fn, plus, weights, device)[0].item() - _loss(fn, minus, weights, device)[0].item()) / (
                2 * eps
            )
            expected = float((analytic * v).sum())
            assert numeric == pytest.approx(expected, rel=rtol, abs=1e-5), f"{name}: input {i}"


# ---- the autograd API ----
def test_seed_snippets() -> None:
    x = Tensor([2.0], requires_grad=True)
    assert (x**2 + 3 * x + 1).sum().gradient(x)[0].tolist() == [7.0]
    (x * x * x).sum().backward()
    assert x.grad is not None and x.grad.tolist() == [12.0]
    y = Tensor([2.0], requires_grad=True)
    (y * y * y).backward()  # one element: no explicit gradient needed
    assert y.grad is not None and y.grad.item() == 12.0


def test_backward_accumulates_and_respects_requires_grad(device: str) -> None:
    w = Tensor([1.0, -2.0], device=device, requires_grad=True)
    frozen = Tensor([3.0, 4.0], device=device)  # requires_grad None: no .grad
    off = Tensor([5.0, 6.0], device=device, requires_grad=False)
    (w * frozen * off).sum().backward()
    assert w.grad is not None and w.grad.tolist() == [15.0, 24.0]
    assert frozen.grad is None and off.grad is None
    (w * 2).sum().backward()
    assert w.grad.tolist() == [17.0, 26.0]  # accumulated
    frozen.requires_grad = True
    (w * frozen).sum().backward()
    assert frozen.grad is not None and frozen.grad.tolist() == [1.0, -2.0]


def test_equal_lazy_parameters_get_their_own_gradients(device: str) -> None:
    b1 = Tensor.zeros(2, device=device, requires_grad=True)
    b2 = Tensor.zeros(2, device=device, requires_grad=True)  # the same lazy graph as b1
    x = Tensor([1.0, 2.0], device=device)
    ((x + b1) * 3 + (x + b2) * 5).sum().backward()
    assert b1.grad is not None and b2.grad is not None
    assert b1.grad.tolist() == [3.0, 3.0] and b2.grad.tolist() == [5.0, 5.0]


def test_backward_with_explicit_gradient_and_detach(device: str) -> None:
    x = Tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    (x * x).backward(Tensor([1.0, 0.5, 0.0], device=device))
    assert x.grad is not None and x.grad.tolist() == [2.0, 2.0, 0.0]
    g = (x * x.detach()).sum().gradient(x)[0]
    assert g.tolist() == [1.0, 2.0, 3.0]


def test_gradient_through_realized_forward(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    y = (x * 3).relu()
    loss = y.sum()
    y.realize()  # realizing an intermediate does not cut the graph
    assert loss.gradient(x)[0].tolist() == [3.0, 3.0]


def test_no_grad_mode(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    with Tensor.inference_mode():
        y = x * 2
        with pytest.raises(RuntimeError, match="gradients are disabled"):
            y.sum().backward()
    assert y.tolist() == [2.0, 4.0]
    # a tensor the result does not depend on has a zero gradient (tinygrad's convention)
    assert (y * x).sum().gradient(Tensor([5.0, 6.0, 7.0], device=device))[0].tolist() == [0.0, 0.0, 0.0]
    assert (y * x).sum().gradient(x)[0].tolist() == [2.0, 4.0]  # y is a constant for autograd


def test_autograd_errors(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    with pytest.raises(ValueError, match=r"non-scalar tensor \(shape \(2,\)\) needs an explicit gradient"):
        (x * 2).backward()
    other = Tensor([3.0], device=device, requires_grad=True)
    assert (x * 2).sum().gradient(other)[0].tolist() == [0.0]  # not in the graph: a zero gradient
    with pytest.raises(RuntimeError, match="only float tensors have gradients"):
        (x * 2).sum().gradient(Tensor([1, 2], device=device))
    with pytest.raises(ValueError, match=r"seed shape \(3,\) does not match"):
        (x * 2).backward(Tensor([1.0, 1.0, 1.0], device=device))


def test_training_flag_context() -> None:
    assert not Tensor.training
    with Tensor.train():
        assert Tensor.training
        with Tensor.test():
            assert not Tensor.training
        assert Tensor.training
    assert not Tensor.training


def test_backward_after_realize(device: str) -> None:
    w = Tensor.zeros(2, device=device, requires_grad=True)
    loss = ((w + 1) * Tensor([2.0, 3.0], device=device)).sum()
    w.realize()  # the parameter is realized after the loss graph was built
    assert loss.item() == 5.0  # and the loss itself is realized before backward
    loss.backward()
    assert w.grad is not None and w.grad.tolist() == [2.0, 3.0]
    assert loss.gradient(w)[0].tolist() == [2.0, 3.0]


@pytest.mark.parametrize(
    "values",
    [[[2.0, 0.0, 4.0], [1.5, -3.0, 0.5]], [[0.0, 3.0, 0.0], [0.0, 2.0, 1.0]], [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]],
)
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_prod_gradient_with_zeros(device: str, values: list[list[float]], axis: int | None) -> None:
    """d prod / d x_i is the product of the others (one zero: non-zero only at the zero; two: all zero)."""
    a = np.array(values)
    x = Tensor(a, device=device, requires_grad=True)
    got = x.prod(axis).sum().gradient(x)[0].numpy()
    expected = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        others = a.copy()
        others[i] = 1.0
        expected[i] = others.prod()
        if axis is not None:
            line = others[:, i[1]] if axis == 0 else others[i[0], :]
            expected[i] = line.prod()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    eps = 1e-6
    for i in np.ndindex(a.shape):  # central differences, one element at a time
        plus, minus = a.copy(), a.copy()
        plus[i] += eps
        minus[i] -= eps
        numeric = (np.prod(plus, axis=axis).sum() - np.prod(minus, axis=axis).sum()) / (2 * eps)
        assert got[i] == pytest.approx(numeric, abs=1e-6)
