"""Tensor.custom_kernel: a user kernel (a kernel AST, or C source for the CPU) run on tensors, as in tinygrad."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg_tensor.custom import KernelSource, load, store

SAXPY = """void saxpy(float* restrict out, const float* restrict x, const float* restrict y, int* restrict n) {
  for (int i = 0; i < n[0]; i++) out[i] = 3.0f * x[i] + y[i];
}"""


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_kernel_ast(device: str) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, np.float32)
    xt, yt = Tensor(x, device=device), Tensor(y, device=device)
    out, x2, y2 = Tensor.empty(2, 3, device=device).custom_kernel(
        xt, yt, fxn=lambda o, a, b: store(o, (2, 3), load(a, (2, 3)) * load(b, (2, 3)) + 1.0)
    )
    np.testing.assert_allclose(out.numpy(), x * y + 1.0)
    np.testing.assert_array_equal(x2.numpy(), x)  # inputs come back unchanged
    np.testing.assert_array_equal(xt.numpy(), x)
    assert (out * 2).sum().item() == pytest.approx(float(((x * y + 1.0) * 2).sum()))  # usable in a graph


def test_c_source_on_cpu() -> None:
    x, y = np.arange(5, dtype=np.float32), np.ones(5, np.float32)
    out, _, _, _ = Tensor.zeros(5, device="CPU").custom_kernel(
        Tensor(x, device="CPU"),
        Tensor(y, device="CPU") * 2,
        Tensor([5], device="CPU", dtype=dtypes.int32),
        fxn=lambda *args: KernelSource(SAXPY, "saxpy"),
    )
    np.testing.assert_allclose(out.numpy(), 3 * x + 2 * y)


def test_writes_in_place_of_an_input() -> None:
    t = Tensor([1.0, 2.0], device="CPU")
    (doubled,) = t.custom_kernel(fxn=lambda a: store(a, (2,), load(a, (2,)) * 2))
    assert doubled.tolist() == [2.0, 4.0] and t.tolist() == [1.0, 2.0]


def test_bad_input() -> None:
    t = Tensor([1.0], device="CPU")
    with pytest.raises(NotImplementedError, match="grad_fxn"):
        t.custom_kernel(fxn=lambda a: store(a, (1,), load(a, (1,))), grad_fxn=lambda *a: a)
    with pytest.raises(ValueError, match="one device"):
        t.custom_kernel(Tensor([1.0], device="PYTHON"), fxn=lambda a, b: store(a, (1,), load(b, (1,))))
    with pytest.raises(TypeError, match="must return a kernel AST"):
        t.custom_kernel(fxn=lambda a: "not a kernel")
    with pytest.raises(TypeError, match="fxn must be callable"):
        t.custom_kernel(fxn=3)
    with pytest.raises(TypeError, match="expected Tensors"):
        t.custom_kernel(np.ones(1), fxn=lambda a, b: store(a, (1,), load(a, (1,))))  # type: ignore[arg-type]


def test_source_kernel_is_lazy_jitted_and_names_a_missing_device() -> None:
    """tg.source_kernel: a graph node that runs when realized (after the kernels of its inputs), that TinyJit
    records and replays on new inputs, and that says which kernel has no source for which device."""
    import numpy as np

    from tg import Tensor, TinyJit
    from tg_tensor import KernelSource, source_kernel
    from tg_uop import dtypes

    src = "void twice(float* restrict o, const float* restrict x) { for (int i = 0; i < 4; i++) o[i] = 2 * x[i]; }"

    def make(device: str, dts: tuple[object, ...]) -> KernelSource | None:
        return KernelSource(src, "twice") if device.startswith("CPU") else None

    step = TinyJit(lambda x: (source_kernel((4,), dtypes.float32, [x + 1], "twice", make) - 1).realize())
    for i in range(4):
        x = np.arange(4, dtype=np.float32) * i
        np.testing.assert_allclose(step(Tensor(x, device="CPU")).numpy(), 2 * (x + 1) - 1)
    assert len(step.jit_cache) == 3  # x + 1, the source kernel, - 1
    lazy = source_kernel((4,), dtypes.float32, [Tensor.ones(4, device="PYTHON")], "twice", make)
    with pytest.raises(NotImplementedError, match="source_kernel 'twice': no source for device PYTHON"):
        lazy.realize()


def test_a_source_kernel_reads_a_reshaped_input_from_its_buffer() -> None:
    """An input that is a reshape of a computed tensor is that tensor's buffer (the same elements in the same order):
    one kernel computes it, none copies it for the source kernel."""
    from tg_tensor import KernelSource, source_kernel
    from tg_tensor.engine.realizer import current

    src = "void twice6(float* restrict o, const float* restrict x) { for (int i = 0; i < 6; i++) o[i] = 2 * x[i]; }"

    def make(device: str, dts: tuple[object, ...]) -> KernelSource | None:
        return KernelSource(src, "twice6")

    x = np.arange(6, dtype=np.float32)
    made = (Tensor(x).realize() + 1).contiguous().reshape(3, 2).reshape(2, 3)
    out = source_kernel((2, 3), dtypes.float32, [made], "twice6", make)
    items = out.schedule()
    assert [it.ast.op.name for it in items] == ["SINK", "CUSTOM"], items  # the add, the source kernel
    current().run_pending()
    np.testing.assert_allclose(out.numpy(), (2 * (x + 1)).reshape(2, 3))
