"""The OpenAI-compatible server answers the real `openai` client; bad requests get OpenAI error JSON."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

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
    srv = LLMServer(Session(model, tok), "tiny", port=0, read_timeout=2.0).start()
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


def _post(server: LLMServer, body: dict) -> tuple[int, dict]:
    return _raw(server, "POST", "/v1/chat/completions", json.dumps(body).encode())


HI = [{"role": "user", "content": "hi"}]


def test_request_defects_are_400s(server: LLMServer) -> None:
    """Each of these was accepted, misread or a 500 before: the server answers 400 naming the parameter."""
    status, body = _post(server, {"model": "tiny", "messages": HI, "max_tokens": 0})  # OpenAI: >= 1
    assert (status, body["error"]["param"], body["error"]["code"]) == (400, "max_tokens", "invalid_value")
    status, body = _post(server, {"model": "tiny", "messages": HI, "max_completion_tokens": -3})
    assert status == 400 and body["error"]["param"] == "max_completion_tokens"
    status, body = _raw(server, "POST", "/v1/chat/completions", b"[" * 100_000)
    assert status == 400 and "nested too deeply" in body["error"]["message"]
    status, body = _post(server, {"model": "tiny", "messages": [{"role": "wizard", "content": "hi"}]})
    assert (
        status == 400 and "role 'wizard' is not one of system, developer, user, assistant" in body["error"]["message"]
    )
    status, body = _post(server, {"messages": HI})
    assert (status, body["error"]["param"], body["error"]["code"]) == (400, "model", "missing_required_parameter")
    status, body = _post(server, {"model": "tiny", "messages": HI, "seed": 1 << 64})
    assert status == 400 and body["error"]["message"] == f"seed={1 << 64} must be a 64-bit integer"
    status, body = _post(server, {"model": "tiny", "messages": HI, "stream": "yes"})
    assert status == 400 and body["error"]["param"] == "stream"
    status, body = _post(server, {"model": "tiny", "messages": HI, "max_tokens": 2, "temperature": 0})
    assert status == 200 and body["usage"]["completion_tokens"] <= 2  # still serving


def test_negative_seed_is_a_seed(client: openai.OpenAI) -> None:
    """OpenAI's seed is any 64-bit integer; -1 and 7 each give one reproducible draw."""

    def draw(seed: int) -> str | None:
        r = client.completions.create(model="tiny", prompt="The", max_tokens=6, temperature=1.5, seed=seed)
        return r.choices[0].text

    assert draw(-1) == draw(-1) and draw(7) == draw(7)


def test_developer_role_is_a_system_message(client: openai.OpenAI) -> None:
    msgs: list = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    dev = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=4, temperature=0)
    msgs[0]["role"] = "system"
    system = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=4, temperature=0)
    assert dev.choices[0].message.content == system.choices[0].message.content


def test_a_body_shorter_than_its_length_times_out(server: LLMServer, client: openai.OpenAI) -> None:
    """A client that stops sending gets 408 after the read timeout (2 s here) and its thread is freed."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"mod')
        t0 = time.perf_counter()
        reply = sock.recv(4096)
        waited = time.perf_counter() - t0
        while chunk := sock.recv(4096):  # the rest, until the server closes the connection
            reply += chunk
    assert reply.startswith(b"HTTP/1.0 408") and b"did not arrive within 2.0 s" in reply, reply
    assert 1.0 < waited < 20, waited
    assert client.models.list().data[0].id == "tiny"
    status, body = _raw(server, "POST", "/v1/completions", None)  # no body at all: a clear 400
    assert status == 400 and body["error"]["message"] == "the request body must be a JSON object"


def test_concurrent_requests_get_the_sequential_answers(client: openai.OpenAI, server: LLMServer) -> None:
    """8 chat requests at once finish with the tokens each gets alone (greedy), streamed or not."""
    prompts = [f"{i} {i}" for i in range(8)]

    def ask(i: int) -> str | None:
        msgs: list = [{"role": "user", "content": prompts[i]}]
        if i % 2:
            chunks = client.chat.completions.create(
                model="tiny", messages=msgs, max_tokens=8, temperature=0, stream=True
            )
            return "".join(c.choices[0].delta.content or "" for c in chunks)
        r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=8, temperature=0)
        return r.choices[0].message.content

    alone = [ask(i) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(ask, range(8)))
    assert together == alone
    assert len(set(alone)) > 1  # the prompts differ, so do the answers: a mix-up would show


def test_malformed_requests_amid_concurrent_ones(client: openai.OpenAI, server: LLMServer) -> None:
    """Bad requests sent while good ones run get their errors; the good ones their answers."""
    msgs: list = [{"role": "user", "content": "hello"}]
    want = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=6, temperature=0)

    def good(_: int) -> str | None:
        r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=6, temperature=0)
        return r.choices[0].message.content

    def bad(i: int) -> int:
        body = [b"{not json", b"[" * 50_000, json.dumps({"model": "tiny", "messages": [{"role": "x"}]}).encode()][i % 3]
        return _raw(server, "POST", "/v1/chat/completions", body)[0]

    with ThreadPoolExecutor(8) as pool:
        goods = [pool.submit(good, i) for i in range(4)]
        bads = [pool.submit(bad, i) for i in range(6)]
        assert [f.result() for f in bads] == [400] * 6
        assert [f.result() for f in goods] == [want.choices[0].message.content] * 4
