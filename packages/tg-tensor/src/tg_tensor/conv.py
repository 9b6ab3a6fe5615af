# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Convolution and pooling over any number of spatial dims, built from movement ops only.

`_pool` turns each spatial axis of size i into (out, kernel) axes through expand/reshape/shrink views
(no im2col copy), so conv2d is a multiply and a sum: one kernel.

>>> from tg_tensor import Tensor
>>> x = Tensor.arange(16, dtype=__import__("tg_uop").dtypes.float32).reshape(1, 1, 4, 4)
>>> x.max_pool2d().tolist()
[[[[5.0, 7.0], [13.0, 15.0]]]]
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from tg_tensor.chains import movement_chain
from tg_tensor.engine.util import ShapeError
from tg_tensor.gradient import custom_gradient
from tg_uop import DType, dtypes

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor

IntOrTuple = int | tuple[int, ...]


def _tuple(x: IntOrTuple, n: int, what: str) -> tuple[int, ...]:
    ret = (x,) * n if isinstance(x, int) else tuple(x)
    if len(ret) != n or not all(isinstance(v, int) for v in ret):
        raise ValueError(f"{what}: expected an int or {n} ints, got {x!r}")
    return ret


def _padding_pairs(padding: Any, n: int) -> tuple[tuple[int, int], ...]:
    """int: all sides; n ints: symmetric per dim; 2n ints: torch's (left, right, top, bottom, ...)."""
    if isinstance(padding, int):
        return ((padding, padding),) * n
    pad = tuple(padding)
    if len(pad) == n:
        return tuple((p, p) for p in pad)
    if len(pad) == 2 * n:
        return tuple((pad[i], pad[i + 1]) for i in range(0, 2 * n, 2))[::-1]
    raise ValueError(f"padding: expected an int, {n} ints or {2 * n} ints, got {padding!r}")


def _reach(kernel: tuple[int, ...], dilation: tuple[int, ...]) -> list[int]:
    """How far each spatial dim's dilated kernel reaches past its first tap: d * (k - 1)."""
    return [d * (k - 1) for k, d in zip(kernel, dilation)]


def _named_padding(name: str, kernel: tuple[int, ...], stride: IntOrTuple, dilation: IntOrTuple) -> tuple[int, ...]:
    """torch's padding="valid" (none) and "same" (output size = input size; the odd extra on the right)."""
    nd = len(kernel)
    if name == "valid":
        return (0,) * (2 * nd)
    if name != "same":
        raise ValueError(f"conv2d: padding must be an int, a tuple, 'valid' or 'same', got {name!r}")
    if any(s != 1 for s in _tuple(stride, nd, "stride")):
        raise ValueError(f"conv2d: padding='same' is not supported for strided convolutions (stride={stride!r})")
    totals = _reach(kernel, _tuple(dilation, nd, "dilation"))
    flat: list[int] = []
    for t in reversed(totals):  # torch's flat order: last dim first, (left, right) each
        flat += [t // 2, t - t // 2]
    return tuple(flat)


# CPU: a conv whose output rows do not split into 8-float vectors (MNIST's 26 and 11) has its weights copied with the
# output channels innermost (Cin, *kernel, Cout), so the register tile takes output channels as its vector lanes
# (contiguous loads) instead of lanes gathered from 4 images: the MNIST step's conv2 (128,32,13,13)x(64,32,3,3) on
# one EPYC core 40 -> 82 GFLOPS. Rows of 8k floats keep the row as the lanes (the 64-channel 56x56 conv: 88 as it is,
# 67 with the copy). CPU_PACK=0 turns it off, with the matmul's packing (linalg.py).
CONV_PACK_MIN_MACS = 1 << 20
GRAD_PACK_MIN_CIN = 8
CONV_ROW_LANES = 8


def _packs_weight(x: Tensor, out: tuple[int, ...], weight: Tensor) -> bool:
    from tg_tensor.linalg import CPU_PACK

    if not CPU_PACK.value or not isinstance(x.device, str) or x.device.split(":")[0] != "CPU":
        return False
    macs = int(x.shape[0]) * math.prod(int(s) for s in weight.shape) * math.prod(out)
    return out[-1] % CONV_ROW_LANES != 0 and macs >= CONV_PACK_MIN_MACS


def _flips_for_input_grad(
    pads: tuple[tuple[int, int], ...], kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]
) -> bool:
    """Whether conv2d's input gradient is taken as a convolution of the output gradient with the flipped weights
    (`_conv_grad`): stride 1 and no side padded by more than the dilated kernel's reach. Otherwise autograd goes
    through the windows' views, which sums a (N, Cin, *out, *kernel) product back onto the input."""
    return all(s == 1 for s in stride) and all(max(p) <= r for p, r in zip(pads, _reach(kernel, dilation)))


