"""GRAPH=1, VIZ=1 and PROFILE=1 on real programs: the JSON the page reads, the DOT files, the trace
events, a failing program, a port in use, and the page itself in a headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tg import Tensor, TinyJit
from tg_uop.trace import tracing
from tg_viz import data
from tg_viz.server import VizServer

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "build" / "artifacts"


def conv_program() -> Tensor:
    """The seed's conv example: a conv is two views, a MUL and a SUM."""
    x = Tensor.rand(1, 1, 8, 8).realize()
    w = Tensor.rand(2, 1, 3, 3).realize()
    return x.conv2d(w).realize()


def matmul_program() -> Tensor:
    a = Tensor.rand(16, 32).realize()
    b = Tensor.rand(32, 8).realize()
    return (a @ b).realize()


@pytest.mark.parametrize("program", [conv_program, matmul_program])
def test_json_for_program(program):
    with tracing() as tr:
        out = program()
    rows = data.kernels(tr)
    kernels = [r for r in rows if r["kind"] == "kernel"]
    schedules = [r for r in rows if r["kind"] == "schedule"]
    assert schedules and kernels
    last = kernels[-1]  # the conv/matmul itself: a reduction kernel
    assert last["name"].lower().startswith("r_") and last["device"] == out.device and last["launches"] == 1
    assert last["time_us"] > 0 and len(last["shape"]) >= 2
    g = data.group(tr, last["id"])
    assert g is not None
    names = [s["name"] for s in g["steps"]]
    lowered = "lowered (indexing, ranges, loads and stores)"
    for want in ("kernel AST (from the scheduler)", lowered, "linearized", "source"):
        assert want in names, names
    ast = data.step(tr, last["id"], names.index("kernel AST (from the scheduler)"))
    assert ast is not None and ast["graph"] is not None
    ops = {n["op"] for n in ast["graph"]["nodes"]}
    assert {"REDUCE_AXIS", "MUL", "STORE", "SINK"} <= ops, ops
    src = data.step(tr, last["id"], names.index("source"))
    assert src is not None and src["text"] and last["name"] in src["text"]
    fired = [data.step(tr, last["id"], i) for i, s in enumerate(g["steps"]) if s["rules"]]
    assert fired and all(f is not None and f["rules_fired"] for f in fired)
    # the schedule's lazy graph, with the movement ops folded into edges
    sched = data.group(tr, schedules[-1]["id"])
    assert sched is not None
    lazy = data.step(tr, schedules[-1]["id"], 0)
    assert lazy is not None and lazy["name"] == "lazy graph"
    lazy_ops = sorted(n["op"] for n in lazy["graph"]["nodes"])
    assert lazy_ops == ["BUFFER", "BUFFER", "MUL", "REDUCE_AXIS", "SINK"], lazy_ops


def test_repeated_schedules_are_one_row_with_a_count():
    x = Tensor.rand(8, 8).realize()
    with tracing() as tr:
        for _ in range(5):  # a loop: new buffers each time, the same graph
            x = (x * 0.5 + 1).realize()
    rows = data.kernels(tr)
    sched = [r for r in rows if r["kind"] == "schedule"]
    assert [r["count"] for r in sched] == [5], sched
    assert len([g for g in tr.groups if g.kind == "schedule"]) == 5  # (all recorded; listed once)


def test_kernels_name_their_tensor_ops_and_user_lines():
    x = Tensor.rand(1, 1, 8, 8).realize()
    w = Tensor.rand(2, 1, 3, 3).realize()
    with tracing() as tr:
        here = sys._getframe().f_lineno + 1
        x.conv2d(w).relu().realize()
    (row,) = [r for r in data.kernels(tr) if r["kind"] == "kernel"]
    assert f"conv2d @ test_viz.py:{here}" in row["tensor_ops"] and f"relu @ test_viz.py:{here}" in row["tensor_ops"]
    assert row["lines"][0].startswith(f"test_viz.py:{here} x.conv2d(w).relu().realize()")
    assert {"MUL", "SUM", "MAX"} <= set(row["ops"])
    (launch,) = [e for e in tr.chrome_trace()["traceEvents"] if e.get("cat") == "kernel"]
    assert launch["args"]["tensor_ops"] == row["tensor_ops"] and launch["args"]["ops"] > 0  # (ops: FLOPs)


def test_debug2_line_names_ops_user_lines_and_jit_replays():
    code = """
    from tg import Tensor, TinyJit
    x = Tensor.rand(16).realize()
    @TinyJit
    def f(a):
        return (a * 2).sum().realize()
    for _ in range(3):
        f(x)
    """
    r = run_py(code, {"DEBUG": "2"})
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("***") and "MUL SUM" in ln]  # (a*2).sum()
    assert len(lines) == 3 and "(jit replay)" not in lines[0], r.stdout
    assert lines[-1].endswith("(jit replay)"), r.stdout  # the third call replays the recorded kernels
    assert "<- <string>:6" in lines[0], r.stdout  # the user line whose realize made it: `return (a * 2)...`
    assert "MUL SUM | mul sum <-" in lines[0], r.stdout  # and the tensor operations the kernel fuses


def run_py(code: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_graph_writes_dot_matching_lazy_graph(tmp_path):
    code = """
    from tg import Tensor
    x = Tensor.rand(1, 1, 8, 8).realize(); w = Tensor.rand(2, 1, 3, 3).realize()
    x.conv2d(w).realize()
    """
    r = run_py(code, {"GRAPH": "2", "GRAPH_DIR": str(tmp_path), "GRAPH_RENDER": "0"})
    assert r.returncode == 0, r.stderr
    (run,) = tmp_path.glob("run_*")  # one folder for the run, named in the first line and the last
    assert f"GRAPH: writing to {run}" in r.stdout and f"DOT files in {run}" in r.stdout.splitlines()[-1]
    r2 = run_py(code, {"GRAPH": "1", "GRAPH_DIR": str(tmp_path), "GRAPH_RENDER": "0"})
    assert r2.returncode == 0 and len(list(tmp_path.glob("run_*"))) == 2  # a second run: a folder of its own
    tmp_path = run
    dots = sorted(p.name for p in tmp_path.glob("realize_*.dot"))
    assert "realize_3.dot" in dots and "realize_3_k0.dot" in dots, dots
    dot = (tmp_path / "realize_3.dot").read_text()
    labels = re.findall(r'^  n\d+ \[label="([^"]*)"', dot, re.M)
    kinds = sorted(lab.split("\\n")[0].split(" ")[0] for lab in labels)
    assert kinds == ["BUFFER", "BUFFER", "MUL", "REDUCE_AXIS", "SINK"], kinds
    edges = re.findall(r"n(\d+) -> n(\d+)", dot)
    assert len(edges) == 4
    assert "movement ops" in dot or "EXPAND" in dot  # the views are drawn on the edges
    kernel_dot = (tmp_path / "realize_3_k0.dot").read_text()
    assert "STORE" in kernel_dot and "REDUCE_AXIS" in kernel_dot


def test_profile_one_event_per_launch(tmp_path):
    path = tmp_path / "trace.json"
    code = """
    from tg import Tensor, TinyJit, GlobalCounters
    x = Tensor.rand(16, 16).realize()
    @TinyJit
    def step(a):
        return (a * 2 + 1).sum(axis=0).realize()
    for _ in range(4):
        step(x)
    y = (x @ x).realize().numpy()
    print("KERNELS", GlobalCounters.kernel_count)
    """
    # a fresh disk cache: a warm one (an earlier test, an earlier run) skips codegen and compiles entirely
    env = {"PROFILE": "1", "PROFILE_PATH": str(path), "CACHEDB": str(tmp_path / "cache.db")}
    r = run_py(code, env)
    assert r.returncode == 0, r.stderr
    count = int(re.search(r"KERNELS (\d+)", r.stdout).group(1))  # type: ignore[union-attr]
    assert f"written to {path}" in r.stdout
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    launches = [e for e in events if e.get("cat") == "kernel"]
    assert len(launches) == count >= 6  # jit replays included
    for e in launches:
        assert e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 and isinstance(e["name"], str)
    cats = {e.get("cat") for e in events}
    assert {"kernel", "compile", "codegen", "schedule"} <= cats, cats
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert "CPU" in tracks or os.environ.get("DEV")


def test_jit_replays_are_profiled():
    x = Tensor.rand(8).realize()

    @TinyJit
    def f(a: Tensor) -> Tensor:
        return (a + 1).realize()

    with tracing() as tr:
        for _ in range(5):
            f(x)
    assert len([e for e in tr.events if e.cat == "kernel"]) == 5


def _read_url(proc: subprocess.Popen[str], deadline: float) -> str:
    assert proc.stdout is not None
    seen = []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if m := re.search(r"(http://127\.0\.0\.1:\d+/)", line):
            return m.group(1)
    raise AssertionError(f"no VIZ url printed: {''.join(seen)}")


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


FAILING = """
from tg import Tensor
a = Tensor.rand(4, 4).realize()
b = (a * 2).sum().realize()
raise SystemExit("boom: the program fails half-way")
"""


def _viz_program(code: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "VIZ": "1", "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    return subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )


def test_viz_failing_program_still_served_and_ctrl_c_stops():
    proc = _viz_program(FAILING)
    try:
        url = _read_url(proc, time.time() + 120)
        rows = _get_json(url + "api/kernels")
        assert any(r["kind"] == "kernel" and r["name"].lower().startswith("r_") for r in rows), rows
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill() if proc.poll() is None else None
    assert "boom" in err
    assert "VIZ: stopped" in out
    assert "Traceback" not in err.replace("boom", "")  # Ctrl-C is a clean stop, not a crash in the server


def test_viz_program_that_raised_is_named_on_the_page():
    code = FAILING.replace('raise SystemExit("boom: the program fails half-way")', 'raise ValueError("bad batch 7")')
    proc = _viz_program(code)
    try:
        url = _read_url(proc, time.time() + 120)
        info = _get_json(url + "api/info")
        assert info["error"] == "ValueError: bad batch 7" and info["groups"] > 0
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill() if proc.poll() is None else None
    assert "ValueError: bad batch 7" in err  # the program's own traceback, as without VIZ
    assert "VIZ: the program raised ValueError: bad batch 7" in err and "VIZ: stopped" in out


def test_viz_port_in_use_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run_py("import tg", {"VIZ": "1", "VIZ_PORT": str(port)}, timeout=120)
    assert r.returncode != 0
    assert f"port {port} on 127.0.0.1 is already in use" in r.stderr


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


NO_BROWSER = "no chromium + chromedriver on this machine (apt-get install chromium chromium-driver)"


@pytest.mark.skipif(_chromium() is None, reason=NO_BROWSER)
def test_page_in_headless_chromium():
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with tracing() as tr:
        conv_program()
    srv = VizServer(tr, 0).start()
    driver = _driver(width=1600)
    try:
        driver.get(srv.url)
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#kernels tr.kernel"))
        rows = driver.find_elements(By.CSS_SELECTOR, "#kernels tr.kernel")
        want = [r["name"] for r in data.kernels(tr) if r["kind"] == "kernel"]
        assert [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows] == want
        rows[-1].click()  # the conv's reduction kernel
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#graph svg g.node"))
        passes = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#steps li")]
        assert any(p.startswith("kernel AST") for p in passes) and any(p.startswith("source") for p in passes)
        # the lowering, step by step, with nothing to tick: a firing per load, the reduce and the store
        lowering = next(
            li for li in driver.find_elements(By.CSS_SELECTOR, "#steps li.step") if li.text.startswith("lower:")
        )
        fired = [f.text.split(" ")[1] for f in lowering.find_elements(By.CSS_SELECTOR, "li.fire")]
        assert {"LOAD", "REDUCE_AXIS", "STORE"} <= set(fired), fired
        nodes = driver.find_elements(By.CSS_SELECTOR, "#graph svg g.node")
        assert len(nodes) >= 5
        nodes[0].click()
        wait.until(lambda d: "op " in d.find_element(By.ID, "node").text)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "viz_conv_graph.png"))
        source = next(li for li in driver.find_elements(By.CSS_SELECTOR, "#steps li") if li.text.startswith("source"))
        source.click()
        wait.until(lambda d: "void " in d.find_element(By.ID, "text").text)
        assert want[-1] in driver.find_element(By.ID, "text").text
        driver.save_screenshot(str(ARTIFACTS / "viz_conv_source.png"))
        # the conv's lazy graph, as the talk draws it: two buffers, views on the edges, a MUL and a SUM
        driver.find_elements(By.CSS_SELECTOR, "#kernels tr.schedule")[-1].click()
        wait.until(lambda d: d.find_element(By.ID, "step-title").text == "lazy graph")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#graph svg g.node")) == 5)
        drawn = driver.find_elements(By.CSS_SELECTOR, "#graph g.node")
        ops = sorted(g.get_attribute("class").split()[1] for g in drawn)
        assert ops == ["BUFFER", "BUFFER", "MUL", "REDUCE_AXIS", "SINK"]
        driver.save_screenshot(str(ARTIFACTS / "viz_conv_lazy.png"))
    finally:
        driver.quit()
        srv.stop()


def _mnist_trace() -> Any:
    """The MNIST example (2 jitted train steps of batch 32, its end-of-training evaluation), recorded as VIZ=1 does."""
    import runpy

    saved = {k: os.environ.get(k) for k in ("STEPS", "BS", "EVAL_EVERY")}
    os.environ.update(STEPS="2", BS="32", EVAL_EVERY="0")
    try:
        with tracing() as tr:
            runpy.run_path(str(ROOT / "examples" / "beautiful_mnist.py"), run_name="__main__")
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return tr


def _driver(width: int = 1800) -> Any:
    """Headless Chromium through chromedriver, its window `width` x 1000."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = _chromium()
    assert found is not None
    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(a)
    opts.add_argument(f"--window-size={width},1000")
    return webdriver.Chrome(service=Service(found[1]), options=opts)


def _shots_dir() -> Path:
    d = Path(os.environ.get("VIZ_SHOTS") or ARTIFACTS)
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.mark.skipif(_chromium() is None, reason=NO_BROWSER)
def test_mnist_step_in_headless_chromium():
    """The acceptance walk: a kernel of the MNIST train step, its rewrites step by step with a highlighted diff,
    zoom, and the timeline with the step's kernels as bars. Page load and step clicks are printed, not asserted."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    tr = _mnist_trace()
    step_kernels = {
        g.name for g in tr.groups if g.kind == "kernel" and any("schedule_step" in ln for ln in g.meta.get("lines", []))
    }
    assert step_kernels, "no kernel of the MNIST train step was recorded"
    srv = VizServer(tr, 0).start()
    driver = _driver()
    shots = _shots_dir()
    try:
        driver.get(srv.url)
        wait = WebDriverWait(driver, 60)
        wait.until(lambda d: d.execute_script("return window.vizLoadedMs !== undefined"))
        load_ms = driver.execute_script("return window.vizLoadedMs")
        driver.save_screenshot(str(shots / "viz_mnist_kernels.png"))
        # a reduction kernel of the step (a conv's backward pass, say), picked by its source line
        rows = driver.find_elements(By.CSS_SELECTOR, "#kernels tr.kernel")
        conv = next(
            r
            for r in rows
            if "schedule_step" in (r.get_attribute("title") or "")
            and r.find_elements(By.TAG_NAME, "td")[1].text.startswith("R_")
        )
        conv.click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#steps li.fire"))
        # a long pass lists its first rewrites, the rest on demand
        listed = len(driver.find_elements(By.CSS_SELECTOR, "#steps li.fire"))
        driver.find_elements(By.CSS_SELECTOR, "#steps li.fire.more")[0].click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps li.fire")) > listed)
        # step into the lowering's first firing: the node it made is highlighted, the diff has added lines
        fires = driver.find_elements(By.CSS_SELECTOR, "#steps li.fire")
        lower = next(f for f in fires if f.text.startswith("lower "))
        lower.click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#graph g.node.changed"))
        assert driver.find_elements(By.CSS_SELECTOR, "#diff .dl.add") and driver.find_elements(
            By.CSS_SELECTOR, "#diff .dl.del"
        )
        assert "lowerer.py:" in driver.find_element(By.ID, "rule-title").text
        assert "op is Ops." in driver.find_element(By.ID, "rule").text  # the branch of the lowering that did it
        driver.save_screenshot(str(shots / "viz_mnist_rewrite_diff.png"))
        clicks = []
        for _ in range(6):  # the keyboard walks the steps; each one is timed by the page
            before = driver.execute_script("return document.querySelector('#steps li.selected').dataset.item")
            driver.find_element(By.TAG_NAME, "body").send_keys("j")
            wait.until(
                lambda d, before=before: (
                    d.execute_script(  # type: ignore[misc]
                        "return document.querySelector('#steps li.selected').dataset.item"
                    )
                    != before
                )
            )
            wait.until(lambda d: d.execute_script("return window.lastStepMs") is not None)
            clicks.append(driver.execute_script("return window.lastStepMs"))
        # J: the next kernel in the list; K: back
        selected = lambda: driver.find_element(By.CSS_SELECTOR, "#kernels tr.selected").get_attribute("data-id")  # noqa: E731
        opened = selected()
        driver.find_element(By.TAG_NAME, "body").send_keys("J")
        wait.until(lambda d: selected() != opened)
        driver.find_element(By.TAG_NAME, "body").send_keys("K")
        wait.until(lambda d: selected() == opened)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#graph g.viewport"))
        # zoom: the view transform changes with the wheel and with the buttons, fit brings it back
        transform = lambda: driver.find_element(By.CSS_SELECTOR, "#graph g.viewport").get_attribute("transform")  # noqa: E731
        t0 = transform()
        driver.execute_script(
            "const s = document.querySelector('#graph svg'); const r = s.getBoundingClientRect();"
            "s.dispatchEvent(new WheelEvent('wheel',"
            " {deltaY: -400, clientX: r.left + 50, clientY: r.top + 50, bubbles: true}))"
        )
        assert transform() != t0
        driver.find_element(By.ID, "zoom-in").click()
        driver.save_screenshot(str(shots / "viz_mnist_zoomed.png"))
        driver.find_element(By.ID, "fit").click()
        assert transform() == t0
        # the lazy graph of the train step: hundreds of nodes, fitted to the pane
        sched = [
            r
            for r in driver.find_elements(By.CSS_SELECTOR, "#kernels tr.schedule")
            if "schedule_step" in (r.get_attribute("title") or "")
        ]
        sched[0].click()
        wait.until(lambda d: d.find_element(By.ID, "step-title").text.startswith("lazy graph"))
        wait.until(
            lambda d: (
                d.find_elements(By.CSS_SELECTOR, "#graph g.node") or d.find_elements(By.CSS_SELECTOR, "#graph p.big")
            )
        )
        transform = lambda: driver.find_element(By.CSS_SELECTOR, "#graph g.viewport").get_attribute("transform")  # noqa: E731
        fitted = transform()
        find = driver.find_element(By.ID, "graph-find")
        find.send_keys("ASSIGN\n")  # the optimizer's updates: found, marked, and the view moves to the first
        assert driver.find_elements(By.CSS_SELECTOR, "#graph g.node.found") and transform() != fitted
        driver.save_screenshot(str(shots / "viz_mnist_lazy_graph_find.png"))
        driver.find_element(By.ID, "fit").click()
        driver.save_screenshot(str(shots / "viz_mnist_lazy_graph.png"))
        # a large graph drawn smaller: only 3 levels under the outputs, the cut nodes saying so
        drawn = len(driver.find_elements(By.CSS_SELECTOR, "#graph g.node"))
        Select(driver.find_element(By.ID, "depth")).select_by_value("3")
        wait.until(lambda d: 0 < len(d.find_elements(By.CSS_SELECTOR, "#graph g.node")) < drawn)
        assert "nodes folded" in driver.find_element(By.ID, "step-title").text
        assert driver.find_elements(By.CSS_SELECTOR, "#graph g.node.cut")
        driver.save_screenshot(str(shots / "viz_mnist_lazy_graph_3_levels.png"))
        Select(driver.find_element(By.ID, "depth")).select_by_value("0")
        # the timeline: the step's kernels are bars
        driver.find_element(By.ID, "tab-timeline").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#tl-view g.bar.kernel"))
        bars = {b.get_attribute("data-name") for b in driver.find_elements(By.CSS_SELECTOR, "#tl-view g.bar.kernel")}
        assert step_kernels <= bars, step_kernels - bars
        driver.execute_script(  # the widest bar (thin ones overlap their neighbours' rects)
            "const bars = [...document.querySelectorAll('#tl-view g.bar.kernel')];"
            "const w = (b) => Number(b.querySelector('rect').getAttribute('width'));"
            "bars.reduce((a, b) => (w(b) > w(a) ? b : a)).dispatchEvent(new MouseEvent('click', {bubbles: true}))"
        )
        assert "GFLOPS" in driver.find_element(By.ID, "tl-detail").text
        driver.save_screenshot(str(shots / "viz_mnist_timeline.png"))
        print(
            f"\nVIZ MNIST: page load {load_ms:.0f} ms, step clicks {', '.join(f'{c:.0f}' for c in clicks)} ms "
            f"(median {sorted(clicks)[len(clicks) // 2]:.0f} ms), {len(tr.groups)} groups"
        )
    finally:
        driver.quit()
        srv.stop()
