"""Tokenizers from GGUF metadata: round trips, the merges applied as a reference BPE would, special tokens."""

from __future__ import annotations

import pathlib

import pytest

from tg_llm.random_model import CORPUS, bpe_vocab, spm_vocab, write_random_gguf
from tg_llm.tokenizer import Tokenizer, byte_encoder
from tg_nn.gguf import gguf_read_header

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces and trailing  ",
    "naïve café déjà vu",
    "emoji 🙂 and 中文",
    "numbers 1234567 and 3.14",
    "tabs\tand\nnew lines\n\n",
    "it's we'll",
    "snake_case_name",
    "",
]


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def tok(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    path = tmp_path_factory.mktemp("t") / "m.gguf"
    write_random_gguf(path, tokenizer=request.param, n_layers=1, dim=32, hidden_dim=32)
    return Tokenizer.from_gguf(gguf_read_header(path).metadata)


def test_round_trip(tok: Tokenizer) -> None:
    for text in TEXTS + [CORPUS]:
        ids = tok.encode(text, add_bos=False)
        assert tok.decode(ids) == text, (tok.model, text, ids)
        # streaming keeps sentencepiece's added leading space (decode drops it: it was not in the text)
        assert "".join(tok.stream(ids)) == (" " + text if tok.model == "llama" and text else text)


def test_special_tokens(tok: Tokenizer) -> None:
    special = "<|eot_id|>" if tok.model == "gpt2" else "</s>"
    ids = tok.encode(f"hi{special}there", add_bos=False)
    assert tok.ids[special] in ids and tok.ids[special] in tok.stop_ids
    assert tok.decode(ids) == "hithere" and tok.decode(ids, skip_special=False) == f"hi{special}there"
    assert tok.ids[special] not in tok.encode(f"hi{special}", allow_special=False)
    assert tok.encode("x")[0] == tok.bos_id if tok.add_bos else tok.bos_id not in tok.encode("x")


def _reference_bpe(word: str, merges: list[str]) -> list[str]:
    """Merges applied one at a time in rank order, each everywhere in the word (the definition of BPE)."""
    parts = list(word)
    for m in merges:
        a, b = m.split(" ")
        i = 0
        while i < len(parts) - 1:
            if parts[i] == a and parts[i + 1] == b:
                parts[i : i + 2] = [a + b]
            else:
                i += 1
    return parts


def test_bpe_matches_reference_merges() -> None:
    tokens, merges, types = bpe_vocab()
    tok = Tokenizer(tokens, merges=merges, token_types=types, pre="llama-bpe")
    enc = byte_encoder()
    for text in TEXTS + CORPUS.split(" "):
        assert tok.pre is not None
        for word in tok.pre.split(text):
            mapped = "".join(enc[b] for b in word.encode())
            assert [tok.tokens[i] for i in tok.encode(word)] == _reference_bpe(mapped, merges), word
    words = ["Hello", " world", "'s", " ", "123", "45", "!!\n\n", " x"]
    assert tok.pre.split("Hello world's 12345!!\n\n x") == words
    assert [tok.tokens[i] for i in tok.encode(" the")] == ["Ġthe"]  # a whole word the merges learned


def test_spm_scores_and_byte_fallback() -> None:
    tokens, scores, types = spm_vocab()
    tok = Tokenizer(tokens, scores=scores, token_types=types, model="llama", bos_id=1, eos_id=2, add_bos=True)
    ids = tok.encode("🙂")
    assert ids[0] == 1 and [tok.tokens[i] for i in ids[1:]][-4:] == ["<0xF0>", "<0x9F>", "<0x99>", "<0x82>"]
    assert tok.decode(ids) == "🙂"
    pieces = [tok.tokens[i] for i in tok.encode(" the", add_bos=False)]
    assert "".join(pieces) == "▁▁the" and all(p in tok.ids for p in pieces)


def test_bad_input() -> None:
    tok = Tokenizer(["a"])
    with pytest.raises(TypeError, match="expected a str"):
        tok.encode(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="token id 5 is not in 0..0"):
        tok.decode([5])
    with pytest.raises(ValueError, match="tokenizer model 'bert' is not supported"):
        Tokenizer(["a"], model="bert")
    with pytest.raises(ValueError, match="no tokenizer.ggml.tokens"):
        Tokenizer.from_gguf({})


def test_gguf_stores_the_vocab(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.gguf"
    write_random_gguf(path, n_layers=1, dim=32, hidden_dim=32, vocab_size=600)
    meta = gguf_read_header(path).metadata
    tokens, merges, _ = bpe_vocab()
    assert meta["tokenizer.ggml.tokens"][: len(tokens)] == tokens and meta["tokenizer.ggml.merges"] == merges
    assert len(meta["tokenizer.ggml.tokens"]) == 600


def _reference_spm(tok: Tokenizer, text: str) -> list[str]:
    """Sentencepiece by its definition: rescan for the best-scoring mergeable pair (leftmost on ties)."""
    parts = list(text)
    while True:
        cands = [(tok.scores[tok.ids[a + b]], -i) for i, (a, b) in enumerate(zip(parts, parts[1:])) if a + b in tok.ids]
        if not cands:
            return parts
        _, neg = max(cands)
        parts[-neg : -neg + 2] = [parts[-neg] + parts[-neg + 1]]


def test_spm_matches_reference() -> None:
    tokens, scores, types = spm_vocab()
    tok = Tokenizer(tokens, scores=scores, token_types=types, model="llama", bos_id=1, add_bos=False)
    for text in TEXTS + [CORPUS, CORPUS * 3]:
        want = _reference_spm(tok, "▁" + text.replace(" ", "▁")) if text else []
        got = tok.encode(text)
        assert [tok.tokens[i] for i in got if tok.types[i] != 6] == [p for p in want if p in tok.ids], text
        assert tok.decode(got) == text