def _conv_grad(
    pads: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    groups: int,
    ret: Tensor,
    g: Tensor,
    x: Tensor,
    w: Tensor,
) -> tuple[Tensor, Tensor]:
    """The gradients of a stride-1 conv2d to its input and weight.

    Input: the output gradient, padded by the kernel's reach less the forward padding on each side, correlated
    with the weights flipped along every spatial axis and with in/out channels swapped (per group). One
    convolution, like the forward one, instead of a (N, Cin, *out, *kernel) product summed back onto the input.
    Weight: the windows of the input times the output gradient, summed over the batch and the output positions.
    """
    nd = w.ndim - 2
    kernel, (cout, cin) = tuple(int(s) for s in w.shape[2:]), (int(w.shape[0]), int(w.shape[1]))
    rcout, gx_in = cout // groups, g.cast(x.dtype)
    wt = w.reshape(groups, rcout, cin, *kernel).transpose(1, 2).reshape(groups * cin, rcout, *kernel)
    gpads = tuple((r - b, r - a) for r, (b, a) in zip(_reach(kernel, dilation), pads))
    if any(any(p) for p in gpads):  # padded once into a buffer: the convolution then reads it without bounds checks
        gx_in = gx_in.pad(((0, 0), (0, 0)) + gpads).contiguous()
    gx = gx_in.conv2d(wt.flip(tuple(range(2, 2 + nd))), groups=groups, dilation=dilation)
    windows = x._conv_windows(pads, kernel, 1, dilation, groups, rcout)
    out = tuple(int(s) for s in windows.shape[3 : 3 + nd])
    gw_in = g.cast(w.dtype)
    if cin >= GRAD_PACK_MIN_CIN and _packs_weight(x, out, w):
        # CPU: the output gradient copied with its channels innermost, the weight gradient's vector lanes (gathered
        # 121 floats apart before): MNIST conv2's on 2 cores 10.7 -> 6.1 ms. With one input channel (conv1) the
        # copy of its 26x26 gradient cost more than the product gained
        gw_in = gw_in.permute(0, *range(2, 2 + nd), 1).contiguous().permute(0, nd + 1, *range(1, nd + 1))
    gw_in = gw_in.reshape(int(x.shape[0]), groups, rcout, *out, *([1] * (nd + 1)))
    gw = (windows * gw_in).sum((0, *range(3, 3 + nd))).reshape(cout, cin, *kernel)
    return gx, gw


