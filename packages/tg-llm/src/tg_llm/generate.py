"""Text generation: sampling (temperature, top-k, top-p: tg_nn.models.sampling.sample, which tg_nn.models.gpt uses too),
stop strings, the chat template, and a session that keeps the KV cache of the previous turns (a new prompt only
prefills what differs from the last one).

>>> import numpy as np
>>> sample(np.array([0.0, 5.0, 1.0]), temperature=0.0)
1
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tg_llm.model import Llama
from tg_llm.tokenizer import Tokenizer
from tg_nn.models.sampling import sample

__all__ = ["Completion", "Decoding", "Session", "apply_chat_template", "sample"]


_BUILTIN = {
    # the formats the built-in fallback knows, picked by the special tokens in the vocabulary
    "llama3": (
        "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    "chatml": ("<|im_start|>{role}\n{content}<|im_end|>\n", "<|im_start|>assistant\n"),
}


def apply_chat_template(tok: Tokenizer, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    """The prompt text of a conversation: the file's Jinja chat template when jinja2 is installed (the `chat`
    extra), else a built-in one for the file's special tokens (llama3, chatml, or Llama 2's [INST])."""
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"chat: each message needs a string 'role' and 'content', got {m!r:.200}")
    bos = tok.tokens[tok.bos_id] if tok.bos_id is not None else ""
    eos = tok.tokens[tok.eos_id] if tok.eos_id is not None else ""
    if tok.chat_template:
        try:
            return _jinja(tok.chat_template, messages, add_generation_prompt, bos, eos)
        except ImportError:
            pass
    return builtin_chat_template(tok, messages, add_generation_prompt, bos)


def builtin_chat_template(tok: Tokenizer, messages: list[dict[str, Any]], add_generation_prompt: bool, bos: str) -> str:
    kind = "llama3" if "<|start_header_id|>" in tok.ids else "chatml" if "<|im_start|>" in tok.ids else None
    if kind is None:  # Llama 2: [INST] user [/INST] answer
        out, system = bos, ""
        for m in messages:
            if m["role"] == "system":
                system = f"<<SYS>>\n{m['content']}\n<</SYS>>\n\n"
            elif m["role"] == "user":
                out += f"[INST] {system}{m['content'].strip()} [/INST]"
                system = ""
            else:
                out += f" {m['content'].strip()} "
        return out
    turn, prompt = _BUILTIN[kind]
    text = (bos if kind == "llama3" else "") + "".join(
        turn.format(role=m["role"], content=m["content"].strip() if kind == "llama3" else m["content"])
        for m in messages
    )
    return text + (prompt if add_generation_prompt else "")


def _jinja(template: str, messages: list[dict[str, Any]], add_generation_prompt: bool, bos: str, eos: str) -> str:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(f"chat template: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=messages, add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos
    )


@dataclass
class Completion:
    """What one generation produced."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    finish_reason: str = "length"
    prefill_s: float = 0.0
    decode_s: float = 0.0


