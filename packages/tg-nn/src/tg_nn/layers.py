"""Layers with tinygrad's default initialisations (which are PyTorch's).

Weights of Linear and the convolutions are Kaiming-uniform with a=sqrt(5), i.e. uniform in
+-1/sqrt(fan_in); biases are uniform in +-1/sqrt(fan_in). Seed them with `Tensor.manual_seed`.
Every parameter is realized into a buffer of its own at construction, so optimizers, load_state_dict
and TinyJit recordings all see (and update) the same memory.

>>> from tg_tensor import Tensor
>>> Linear(3, 2)(Tensor.ones(4, 3)).shape
(4, 2)
>>> Conv2d(1, 4, 3)(Tensor.ones(2, 1, 8, 8)).shape
(2, 4, 6, 6)
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tg_nn.util import own_buffer, own_buffers
from tg_tensor import Tensor
from tg_uop import dtypes
from tg_uop.helpers import prod

IntOrTuple = int | tuple[int, ...]


def _positive(name: str, **sizes: int) -> None:
    for k, v in sizes.items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{name}: {k} must be a positive int, got {v!r}")


def _tuple(name: str, v: IntOrTuple, n: int) -> tuple[int, ...]:
    ret = (v,) * n if isinstance(v, int) else tuple(v)
    if len(ret) != n or not all(isinstance(x, int) and x > 0 for x in ret):
        raise ValueError(f"{name}: kernel_size must be a positive int or {n} positive ints, got {v!r}")
    return ret


def _weight_and_bias(
    draw_weight: Callable[[], Tensor], n: int, fan_in: int, bias: bool
) -> tuple[Tensor, Tensor | None]:
    """The weight and (when asked) a bias uniform in +-1/sqrt(fan_in), drawn in this order and realized in one
    schedule, so a new process compiles their kernels side by side."""

    def draw_bias() -> Tensor:
        bound = 1 / math.sqrt(fan_in)
        return Tensor.uniform(n, low=-bound, high=bound)

    makers = (draw_weight, draw_bias) if bias else (draw_weight,)
    params = own_buffers(make() for make in makers)  # (a generator: no lazy draw stays alive)
    return params[0], params[1] if bias else None


class Linear:
    """y = x @ weight.T + bias for inputs of shape (..., in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        _positive("Linear", in_features=in_features, out_features=out_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight, self.bias = _weight_and_bias(
            lambda: Tensor.kaiming_uniform(out_features, in_features, a=math.sqrt(5)), out_features, in_features, bias
        )

    def __call__(self, x: Tensor) -> Tensor:
        if not x.shape or x.shape[-1] != self.in_features:
            raise ValueError(f"Linear: input shape {x.shape} does not end in in_features={self.in_features}")
        return x.linear(self.weight.transpose(), self.bias)


class Conv2d:
    """N-d convolution over (N, C, *spatial) inputs; the kernel's rank picks the dimension (2-D by default).

    padding: int, a tuple per spatial dim (or per side, as for Tensor.conv2d), "same" or "valid".
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrTuple,
        stride: IntOrTuple = 1,
        padding: int | tuple[int, ...] | str = 0,
        dilation: IntOrTuple = 1,
        groups: int = 1,
        bias: bool = True,
        dims: int = 2,
    ) -> None:
        _positive("Conv", in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv: groups={groups} must divide in_channels={in_channels} and out={out_channels}")
        self.kernel_size = _tuple("Conv", kernel_size, dims) if isinstance(kernel_size, int) else tuple(kernel_size)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        shape = (out_channels, in_channels // groups, *self.kernel_size)
        fan_in = in_channels // groups * prod(self.kernel_size)
        self.weight, self.bias = _weight_and_bias(
            lambda: Tensor.kaiming_uniform(*shape, a=math.sqrt(5)), out_channels, fan_in, bias
        )

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)


def Conv1d(  # noqa: N802  (a layer constructor, named like the class it builds)
    in_channels: int,
    out_channels: int,
    kernel_size: int,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
    bias: bool = True,
) -> Conv2d:
    """A 1-D convolution over (N, C, L): a Conv2d with a one-element kernel size."""
    return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias, dims=1)


class ConvTranspose2d(Conv2d):
    """Transposed convolution (the gradient of Conv2d with respect to its input)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrTuple,
        stride: IntOrTuple = 1,
        padding: int | tuple[int, ...] = 0,
        output_padding: int = 0,
        dilation: IntOrTuple = 1,
        groups: int = 1,
        bias: bool = True,
        dims: int = 2,
    ) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, dims)
        self.output_padding = output_padding
        shape = (in_channels, out_channels // groups, *self.kernel_size)
        fan_in = out_channels // groups * prod(self.kernel_size)
        self.weight, self.bias = _weight_and_bias(
            lambda: Tensor.kaiming_uniform(*shape, a=math.sqrt(5)), out_channels, fan_in, bias
        )

    def __call__(self, x: Tensor) -> Tensor:
        if isinstance(self.padding, str):
            raise ValueError(f"ConvTranspose2d: padding must be an int or a tuple, got {self.padding!r}")
        return x.conv_transpose2d(
            self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding, self.output_padding
        )


def ConvTranspose1d(  # noqa: N802
    in_channels: int,
    out_channels: int,
    kernel_size: int,
    stride: int = 1,
    padding: int = 0,
    output_padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
    bias: bool = True,
) -> ConvTranspose2d:
    """A 1-D transposed convolution over (N, C, L)."""
    return ConvTranspose2d(
        in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups, bias, dims=1
    )


class Embedding:
    """Rows of a (vocab_size, embed_size) table picked by integer indices: (...,) -> (..., embed_size)."""

    def __init__(self, vocab_size: int, embed_size: int) -> None:
        _positive("Embedding", vocab_size=vocab_size, embed_size=embed_size)
        self.vocab_size, self.embed_size = vocab_size, embed_size
        self.weight = own_buffer(Tensor.glorot_uniform(vocab_size, embed_size))

    def __call__(self, idx: Tensor) -> Tensor:
        if not (dtypes.is_int(idx.dtype) or dtypes.is_unsigned(idx.dtype)):
            raise TypeError(f"Embedding: indices must be integers, got {idx.dtype}")
        # the table's rows (an indexed load per row, not a one-hot matmul over the vocabulary); a negative
        # index selects nothing, as a one-hot of it would, and one past the end gives zeros too
        return (idx < 0).unsqueeze(-1).where(0, self.weight[idx])


class LSTMCell:
    """One LSTM step: (x, (h, c)) -> (h', c'); weights uniform in +-1/sqrt(hidden_size)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        _positive("LSTMCell", input_size=input_size, hidden_size=hidden_size)
        bound = 1 / math.sqrt(hidden_size)
        self.weight_ih = own_buffer(Tensor.uniform(hidden_size * 4, input_size, low=-bound, high=bound))
        self.weight_hh = own_buffer(Tensor.uniform(hidden_size * 4, hidden_size, low=-bound, high=bound))
        self.bias_ih = own_buffer(Tensor.uniform(hidden_size * 4, low=-bound, high=bound)) if bias else None
        self.bias_hh = own_buffer(Tensor.uniform(hidden_size * 4, low=-bound, high=bound)) if bias else None

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        hidden = self.weight_hh.shape[1]
        if hc is None:
            zeros = Tensor.zeros(x.shape[0], hidden, dtype=x.dtype, device=x.device)
            hc = (zeros, zeros)
        h, c = hc
        gates = x.linear(self.weight_ih.transpose(), self.bias_ih) + h.linear(self.weight_hh.transpose(), self.bias_hh)
        i, f, g, o = gates.chunk(4, dim=1)
        new_c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        new_h = o.sigmoid() * new_c.tanh()
        return new_h.contiguous(), new_c.contiguous()
