"""Optimizers: SGD (momentum, nesterov, weight decay), LARS, Adam, AdamW, LAMB, and OptimizerGroup.

Updates are written in place (`Tensor.assign`) and realized together by `step()`, so they work
under TinyJit. The learning rate is a one-element tensor: change it with `opt.lr.assign(...)`
(and realize) and a jitted step picks the new value up.

>>> from tg_tensor import Tensor
>>> w = Tensor([1.0, 2.0], requires_grad=True)
>>> opt = SGD([w], lr=0.5)
>>> with Tensor.train():
...     opt.zero_grad()
...     _ = (w * w).sum().backward()
...     opt.step()
>>> w.tolist()
[0.0, 0.0]
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from tg_nn.fused import FlatParams
from tg_nn.util import own_buffer, own_buffers
from tg_tensor import Tensor
from tg_uop import dtypes
from tg_uop.helpers import getenv


def _state(t: Tensor) -> Tensor:
    """Optimizer state: a realized buffer of its own, without gradient, that updates assign into in place."""
    return own_buffer(t, requires_grad=False)


def _states_like(ts: list[Tensor], value: float = 0.0) -> list[Tensor]:
    """One state tensor per tensor of `ts`, filled with `value`, realized together (compiled in one batch)."""
    return own_buffers([t.full_like(value) for t in ts], requires_grad=False)  # (several devices: split as t is)


def _once(g: Tensor) -> Tensor:
    """A gradient that several updates read, computed by one kernel (a reduction read twice would run twice)."""
    return g.detach().contiguous()


def _as_buffer(t: Tensor) -> None:
    """Give a lazy tensor a buffer of its own (keeping the Tensor object) so later assigns write in place."""
    if not t.is_realized:
        t.uop = own_buffer(t).uop


class Optimizer:
    """Base class: holds the parameters (requires_grad) and buffers (the other tensors given, e.g. BatchNorm stats).

    `fused=True` (default: the FUSE_OPTIM environment variable, as in tinygrad) keeps the parameters in one flat
    buffer (tg_nn.fused): the update, its state and `clip_grad_norm` are a few kernels for all of them.
    """

    _warned = False  # the warning for a step outside training mode is given once per process
    elementwise = True  # each parameter's update reads that parameter only (fused=True needs it)

    def __init__(self, params: Sequence[Tensor], lr: float | Tensor, fused: bool | None = None) -> None:
        params = list(params)
        if not all(isinstance(p, Tensor) for p in params):
            raise TypeError("optimizer: params must be Tensors (use tg_nn.state.get_parameters(model))")
        for p in params:
            if p.requires_grad is None:
                p.requires_grad = True
        self.params = list({id(p): p for p in params if p.requires_grad}.values())
        if not self.params:
            raise ValueError("optimizer: no parameter requires a gradient")
        self.buffers = list({id(p): p for p in params if not p.requires_grad}.values())
        self.fused = bool(getenv("FUSE_OPTIM", 0)) if fused is None else bool(fused)
        if self.fused and not self.elementwise:
            raise ValueError(f"{type(self).__name__}: fused=True needs an update of each parameter on its own")
        self.flat = FlatParams(self.params) if self.fused else None
        for t in self.buffers if self.flat is not None else self.params + self.buffers:
            _as_buffer(t)
        # what the update writes: the flat buffer of all parameters, or each parameter
        self.targets = [self.flat.data] if self.flat is not None else self.params
        self._grads: list[Tensor] | None = None  # this step's gradients of the targets (see step_grads)
        self._views: list[Tensor] = []  # the parameters' .grad that _grads were published as
        device = self.params[0].device
        if isinstance(lr, Tensor):
            self.lr = lr
        else:
            self.lr = _state(Tensor([float(lr)], dtype=dtypes.float32, device=device))

    def zero_grad(self) -> None:
        """Forget the gradients (backward() accumulates into .grad otherwise)."""
        for p in self.params:
            p.grad = None
        self._grads = None

    def step_grads(self) -> list[Tensor]:
        """This step's gradients, one per target (fused: the flat gradient, each parameter's .grad a view of it).

        A gradient is computed once (a reduction read by several updates would run once per reader): in its own
        buffer, or stored into its window of the flat gradient by the kernel that finishes it."""
        missing = [i for i, p in enumerate(self.params) if p.grad is None]
        if missing:
            raise RuntimeError(f"optimizer: parameters {missing} have no gradient; call loss.backward() first")
        if self._grads is not None and all(p.grad is g for p, g in zip(self.params, self._views)):
            return self._grads  # (clip_grad_norm made them this step)
        if self.flat is None:
            self._grads = [_once(p.grad) for p in self.params]  # type: ignore[arg-type]
        else:
            self._grads = [self.flat.gather([p.grad.detach() for p in self.params])]  # type: ignore[union-attr]
        self._publish(self._grads)
        return self._grads

    def _publish(self, grads: list[Tensor]) -> None:
        """Make each parameter's .grad this step's gradient (a view of the flat one when fused)."""
        self._grads = grads
        self._views = self.flat.views(grads[0]) if self.flat is not None else list(grads)
        for p, g in zip(self.params, self._views):
            p.grad = g

    def clip_grad_norm(self, max_norm: float) -> Tensor:
        """Scale this step's gradients so that their global L2 norm is at most `max_norm` (scale
        min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_); returns the norm before clipping.

        Fused, the norm is one reduction over the flat gradient; otherwise one per parameter, then their sum.

        >>> from tg_tensor import Tensor
        >>> w = Tensor([3.0, 4.0], requires_grad=True)
        >>> opt = SGD([w], lr=1.0)
        >>> with Tensor.train():
        ...     _ = (w * Tensor([3.0, 4.0])).sum().backward()
        ...     round(opt.clip_grad_norm(1.0).item(), 4), [round(g, 4) for g in w.grad.tolist()]
        (5.0, [0.6, 0.8])
        """
        if not max_norm > 0:
            raise ValueError(f"clip_grad_norm: max_norm must be > 0, got {max_norm!r}")
        grads = self.step_grads()
        norm = Tensor.stack(*[(g.float() * g.float()).sum() for g in grads]).sum().sqrt()
        scale = (max_norm / (norm + 1e-6)).minimum(1.0)
        self._publish([(g * scale).cast(g.dtype) for g in grads])
        return norm

    def step(self) -> None:
        """Apply one update to every parameter; all updates are realized together."""
        Tensor.realize(*self.schedule_step())

    def schedule_step(self) -> list[Tensor]:
        """Build the update lazily and return the tensors to realize (for `Tensor.realize(loss, *...)`)."""
        if not Tensor.training and not Optimizer._warned:
            # tinygrad raises here; PyTorch code steps outside any training mode, so tg steps and says so once
            Optimizer._warned = True
            warnings.warn(
                "optimizer step with Tensor.training=False: the step runs, but dropout and batchnorm were in eval "
                "mode; run the training step under `with Tensor.train():` (this warning is shown once)",
                stacklevel=3,
            )
        grads = self.step_grads()  # realized with the update: a lazy p.grad would read the old weights
        self._grads = None  # (the next step computes its own)
        return self._updates(grads) + self.targets + self.buffers + grads

    def _updates(self, grads: list[Tensor]) -> list[Tensor]:
        raise NotImplementedError(f"{type(self).__name__} must implement _updates")


class OptimizerGroup:
    """Several optimizers stepped as one (for example different learning rates per part of a model)."""

    def __init__(self, *optimizers: Optimizer) -> None:
        if not optimizers or not all(isinstance(o, Optimizer) for o in optimizers):
            raise TypeError("OptimizerGroup: pass one or more optimizers")
        self.optimizers = list(optimizers)
        self.params = [p for o in optimizers for p in o.params]
        self.buffers = [b for o in optimizers for b in o.buffers]

    def __getitem__(self, i: int) -> Optimizer:
        return self.optimizers[i]

    def zero_grad(self) -> None:
        for o in self.optimizers:
            o.zero_grad()

    def schedule_step(self) -> list[Tensor]:
        return [t for o in self.optimizers for t in o.schedule_step()]

    def step(self) -> None:
        Tensor.realize(*self.schedule_step())


class SGD(Optimizer):
    """Stochastic gradient descent: g = grad + weight_decay*w; with momentum b = momentum*b + g and
    g = b (or g + momentum*b with nesterov); w -= lr*g.
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float | Tensor = 0.001,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        fused: bool | None = None,
    ) -> None:
        super().__init__(params, lr, fused)
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: momentum and weight_decay must be >= 0, got {momentum}, {weight_decay}")
        if nesterov and momentum == 0:
            raise ValueError("SGD: nesterov needs a momentum > 0")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        self.b = _states_like(self.targets) if momentum else []

    def _updates(self, grads: list[Tensor]) -> list[Tensor]:
        out = []
        for i, (p, g) in enumerate(zip(self.targets, grads)):
            g = g + self.weight_decay * p.detach() if self.weight_decay else g
            if self.momentum:
                self.b[i].assign(self.momentum * self.b[i] + g)
                g = g + self.momentum * self.b[i] if self.nesterov else self.b[i]
                out.append(self.b[i])
            p.assign((p.detach() - g * self.lr).cast(p.dtype))
        return out


