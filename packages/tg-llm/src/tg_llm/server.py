"""An OpenAI-compatible HTTP server: /v1/models, /v1/chat/completions, /v1/completions (streamed with
server-sent events or not). Each connection has a handler thread; the generations go through one queue
(tg_llm.scheduler) to the one worker that owns the model, and run one at a time in arrival order (the model
has one KV cache). Bad requests get OpenAI-style error JSON and the server keeps serving; a request body that
does not arrive within `read_timeout` seconds is answered 408.

>>> srv = LLMServer(session, "tiny", port=0).start()  # doctest: +SKIP
>>> from openai import OpenAI                          # doctest: +SKIP
>>> OpenAI(base_url=srv.url + "/v1", api_key="x").models.list().data[0].id  # doctest: +SKIP
'tiny'
"""

from __future__ import annotations

import json
import queue
import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tg_llm.generate import Completion, Session
from tg_llm.scheduler import BatchScheduler, QueueFull, Request, Scheduler

__all__ = ["LLMServer", "RequestError"]


class RequestError(Exception):
    """A request the server refuses: an HTTP status and an OpenAI error type/code."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def _number(req: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    v = req.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise RequestError(400, f"{key}={v!r} must be a number in [{lo}, {hi}]", key, "invalid_value")
    return float(v)


ROLES = ("system", "developer", "user", "assistant")  # "developer" is OpenAI's newer name for "system"
MAX_BODY = 16 << 20  # bytes of a request body


class LLMServer:
    """Serve `session` as model `model_id` on host:port (port 0: a free one). `start()` runs it in a thread.

    `read_timeout`: seconds a client may take to send its request (and to take each write of the answer);
    `max_waiting`: requests that may wait for the model before the server answers 503; `slots`: requests decoded
    together (1: one at a time, on the session's KV cache; more: tg_llm.scheduler.BatchScheduler, a KV cache of the
    model's context for each slot)."""

    def __init__(
        self,
        session: Session,
        model_id: str,
        host: str = "127.0.0.1",
        port: int = 8000,
        read_timeout: float = 30.0,
        max_waiting: int = 64,
        slots: int = 1,
    ) -> None:
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
            raise ValueError(f"LLMServer: slots={slots!r} must be a positive int")
        self.session, self.model_id = session, model_id
        sched = Scheduler(session, max_waiting) if slots == 1 else BatchScheduler(session, slots, max_waiting)
        self.scheduler = sched.start()
        server = self

        class Handler(_Handler):
            owner = server
            timeout = read_timeout  # socket timeout of each connection: a stalled client frees its thread

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread: threading.Thread | None = None

    def start(self) -> LLMServer:
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.scheduler.stop()

    # ---- requests ----
    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model_id, "object": "model", "created": 0, "owned_by": "tg"}]}

    def parse(self, req: Any, chat: bool) -> tuple[list[int], dict[str, Any]]:
        """The prompt tokens and the sampling arguments of a (chat) completion request."""
        if not isinstance(req, dict):
            raise RequestError(400, "the request body must be a JSON object")
        if req.get("model") is None:
            raise RequestError(400, "you must provide a model parameter", "model", "missing_required_parameter")
        if req.get("model") != self.model_id:
            raise RequestError(
                404,
                f"The model {req.get('model')!r} does not exist; this server has {self.model_id!r}",
                "model",
                "model_not_found",
            )
        tok = self.session.tokenizer
        if chat:
            msgs = req.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise RequestError(400, "'messages' must be a non-empty list", "messages")
            try:
                prompt = self.session.encode_chat([_message(m) for m in msgs])
            except ValueError as e:
                raise RequestError(400, str(e), "messages") from None
        else:
            p = req.get("prompt")
            if isinstance(p, list) and len(p) == 1:
                p = p[0]
            if not isinstance(p, str) or not p:
                raise RequestError(400, "'prompt' must be a non-empty string", "prompt")
            prompt = tok.encode(p, add_bos=None)
        ctx = self.session.model.cfg.context_length
        key = "max_completion_tokens" if req.get("max_completion_tokens") is not None else "max_tokens"
        max_tokens = req.get(key)
        if max_tokens is None:  # absent: up to the end of the context
            max_tokens = max(1, ctx - len(prompt))
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise RequestError(400, f"{key}={max_tokens!r:.40} must be an integer >= 1", key, "invalid_value")
        if len(prompt) + max_tokens > ctx:
            raise RequestError(
                400,
                f"This model's maximum context length is {ctx} tokens. However, you requested "
                f"{len(prompt) + max_tokens} tokens ({len(prompt)} in the messages, {max_tokens} in the completion).",
                "max_tokens",
                "context_length_exceeded",
            )
        stop = req.get("stop")
        stop = [stop] if isinstance(stop, str) else stop or []
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 4:
            raise RequestError(400, "'stop' must be a string or a list of at most 4 strings", "stop")
        if req.get("n", 1) not in (1, None):
            raise RequestError(400, f"n={req.get('n')!r}: this server generates one choice per request (n=1)", "n")
        seed = req.get("seed")
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int) or not -(1 << 63) <= seed < 1 << 63
        ):
            raise RequestError(400, f"seed={seed!r:.40} must be a 64-bit integer", "seed", "invalid_value")
        if not isinstance(req.get("stream", False), bool):
            raise RequestError(400, f"stream={req.get('stream')!r:.40} must be true or false", "stream")
        args = {
            "max_tokens": max_tokens,
            "stop": stop,
            "seed": None if seed is None else seed % (1 << 64),  # OpenAI's seeds may be negative, numpy's not
            "temperature": _number(req, "temperature", 1.0, 0.0, 2.0),
            "top_p": _number(req, "top_p", 1.0, 1e-9, 1.0),
            "top_k": int(_number(req, "top_k", 0, 0, 1e9)),
        }
        return prompt, args

    def complete(self, prompt: list[int], args: dict[str, Any]) -> Request:
        """Queue a generation (raises RequestError 503 when too many wait)."""
        try:
            return self.scheduler.submit(prompt, args)
        except QueueFull as e:
            raise RequestError(503, str(e), code="server_busy", kind="server_error") from None


