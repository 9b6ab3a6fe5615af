"""Parameters in one flat buffer: the optimizers' `fused=True` mode (tinygrad's name; `FUSE_OPTIM=1`).

An optimizer updates each parameter with a few elementwise kernels. A model of 52 parameters (the GPT
example) then runs 4 x 52 small kernels per step for AdamW, plus two reductions per parameter for a global
gradient-norm clip. Fused, the parameters become views of one flat buffer (each Tensor object keeps its shape
and its `requires_grad`; the model sees no difference), the gradients are gathered into one flat gradient
(one copy kernel), and the update, its state (momenta) and the gradient's norm are computed on the flat
buffers: a few kernels for the whole model, each with the parallelism of all the parameters.

>>> from tg_tensor import Tensor
>>> a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([[3.0]], requires_grad=True)
>>> flat = FlatParams([a, b])
>>> flat.data.tolist(), a.tolist(), b.shape
([1.0, 2.0, 3.0], [1.0, 2.0], (1, 1))
>>> _ = flat.data.assign(flat.data * 10).realize()
>>> a.tolist(), b.tolist()
([10.0, 20.0], [[30.0]])
"""

from __future__ import annotations

from collections.abc import Sequence

from tg_nn.util import own_buffer
from tg_tensor import Tensor


class FlatParams:
    """`params` (of one dtype, on one device or replicated on one set of devices) re-homed as views of one flat
    buffer, `data`. Replicated (data-parallel) parameters get a replicated flat buffer: their gradients are gathered
    into one flat gradient, all-reduced in one collective."""

    def __init__(self, params: Sequence[Tensor]) -> None:
        params = list(params)
        if not params:
            raise ValueError("FlatParams: no parameters")
        first = params[0]
        for i, p in enumerate(params):
            if (axis := p.shard_axis) is not None:
                raise ValueError(
                    f"fused optimizer: parameter {i} is split over {p.device} along axis {axis}; a flat buffer "
                    "holds whole parameters (replicated on several devices is fine): use fused=False"
                )
            if (p.device, p.dtype) != (first.device, first.dtype):
                raise ValueError(
                    f"fused optimizer: parameter {i} is {p.dtype} on {p.device}, parameter 0 {first.dtype} on "
                    f"{first.device}; one flat buffer holds one dtype on one device (use fused=False, or one "
                    "optimizer per dtype)"
                )
        self.params = params
        self.sizes = [int(p.numel()) for p in params]
        self.offsets = [sum(self.sizes[:i]) for i in range(len(params))]
        self.data = own_buffer(Tensor.cat(*[p.detach().flatten() for p in params]), requires_grad=False)
        for p, view in zip(params, self.views(self.data)):
            p.uop = view.uop  # the same Tensor object (its grad, requires_grad), now a window of the flat buffer

    @property
    def numel(self) -> int:
        return self.offsets[-1] + self.sizes[-1]

    def views(self, flat: Tensor) -> list[Tensor]:
        """Each parameter's window of a flat tensor, in the parameter's shape."""
        return [flat[o : o + n].reshape(p.shape) for p, o, n in zip(self.params, self.offsets, self.sizes)]

    def gather(self, tensors: Sequence[Tensor]) -> Tensor:
        """One flat tensor holding `tensors` (one per parameter, each of its shape), lazily: one kernel copies them
        in when it is realized with the rest of the step (each is a reduction's output, computed on its own)."""
        return Tensor.cat(*[t.flatten().cast(self.data.dtype) for t in tensors])