class LARS(Optimizer):
    """Layer-wise adaptive rate scaling (You et al. 2017, arXiv:1708.03888), as in tinygrad.

    Per parameter w with gradient g: the trust ratio r = tcoef * |w| / (|g| + weight_decay * |w|) (1 where
    a norm is 0); g += weight_decay * w; with `classic` momentum g = g * r * lr before the momentum
    b = momentum * b + g (else after); w -= g (g + momentum * b with nesterov).
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float | Tensor = 0.001,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        nesterov: bool = False,
        classic: bool = True,
        tcoef: float = 0.001,
        *,
        ns_steps: int = 0,
        ns_coefficients: tuple[float, ...] | None = None,
        pre_wd: bool = True,
        fused: bool | None = None,
    ) -> None:
        self.elementwise = tcoef == 0 and not (ns_steps and ns_coefficients)  # (a per-parameter ratio or matrix)
        super().__init__(params, lr, fused)
        if momentum < 0 or weight_decay < 0 or tcoef < 0:
            raise ValueError(
                f"LARS: momentum, weight_decay and tcoef must be >= 0, got {momentum}, {weight_decay}, {tcoef}"
            )
        if ns_steps < 0:
            raise ValueError(f"LARS: ns_steps must be >= 0, got {ns_steps}")
        # Muon: the update orthogonalized by Newton-Schulz steps; weight decay after the momentum (pre_wd=False)
        self.ns_steps, self.ns_coefficients, self.pre_wd = ns_steps, ns_coefficients, pre_wd
        self.momentum, self.wd, self.nesterov, self.classic, self.tcoef = (
            momentum,
            weight_decay,
            nesterov,
            classic,
            tcoef,
        )
        self.b = _states_like(self.targets) if momentum else []

    def _ratio(self, p: Tensor, g: Tensor) -> Tensor | float:
        if self.tcoef == 0:
            return 1.0
        r1, r2 = p.detach().square().sum().sqrt(), g.square().sum().sqrt()
        return (r1 > 0).where((r2 > 0).where(self.tcoef * r1 / (r2 + self.wd * r1), 1.0), 1.0)

    def _updates(self, grads: list[Tensor]) -> list[Tensor]:
        for i, (p, g) in enumerate(zip(self.targets, grads)):
            r = self._ratio(p, g)
            g = g + self.wd * p.detach() if self.wd and self.pre_wd else g
            if self.classic:
                g = g * r * self.lr
            if self.momentum:
                self.b[i].assign(self.momentum * self.b[i] + g)
                g = g + self.momentum * self.b[i] if self.nesterov else self.b[i]
            if self.ns_coefficients:  # each parameter as a matrix (rows = its first axis)
                g = g.reshape(g.shape[0], -1).newton_schulz(self.ns_steps, self.ns_coefficients).reshape(g.shape)
            if not self.classic:
                g = g * r * self.lr
            if self.wd and not self.pre_wd:
                g = g + self.wd * self.lr * p.detach()
            p.assign((p.detach() - g).cast(p.dtype))
        return list(self.b)


def Muon(  # noqa: N802  (tinygrad's name: a function returning the configured LARS)
    params: Sequence[Tensor],
    lr: float | Tensor = 0.001,
    momentum: float = 0.95,
    weight_decay: float = 0.1,
    ns_steps: int = 5,
    ns_coefficients: tuple[float, ...] = (3.4445, -4.775, 2.0315),
    nesterov: bool = True,
) -> LARS:
    """Muon (Jordan et al. 2024): momentum SGD whose update is orthogonalized by Newton-Schulz steps, with the
    weight decay applied after the momentum (decoupled, scaled by lr), as tinygrad's `Muon`.

    Per parameter w (viewed as a matrix of w.shape[0] rows) with gradient g: b = momentum*b + g;
    u = g + momentum*b (nesterov) or b; u = newton_schulz(u); w -= lr*u + weight_decay*lr*w.

    >>> from tg_tensor import Tensor
    >>> w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> opt = Muon([w], lr=0.1, weight_decay=0.0)
    >>> with Tensor.train():
    ...     _ = (w * w).sum().backward()
    ...     opt.step()
    >>> w.shape
    (2, 2)
    """
    return LARS(
        params, lr, momentum, weight_decay, nesterov, classic=False, tcoef=0.0,
        ns_steps=ns_steps, ns_coefficients=ns_coefficients, pre_wd=False,
    )  # fmt: skip


class LAMB(Optimizer):
    """LAMB (layer-wise adaptive moments); with adam=True it is Adam/AdamW (decoupled weight decay)."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float | Tensor = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adam: bool = False,
        fused: bool | None = None,
    ) -> None:
        self.elementwise = adam  # (LAMB's trust ratio is per parameter)
        super().__init__(params, lr, fused)
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"{type(self).__name__}: betas must be in [0, 1), got b1={b1}, b2={b2}")
        self.b1, self.b2, self.eps, self.weight_decay, self.adam = b1, b2, eps, weight_decay, adam
        device = self.params[0].device
        ones = Tensor.ones(1, device=device)
        self.b1_t, self.b2_t, *mv = own_buffers([ones, ones, *(p.full_like(0.0) for p in self.targets * 2)], False)
        self.m, self.v = mv[: len(self.targets)], mv[len(self.targets) :]

    def _updates(self, grads: list[Tensor]) -> list[Tensor]:
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)
        for p, g, m, v in zip(self.targets, grads, self.m, self.v):
            m.assign(self.b1 * m + (1 - self.b1) * g)
            v.assign(self.b2 * v + (1 - self.b2) * (g * g))
            up = (m / (1 - self.b1_t)) / ((v / (1 - self.b2_t)).sqrt() + self.eps)
            if self.weight_decay:
                up = up + self.weight_decay * p.detach()
            ratio = self._trust_ratio(p, up) if not self.adam else 1.0
            p.assign((p.detach() - self.lr * ratio * up).cast(p.dtype))
        return [self.b1_t, self.b2_t, *self.m, *self.v]

    @staticmethod
    def _trust_ratio(p: Tensor, up: Tensor) -> Tensor:
        r1 = p.detach().square().sum().sqrt()
        r2 = up.square().sum().sqrt()
        return (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)


def Adam(  # noqa: N802  (tinygrad's spelling: a LAMB in Adam mode)
    params: Sequence[Tensor],
    lr: float | Tensor = 0.001,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    fused: bool | None = None,
) -> LAMB:
    """Adam: LAMB with adam=True and no weight decay."""
    return LAMB(params, lr, b1, b2, eps, 0.0, adam=True, fused=fused)


def AdamW(  # noqa: N802
    params: Sequence[Tensor],
    lr: float | Tensor = 0.001,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.01,
    fused: bool | None = None,
) -> LAMB:
    """AdamW: Adam with decoupled weight decay (added to the update, scaled by lr).

    >>> from tg_tensor import Tensor
    >>> w = Tensor([1.0, -1.0], requires_grad=True)
    >>> opt = AdamW([w], lr=0.1, weight_decay=0.0, fused=True)  # w is now a window of one flat buffer
    >>> with Tensor.train():
    ...     _ = (w * w).sum().backward()
    ...     opt.step()
    >>> [round(x, 4) for x in w.tolist()]
    [0.9, -0.9]
    """
    return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, fused=fused)
