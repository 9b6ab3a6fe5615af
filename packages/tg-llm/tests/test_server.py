"""The OpenAI-compatible server answers the real `openai` client; bad requests get OpenAI error JSON."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import openai
import pytest

from tg_llm import load_model
from tg_llm.generate import Session
from tg_llm.random_model import write_random_gguf
from tg_llm.server import LLMServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LLMServer]:
    path = tmp_path_factory.mktemp("srv") / "tiny.gguf"
    write_random_gguf(path, qtype="Q8_0", context_length=48, n_layers=1)
    model, tok = load_model(path, "CPU")
    srv = LLMServer(Session(model, tok), "tiny", port=0).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: LLMServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_models(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert client.models.retrieve("tiny").id == "tiny"


def test_chat_completion_plain_and_streamed(client: openai.OpenAI) -> None:
    msgs: list = [{"role": "user", "content": "Hello there"}]
    r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=6, temperature=0)
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
    assert r.usage is not None and r.usage.completion_tokens <= 6 and r.usage.prompt_tokens > 3
    chunks = list(client.chat.completions.create(model="tiny", messages=msgs, max_tokens=6, temperature=0, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == choice.message.content  # greedy: the same answer both ways
    assert (
        chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason == choice.finish_reason
    )


def test_completion_with_stop(client: openai.OpenAI) -> None:
    full = client.completions.create(model="tiny", prompt="The quick", max_tokens=8, temperature=0).choices[0].text
    assert full
    stop = full[len(full) // 2 :][:2]
    cut = client.completions.create(model="tiny", prompt="The quick", max_tokens=8, temperature=0, stop=[stop])
    assert cut.choices[0].text == full[: full.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="tiny", prompt="The quick", max_tokens=8, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == full
    sampled = client.completions.create(model="tiny", prompt="The", max_tokens=4, temperature=1.5, top_p=0.9, seed=3)
    assert sampled.usage is not None and 1 <= sampled.usage.completion_tokens <= 4


def _raw(server: LLMServer, method: str, path: str, body: bytes | None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(client: openai.OpenAI, server: LLMServer) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e2:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=1000)
    assert e2.value.code == "context_length_exceeded" and "maximum context length is 48" in str(e2.value)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.completions.create(model="tiny", prompt="x", temperature=-1)
    status, body = _raw(server, "POST", "/v1/chat/completions", b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"] and body["error"]["type"]
    status, body = _raw(server, "POST", "/v1/chat/completions", json.dumps({"model": "tiny", "messages": []}).encode())
    assert status == 400 and body["error"]["param"] == "messages"
    with pytest.raises(openai.BadRequestError, match="n=2"):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], n=2)
    status, body = _raw(server, "GET", "/v1/nothing", None)
    assert status == 404 and body["error"]["code"] == "not_found"
    assert client.models.list().data[0].id == "tiny"  # still serving
    r = client.completions.create(model="tiny", prompt="Hello", max_tokens=2, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")