def _message(m: Any) -> dict[str, str]:
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise RequestError(400, f"each message needs a 'role' string, got {m!r:.200}", "messages")
    if m["role"] not in ROLES:
        raise RequestError(
            400, f"message role {m['role']!r:.40} is not one of {', '.join(ROLES)}", "messages", "invalid_value"
        )
    content = m.get("content")
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    if not isinstance(content, str):
        raise RequestError(400, f"message content must be a string, got {content!r:.200}", "messages")
    return {"role": "system" if m["role"] == "developer" else m["role"], "content": content}


class _Handler(BaseHTTPRequestHandler):
    owner: LLMServer
    server_version = "tg-llm"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no line per request
        pass

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._json(200, self.owner.models())
        elif self.path.rstrip("/").startswith("/v1/models/"):
            name = self.path.rstrip("/").removeprefix("/v1/models/")
            if name == self.owner.model_id:
                self._json(200, self.owner.models()["data"][0])
            else:
                self._json(
                    404, RequestError(404, f"The model {name!r} does not exist", "model", "model_not_found").body()
                )
        else:
            self._json(404, RequestError(404, f"unknown path {self.path!r}", code="not_found").body())

    def do_POST(self) -> None:
        path = self.path.rstrip("/")
        chat = path in ("/v1/chat/completions", "/chat/completions")
        if not chat and path not in ("/v1/completions", "/completions"):
            self._json(404, RequestError(404, f"unknown path {self.path!r}", code="not_found").body())
            return
        try:
            req = self._body()
            prompt, args = self.owner.parse(req, chat)
            job = self.owner.complete(prompt, args)
            try:
                if req.get("stream"):
                    opts = req.get("stream_options")
                    self._stream(job, chat, isinstance(opts, dict) and bool(opts.get("include_usage")))
                else:
                    self._whole(job, chat)
            finally:
                job.cancel()  # a client gone mid-answer stops its generation; a finished one is unaffected
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        except RequestError as e:
            self._json(e.status, e.body())
        except ValueError as e:  # anything the model or tokenizer refuses
            self._json(400, RequestError(400, str(e)).body())
        except Exception as e:  # keep serving: a bug in one request is a 500 for that request only
            self._json(500, RequestError(500, f"{type(e).__name__}: {e}", kind="server_error").body())

    def _body(self) -> Any:
        """The JSON body; a length over MAX_BODY is 413, a body slower than the read timeout 408."""
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if not 0 <= n <= MAX_BODY:
            self.close_connection = True
            raise RequestError(413 if n > 0 else 400, f"Content-Length must be an integer in 0..{MAX_BODY}")
        try:
            data = self.rfile.read(n)
        except TimeoutError:
            self.close_connection = True
            raise RequestError(408, f"the request body did not arrive within {self.timeout} s") from None
        if len(data) < n:
            self.close_connection = True
            raise RequestError(400, f"the request body has {len(data)} bytes, its Content-Length says {n}")
        try:
            return json.loads(data or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(400, f"the request body is not valid JSON: {e}") from None
        except RecursionError:
            raise RequestError(400, "the request body is not valid JSON: nested too deeply") from None

    def _client_gone(self) -> bool:
        """Whether the client closed its connection (checked while its request waits or runs)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _pieces(self, job: Request) -> Iterator[tuple[str, Completion]]:
        """The job's pieces as they come; stops (ConnectionResetError) when the client goes away, checked every
        half second while it waits or runs."""
        checked = time.monotonic()
        while True:
            try:
                item = job.next(timeout=0.5)
            except queue.Empty:
                pass  # nothing yet: only the check below
            else:
                if item is None:
                    return
                yield item
            if time.monotonic() - checked > 0.5:
                if self._client_gone():
                    raise ConnectionResetError("the client went away")
                checked = time.monotonic()

    def _head(self, chat: bool) -> dict[str, Any]:
        kind = "chat.completion" if chat else "text_completion"
        return {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
            "object": kind,
            "created": int(time.time()),
            "model": self.owner.model_id,
        }

    @staticmethod
    def _usage(c: Completion) -> dict[str, int]:
        return {
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": len(c.tokens),
            "total_tokens": c.prompt_tokens + len(c.tokens),
        }

    def _whole(self, job: Request, chat: bool) -> None:
        done = Completion()
        for _, c in self._pieces(job):
            done = c
        choice: dict[str, Any] = {"index": 0, "finish_reason": done.finish_reason, "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": done.text}
        else:
            choice["text"] = done.text
        self._json(200, {**self._head(chat), "choices": [choice], "usage": self._usage(done)})

    def _stream(self, job: Request, chat: bool, usage: bool) -> None:
        gen = self._pieces(job)
        first = next(gen)  # errors (prompt too long...) surface before the 200 is sent
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        head = self._head(chat)
        head["object"] = "chat.completion.chunk" if chat else "text_completion"

        def send(piece: str | None, finish: str | None, role: bool = False) -> None:
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
                if piece:
                    delta["content"] = piece
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            else:
                choice = {"index": 0, "text": piece or "", "finish_reason": finish, "logprobs": None}
            self.wfile.write(f"data: {json.dumps({**head, 'choices': [choice]})}\n\n".encode())
            self.wfile.flush()

        if chat:
            send(None, None, role=True)
        done = first[1]
        for piece, c in _chain(first, gen):
            done = c
            if piece:
                send(piece, None)
        send(None, done.finish_reason)
        if usage:  # stream_options.include_usage: a last chunk with no choices and the token counts
            self.wfile.write(f"data: {json.dumps({**head, 'choices': [], 'usage': self._usage(done)})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def _chain(first: tuple[str, Completion], rest: Iterator[tuple[str, Completion]]) -> Iterator[tuple[str, Completion]]:
    yield first
    yield from rest
