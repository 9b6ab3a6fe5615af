"""The KV cache of decoder-only transformers: one class for tg_nn.models.gpt's GPT and tg_llm's Llama.

A `KVCache` holds one attention layer's keys and values for up to `context` positions, as realized buffers
updated in place. `update(k, v, start)` writes the new positions start..start+t-1 and returns the keys and values
of positions 0..start+t-1 only: with `start` a bound Variable (`Variable("start", 0, context - t).bind(p)`) that
length is symbolic, so one TinyJit-captured step serves every position and its attention reads `start + t` rows,
not the whole context (decode cost grows with the position, not with the context).

The values are stored transposed, (batch, kv_heads, head_dim, context): `weights @ values` then reduces along
contiguous memory, as the scores' `q @ keys.T` does (GPU: wide loads, a warp per output row).

>>> from collections.abc import Sequence

from tg_tensor import Tensor
>>> cache = KVCache(1, 2, 8, 4)
>>> keys, values = cache.update(Tensor.ones(1, 2, 3, 4), Tensor.ones(1, 2, 3, 4), 0)
>>> keys.shape, values.shape
((1, 2, 3, 4), (1, 2, 3, 4))
>>> causal_mask(2, 3, device=keys.device).numpy().astype(int).tolist()  # queries at 2, 3, 4 over slots 0..4
[[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
"""

from __future__ import annotations

from collections.abc import Sequence

from tg_tensor import Tensor
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.uop import sint

__all__ = ["KVCache", "causal_mask"]


class KVCache:
    """One layer's keys and values, (batch, kv_heads, context, head_dim) each (the values stored transposed)."""

    def __init__(
        self,
        batch: int,
        n_kv_heads: int,
        context: int,
        head_dim: int,
        device: str | None = None,
        dtype: DType = dtypes.float32,
        split_over: Sequence[str] = (),
    ) -> None:
        """`split_over`: devices the kv heads are split over (a tensor-parallel model's), each holding its heads'
        keys and values (`device` is then unused)."""
        for name, v in (("batch", batch), ("n_kv_heads", n_kv_heads), ("context", context), ("head_dim", head_dim)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"KVCache: {name}={v!r} must be a positive int")
        if split_over and n_kv_heads % len(split_over):
            raise ValueError(f"KVCache: {n_kv_heads} kv heads do not split over {len(split_over)} devices")

        def zeros(*shape: int) -> Tensor:
            z = Tensor.zeros(*shape, dtype=dtype, device=device)
            return (z.shard(tuple(split_over), axis=1) if split_over else z).contiguous().realize()

        self.keys = zeros(batch, n_kv_heads, context, head_dim)
        self.values = zeros(batch, n_kv_heads, head_dim, context)
        self.context = context

    @property
    def nbytes(self) -> int:
        return 2 * int(self.keys.numel()) * self.keys.dtype.itemsize

    def update(self, k: Tensor, v: Tensor, start: sint) -> tuple[Tensor, Tensor]:
        """Store k, v (batch, kv_heads, t, head_dim) at positions start..start+t-1 (`start`: an int or a bound
        Variable); return the keys and values of positions 0..start+t-1, each (batch, kv_heads, start+t, head_dim)."""
        t = int(k.shape[2])
        if not isinstance(start, (int, UOp)) or isinstance(start, bool):
            raise TypeError(f"KVCache: start must be an int or a bound Variable, got {type(start).__name__}")
        if isinstance(start, int) and not 0 <= start <= self.context - t:
            raise ValueError(f"KVCache: positions {start}..{start + t - 1} exceed the context of {self.context}")
        if isinstance(start, UOp) and _upper(start) + t > self.context:
            raise ValueError(
                f"KVCache: start {start.render()} may reach {_upper(start)}; {t} more exceed {self.context}"
            )
        end = start + t
        self.keys[:, :, start:end].assign(k.cast(self.keys.dtype))
        self.values[:, :, :, start:end].assign(v.cast(self.values.dtype).transpose(-2, -1))
        return self.keys[:, :, :end], self.values[:, :, :, :end].transpose(-2, -1)

    def write_rows(self, k: Tensor, v: Tensor, starts: Sequence[sint]) -> None:
        """Store k, v (rows <= batch, kv_heads, 1, head_dim): row b at position starts[b] (an int or a bound
        Variable each), so the rows of a batched decode step, each at its own position, go to their own slots."""
        if len(starts) != int(k.shape[0]) or int(k.shape[2]) != 1:
            raise ValueError(f"KVCache.write_rows: k {k.shape} needs one token per row and {len(starts)} starts")
        for b, start in enumerate(starts):
            if isinstance(start, int) and not 0 <= start < self.context:
                raise ValueError(f"KVCache.write_rows: position {start} is outside the context of {self.context}")
            self.keys[b : b + 1, :, start : start + 1].assign(k[b : b + 1].cast(self.keys.dtype))
            self.values[b : b + 1, :, :, start : start + 1].assign(
                v[b : b + 1].cast(self.values.dtype).transpose(-2, -1)
            )

    def clear(self) -> None:
        """Zero every position (in place: a captured step keeps reading these buffers)."""
        self.keys.assign(Tensor.zeros(*self.keys.shape, dtype=self.keys.dtype, device=self.keys.device))
        self.values.assign(Tensor.zeros(*self.values.shape, dtype=self.values.dtype, device=self.values.device))
        Tensor.realize(self.keys, self.values)


def _upper(s: sint) -> int:
    """The largest value of a position: itself, or a bound Variable's (or expression's) upper bound."""
    if not isinstance(s, UOp):
        return s
    return int(s.substitute({u: u.src[0] for u in s.toposort if u.op is Ops.BIND}).vmax)


def causal_mask(start: sint, t: int, device: str | None = None) -> Tensor:
    """(t, start + t) bools: query i (at position start + i) sees the slots 0..start+i (`start`: int or bound
    Variable; the slots are an arange of the largest length, shrunk to this one)."""
    slots = Tensor.arange(_upper(start) + t, device=device)[: start + t].reshape(1, start + t)
    return slots <= (Tensor.arange(t, device=device).reshape(t, 1) + start)
