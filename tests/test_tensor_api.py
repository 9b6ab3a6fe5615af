"""Tensor construction, creation ops, seeded randomness, assign, and data access."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg_tensor.engine.schedule import buffer_of


def test_construction(device: str) -> None:
    assert Tensor([[1, 2], [3, 4]], device=device).tolist() == [[1, 2], [3, 4]]
    assert Tensor((1.5, 2.5), device=device).dtype == dtypes.float32
    assert Tensor(3, device=device).shape == () and Tensor(3, device=device).item() == 3
    assert Tensor(2.5, device=device, dtype=dtypes.float64).dtype == dtypes.float64
    assert Tensor([1, 2], device=device, dtype=dtypes.float32).tolist() == [1.0, 2.0]
    arr = np.arange(6, dtype=np.int16).reshape(2, 3)
    t = Tensor(arr, device=device)
    assert t.dtype == dtypes.int16 and t.shape == (2, 3) and (t.numpy() == arr).all()
    assert Tensor(b"\x01\x02\xff", device=device).tolist() == [1, 2, 255]
    assert Tensor([], device=device).shape == (0,) and Tensor([], device=device).numpy().shape == (0,)
    assert Tensor(np.float32(1.5), device=device).item() == 1.5
    assert Tensor([True, False], device=device).dtype == dtypes.bool
    with pytest.raises(ValueError, match="ragged"):
        Tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match="cannot build a tensor from dict"):
        Tensor({"a": 1})
    assert Tensor([1], dtype="float32").dtype == dtypes.float32  # dtype names, as tinygrad
    with pytest.raises(TypeError, match="unknown dtype name 'float33'"):
        Tensor([1], dtype="float33")
    with pytest.raises(TypeError, match="expected a tg DType or a dtype name"):
        Tensor([1], dtype=3)  # type: ignore[arg-type]


def test_creation_ops(device: str) -> None:
    np.testing.assert_equal(Tensor.zeros(2, 3, device=device).numpy(), np.zeros((2, 3)))
    np.testing.assert_equal(Tensor.ones((2,), device=device).numpy(), np.ones(2))
    full = Tensor.full((2, 2), 7, device=device)
    assert full.dtype == dtypes.int32 and full.tolist() == [[7, 7], [7, 7]]
    x = Tensor([[1.5, 2.5]], device=device)
    assert x.zeros_like().tolist() == [[0.0, 0.0]] and x.ones_like(dtype=dtypes.int32).tolist() == [[1, 1]]
    assert x.full_like(3.0).tolist() == [[3.0, 3.0]] and x.empty_like().shape == (1, 2)
    assert Tensor.empty(3, 2, device=device).shape == (3, 2)
    np.testing.assert_equal(Tensor.arange(5, device=device).numpy(), np.arange(5))
    np.testing.assert_allclose(Tensor.arange(1, 2, 0.25, device=device).numpy(), np.arange(1, 2, 0.25))
    np.testing.assert_equal(Tensor.arange(5, 0, -2, device=device).numpy(), [5, 3, 1])
    assert Tensor.arange(3, 3, device=device).shape == (0,)
    np.testing.assert_allclose(Tensor.linspace(-1, 1, 5, device=device).numpy(), np.linspace(-1, 1, 5))
    np.testing.assert_equal(Tensor.eye(3, 2, device=device).numpy(), np.eye(3, 2))
    assert Tensor.zeros(0, 4, device=device).numpy().shape == (0, 4)
    with pytest.raises(ValueError, match="negative dimension"):
        Tensor.zeros(-1, 2)
    with pytest.raises(ValueError, match="step must not be zero"):
        Tensor.arange(0, 5, 0)


def test_random_is_seeded_and_device_independent() -> None:
    values = {}
    for dev in ("PYTHON", "CPU"):
        Tensor.manual_seed(42)
        values[dev] = (Tensor.rand(4, device=dev).tolist(), Tensor.randn(3, device=dev).tolist())
    assert values["PYTHON"][0] == values["CPU"][0]
    np.testing.assert_allclose(values["PYTHON"][1], values["CPU"][1], rtol=1e-6)  # libm log/cos: 1 ulp
    Tensor.manual_seed(42)
    assert Tensor.rand(4).tolist() == values["CPU"][0]
    assert Tensor.rand(4).tolist() != values["CPU"][0]  # the stream moves on


def test_random_distributions() -> None:
    Tensor.manual_seed(0)
    u = Tensor.rand(4000).numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.03
    n = Tensor.randn(4000).numpy()
    assert abs(n.mean()) < 0.1 and abs(n.std() - 1) < 0.1
    nm = Tensor.normal(4000, mean=3.0, std=0.5).numpy()
    assert abs(nm.mean() - 3) < 0.05 and abs(nm.std() - 0.5) < 0.05
    un = Tensor.uniform(2000, low=-2.0, high=-1.0).numpy()
    assert un.min() >= -2 and un.max() < -1
    ri = Tensor.randint(1000, low=3, high=6)
    assert ri.dtype == dtypes.int32 and set(np.unique(ri.numpy())) == {3, 4, 5}
    k = Tensor.kaiming_uniform(64, 50).numpy()
    bound = math.sqrt(3) * math.sqrt(2 / (1 + 0.01**2)) / math.sqrt(50)
    assert np.abs(k).max() <= bound and np.abs(k).max() > 0.9 * bound
    kn = Tensor.kaiming_normal(200, 50).numpy()
    assert abs(kn.std() - math.sqrt(2 / (1 + 0.01**2)) / math.sqrt(50)) < 0.02
    g = Tensor.glorot_uniform(30, 20).numpy()
    assert np.abs(g).max() <= math.sqrt(6 / 50)
    su = Tensor.scaled_uniform(10, 10).numpy()
    assert np.abs(su).max() <= 0.1
    assert Tensor.rand(2, 2, requires_grad=True).requires_grad is True
    assert Tensor.kaiming_uniform(3, 3, requires_grad=True).requires_grad is True
    x = Tensor.zeros(3, 3)
    assert x.rand_like().shape == (3, 3) and x.randn_like().dtype == dtypes.float32
    with pytest.raises(ValueError, match="low < high"):
        Tensor.randint(3, low=5, high=5)


def test_assign_reuses_the_buffer(device: str) -> None:
    w = Tensor([1.0, 2.0, 3.0], device=device).realize()
    buf = buffer_of(w.uop.base)
    before = (w + 1).realize()
    w.assign(w * 2 - 1).realize()
    assert buffer_of(w.uop.base) is buf  # written in place
    assert w.tolist() == [1.0, 3.0, 5.0]
    assert before.tolist() == [2.0, 3.0, 4.0]
    assert (w + 1).tolist() == [2.0, 4.0, 6.0]  # no stale cached result for the same expression
    w.assign(w.flip(0)).realize()  # reads shifted: computed before writing
    assert w.tolist() == [5.0, 3.0, 1.0]
    w.assign(w - w.sum()).realize()
    assert w.tolist() == [-4.0, -6.0, -8.0]
    lazy = Tensor.zeros(3, device=device)
    lazy.assign(Tensor([1.0, 1.0, 1.0], device=device))
    assert lazy.tolist() == [1.0, 1.0, 1.0]


def test_assign_errors(device: str) -> None:
    w = Tensor([1.0, 2.0], device=device).realize()
    with pytest.raises(ValueError, match=r"value of shape \(3,\) does not match the tensor's shape \(2,\)"):
        w.assign(Tensor([1.0, 2.0, 3.0], device=device))
    with pytest.raises(TypeError, match="dtype"):
        w.assign(Tensor([1, 2], device=device))


def test_data_access(device: str) -> None:
    t = Tensor([[1.0, 2.0]], device=device)
    with pytest.raises(ValueError, match=r"item: the tensor has 2 elements \(shape \(1, 2\)\)"):
        t.item()
    assert t.numel() == 2 and t.ndim == 2 and t.element_size() == 4 and t.nbytes() == 8
    assert len(t) == 1 and bytes(t.data()) == np.array([[1.0, 2.0]], np.float32).tobytes()
    with pytest.raises(TypeError, match="0-d"):
        len(Tensor(1.0, device=device))
    bf = Tensor([1.5, -2.0], device=device, dtype=dtypes.bfloat16)
    assert bf.tolist() == [1.5, -2.0]
    assert "shape=(1, 2)" in repr(t)
    assert t.size() == (1, 2) and t.size(-1) == 2 and t.is_floating_point()
    assert not Tensor([1], device=device).is_floating_point()
    assert t.requires_grad_().requires_grad is True


def test_unsupported_dtype_ops(device: str) -> None:
    f = Tensor([1.5], device=device)
    with pytest.raises(TypeError, match="one_hot needs an integer tensor, got dtype dtypes.float"):
        f.one_hot(3)
    with pytest.raises(TypeError, match="lshift needs an integer"):
        f << 1
    with pytest.raises(TypeError, match="labels must be integers"):
        Tensor.ones(2, 3, device=device).sparse_categorical_crossentropy(Tensor([0.0, 1.0], device=device))
    with pytest.raises(TypeError, match="subtracting bool"):
        Tensor([True], device=device) - Tensor([False], device=device)


@pytest.mark.parametrize("order", [0, 1])
def test_assigns_run_after_every_read_of_the_old_values(device: str, order: int) -> None:
    """An optimizer step realizes all updates at once: each gradient must see the old weights."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 3)).astype(np.float32), np.array([0, 1, 1, 0], np.int32)
    w1n, w2n = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((5, 2)).astype(np.float32)

    def step(separately: bool) -> list[np.ndarray]:
        w1 = Tensor(w1n, device=device, requires_grad=True).realize()
        w2 = Tensor(w2n, device=device, requires_grad=True).realize()
        loss = (
            (Tensor(x, device=device) @ w1).relu().linear(w2).sparse_categorical_crossentropy(Tensor(y, device=device))
        )
        loss.backward()
        params = [w1, w2] if order == 0 else [w2, w1]
        if separately:
            for p in params:
                assert p.grad is not None
                p.grad.realize()
        for p in params:
            assert p.grad is not None
            p.assign(p - p.grad * 0.1)
        loss.realize(*params)
        return [w1.numpy(), w2.numpy()]

    for got, ref in zip(step(False), step(True)):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


def test_two_assigns_before_realize(device: str) -> None:
    w = Tensor([1.0, 2.0], device=device).realize()
    old_view = w + 0
    w.assign(w + 1)
    mid = w * 10
    w.assign(w * 2)
    w.realize(old_view, mid)  # in one realize, reads of the old values run before the writes
    assert w.tolist() == [4.0, 6.0]
    assert mid.tolist() == [20.0, 30.0] and old_view.tolist() == [1.0, 2.0]


def test_assign_from_a_shifted_older_version(device: str) -> None:
    w = Tensor([1.0, 2.0, 3.0], device=device).realize()
    w.assign(w + 1).realize()
    old_alias_view = Tensor(w.uop)  # the current version
    w.assign(w * 2).realize()
    # an older node of the same memory (which now holds [4, 6, 8]), reversed: computed before writing
    w.assign(old_alias_view.flip(0)).realize()
    assert w.tolist() == [8.0, 6.0, 4.0]  # written in place while reading it reversed would give [8, 6, 8]
