r"""Pre-tokenizers of byte-level BPE vocabularies: how a text is cut into words before the merges run.

A GGUF file names its pre-tokenizer in `tokenizer.ggml.pre`; each is one or more regexes applied in turn (every
piece the previous one made is split again, and the text between two matches is a piece too), as llama.cpp
runs them. The classes are Unicode's: letters \p{L} and numbers \p{N} by general category ("²", "¼", "Ⅻ" are
numbers), whitespace by the White_Space property.

| `tokenizer.ggml.pre` | stages |
|---|---|
| smollm, starcoder, refact, codeshell, command-r | every number character alone, then gpt2's regex |
| gpt-2 | `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+` |
| llama3, llama-v3, llama-bpe | llama 3's regex (numbers in runs of at most 3); a word in the vocabulary is one token |
| qwen2, deepseek-r1-qwen | llama 3's regex with every number character alone |
| default (or no key) | runs of punctuation, gpt2's regex, runs of numbers, then groups of three ASCII digits |

>>> pre_tokenizer("smollm").split("x  +  12")
['x', ' ', ' +', '  ', '1', '2']
>>> pre_tokenizer("llama-bpe").split("I'LL pay 12345!\n\n")
['I', "'LL", ' pay', ' ', '123', '45', '!\n\n']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from tg_llm._unicode import LETTERS, NUMBERS, PUNCTUATION, WHITESPACE, char_class

__all__ = ["PRE_TOKENIZERS", "PreTokenizer", "pre_tokenizer"]

# `tokenizer.ggml.pre` -> the stages it runs (names as llama.cpp reads them; "" is a file without the key)
PRE_TOKENIZERS = {
    **dict.fromkeys(["smollm", "starcoder", "refact", "codeshell", "command-r"], "smollm"),
    "gpt-2": "gpt2",
    **dict.fromkeys(["llama3", "llama-v3", "llama-bpe"], "llama3"),
    **dict.fromkeys(["qwen2", "deepseek-r1-qwen"], "qwen2"),
    **dict.fromkeys(["default", ""], "default"),
}


@cache
def _regexes() -> dict[str, str]:
    r"""The regexes of the stages, with the Unicode classes spelled out (built once: the classes are long)."""
    letter, number, space = char_class(LETTERS), char_class(NUMBERS), char_class(WHITESPACE)
    not_space = char_class(WHITESPACE, negate=True)
    other = char_class(WHITESPACE, LETTERS, NUMBERS, negate=True)  # [^\s\p{L}\p{N}]
    spaces = rf"{space}+(?!{not_space})|{space}+"  # \s+(?!\S)|\s+
    # llama 3's (?i:'s|...) as llama.cpp adapts it: ASCII case only (Python's (?i) also folds "ſ" to "s")
    contractions = "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"
    prefix = char_class(LETTERS, NUMBERS, negate=True, extra="\r\n")  # [^\r\n\p{L}\p{N}]

    def llama3(digits: str) -> str:
        return rf"{contractions}|{prefix}?{letter}+|{number}{digits}| ?{other}+[\r\n]*|{space}*[\r\n]+|{spaces}"

    return {
        "gpt2": rf"'s|'t|'re|'ve|'m|'ll|'d| ?{letter}+| ?{number}+| ?{other}+|{spaces}",
        "llama3": llama3("{1,3}"),
        "qwen2": llama3(""),
        "number": number,
        "numbers": number + "+",
        "punctuation": char_class(PUNCTUATION, extra="$+<=>^~|") + "+",
        "digits3": "[0-9]{3}",
    }


_STAGES = {
    "smollm": ("number", "gpt2"),
    "gpt2": ("gpt2",),
    "llama3": ("llama3",),
    "qwen2": ("qwen2",),
    "default": ("punctuation", "gpt2", "numbers", "digits3"),
}


@dataclass(frozen=True)
class PreTokenizer:
    """The regexes of one pre-tokenizer, applied in turn; `ignore_merges`: a word that is itself a token is not
    split by the merges (llama 3's rule)."""

    name: str
    stages: tuple[re.Pattern[str], ...]
    ignore_merges: bool = False

    def split(self, text: str) -> list[str]:
        """The words of `text`, in order; they join back to `text`."""
        pieces = [text] if text else []
        for rx in self.stages:
            out: list[str] = []
            for piece in pieces:
                at = 0
                for m in rx.finditer(piece):
                    if m.start() > at:  # text no alternative matched is a word of its own
                        out.append(piece[at : m.start()])
                    out.append(m.group())
                    at = m.end()
                if at < len(piece):
                    out.append(piece[at:])
            pieces = out
        return pieces


@cache
def pre_tokenizer(pre: str) -> PreTokenizer:
    """The pre-tokenizer a GGUF file's `tokenizer.ggml.pre` names (see the table above)."""
    kind = PRE_TOKENIZERS.get(pre)
    if kind is None:
        known = ", ".join(repr(k) for k in PRE_TOKENIZERS if k)
        raise ValueError(f"Tokenizer: tokenizer.ggml.pre={pre!r} is not a pre-tokenizer tg knows ({known})")
    regexes = _regexes()
    return PreTokenizer(kind, tuple(re.compile(regexes[s]) for s in _STAGES[kind]), ignore_merges=kind == "llama3")
