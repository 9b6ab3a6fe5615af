"""The viewer's server with only tg-uop installed: routes, JSON shapes, security, port errors."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from tg_uop import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite
from tg_uop.trace import Trace, tracing
from tg_viz.server import VizError, VizServer

fold = PatternMatcher(
    [(UPat(Ops.ADD, src=(UPat.cvar("a"), UPat.cvar("b"))), lambda a, b: UOp.const(a.dtype, a.arg + b.arg))]
)


@pytest.fixture
def server():
    with tracing() as tr:
        with tr.group("kernel", "demo", device="CPU", shape=[4]):
            tr.graph_step("input", (UOp.const(dtypes.int, 1) + 2) * 4)
            graph_rewrite((UOp.const(dtypes.int, 1) + 2) * 4, fold, name="fold")
            tr.text_step("source", "void demo(int* data0) { data0[0] = 9; }")
        tr.event("demo", "kernel", "CPU", 0.0, 5.0)
        srv = VizServer(tr, 0).start()
    yield srv
    srv.stop()


def get(srv: VizServer, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(srv.url.rstrip("/") + path, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(srv: VizServer, path: str) -> Any:
    status, body = get(srv, path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def test_kernels_group_step(server):
    rows = get_json(server, "/api/kernels")
    assert [(r["kind"], r["name"], r["device"], r["shape"]) for r in rows] == [("kernel", "demo", "CPU", [4])]
    g = get_json(server, "/api/group/0")
    assert [s["name"] for s in g["steps"]] == ["input", "fold", "source"]
    assert g["steps"][1]["rules"] == 1
    step = get_json(server, "/api/step/0/1")
    assert step["kind"] == "rewrite" and step["before_nodes"] > step["nodes"]
    (rule,) = step["rules_fired"]
    assert rule["pattern"].startswith("ADD") and rule["location"].startswith("test_server.py:")
    assert [n["op"] for n in step["graph"]["nodes"]] == ["CONST", "CONST", "MUL"]
    mul = step["graph"]["nodes"][-1]
    assert mul["src"] == [0, 1] and {(e["src"], e["dst"]) for e in step["graph"]["edges"]} == {(0, 2), (1, 2)}
    assert "void demo" in get_json(server, "/api/step/0/2")["text"]
    prof = get_json(server, "/api/profile")
    assert [e["name"] for e in prof["traceEvents"] if e["ph"] == "X"] == ["demo"]


def test_static_files_served(server):
    status, body = get(server, "/")
    assert status == 200 and b"<title>tg VIZ</title>" in body
    for name in ("app.js", "style.css", "dagre.min.js", "dagre-LICENSE.txt"):
        assert get(server, f"/static/{name}")[0] == 200


@pytest.mark.parametrize(
    "path",
    [
        "/../pyproject.toml",
        "/static/../__init__.py",
        "/static/..%2f__init__.py",
        "/static/%2e%2e/server.py",
        "/etc/passwd",
        "//etc/passwd",
        "/static//etc/passwd",
        "/static/server.py",
        "/api/group/99",
        "/api/step/0/99",
        "/api/fire/0/1/5",
    ],
)
def test_only_own_files_and_trace(server, path):
    status, body = get(server, path)
    assert status == 404, (path, body[:80])


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/api/group/x", "'x' is not an index"),
        ("/api/group/-1", "'-1' is not an index"),
        ("/api/step/0", "takes 2 numbers"),
        ("/api/nothing", "unknown API 'nothing'"),
        ("/api/group/99999999999999999999", "is not an index"),
    ],
)
def test_malformed_requests_are_400_and_serving_goes_on(server, path, says):
    status, body = get(server, path)
    assert status == 400 and says in body.decode(), (path, status, body)
    assert get(server, "/api/kernels")[0] == 200


def test_other_methods_are_405(server):
    req = urllib.request.Request(server.url + "api/kernels", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 405 and b"only answers GET" in e.value.read()
    for raw, status in ((b"GET /x HTTP/1.1 junk", b"400"), (b"BREW /pot HTTP/1.1", b"405"), (b"\x00\x01", b"400")):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(raw + b"\r\n\r\n")
            assert s.recv(100).split(b" ")[1] == status, raw
    assert get(server, "/api/kernels")[0] == 200


def test_fire_step_diff_and_source(server):
    g = get_json(server, "/api/group/0")
    (summary,) = g["steps"][1]["fires"]
    assert summary["count"] == 1 and summary["location"].startswith("test_server.py:")
    f = get_json(server, "/api/fire/0/1/0")
    assert f["pattern"].startswith("ADD") and f["count"] == 1
    assert "-UOp(Ops.ADD" in f["diff"] and "+UOp(Ops.CONST" in f["diff"]
    assert "lambda a, b" in f["source"]  # the rule's own source line
    assert [n.get("changed", False) for n in f["graph"]["nodes"]] == [True]
    step = get_json(server, "/api/step/0/1")
    assert "+++ after" in step["diff"]
    changed = {n["label"].split()[0] for n in step["graph"]["nodes"] if n.get("changed")}
    assert changed == {"3", "MUL"}  # the 4 stays; the folded 3 and the MUL over it are new


def test_binds_localhost_only(server):
    assert server.httpd.server_address[0] == "127.0.0.1"


def test_port_in_use_names_the_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(VizError, match=f"port {port} .*in use"):
            VizServer(Trace(), port)


def test_trace_records_only_outermost_rewrite():
    inner = PatternMatcher([(UPat(Ops.MUL, name="x"), lambda x: graph_rewrite(x.src[0], fold, name="inner"))])
    with tracing() as tr:
        graph_rewrite((UOp.const(dtypes.int, 1) + 2) * 3, inner, name="outer")
    names = [s.name for g in tr.groups for s in g.steps]
    assert names == ["outer"]
