"""tg_viz: the VIZ=1 viewer. A page on 127.0.0.1 listing the kernels a program compiled, the rewrite
passes of each, the UOp graph after each pass (laid out with dagre), the rules that fired, the
linear UOps and the generated source.

`install()` is what `import tg` calls when VIZ is set: VIZ=1 serves when the program ends (until
Ctrl-C), VIZ=2 also serves while it runs. The port is $VIZ_PORT, or a free one; the URL is printed.

>>> from tg_viz import VizServer, VizError
>>> issubclass(VizError, RuntimeError)
True
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from types import TracebackType

from tg_uop.trace import TRACE, VIZ
from tg_viz.server import VizError, VizServer

__version__ = "0.1.0"
__all__ = ["VizError", "VizServer", "install", "serve_until_interrupted"]

_installed: list[VizServer | None] = []


def serve_until_interrupted(srv: VizServer) -> None:
    """Block until Ctrl-C (SIGINT), then stop the server cleanly."""
    stop = threading.Event()
    try:  # the URL is printed inside: a Ctrl-C right after it (a script reading the URL) is still a clean stop
        print(f"VIZ: serving {len(TRACE.groups)} groups at {srv.url} (Ctrl-C to stop)", flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    srv.stop()
    print("VIZ: stopped", flush=True)


def _port() -> int:
    raw = os.environ.get("VIZ_PORT", "0")
    try:
        port = int(raw)
    except ValueError:
        raise VizError(f"VIZ_PORT={raw!r} is not a port number (expected an integer 0..65535)") from None
    if not 0 <= port <= 65535:
        raise VizError(f"VIZ_PORT={port} is out of range (expected 0..65535)")
    return port


def _note_uncaught_exceptions() -> None:
    """Keep the exception a program ends with, for the page's banner (the traceback is printed as usual)."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        TRACE.program_error = f"{kind.__name__}: {value}"
        previous(kind, value, tb)
        print(f"VIZ: the program raised {TRACE.program_error}; serving what it recorded before", file=sys.stderr)

    sys.excepthook = hook


def install() -> None:
    """Turn on recording and arrange serving (called by `import tg` when VIZ is set; idempotent)."""
    if _installed:
        return
    TRACE.active = True
    TRACE.profiling = True
    srv = VizServer(TRACE, _port())  # binds now: a port in use fails at the start, not at the end
    if VIZ.value >= 2:
        srv.start()
        print(f"VIZ: live at {srv.url}", flush=True)
    _installed.append(srv)
    _note_uncaught_exceptions()

    def at_exit() -> None:
        if srv.thread is None:
            srv.start()
        serve_until_interrupted(srv)

    atexit.register(at_exit)
