"""Issue-2 acceptance: the first path through every layer, on every device that runs here."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Device, GlobalCounters, Tensor, dtypes


def test_fused_chain_is_one_kernel(device: str) -> None:
    a, b, c = (Tensor([1.0, 2.0, 3.0], device=device) for _ in range(3))
    GlobalCounters.reset()
    out = ((a + b) * c).relu().sum()
    assert len(out.schedule()) == 1
    out.realize()
    assert GlobalCounters.kernel_count == 1
    assert out.item() == pytest.approx(28.0)


def test_movement_ops_alone_run_no_kernels(device: str) -> None:
    t = Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4), device=device)
    GlobalCounters.reset()
    v = t.permute(2, 0, 1).reshape(4, 6).expand(3, 4, 6)
    assert GlobalCounters.kernel_count == 0
    np.testing.assert_equal(
        v.numpy(), np.broadcast_to(np.arange(24).reshape(2, 3, 4).transpose(2, 0, 1).reshape(4, 6), (3, 4, 6))
    )


def test_hash_consing() -> None:
    t = Tensor([1, 2, 3, 4])
    assert (t * 4).uop is (t * 4).uop
    assert (t + 3 + 4).tolist() == [8, 9, 10, 11]


def test_dtypes_and_devices() -> None:
    assert Tensor([1, 2]).dtype == dtypes.int32
    assert Tensor([1.5]).dtype == dtypes.float32
    assert Tensor([True]).dtype == dtypes.bool
    assert Tensor(np.array([1, 2], dtype=np.int64)).dtype == dtypes.int64
    assert Tensor([1]).device == Device.DEFAULT


def test_unknown_device_lists_known() -> None:
    with pytest.raises(KeyError, match="known devices: .*CPU.*PYTHON"):
        Tensor([1], device="NOPE")


def test_broadcast_error_names_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        Tensor.ones(2, 3) + Tensor.ones(4)


def test_reshape_error_names_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 2\)"):
        Tensor.ones(2, 3).reshape(4, 2)
