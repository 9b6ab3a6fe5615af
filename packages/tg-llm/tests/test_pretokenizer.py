"""The pre-tokenizers' Unicode classes and splits, from the regexes' definitions (no vocabulary needed).

The expected splits follow from the regexes as written in each model's tokenizer.json and in llama.cpp's
llama-vocab.cpp (which runs them): see tg_llm.pretokenizer's table. test_real_model.py checks the smollm one
against llama.cpp's own token ids on the SmolLM2 file.
"""

from __future__ import annotations

import unicodedata

import pytest

from tg_llm._unicode import LETTERS, NUMBERS, PUNCTUATION, UNICODE_VERSION, WHITESPACE
from tg_llm.pretokenizer import PRE_TOKENIZERS, pre_tokenizer


def _ranges(first_letter: str) -> str:
    """The code point ranges of the general categories starting with `first_letter`, in _unicode's format."""
    out, start = [], None
    for cp in range(0x110001):
        inside = cp <= 0x10FFFF and unicodedata.category(chr(cp))[0] == first_letter
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            out.append(f"{start:x}" if start == cp - 1 else f"{start:x}-{cp - 1:x}")
            start = None
    return " ".join(out)


@pytest.mark.skipif(
    unicodedata.unidata_version != UNICODE_VERSION,
    reason=f"the tables are Unicode {UNICODE_VERSION}'s; this Python has {unicodedata.unidata_version}",
)
def test_unicode_tables_are_the_categories() -> None:
    for table, first in ((LETTERS, "L"), (NUMBERS, "N"), (PUNCTUATION, "P")):
        assert table.split() == _ranges(first).split(), first


def test_whitespace_is_the_white_space_property() -> None:
    """White_Space is str.isspace() less U+001C..U+001F (separators Python counts as space, Unicode does not)."""
    listed = set()
    for part in WHITESPACE.split():
        lo, _, hi = part.partition("-")
        listed |= set(range(int(lo, 16), int(hi or lo, 16) + 1))
    assert listed == {cp for cp in range(0x110000) if chr(cp).isspace()} - set(range(0x1C, 0x20))


SPLITS = {
    # the issue's cases: digits alone first, then gpt2's regex (whose \s+(?!\S) leaves the last space to " +")
    "smollm": [
        ("x  +  1", ["x", " ", " +", "  ", "1"]),
        ("count:    42", ["count", ":", "    ", "4", "2"]),
        ("a ¼ cup", ["a", " ", "¼", " cup"]),
        ("x² + Ⅻ", ["x", "²", " +", " ", "Ⅻ"]),
        ("it's 2026.\n\tok", ["it", "'s", " ", "2", "0", "2", "6", ".", "\n", "\t", "ok"]),
        ("IT'S", ["IT", "'", "S"]),  # gpt2's contractions are lowercase only
    ],
    "gpt2": [
        ("x  +  12", ["x", " ", " +", " ", " 12"]),  # the digits keep the space before them
        ("a ¼ cup", ["a", " ¼", " cup"]),
        ("\u3000日本\u00a0語", ["\u3000", "日本", "\u00a0", "語"]),  # \s, but not the " " before a word
        ("a \x1cb", ["a", " \x1c", "b"]),  # U+001C is not \s here (Python's \s says it is)
    ],
    "llama3": [
        ("I'LL pay 12345!\n\n", ["I", "'LL", " pay", " ", "123", "45", "!\n\n"]),
        ("x² = ¼", ["x", "²", " =", " ", "¼"]),
        ("  foo\n  bar", [" ", " foo", "\n", " ", " bar"]),
        ("'ſx", ["'ſx"]),  # (?i:'s) is ASCII case only in llama.cpp (Python's (?i) folds "ſ" to "s")
    ],
    "qwen2": [("I'LL pay 12345", ["I", "'LL", " pay", " ", "1", "2", "3", "4", "5"])],
    "default": [("a+b=12345;", ["a", "+", "b", "=", "123", "45", ";"])],
}


@pytest.mark.parametrize("kind", sorted(SPLITS))
def test_splits(kind: str) -> None:
    name = next(k for k, v in PRE_TOKENIZERS.items() if v == kind)
    pre = pre_tokenizer(name)
    for text, want in SPLITS[kind]:
        assert pre.split(text) == want, (kind, text)
        assert "".join(pre.split(text)) == text


def test_unknown_pre_tokenizer_is_named() -> None:
    with pytest.raises(ValueError, match=r"tokenizer.ggml.pre='tekken' is not a pre-tokenizer tg knows \('smollm'"):
        pre_tokenizer("tekken")