class ConvMixin:
    """conv2d (1-D/2-D/3-D), conv_transpose2d, max_pool2d, avg_pool2d."""

    __slots__ = ()

    def _pool1d_last(self: Tensor, k: int, s: int, d: int) -> Tensor:
        """(..., i) -> (..., o, k) with out[o, j] = x[o*s + j*d]."""
        i = int(self.shape[-1])
        o = (i - d * (k - 1) - 1) // s + 1
        if o <= 0:
            raise ShapeError(f"pool: kernel {k} (dilation {d}) does not fit an input of size {i}")
        lead = self.shape[:-1]
        if d == 1 and s >= k:  # windows do not overlap: a strided reshape is enough
            x = self.pad(((0, 0),) * len(lead) + ((0, max(0, o * s - i)),))._slice(self.ndim - 1, 0, o * s)
            return x.reshape(*lead, o, s)._slice(len(lead) + 1, 0, k)
        e = math.ceil(k * (i + d) / i)
        x = self.unsqueeze(-2).expand(*lead, e, i).reshape(*lead, e * i)
        x = x._slice(len(lead), 0, k * (i + d)).reshape(*lead, k, i + d)
        if o * s > i + d:
            x = x.pad(((0, 0),) * (len(lead) + 1) + ((0, o * s - i - d),))
        x = x._slice(len(lead) + 1, 0, o * s).reshape(*lead, k, o, s)._slice(len(lead) + 2, 0, 1)
        return x.reshape(*lead, k, o).transpose(-1, -2)

    def _pool(self: Tensor, k: tuple[int, ...], stride: IntOrTuple = 1, dilation: IntOrTuple = 1) -> Tensor:
        """(..., *spatial) -> (..., *out, *k): every window as extra axes, through views only."""
        nd = len(k)
        s, d = _tuple(stride, nd, "stride"), _tuple(dilation, nd, "dilation")
        lead = self.ndim - nd
        if lead < 0:
            raise ValueError(f"pool: kernel {k} has more dims than the input shape {self.shape}")
        x = self
        for j in range(nd):  # the first unpooled spatial axis (always at `lead`) becomes (o_j, k_j) at the end
            order = [a for a in range(x.ndim) if a != lead] + [lead]
            x = x.permute(tuple(order))._pool1d_last(k[j], s[j], d[j])
        # x is now (..., o0, k0, o1, k1, ...) with the lead dims first: the o axes, then the k axes
        return x.permute(*range(lead), *range(lead, lead + 2 * nd, 2), *range(lead + 1, lead + 2 * nd, 2))

    def conv2d(
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: IntOrTuple = 1,
        dilation: IntOrTuple = 1,
        padding: Any = 0,
        dtype: DType | None = None,
    ) -> Tensor:
        """Convolution (cross-correlation) of (N, Cin, *spatial) with weight (Cout, Cin/groups, *kernel).

        Works for 1, 2 and 3 spatial dims; padding may be asymmetric (torch's flat order).
        """
        nd = weight.ndim - 2
        if nd < 1 or self.ndim != weight.ndim:
            raise ShapeError(f"conv2d: input {self.shape} and weight {weight.shape} need the same rank >= 3")
        cin_all = int(self.shape[1])
        cout, cin = int(weight.shape[0]), int(weight.shape[1])
        kernel = tuple(int(s) for s in weight.shape[2:])
        if groups * cin != cin_all or cout % groups:
            raise ShapeError(
                f"conv2d: input channels {cin_all} (shape {self.shape}) do not match weight {weight.shape} "
                f"with groups={groups}"
            )
        if isinstance(padding, str):
            padding = _named_padding(padding, kernel, stride, dilation)
        pads, d = _padding_pairs(padding, nd), _tuple(dilation, nd, "dilation")
        if self.no_grad or not _flips_for_input_grad(pads, kernel, _tuple(stride, nd, "stride"), d):
            ret = self._conv(weight, pads, stride, d, groups, dtype)
        else:
            rule = functools.partial(_conv_grad, pads, d, groups)
            # (not from detached inputs: the graph stays the one a forward pass builds; gradients reach self and
            # weight through the rule only)
            ret = custom_gradient(self._conv(weight, pads, 1, d, groups, dtype), (self, weight), rule)
        return ret if bias is None else ret + bias.reshape(1, -1, *([1] * nd))

    def _conv(
        self: Tensor,
        weight: Tensor,
        pads: tuple[tuple[int, int], ...],
        stride: IntOrTuple,
        dilation: tuple[int, ...],
        groups: int,
        dtype: DType | None,
    ) -> Tensor:
        """conv2d without bias, its inputs checked: one multiply over the windows and a sum."""
        bs, nd, cin, cout = int(self.shape[0]), weight.ndim - 2, int(weight.shape[1]), int(weight.shape[0])
        kernel, rcout = tuple(int(s) for s in weight.shape[2:]), cout // groups
        x = self._conv_windows(pads, kernel, stride, dilation, groups, rcout)
        out = tuple(int(s) for s in x.shape[3 : 3 + nd])
        if _packs_weight(self, out, weight):
            weight = weight.permute(*range(1, nd + 2), 0).contiguous().permute(nd + 1, *range(nd + 1))
        w = weight.reshape(1, groups, rcout, *([1] * nd), cin, *kernel)
        return (x * w).sum(tuple(range(-1 - nd, 0)), keepdim=True, dtype=dtype).reshape(bs, cout, *out)

    def _conv_windows(
        self: Tensor,
        pads: tuple[tuple[int, int], ...],
        kernel: tuple[int, ...],
        stride: IntOrTuple,
        dilation: IntOrTuple,
        groups: int,
        rcout: int,
    ) -> Tensor:
        """The input of conv2d as (N, groups, rcout, *out, cin, *kernel) views: padded, every window as axes."""
        bs, cin, nd = int(self.shape[0]), int(self.shape[1]) // groups, len(kernel)

        def build(x: Tensor) -> Tensor:
            x = x.pad(((0, 0), (0, 0)) + pads)._pool(kernel, stride, dilation)
            out = tuple(int(s) for s in x.shape[2 : 2 + nd])
            x = x.reshape(bs, groups, cin, 1, *out, *kernel).expand(bs, groups, cin, rcout, *out, *kernel)
            return x.permute(0, 1, 3, *range(4, 4 + nd), 2, *range(4 + nd, 4 + 2 * nd))

        return movement_chain(self, ("conv", pads, kernel, stride, dilation, groups, rcout), build)

    def conv_transpose2d(
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: IntOrTuple = 1,
        dilation: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        output_padding: IntOrTuple = 0,
    ) -> Tensor:
        """The gradient of conv2d with respect to its input: weight is (Cin, Cout/groups, *kernel)."""
        nd = weight.ndim - 2
        if nd < 1 or self.ndim != weight.ndim:
            raise ShapeError(f"conv_transpose2d: input {self.shape} and weight {weight.shape} need the same rank")
        kernel = tuple(int(s) for s in weight.shape[2:])
        s, d = _tuple(stride, nd, "stride"), _tuple(dilation, nd, "dilation")
        p, op = _tuple(padding, nd, "padding"), _tuple(output_padding, nd, "output_padding")
        cin, rcout = int(weight.shape[0]), int(weight.shape[1])
        if cin % groups or int(self.shape[1]) != cin:
            raise ShapeError(f"conv_transpose2d: input {self.shape} does not match weight {weight.shape}")
        w = weight.reshape(groups, cin // groups, rcout, *kernel).transpose(1, 2)
        w = w.reshape(groups * rcout, cin // groups, *kernel).flip(tuple(range(2, 2 + nd)))
        x = self
        for j in range(nd):  # insert s-1 zeros between input elements
            if s[j] > 1:
                x = x._dilate(2 + j, s[j])
        pads = tuple((r - p[j], r - p[j] + op[j]) for j, r in enumerate(_reach(kernel, d)))
        x = x.pad(((0, 0), (0, 0)) + pads)
        return x.conv2d(w, bias, groups=groups, dilation=d)

    def _dilate(self: Tensor, ax: int, s: int) -> Tensor:
        n = int(self.shape[ax])
        x = self.unsqueeze(ax + 1)
        x = x.pad(tuple((0, s - 1) if i == ax + 1 else (0, 0) for i in range(x.ndim)))
        x = x.flatten(ax, ax + 1)
        return x._slice(ax, 0, max(0, (n - 1) * s + 1))

    def _pool_input(
        self: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None, dilation: IntOrTuple, padding: Any, ceil: bool
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...]]:
        """A pooling's kernel, stride (default: the kernel) and dilation per spatial dim, and its padding per spatial
        dim with the extra right padding ceil_mode (`ceil`) needs."""
        k = _tuple(kernel_size, 2 if isinstance(kernel_size, int) else len(kernel_size), "kernel_size")
        s = k if stride is None else _tuple(stride, len(k), "stride")
        d, nd = _tuple(dilation, len(k), "dilation"), len(k)
        pads = _padding_pairs(padding, nd)
        if not ceil:
            return k, s, d, pads
        out = []
        for j, (b, a) in enumerate(pads):
            i = int(self.shape[self.ndim - nd + j])
            span = i + b + a - d[j] * (k[j] - 1) - 1
            o = -(-span // s[j]) + 1
            if (o - 1) * s[j] >= i + b:
                o -= 1
            out.append((b, a + max(0, (o - 1) * s[j] + d[j] * (k[j] - 1) + 1 - (i + b + a))))
        return k, s, d, tuple(out)

    def max_pool2d(
        self: Tensor,
        kernel_size: IntOrTuple = (2, 2),
        stride: IntOrTuple | None = None,
        dilation: IntOrTuple = 1,
        padding: Any = 0,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Any:
        """Maximum over windows of the last len(kernel_size) dims (stride defaults to the kernel).

        return_indices=True also returns, per output, the flat spatial index of the window's first maximum.
        """
        k, s, d, pads = self._pool_input(kernel_size, stride, dilation, padding, ceil_mode)
        lowest = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
        x = self.pad(((0, 0),) * (self.ndim - len(k)) + pads, value=lowest)
        ret = x._pool(k, s, d).max(tuple(range(-len(k), 0)))
        return (ret, self._max_pool_indices(x, k, s, d, pads)) if return_indices else ret

    def avg_pool2d(
        self: Tensor,
        kernel_size: IntOrTuple = (2, 2),
        stride: IntOrTuple | None = None,
        dilation: IntOrTuple = 1,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> Tensor:
        """Mean over windows; padding counts toward the divisor when count_include_pad (not ceil_mode's)."""
        k, s, d, pads = self._pool_input(kernel_size, stride, dilation, padding, ceil_mode)
        base = _padding_pairs(padding, len(k))
        lead = ((0, 0),) * (self.ndim - len(k))
        axes = tuple(range(-len(k), 0))
        total = self._float().pad(lead + pads)._pool(k, s, d).sum(axes)
        spatial = type(self).ones(*self.shape[self.ndim - len(k) :], device=self.device)
        if count_include_pad:  # the padding counts (ones), ceil_mode's extra padding does not (zeros)
            extra = tuple((0, (a2 - a1)) for (_, a1), (_, a2) in zip(base, pads))
            spatial = spatial.pad(base, value=1.0).pad(extra)
        else:
            spatial = spatial.pad(pads)
        return total / spatial._pool(k, s, d).sum(axes)
