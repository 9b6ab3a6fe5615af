"""Random numbers made on the device: Threefry-2x32 known answers, distributions, seeds, TinyJit replays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg import GlobalCounters, Tensor, TinyJit, dtypes, nn
from tg_tensor.rng import RandomState, threefry2x32

# Random123's known-answer vectors for threefry2x32_20: (counter, key) -> output
KAT = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
]


def test_threefry_matches_the_known_answers(device: str) -> None:
    cols = [Tensor(np.array(v, np.uint32), device=device).uop for v in zip(*(c + k for c, k, _ in KAT))]
    out = threefry2x32((cols[0], cols[1]), (cols[2], cols[3]), (len(KAT),), device)
    got = list(zip(Tensor(out[0]).tolist(), Tensor(out[1]).tolist()))
    assert got == [want for _, _, want in KAT]


def test_threefry_known_answers_in_a_vectorized_kernel(device: str) -> None:
    """The answers tiled to 768 counters: a kernel large enough to be upcast, so the CPU runs the rounds' xors,
    shifts and ors on whole vectors."""
    n = 768
    rows = [KAT[i % len(KAT)] for i in range(n)]
    cols = [Tensor(np.array(v, np.uint32), device=device).uop for v in zip(*(c + k for c, k, _ in rows))]
    out = threefry2x32((cols[0], cols[1]), (cols[2], cols[3]), (n,), device)
    assert list(zip(Tensor(out[0]).tolist(), Tensor(out[1]).tolist())) == [want for _, _, want in rows]


def test_dropout_mask_kernel_runs_its_random_bits_as_vectors() -> None:
    """x * (rand >= 0.5) * 2, upcast on the CPU: the Threefry rounds under the mask's bool compare are packed into
    vector ops (one scalar compare per lane at the end), not repeated per lane; the values equal the PYTHON
    device's bit for bit."""
    from tg_runtime.runner import get_runner

    def masked(dev: str) -> Tensor:
        Tensor.manual_seed(11)
        x = Tensor(np.linspace(-1, 1, 64 * 40, dtype=np.float32).reshape(64, 40), device=dev)
        return (Tensor.rand(64, 40, device=dev) >= 0.5).where(x, 0.0) * 2.0

    item = next(i for i in masked("CPU").schedule() if "float8" in get_runner("CPU", i.ast).spec.src)
    src = get_runner("CPU", item.ast).spec.src
    assert "tg_unsigned_int8 alu" in src and src.count("^") < 150, src  # ~100 xors of the rounds, once
    np.testing.assert_array_equal(masked("CPU").numpy(), masked("PYTHON").numpy())


def test_uniform_statistics() -> None:
    Tensor.manual_seed(3)
    u = Tensor.rand(200_000).numpy()
    assert u.dtype == np.float32 and u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.003 and abs(u.var() - 1 / 12) < 0.001
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    expected = len(u) / 20
    assert ((counts - expected) ** 2 / expected).sum() < 50  # chi-square, 19 dof (p ~ 1e-4)
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01  # neighbours are independent
    n = Tensor.randn(200_000).numpy()
    assert abs(n.mean()) < 0.01 and abs(n.std() - 1) < 0.01 and np.isfinite(n).all()
    assert abs(((n > 1) & (n < 2)).mean() - 0.1359) < 0.004  # the normal's mass between 1 and 2
    r = Tensor.randint(50_000, low=-3, high=4).numpy()
    assert set(np.unique(r).tolist()) == set(range(-3, 4)) and abs(r.mean()) < 0.05


def _draws(dev: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    Tensor.manual_seed(1234)
    return (
        Tensor.rand(3, 5, device=dev).numpy(),
        Tensor.randint(7, low=0, high=1000, device=dev).numpy(),
        Tensor.randn(6, device=dev).numpy(),
    )


def test_same_numbers_on_every_device(device: str) -> None:
    if device == "PYTHON":
        pytest.skip("PYTHON is the reference the other devices are compared with")
    ref, got = _draws("PYTHON"), _draws(device)
    np.testing.assert_array_equal(got[0], ref[0])  # pure uint32 maths: bit for bit
    np.testing.assert_array_equal(got[1], ref[1])
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-6)  # log/cos: libm may differ by 1 ulp


def test_manual_seed_reproduces_and_the_stream_moves_on(device: str) -> None:
    Tensor.manual_seed(7)
    a, b = Tensor.rand(5, device=device).tolist(), Tensor.rand(5, device=device).tolist()
    assert a != b
    Tensor.manual_seed(7)
    assert Tensor.rand(5, device=device).tolist() == a and Tensor.rand(5, device=device).tolist() == b
    Tensor.manual_seed(8)
    assert Tensor.rand(5, device=device).tolist() != a


