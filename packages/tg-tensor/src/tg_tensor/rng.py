"""Random bits made on the device: Threefry-2x32 (20 rounds) of (element index, call number) under a key.

A `RandomState` holds, per device, a key (uint32[2], from the seed) and a call counter (uint32[1])
in device buffers. Each draw assigns `counter + 1` in place (lazily) and hashes the counter's new
value minus one with every element's index, so realizing the numbers runs the increment first.
Under TinyJit the increment is one recorded kernel: every replay draws new numbers. The hash is
pure uint32 ALU (add, xor, shifts) in the UOp graph, so it fuses into the kernel that uses it and
gives the same bits on every device.

>>> from tg_tensor import Tensor
>>> state = RandomState(5)
>>> a, b = Tensor(state.bits((3,), "PYTHON")[0]).tolist(), Tensor(state.bits((3,), "PYTHON")[0]).tolist()
>>> a != b, a == Tensor(RandomState(5).bits((3,), "CPU")[0]).tolist()
(True, True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg_tensor.engine.util import const_uop
from tg_tensor.front import front
from tg_uop import Ops, UOp, dtypes
from tg_uop.helpers import prod

if TYPE_CHECKING:
    import numpy as np

    from tg_tensor.tensor import Tensor

ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)  # Threefry-2x32's rotation constants (Random123)
PARITY = 0x1BD11BDA  # the key schedule's parity constant
U32 = dtypes.uint32
INDEX_CACHE_MAX = 1 << 20  # index ranges up to this length are kept on the device between draws


def _broadcast(u: UOp, shape: tuple[int, ...]) -> UOp:
    """A 0-d node seen as `shape`."""
    return u.reshape((1,) * len(shape)).expand(shape) if shape else u


def _const(value: int, shape: tuple[int, ...], device: str) -> UOp:
    return _broadcast(const_uop(value, U32, device), shape)


def threefry2x32(x: tuple[UOp, UOp], key: tuple[UOp, UOp], shape: tuple[int, ...], device: str) -> tuple[UOp, UOp]:
    """Threefry-2x32-20 of the counter pair `x` (uint32 UOps of `shape`) under `key`, elementwise.

    The key may be 0-d (one key for all elements): its schedule is then computed once, not per element.
    """
    consts: dict[int, UOp] = {}

    def const(v: int) -> UOp:
        if v not in consts:
            consts[v] = _const(v, shape, device)
        return consts[v]

    def wide(u: UOp) -> UOp:
        return _broadcast(u, shape) if u.shape == () else u

    k0, k1 = key
    ks = (k0, k1, k0.alu(Ops.XOR, k1).alu(Ops.XOR, _const(PARITY, tuple(k0.shape or ()), device)))
    x0, x1 = x[0].alu(Ops.ADD, wide(k0)), x[1].alu(Ops.ADD, wide(k1))
    for group in range(5):  # 5 groups of 4 rounds, a key injection after each
        for r in ROTATIONS[4 * (group % 2) : 4 * (group % 2) + 4]:
            x0 = x0.alu(Ops.ADD, x1)
            x1 = x1.alu(Ops.SHL, const(r)).alu(Ops.OR, x1.alu(Ops.SHR, const(32 - r))).alu(Ops.XOR, x0)
        s = group + 1
        inject1 = ks[(s + 1) % 3].alu(Ops.ADD, _const(s, tuple(k0.shape or ()), device))
        x0, x1 = x0.alu(Ops.ADD, wide(ks[s % 3])), x1.alu(Ops.ADD, wide(inject1))
    return x0, x1


class RandomState:
    """A seed and, per device, its key and call counter in device buffers."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)
        self.keys: dict[str, Tensor] = {}
        self.counters: dict[str, Tensor] = {}

    def _key_values(self) -> np.ndarray:
        import numpy as np

        return np.array([self.seed & 0xFFFFFFFF, (self.seed >> 32) & 0xFFFFFFFF], np.uint32)

    def reseed(self, seed: int) -> None:
        """Start again from `seed`, writing the existing device state in place (TinyJit recordings see it)."""
        import numpy as np

        from tg_tensor.tensor import Tensor

        self.seed = int(seed)
        for dev, key in self.keys.items():
            key.assign(Tensor(self._key_values(), device=dev)).realize()
            self.counters[dev].assign(Tensor(np.zeros(1, np.uint32), device=dev)).realize()

    def _state(self, device: str) -> tuple[Tensor, Tensor]:
        import numpy as np

        from tg_tensor.tensor import Tensor

        if device not in self.counters:
            self.keys[device] = Tensor(self._key_values(), device=device)
            self.counters[device] = Tensor(np.zeros(1, np.uint32), device=device)
        return self.keys[device], self.counters[device]

    def bits(self, shape: tuple[int, ...], device: str) -> tuple[UOp, UOp]:
        """Two independent uint32 UOps of `shape`: this draw's random bits (the counter moves on by one)."""
        key, counter = self._state(device)
        counter.assign(counter + 1)
        call = (counter - 1).reshape(()).uop  # reads the assign: realizing the bits runs the increment
        k0, k1 = key.uop.shrink(((0, 1),)).reshape(()), key.uop.shrink(((1, 2),)).reshape(())
        return threefry2x32((element_index(shape, device), _broadcast(call, shape)), (k0, k1), shape, device)


def _arange(n: int, device: str) -> UOp:
    """0..n-1 as uint32 in a device buffer (kept for small n)."""
    import numpy as np

    from tg_tensor.tensor import Tensor

    ranges = front().index_ranges  # kept per Realizer (its buffers are registered there)
    t = ranges.get((n, device))
    if t is None:
        t = Tensor(np.arange(n, dtype=np.uint32), device=device)
        if n <= INDEX_CACHE_MAX:
            ranges[(n, device)] = t
    return t.uop


def element_index(shape: tuple[int, ...], device: str) -> UOp:
    """Each element's row-major position (uint32), built from one small range per dim."""
    total = prod(shape)
    if total >= 1 << 32:
        raise ValueError(f"random: {total} elements (shape {shape}) do not fit the 32-bit element counter")
    index: UOp | None = None
    stride = 1
    for d in reversed(range(len(shape))):
        n = shape[d]
        if n > 1:
            view = (1,) * d + (n,) + (1,) * (len(shape) - d - 1)
            part = _arange(n, device).reshape(view).expand(shape)
            if stride != 1:
                part = part.alu(Ops.MUL, _const(stride, shape, device))
            index = part if index is None else index.alu(Ops.ADD, part)
        stride *= n
    return index if index is not None else _const(0, shape, device)


def to_unit_float(bits: UOp, shape: tuple[int, ...], device: str) -> UOp:
    """Uniform float32 in [0, 1) from uint32 bits: the top 24 bits times 2**-24 (exact)."""
    f = bits.alu(Ops.SHR, _const(8, shape, device)).cast(dtypes.float32)
    return f.alu(Ops.MUL, _broadcast(const_uop(2.0**-24, dtypes.float32, device), shape))