class Session:
    """A model and tokenizer with the tokens now in the KV cache, so the next prompt prefills only its new part."""

    def __init__(self, model: Llama, tokenizer: Tokenizer) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.cached: list[int] = []  # tokens whose keys/values are in the cache at positions 0..len-1

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        ids = self.tokenizer.encode(apply_chat_template(self.tokenizer, messages), add_bos=True)
        if len(ids) > 1 and ids[0] == ids[1] == self.tokenizer.bos_id:  # the template wrote BOS too
            ids = ids[1:]
        return ids

    def prefill(self, prompt: list[int]) -> np.ndarray:
        """Logits after the prompt, reusing the cached tokens it starts with."""
        ctx = self.model.cfg.context_length
        if not prompt:
            raise ValueError("generate: the prompt is empty")
        if len(prompt) >= ctx:
            raise ValueError(
                f"generate: the prompt has {len(prompt)} tokens; the context holds {ctx} (prompt + answer)"
            )
        same = 0
        for a, b in zip(self.cached, prompt):
            if a != b:
                break
            same += 1
        same = min(same, len(prompt) - 1)  # at least one token runs, for its logits
        logits: np.ndarray = self.model.forward(prompt[same:], same, all_logits=False).numpy()[-1]
        self.cached = list(prompt)
        return logits

    def generate(
        self,
        prompt: list[int],
        max_tokens: int = 256,
        temperature: float = 0.7,
        top_p: float = 1.0,
        top_k: int = 0,
        stop: list[str] | None = None,
        seed: int | None = None,
    ) -> Generator[tuple[str, Completion]]:
        """Yield (new text, completion so far) as tokens come; the last yield has the finish_reason set.

        Stops at an end-of-turn token ("stop"), a stop string ("stop", not included), max_tokens or the end
        of the context ("length").
        """
        state = Decoding(self.tokenizer, len(prompt), max_tokens, temperature, top_p, top_k, stop, seed)
        t0 = time.perf_counter()
        logits = self.prefill(prompt)
        state.out.prefill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        greedy: Iterator[int] | None = None  # temperature 0: steps chained on the device (Llama.greedy_tokens)
        tok = state.sample(logits)
        while True:
            yield from state.push(tok)
            pos = len(self.cached)
            if state.done or pos >= self.model.cfg.context_length:
                break
            if temperature == 0:
                if greedy is None:  # as many as the loop can still take: it stops before they run out
                    n = min(max_tokens - len(state.out.tokens), self.model.cfg.context_length - pos)
                    greedy = self.model.greedy_tokens(tok, pos, n, chunk=8)
                following = next(greedy)
            else:
                following = state.sample(self.model.forward([tok], pos).numpy()[0])
            self.cached.append(tok)
            tok = following
        state.out.decode_s = time.perf_counter() - t0
        yield from state.finish()


class Decoding:
    """One generation's text after its prompt: the sampler (its own seeded generator), the token limit, end-of-turn
    tokens, stop strings (text held back while it may be the start of one) and UTF-8 pieces. Session.generate
    and the server's batched decode (tg_llm.scheduler) feed it tokens; it says when the generation is `done`."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_tokens: int,
        max_tokens: int = 256,
        temperature: float = 0.7,
        top_p: float = 1.0,
        top_k: int = 0,
        stop: list[str] | None = None,
        seed: int | None = None,
    ) -> None:
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"generate: max_tokens={max_tokens!r} must be a positive int")
        self.tokenizer, self.max_tokens = tokenizer, max_tokens
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.rng = np.random.default_rng(seed)
        self.out = Completion(prompt_tokens=prompt_tokens)
        self.stops = [s for s in (stop or []) if s]
        self.pending, self.dec, self.matched, self.done = "", _Utf8Stream(tokenizer), False, False

    def sample(self, logits: np.ndarray) -> int:
        return sample(logits, self.temperature, self.top_k, self.top_p, self.rng)

    def push(self, tok: int) -> list[tuple[str, Completion]]:
        """Take the next token: the text it completes, as (piece, completion so far) pairs (none or one)."""
        out = self.out
        if tok in self.tokenizer.stop_ids:
            out.finish_reason, self.done = "stop", True
            return []
        out.tokens.append(tok)
        self.pending += self.dec.push(tok)
        cut = min((i for i in (self.pending.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            out.text += self.pending[:cut]
            out.finish_reason, self.matched, self.done = "stop", True, True
            return [(self.pending[:cut], out)]
        hold = max((_overlap(self.pending, s) for s in self.stops), default=0)  # a stop string may be starting
        ready, self.pending = self.pending[: len(self.pending) - hold], self.pending[len(self.pending) - hold :]
        self.done = len(out.tokens) >= self.max_tokens
        if ready:
            out.text += ready
            return [(ready, out)]
        return []

    def finish(self) -> list[tuple[str, Completion]]:
        """The text held back (for a stop string that never came), then the last ("", completion)."""
        pieces = []
        if not self.matched and (pending := self.pending + self.dec.flush()):
            self.out.text += pending
            pieces.append((pending, self.out))
        self.pending = ""
        return [*pieces, ("", self.out)]


def _overlap(text: str, stop: str) -> int:
    """Length of the longest end of `text` that is a start of `stop`."""
    for n in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0


class _Utf8Stream:
    def __init__(self, tok: Tokenizer) -> None:
        import codecs

        self.tok, self.dec = tok, codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, i: int) -> str:
        return str(self.dec.decode(self.tok.token_bytes(i)))

    def flush(self) -> str:
        return str(self.dec.decode(b"", final=True))
