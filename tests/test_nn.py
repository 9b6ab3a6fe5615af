"""tg_nn layers against numpy formulas, their default initialisations, and state round trips of whole models."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import numpy as np
import pytest

from tg import Device, Tensor, dtypes, nn
from tg_nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save


@pytest.fixture
def on_device(device: str) -> Iterator[str]:
    """Layers create their weights on Device.DEFAULT: point it at the device under test."""
    prev = Device.DEFAULT
    Device.DEFAULT = device
    try:
        yield device
    finally:
        Device.DEFAULT = prev


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _conv2d_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int = 1, padding: int = 0) -> np.ndarray:
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    out = np.einsum("nchwij,ocij->nohw", win, w)
    return out + b.reshape(1, -1, 1, 1) if b is not None else out


def test_linear_matches_numpy(on_device: str) -> None:
    layer = nn.Linear(5, 3)
    x = _rand(4, 5)
    ref = x @ layer.weight.numpy().T + layer.bias.numpy()  # type: ignore[union-attr]
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5)
    assert nn.Linear(5, 3, bias=False).bias is None


def test_conv2d_matches_numpy(on_device: str) -> None:
    conv = nn.Conv2d(2, 3, 3, stride=1, padding=1)
    x = _rand(2, 2, 5, 5)
    ref = _conv2d_ref(x, conv.weight.numpy(), conv.bias.numpy(), padding=1)  # type: ignore[union-attr]
    np.testing.assert_allclose(conv(Tensor(x)).numpy(), ref, rtol=1e-4, atol=1e-5)


def test_conv2d_stride_and_conv1d() -> None:
    conv = nn.Conv2d(1, 2, (2, 2), stride=2, bias=False)
    x = _rand(1, 1, 6, 6)
    np.testing.assert_allclose(conv(Tensor(x)).numpy(), _conv2d_ref(x, conv.weight.numpy(), None, 2), rtol=1e-5)
    c1 = nn.Conv1d(2, 3, 3)
    x1 = _rand(2, 2, 7)
    ref = _conv2d_ref(x1[:, :, None, :], c1.weight.numpy()[:, :, None, :], c1.bias.numpy())[:, :, 0]  # type: ignore
    np.testing.assert_allclose(c1(Tensor(x1)).numpy(), ref, rtol=1e-4, atol=1e-5)


def test_conv_transpose2d_matches_numpy() -> None:
    layer = nn.ConvTranspose2d(2, 3, 3, stride=2)
    x = _rand(1, 2, 3, 3)
    w, b = layer.weight.numpy(), layer.bias.numpy()  # type: ignore[union-attr]
    ref = np.zeros((1, 3, 7, 7), np.float32)
    for i in range(3):
        for j in range(3):
            ref[:, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3] += np.einsum("nc,cokl->nokl", x[:, :, i, j], w)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), ref + b.reshape(1, -1, 1, 1), rtol=1e-4, atol=1e-5)
    assert nn.ConvTranspose1d(2, 3, 3)(Tensor(_rand(1, 2, 5))).shape == (1, 3, 7)


def test_default_initialisations_follow_tinygrad() -> None:
    Tensor.manual_seed(1)
    lin = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w, b = lin.weight.numpy(), lin.bias.numpy()  # type: ignore[union-attr]
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound and abs(w.mean()) < 0.01 * bound
    assert np.abs(b).max() <= bound
    conv = nn.Conv2d(16, 8, 3)
    cbound = 1 / math.sqrt(16 * 9)
    assert np.abs(conv.weight.numpy()).max() <= cbound and np.abs(conv.bias.numpy()).max() <= cbound  # type: ignore
    emb = nn.Embedding(100, 50)
    gbound = math.sqrt(6 / 150)
    assert np.abs(emb.weight.numpy()).max() <= gbound and np.abs(emb.weight.numpy()).max() > 0.95 * gbound
    bn = nn.BatchNorm2d(4)
    assert bn.weight.tolist() == [1.0] * 4 and bn.bias.tolist() == [0.0] * 4  # type: ignore[union-attr]
    assert bn.running_var.tolist() == [1.0] * 4 and bn.running_mean.requires_grad is False


def test_manual_seed_makes_layers_reproducible() -> None:
    Tensor.manual_seed(7)
    a = nn.Linear(3, 3).weight.numpy()
    Tensor.manual_seed(7)
    np.testing.assert_array_equal(nn.Linear(3, 3).weight.numpy(), a)


def test_batchnorm_training_and_eval(on_device: str) -> None:
    bn = nn.BatchNorm2d(3, momentum=0.1)
    x = _rand(4, 3, 2, 2) * 2 + 1
    with Tensor.train():
        y = bn(Tensor(x)).numpy()
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    ref = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * x.var(axis=(0, 2, 3), ddof=1), rtol=1e-4)
    assert bn.num_batches_tracked.tolist() == [1]
    rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
    y_eval = bn(Tensor(x)).numpy()  # eval mode: the running statistics
    np.testing.assert_allclose(y_eval, (x - rm.reshape(1, 3, 1, 1)) / np.sqrt(rv.reshape(1, 3, 1, 1) + 1e-5), rtol=1e-4)


def test_layernorm_groupnorm_instancenorm_rmsnorm(on_device: str) -> None:
    x = _rand(2, 4, 3, 3)

    def norm(a: np.ndarray, axes: tuple[int, ...], eps: float = 1e-5) -> np.ndarray:
        return (a - a.mean(axis=axes, keepdims=True)) / np.sqrt(a.var(axis=axes, keepdims=True) + eps)

    np.testing.assert_allclose(nn.LayerNorm(3)(Tensor(x)).numpy(), norm(x, (-1,)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(nn.LayerNorm((3, 3))(Tensor(x)).numpy(), norm(x, (-2, -1)), rtol=1e-4, atol=1e-4)
    ln2 = nn.LayerNorm2d(4)(Tensor(x)).numpy()
    np.testing.assert_allclose(ln2, norm(x, (1,)), rtol=1e-4, atol=1e-4)
    gn = nn.GroupNorm(2, 4)(Tensor(x)).numpy()
    np.testing.assert_allclose(gn, norm(x.reshape(2, 2, -1), (2,)).reshape(x.shape), rtol=1e-4, atol=1e-4)
    inn = nn.InstanceNorm(4)(Tensor(x)).numpy()
    np.testing.assert_allclose(inn, norm(x, (2, 3)), rtol=1e-4, atol=1e-4)
    rms = nn.RMSNorm(3)(Tensor(x)).numpy()
    np.testing.assert_allclose(rms, x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6), rtol=1e-4, atol=1e-4)


def test_embedding_and_lstm_cell(on_device: str) -> None:
    emb = nn.Embedding(6, 3)
    idx = np.array([[0, 5], [2, 2]], np.int32)
    np.testing.assert_allclose(emb(Tensor(idx)).numpy(), emb.weight.numpy()[idx], rtol=1e-6)
    cell = nn.LSTMCell(3, 2)
    x, h, c = _rand(2, 3), _rand(2, 2, seed=1), _rand(2, 2, seed=2)
    new_h, new_c = cell(Tensor(x), (Tensor(h), Tensor(c)))
    wi, wh = cell.weight_ih.numpy(), cell.weight_hh.numpy()
    gates = x @ wi.T + cell.bias_ih.numpy() + h @ wh.T + cell.bias_hh.numpy()  # type: ignore[union-attr]
    i, f, g, o = np.split(gates, 4, axis=1)

    def sig(v: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-v))

    ref_c = sig(f) * c + sig(i) * np.tanh(g)
    np.testing.assert_allclose(new_c.numpy(), ref_c, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(new_h.numpy(), sig(o) * np.tanh(ref_c), rtol=1e-4, atol=1e-5)


def test_bad_layer_arguments_raise() -> None:
    with pytest.raises(ValueError, match="in_features must be a positive int, got 0"):
        nn.Linear(0, 3)
    with pytest.raises(ValueError, match="does not end in in_features=3"):
        nn.Linear(3, 2)(Tensor.ones(2, 4))
    with pytest.raises(ValueError, match="groups=2 must divide"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match=r"expected input of shape \(N, 4, ...\)"):
        nn.BatchNorm2d(4)(Tensor.ones(2, 3, 2, 2))
    with pytest.raises(ValueError, match="num_groups=3 must divide num_channels=4"):
        nn.GroupNorm(3, 4)
    with pytest.raises(TypeError, match="indices must be integers"):
        nn.Embedding(4, 2)(Tensor([0.5]))


class TinyNet:
    def __init__(self) -> None:
        self.c1 = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.l1 = nn.Linear(8, 3)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l1(self.bn(self.c1(x)).relu().max_pool2d((2, 2)).flatten(1))


def test_model_state_round_trip_through_safetensors(tmp_path: os.PathLike[str]) -> None:
    Tensor.manual_seed(3)
    a, b = TinyNet(), TinyNet()
    assert sorted(get_state_dict(a)) == [
        "bn.bias", "bn.num_batches_tracked", "bn.running_mean", "bn.running_var", "bn.weight",
        "c1.bias", "c1.weight", "l1.bias", "l1.weight",
    ]  # fmt: skip
    assert len(get_parameters(a)) == 9
    path = os.path.join(tmp_path, "net.safetensors")
    safe_save(get_state_dict(a), path)
    load_state_dict(b, safe_load(path))
    x = Tensor(_rand(2, 1, 6, 6))
    np.testing.assert_allclose(b(x).numpy(), a(x).numpy(), rtol=1e-6)
    assert b.bn.num_batches_tracked.dtype == dtypes.int32


def test_dropout_layer(on_device: str) -> None:
    x = Tensor(np.ones((4, 50), np.float32))
    assert nn.Dropout(0.5)(x).tolist() == x.tolist()  # eval mode: identity
    with Tensor.train():
        a = nn.Dropout(0.25, seed=9)(x).numpy()
        b = nn.Dropout(0.25, seed=9)(x).numpy()
        c = nn.Dropout(0.25, seed=10)(x).numpy()
    np.testing.assert_array_equal(a, b)  # same seed, same mask
    assert not np.array_equal(a, c)
    assert set(np.unique(a).tolist()) <= {0.0, float(np.float32(1 / 0.75))} and 25 < int((a == 0).sum()) < 75
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):  # one range with Tensor.dropout
        nn.Dropout(1.5)
    with Tensor.train():
        assert not nn.Dropout(1.0, seed=9)(x).numpy().any()  # p=1 drops everything (as torch)