def test_many_draws_realized_together_are_all_different(device: str) -> None:
    Tensor.manual_seed(0)
    draws = [Tensor.rand(4, device=device) for _ in range(4)]
    both = draws[0] + draws[1]  # one kernel reading two draws
    values = [d.tolist() for d in draws]
    assert len({tuple(v) for v in values}) == 4
    np.testing.assert_allclose(both.numpy(), np.add(values[0], values[1]), rtol=1e-6)


def test_jitted_rand_draws_new_numbers_on_every_replay() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x + Tensor.rand(128, 1600)

    x = Tensor.zeros(128, 1600).contiguous().realize()
    Tensor.manual_seed(5)
    outs = [f(x).numpy() for _ in range(4)]
    assert len(f.jit_cache) == 2  # the counter increment, then one kernel that hashes and adds
    assert all(not np.array_equal(outs[i], outs[j]) for i in range(4) for j in range(i))
    Tensor.manual_seed(5)  # resets the device counter in place: the recording starts over too
    np.testing.assert_array_equal(f(x).numpy(), outs[0])
    GlobalCounters.reset()
    f(x)
    assert GlobalCounters.kernel_count == 2


def test_dropout_uses_the_device_stream(device: str) -> None:
    x = Tensor.ones(4, 100, device=device)
    with Tensor.train():
        Tensor.manual_seed(2)
        a = x.dropout(0.25).numpy()
        Tensor.manual_seed(2)
        b = nn.Dropout(0.25)(x).numpy()
        c = nn.Dropout(0.25, seed=3)(x).numpy()  # a stream of its own
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a).tolist()) <= {0.0, float(np.float32(1 / 0.75))} and 60 < int((a == 0).sum()) < 140
    assert not np.array_equal(a, c)
    assert x.dropout(0.5).tolist() == x.tolist()  # not training: identity


def test_random_dtypes_and_errors() -> None:
    assert Tensor.rand(3, dtype=dtypes.float16).dtype == dtypes.float16
    assert Tensor.randn(3, dtype=dtypes.float64).dtype == dtypes.float64
    assert Tensor.randint(3, low=0, high=2**31, dtype=dtypes.int64).dtype == dtypes.int64
    big = Tensor.randint(1000, low=0, high=2**32, dtype=dtypes.int64).numpy()
    assert big.min() >= 0 and big.max() < 2**32 and big.max() > 2**31
    k = Tensor.kaiming_uniform(64, 50).numpy()
    assert np.abs(k).max() <= math.sqrt(3) * math.sqrt(2 / (1 + 0.01**2)) / math.sqrt(50)
    with pytest.raises(ValueError, match="larger than 2\\*\\*32"):
        Tensor.randint(3, low=0, high=2**33)
    with pytest.raises(ValueError, match="low < high"):
        Tensor.randint(3, low=2, high=2)


def test_a_random_state_of_its_own() -> None:
    s1, s2 = RandomState(11), RandomState(11)
    a = Tensor(s1.bits((6,), "CPU")[0]).tolist()
    assert a == Tensor(s2.bits((6,), "CPU")[0]).tolist()
    assert a != Tensor(s1.bits((6,), "CPU")[0]).tolist()


def test_odd_shapes(device: str) -> None:
    assert Tensor.rand(0, 3, device=device).numpy().shape == (0, 3)
    scalar = Tensor.rand(device=device)
    assert scalar.shape == () and 0 <= scalar.item() < 1
    x = Tensor.rand(2, 1, 3, device=device).numpy()
    assert x.shape == (2, 1, 3) and len(np.unique(x)) == 6  # every element its own index


def test_uniform_dtype_and_rand_contiguous() -> None:
    """uniform(dtype=) draws in float and then casts (ints are floors of the floats), as tinygrad; rand accepts
    tinygrad's contiguous= hint."""
    Tensor.manual_seed(3)
    x = Tensor.uniform(1000, low=2, high=5, dtype="int32").numpy()
    assert x.dtype == np.int32 and x.min() == 2 and x.max() == 4
    h = Tensor.uniform(8, low=-1.0, high=1.0, dtype=dtypes.float16)
    assert h.dtype == dtypes.float16 and bool(((h >= -1) & (h < 1)).all().item())
    assert Tensor.rand(3, contiguous=False).shape == (3,)
