"""The viewer's web server: Python's standard library, bound to 127.0.0.1 only.

It serves its own static files (a fixed list read from the package at start) and the trace as JSON;
anything else, `../` and absolute paths included, is a 404.

>>> from tg_uop.trace import Trace
>>> srv = VizServer(Trace(), port=0).start()
>>> srv.url.startswith("http://127.0.0.1:")
True
>>> srv.stop()
"""

from __future__ import annotations

import errno
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit

from tg_uop.trace import Trace
from tg_viz import data

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
}


class VizError(RuntimeError):
    """The viewer could not start (e.g. its port is in use)."""


def _static_files() -> dict[str, bytes]:
    root = resources.files("tg_viz") / "static"
    return {f.name: f.read_bytes() for f in root.iterdir() if f.is_file()}


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-answer is no error of ours; anything else is printed, and serving goes on."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class VizServer:
    """Serves `trace` on 127.0.0.1:`port` (0: a free port) in a background thread."""

    def __init__(self, trace: Trace, port: int = 0) -> None:
        self.trace = trace
        self.files = _static_files()
        handler = _make_handler(self)
        try:
            self.httpd = _Server(("127.0.0.1", port), handler)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise VizError(
                    f"VIZ: port {port} on 127.0.0.1 is already in use; set VIZ_PORT to a free port "
                    "(or leave it unset to get one)"
                ) from None
            raise VizError(f"VIZ: cannot listen on 127.0.0.1:{port}: {e}") from None
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> VizServer:
        """Serve in a daemon thread; returns self."""
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="tg-viz", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self.thread is not None:
            self.httpd.shutdown()
            self.thread.join(timeout=5)
            self.thread = None
        self.httpd.server_close()

    # ---- routes ----
    def route(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of `path`: 400 for a malformed request, 404 for what is not here."""
        parts = [p for p in unquote(urlsplit(path).path).split("/") if p]
        if not parts:
            return 200, _TYPES[".html"], self.files["index.html"]
        if parts[0] == "static" and len(parts) == 2 and parts[1] in self.files:
            ext = "." + parts[1].rsplit(".", 1)[-1]
            return 200, _TYPES.get(ext, "application/octet-stream"), self.files[parts[1]]
        if parts[0] == "api":
            try:
                body = self._api(parts[1:])
            except _BadRequest as e:
                return 400, _TYPES[".txt"], f"{e}\n".encode()
            if body is not None:
                return 200, "application/json", json.dumps(body).encode()
            return 404, _TYPES[".txt"], f"not found: {'/'.join(parts)} (no such group, step or rule)\n".encode()
        return 404, _TYPES[".txt"], b"not found\n"

    def _api(self, parts: list[str]) -> Any:
        name, args = (parts[0], parts[1:]) if parts else ("", [])
        want = _ROUTES.get(name)
        if want is None:
            raise _BadRequest(f"unknown API {name!r} (expected one of {', '.join(sorted(_ROUTES))})")
        if len(args) != want:
            raise _BadRequest(f"/api/{name} takes {want} numbers in its path, got {len(args)}: {'/'.join(args)!r}")
        nums = []
        for a in args:
            if not a.isdigit() or len(a) > 9:
                raise _BadRequest(f"/api/{name}: {a!r} is not an index (expected a non-negative integer)")
            nums.append(int(a))
        if name == "kernels":
            return data.kernels(self.trace)
        if name == "info":
            return data.info(self.trace)
        if name == "profile":
            return self.trace.chrome_trace()
        if name == "group":
            return data.group(self.trace, nums[0])
        if name == "step":
            return data.step(self.trace, nums[0], nums[1])
        return data.fire(self.trace, nums[0], nums[1], nums[2])


class _BadRequest(ValueError):
    pass


# the API: its names and how many numbers each takes (/api/step/<group>/<step>)
_ROUTES = {"kernels": 0, "info": 0, "profile": 0, "group": 1, "step": 2, "fire": 3}


def _make_handler(server: VizServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        default_request_version = "HTTP/1.0"  # (a malformed request line still gets a status line with its 400)

        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            try:
                status, ctype, body = server.route(self.path)
            except Exception as e:  # a bug in the data: report it to the page, keep serving
                status, ctype, body = 500, _TYPES[".txt"], f"{type(e).__name__}: {e}\n".encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _refuse(self) -> None:
            body = f"method {self.command} not allowed: the viewer only answers GET\n".encode()
            self.send_response(405)
            self.send_header("Allow", "GET")
            self.send_header("Content-Type", _TYPES[".txt"])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def __getattr__(self, name: str) -> Any:  # any other method (do_POST, do_BREW, ...): 405, not 501
            if name.startswith("do_"):
                return self._refuse
            raise AttributeError(name)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler
