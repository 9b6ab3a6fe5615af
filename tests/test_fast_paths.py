"""Issue 5 fast paths above codegen: schedules cached by graph structure, long reductions split in two."""

from __future__ import annotations

import numpy as np

from tg import GlobalCounters, Tensor
from tg_tensor.engine.realizer import current


def test_same_structure_reuses_the_schedule_with_new_buffers(device: str) -> None:
    xs = [np.arange(6, dtype=np.float32).reshape(2, 3) + i for i in range(3)]
    outs = []
    for x in xs:
        t = Tensor(x, device=device)
        outs.append(((t + 1) * t).sum(1).numpy())
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out, ((x + 1) * x).sum(1))
    before = len(current().recipes)
    t = Tensor(xs[0] * 2, device=device)
    np.testing.assert_allclose(((t + 1) * t).sum(1).numpy(), ((xs[0] * 2 + 1) * xs[0] * 2).sum(1))
    assert len(current().recipes) == before, "a graph of a seen structure must come from the schedule cache"


def test_aliasing_is_part_of_the_structure(device: str) -> None:
    a = np.arange(4, dtype=np.float32)
    b = a + 10
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_allclose((ta * ta).numpy(), a * a)
    np.testing.assert_allclose((ta * tb).numpy(), a * b)
    tc = Tensor(b, device=device)
    np.testing.assert_allclose((tc * tc).numpy(), b * b)


def test_long_sum_runs_in_two_kernels() -> None:
    x = np.random.rand(1 << 16).astype(np.float32)
    t = Tensor(x, device="CPU")
    GlobalCounters.reset()
    out = t.sum().realize()
    assert GlobalCounters.kernel_count == 2
    np.testing.assert_allclose(out.item(), x.astype(np.float64).sum(), rtol=1e-5)
    np.testing.assert_allclose(Tensor(x, device="CPU").max().item(), x.max())


def test_split_reduce_keeps_other_axes() -> None:
    x = np.random.rand(2, 1 << 15).astype(np.float32)
    np.testing.assert_allclose(Tensor(x, device="CPU").sum(1).numpy(), x.sum(1), rtol=1e-5)
