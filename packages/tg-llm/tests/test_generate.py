"""Sampling, stop strings, the chat template (jinja2 and the built-in fallback), the CLI and the KV-cache reuse."""

from __future__ import annotations

import io
import json
import pathlib

import numpy as np
import pytest

from tg_llm import load_model
from tg_llm.cli import main
from tg_llm.generate import Session, apply_chat_template, builtin_chat_template, sample
from tg_llm.random_model import write_random_gguf


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    p = tmp_path_factory.mktemp("gen") / "tiny.gguf"
    write_random_gguf(p, qtype="Q4_0", context_length=40, n_layers=1)
    return p


@pytest.fixture(scope="module")
def session(path: pathlib.Path) -> Session:
    return Session(*load_model(path, "CPU"))


def test_sample() -> None:
    logits = np.array([1.0, 3.0, 2.0, -1.0])
    rng = np.random.default_rng(0)
    assert sample(logits, 0.0) == 1
    assert {sample(logits, 1.0, top_k=1, rng=rng) for _ in range(20)} == {1}
    assert {sample(logits, 1.0, top_k=2, rng=rng) for _ in range(200)} == {1, 2}
    assert {sample(logits, 1.0, top_p=0.5, rng=rng) for _ in range(50)} == {1}  # p(1) = 0.64 already covers 0.5
    draws = [sample(logits, 1.0, rng=rng) for _ in range(4000)]
    p = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / 4000, p, atol=0.03)
    with pytest.raises(ValueError, match="temperature >= 0"):
        sample(logits, -1.0)


def test_chat_template_jinja_equals_builtin(session: Session) -> None:
    tok = session.tokenizer
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi! "}]
    bos = tok.tokens[tok.bos_id] if tok.bos_id is not None else ""
    rendered = apply_chat_template(tok, msgs)
    assert rendered == builtin_chat_template(tok, msgs, True, bos)
    assert rendered.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n") and "Hi!<|eot_id|>" in rendered
    ids = session.encode_chat(msgs)
    assert ids.count(tok.bos_id) == 1 and ids[0] == tok.bos_id
    with pytest.raises(ValueError, match="'role' and 'content'"):
        apply_chat_template(tok, [{"role": "user"}])


def test_generation_reuses_the_cache_and_equals_a_fresh_run(session: Session, path: pathlib.Path) -> None:
    prompt = session.tokenizer.encode("The quick brown")
    first = [c for _, c in session.generate(prompt, max_tokens=5, temperature=0)][-1]
    longer = prompt + first.tokens[:3]
    again = [c for _, c in session.generate(longer, max_tokens=4, temperature=0)][-1]  # prefills only the new part
    fresh = Session(*load_model(path, "CPU"))
    want = [c for _, c in fresh.generate(longer, max_tokens=4, temperature=0)][-1]
    assert again.tokens == want.tokens and first.tokens[3:5] == want.tokens[:2]
    assert again.finish_reason == "length" and len(again.tokens) == 4


def test_stop_strings_are_cut_and_never_streamed(session: Session) -> None:
    prompt = session.tokenizer.encode("Hello")
    full = "".join(p for p, _ in session.generate(prompt, max_tokens=10, temperature=0))
    stop = full[3:5]
    pieces = [p for p, _ in session.generate(prompt, max_tokens=10, temperature=0, stop=[stop])]
    assert "".join(pieces) == full[: full.index(stop)] and stop not in "".join(pieces)


def test_cli_prompt_and_benchmark(path: pathlib.Path) -> None:
    out = io.StringIO()
    assert (
        main(
            ["--model", str(path), "--device", "CPU", "--prompt", "Hi", "--max-tokens", "4", "--temperature", "0"],
            stdout=out,
        )
        == 0
    )
    assert out.getvalue().endswith("\n")
    out = io.StringIO()
    assert main(["--model", str(path), "--device", "CPU", "--benchmark", "3"], stdout=out) == 0
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["bench"] for x in lines] == ["llm_load", "llm_prefill", "llm_decode", "llm_decode_bandwidth"]
    assert all(x["value"] > 0 for x in lines)
    chat_in = io.StringIO("hello\n/exit\n")
    out = io.StringIO()
    assert main(["--model", str(path), "--device", "CPU", "--max-tokens", "3"], stdin=chat_in, stdout=out) == 0
    assert out.getvalue().startswith("> ") and out.getvalue().count("> ") == 2


def test_cli_bad_file(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00")
    assert main(["--model", str(bad), "--prompt", "x"]) == 1
    assert "truncated or corrupt" in capsys.readouterr().err


def test_cli_prompt_longer_than_context(path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI names the prompt's length and the context (it said 'max_tokens=-N must be a positive int')."""
    assert main(["--model", str(path), "--device", "CPU", "--prompt", "hello world " * 30]) == 1
    err = capsys.readouterr().err
    assert "the context holds 40" in err and "the prompt has" in err and "max_tokens" not in err
