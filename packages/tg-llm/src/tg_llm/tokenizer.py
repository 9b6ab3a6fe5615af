"""Tokenizers from a GGUF file's metadata: byte-level BPE (gpt2/llama3/qwen2 style) and sentencepiece (llama).

`tokenizer.ggml.model` says which: "gpt2" is byte-level BPE (every byte is a printable character, the
text is split by the file's pre-tokenizer (tg_llm.pretokenizer), then the file's merges are applied by
rank); "llama" is
sentencepiece (spaces become "▁", the highest-scoring adjacent pair in the vocabulary is merged
first, and characters outside it fall back to <0xNN> byte tokens). Control tokens (`<|eot_id|>`, `<s>`)
are matched whole in the text when `allow_special`, user-defined ones always, longest first, as llama.cpp does.

>>> tok = Tokenizer(["a", "b", "ab"], merges=["a b"])
>>> tok.encode("abab"), tok.decode(tok.encode("abab"))
([2, 2], 'abab')
"""

from __future__ import annotations

import codecs
import heapq
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from typing import Any

from tg_llm.pretokenizer import pre_tokenizer

__all__ = ["Tokenizer", "byte_encoder"]

# token types in tokenizer.ggml.token_type
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@cache
def byte_encoder() -> dict[int, str]:
    """GPT-2's map of the 256 bytes to printable characters (printable ASCII/Latin-1 keep their own)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


class Tokenizer:
    """Encode text to token ids and back. Build it with `from_gguf(metadata)`.

    `pre` is the file's `tokenizer.ggml.pre` (see tg_llm.pretokenizer); `bos_id`/`eos_id` must be ids of
    the vocabulary.
    """

    def __init__(
        self,
        tokens: list[str],
        merges: list[str] | None = None,
        scores: list[float] | None = None,
        token_types: list[int] | None = None,
        model: str = "gpt2",
        pre: str = "gpt-2",
        bos_id: int | None = None,
        eos_id: int | None = None,
        add_bos: bool = False,
        add_space_prefix: bool = True,
        chat_template: str | None = None,
    ) -> None:
        if model not in ("gpt2", "llama"):
            raise ValueError(f"Tokenizer: tokenizer model {model!r} is not supported (gpt2 or llama)")
        if not tokens:
            raise ValueError("Tokenizer: the vocabulary (tokenizer.ggml.tokens) is empty")
        for key, v in (("bos_token_id", bos_id), ("eos_token_id", eos_id)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(tokens)):
                raise ValueError(
                    f"Tokenizer: tokenizer.ggml.{key}={v!r} is not a token id (the vocabulary has {len(tokens)} tokens)"
                )
        self.tokens, self.model = tokens, model
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.types = token_types or [NORMAL] * len(tokens)
        self.scores = scores or [0.0] * len(tokens)
        self.ranks = {tuple(m.split(" ", 1)): i for i, m in enumerate(merges or [])}
        self.pre = pre_tokenizer(pre) if model == "gpt2" else None
        self.bos_id, self.eos_id, self.add_bos, self.add_space_prefix = bos_id, eos_id, add_bos, add_space_prefix
        self.chat_template = chat_template
        # matched whole in the text, longest first (llama.cpp's order); user-defined ones even without allow_special
        special = [(t, ty) for t, ty in zip(tokens, self.types) if ty in (CONTROL, USER_DEFINED, UNKNOWN) and t]
        self.specials = sorted(special, key=lambda s: -len(s[0]))
        self.byte_ids = {int(t[3:5], 16): i for i, t in enumerate(tokens) if self.types[i] == BYTE and len(t) == 6}
        self._byte_dec = {c: b for b, c in byte_encoder().items()}
        self._bpe_cache: dict[str, list[str]] = {}
        self.stop_ids = {i for i in (eos_id,) if i is not None} | {
            self.ids[t]
            for t in ("<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<|endoftext|>", "</s>", "<|end|>")
            if t in self.ids
        }

    @classmethod
    def from_gguf(cls, metadata: dict[str, Any]) -> Tokenizer:
        """The tokenizer stored in a GGUF file's metadata (`tokenizer.ggml.*`)."""
        if "tokenizer.ggml.tokens" not in metadata:
            raise ValueError("Tokenizer: the GGUF metadata has no tokenizer.ggml.tokens")

        def g(key: str, default: Any = None) -> Any:
            return metadata.get(f"tokenizer.ggml.{key}", default)

        model = str(g("model", "gpt2"))
        return cls(
            list(g("tokens")),
            merges=g("merges"),
            scores=g("scores"),
            token_types=g("token_type"),
            model=model,
            pre=str(g("pre", "")),
            bos_id=g("bos_token_id"),
            eos_id=g("eos_token_id"),
            add_bos=bool(g("add_bos_token", model == "llama")),
            add_space_prefix=bool(g("add_space_prefix", True)),
            chat_template=metadata.get("tokenizer.chat_template"),
        )

    # ---- encoding ----
    def encode(self, text: str, allow_special: bool = True, add_bos: bool | None = None) -> list[int]:
        """Token ids of `text`; control tokens written in the text are single tokens when allow_special
        (user-defined ones always are)."""
        if not isinstance(text, str):
            raise TypeError(f"Tokenizer.encode: expected a str, got {type(text).__name__}")
        out = [self.bos_id] if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None else []
        for i, part in enumerate(self._split_special(text, allow_special)):
            out += [part] if isinstance(part, int) else self._encode_plain(part, i == 0)
        return out

    def _split_special(self, text: str, allow_special: bool) -> list[str | int]:
        """`text` cut around the special tokens written in it (their ids), each token's every occurrence in
        turn, longest token first."""
        parts: list[str | int] = [text] if text else []
        for t, ty in self.specials:
            if ty != USER_DEFINED and not allow_special:
                continue
            cut: list[str | int] = []
            for p in parts:
                if isinstance(p, int) or t not in p:
                    cut.append(p)
                    continue
                pieces = p.split(t)
                for j, piece in enumerate(pieces):
                    if j:
                        cut.append(self.ids[t])
                    if piece:
                        cut.append(piece)
            parts = cut
        return parts

    def _encode_plain(self, text: str, first: bool) -> list[int]:
        if self.pre is None:
            return self._spm(("▁" if first and self.add_space_prefix else "") + text.replace(" ", "▁"))
        enc = byte_encoder()
        out: list[int] = []
        for word in self.pre.split(text):
            for piece in self._bpe("".join(enc[b] for b in word.encode("utf-8"))):
                out.append(self.ids[piece])
        return out

    def _bpe(self, word: str) -> list[str]:
        """Merge the characters of one pre-token by the merges' ranks, lowest rank first (leftmost on ties)."""
        if (hit := self._bpe_cache.get(word)) is not None:
            return hit
        if self.pre is not None and self.pre.ignore_merges and word in self.ids:
            parts = [word]
        else:
            parts = _merge_pairs(list(word), lambda a, b: self.ranks.get((a, b)))
        # a piece the vocabulary lacks (a byte with no token: SmolLM2 has none for U+001D) has no id; llama.cpp
        # then looks up the piece's bytes one by one, which never match a byte-level vocabulary's tokens
        parts = [p for p in parts if p in self.ids]
        if len(word) <= 64:  # bounded: a server sees unbounded distinct words
            if len(self._bpe_cache) >= 100_000:
                self._bpe_cache.clear()
            self._bpe_cache[word] = parts
        return parts

    def _spm(self, text: str) -> list[int]:
        """Sentencepiece: merge the adjacent pair with the best score (leftmost on ties) while the merge is a
        vocabulary piece; characters outside the vocabulary become byte tokens."""

        def priority(a: str, b: str) -> float | None:
            tid = self.ids.get(a + b)
            return None if tid is None else -self.scores[tid]

        out = []
        for p in _merge_pairs(list(text), priority):
            if p in self.ids:
                out.append(self.ids[p])
                continue
            for b in p.encode("utf-8"):
                if b not in self.byte_ids:
                    raise ValueError(f"Tokenizer: {p!r} is not in the vocabulary and it has no byte token <0x{b:02X}>")
                out.append(self.byte_ids[b])
        return out

    # ---- decoding ----
    def token_bytes(self, i: int, skip_special: bool = True) -> bytes:
        """The bytes token `i` stands for (control tokens: b"" when skip_special, else their text)."""
        if not 0 <= i < len(self.tokens):
            raise ValueError(f"Tokenizer: token id {i} is not in 0..{len(self.tokens) - 1}")
        t, ty = self.tokens[i], self.types[i]
        if ty == CONTROL or ty == UNKNOWN:
            return b"" if skip_special else t.encode("utf-8")
        if ty == USER_DEFINED:
            return t.encode("utf-8")
        if self.model == "llama":
            if ty == BYTE:
                return bytes([int(t[3:5], 16)])
            return t.replace("▁", " ").encode("utf-8")
        return bytes(self._byte_dec[c] for c in t if c in self._byte_dec)

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """The text of `ids` (invalid UTF-8 becomes U+FFFD)."""
        text = b"".join(self.token_bytes(i, skip_special) for i in ids).decode("utf-8", errors="replace")
        return text[1:] if self.model == "llama" and self.add_space_prefix and text.startswith(" ") else text

    def stream(self, ids: Iterable[int]) -> Iterator[str]:
        """Text pieces as the tokens arrive, never splitting a UTF-8 character."""
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for i in ids:
            if s := dec.decode(self.token_bytes(i)):
                yield s
        if tail := dec.decode(b"", final=True):
            yield tail

    def __len__(self) -> int:
        return len(self.tokens)


