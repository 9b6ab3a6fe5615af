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


class VizServer:
    """Serves `trace` on 127.0.0.1:`port` (0: a free port) in a background thread."""

    def __init__(self, trace: Trace, port: int = 0) -> None:
        self.trace = trace
        self.files = _static_files()
        handler = _make_handler(self)
        try:
            self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
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
        """(status, content type, body) for a GET of `path`."""
        parts = [p for p in unquote(urlsplit(path).path).split("/") if p]
        if not parts:
            return 200, _TYPES[".html"], self.files["index.html"]
        if parts[0] == "static" and len(parts) == 2 and parts[1] in self.files:
            ext = "." + parts[1].rsplit(".", 1)[-1]
            return 200, _TYPES.get(ext, "application/octet-stream"), self.files[parts[1]]
        if parts[0] == "api":
            body = self._api(parts[1:])
            if body is not None:
                return 200, "application/json", json.dumps(body).encode()
        return 404, _TYPES[".txt"], b"not found\n"

    def _api(self, parts: list[str]) -> Any:
        try:
            nums = [int(p) for p in parts[1:]]
        except ValueError:
            return None
        if parts == ["kernels"]:
            return data.kernels(self.trace)
        if parts == ["profile"]:
            return self.trace.chrome_trace()
        if len(parts) == 2 and parts[0] == "group":
            return data.group(self.trace, nums[0])
        if len(parts) == 3 and parts[0] == "step":
            return data.step(self.trace, nums[0], nums[1])
        return None


def _make_handler(server: VizServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
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

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler
