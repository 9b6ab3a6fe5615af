"""How responsive the VIZ page is on the examples' traces: page load, and a step click, in headless Chromium.

    uv run python bench/bench_viz.py            # MNIST (2 steps) and GPT (2 steps, 2 layers)
    VIZ_BENCH=mnist uv run python bench/bench_viz.py

One JSON line per figure: {"bench": "viz_page_load" | "viz_step_click", "impl": "tg", "value", "unit": "ms",
"params": {"example", "groups", ...}}. The page times itself (performance.now(): load from navigation start to the
kernel list drawn; a step click from the click to its graph and diff drawn). Needs chromium and chromedriver.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {
    "mnist": ("beautiful_mnist.py", {"STEPS": "2", "BS": "32", "EVAL_EVERY": "0"}),
    "gpt": (
        "gpt_shakespeare.py",
        {
            "STEPS": "2",
            "LAYERS": "2",
            "EVAL_EVERY": "0",
            "EVAL_BATCHES": "1",
            "SAMPLE": "8",
            "CKPT": "/tmp/tg_bench_viz_gpt.safetensors",
        },
    ),
}


def record(example: str) -> Any:
    from tg_uop.trace import tracing

    script, env = EXAMPLES[example]
    os.environ.update(env)
    with tracing() as tr:
        runpy.run_path(str(ROOT / "examples" / script), run_name="__main__")
    return tr


def driver() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(browser)
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1800,1000"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(str(shutil.which("chromedriver"))), options=opts)


def measure(example: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tg_viz.server import VizServer

    tr = record(example)
    srv = VizServer(tr, 0).start()
    d = driver()
    params = {"example": example, "groups": len(tr.groups), "events": len(tr.events)}
    try:
        d.get(srv.url)
        wait = WebDriverWait(d, 120)
        wait.until(lambda d: d.execute_script("return window.vizLoadedMs !== undefined"))
        emit("viz_page_load", d.execute_script("return window.vizLoadedMs"), params)
        rows = d.find_elements(By.CSS_SELECTOR, "#kernels tr.kernel")
        reductions = [r for r in rows if r.find_elements(By.TAG_NAME, "td")[1].text.startswith("R_")]
        (reductions or rows)[-1].click()  # the last reduction kernel (in the examples: of the training step)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#steps li.selected"))
        clicks = []
        items = len(d.find_elements(By.CSS_SELECTOR, "#steps li[data-item]"))
        for i in range(min(items, 25)):
            d.execute_script("window.lastStepMs = undefined; goTo(arguments[0])", i)
            wait.until(lambda d: d.execute_script("return typeof window.lastStepMs === 'number'"))
            clicks.append(d.execute_script("return window.lastStepMs"))
        emit(
            "viz_step_click",
            statistics.median(clicks),
            {**params, "steps": len(clicks), "max_ms": round(max(clicks), 1)},
        )
    finally:
        d.quit()
        srv.stop()


def emit(name: str, value: float, params: dict[str, Any]) -> None:
    print(json.dumps({"bench": name, "impl": "tg", "value": round(value, 1), "unit": "ms", "params": params}))
    sys.stdout.flush()


if __name__ == "__main__":
    for ex in os.environ.get("VIZ_BENCH", "mnist,gpt").split(","):
        measure(ex)