def _merge_pairs(parts: list[str], priority: Callable[[str, str], float | None]) -> list[str]:
    """Merge adjacent symbols while some pair has a priority, the lowest first (the leftmost on ties). The pairs
    wait in a heap, so n symbols take O(n log n) (a long word of one repeated letter stays fast)."""
    sym: list[str | None] = list(parts)
    nxt = list(range(1, len(sym))) + [-1]
    prev = list(range(-1, len(sym) - 1))
    heap: list[tuple[float, int, str]] = []

    def push(i: int) -> None:  # the pair that starts at symbol i
        j = nxt[i] if i >= 0 else -1
        if j >= 0 and (a := sym[i]) is not None and (b := sym[j]) is not None:
            if (rank := priority(a, b)) is not None:
                heapq.heappush(heap, (rank, i, a + b))

    for i in range(len(sym) - 1):
        push(i)
    while heap:
        _, i, merged = heapq.heappop(heap)
        j = nxt[i]
        if j < 0 or sym[i] is None or sym[j] is None or f"{sym[i]}{sym[j]}" != merged:
            continue  # stale: one of the two was merged since
        sym[i], sym[j], nxt[i] = merged, None, nxt[j]
        if nxt[j] >= 0:
            prev[nxt[j]] = i
        push(prev[i])
        push(i)
    return [p for p in sym if p is not None]
