"""The GPT example's training, whole, beside its PyTorch twin in the same run: steps/s and the first step's seconds.

    DEV=CUDA PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 bench/bench_gpt.py
    STEPS=300 DTYPES=fp32,tf32,bf16 TWIN=../shared/bench/nanogpt_torch.py TWIN_SECONDS=20 python3 bench/bench_gpt.py

Each tg row runs examples/gpt_shakespeare.py BIG=1 in a process of its own (its real step: the model, AdamW, the
gradient-norm clip, the batch and block of the nanoGPT shakespeare-char config; EVAL_EVERY=0, so the loop is
training only, with an evaluation at the end) and reads the line it prints at the end: the first step's seconds
(its kernels rendered and compiled), the second's (TinyJit's capture, `gpt_capture_step`) and the training
steps/s after them (`gpt_shakespeare`; `gpt_shakespeare_every_step` counts the first two steps too). fp32 first
runs with an empty compile cache and no TinyJit capture file (cold), then again in a second process on the caches
it left (warm): once replaying the capture the cold run saved (JIT_CACHE, `jit_file: saved capture`), once without
it (JIT_CACHE=0, `jit_file: none`: warm-up and capture again). tf32 is ALLOW_TF32=1, bf16 DTYPE=bf16
(the matmuls and the attention in bf16, the weights, AdamW and the loss in float32). The twin
(`nanogpt_torch.py --big`, same data, batches and schedule) runs eager fp32, eager TF32 (`--tf32`) and
torch.compile with bf16 autocast (`--compile --dtype bf16`); its steps/s is the median step's. Prints one JSON
line per figure: {"bench", "impl", "value", "unit", "params"}.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "gpt_shakespeare.py")
STEPS = int(os.getenv("STEPS", "300"))
DTYPES = os.getenv("DTYPES", "fp32,tf32,bf16").split(",")
TWIN = os.getenv("TWIN", os.path.join(ROOT, "..", "shared", "bench", "nanogpt_torch.py"))
TWIN_SECONDS = float(os.getenv("TWIN_SECONDS", "20"))
SUMMARY = re.compile(
    r"first step ([\d.]+)s \((?:its kernels compile|replayed from the saved capture)\)"
    r"(?:, second step ([\d.]+)s \(TinyJit capture\))?, then ([\d.]+) train steps/s \(([\d.]+) counting every step\)"
)


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    print(json.dumps({"bench": bench, "impl": impl, "value": round(value, 3), "unit": unit, "params": params}))
    sys.stdout.flush()


def run_tg(dtype: str, cachedb: str, jit_cache: str = "0") -> tuple[float, float | None, float, float] | None:
    """(first step seconds, second step seconds (the capture; None when the first step replayed a saved one), train
    steps/s after them, steps/s counting every step) of one run of the example (JIT_CACHE=`jit_cache`), or None
    (its error printed)."""
    env = {**os.environ, "BIG": "1", "STEPS": str(STEPS), "EVAL_EVERY": "0", "SAMPLE": "0", "CACHEDB": cachedb,
           "CKPT": os.path.join(tempfile.gettempdir(), "bench_gpt.safetensors"), "JIT_CACHE": jit_cache}  # fmt: skip
    env.pop("ALLOW_TF32", None)
    if dtype == "tf32":
        env["ALLOW_TF32"] = "1"
    if dtype == "bf16":
        env["DTYPE"] = "bf16"
    proc = subprocess.run([sys.executable, EXAMPLE], capture_output=True, text=True, env=env, timeout=1800)
    if (m := SUMMARY.search(proc.stdout)) is None:
        print(f"tg {dtype}: no summary line (exit {proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return float(m.group(1)), float(m.group(2)) if m.group(2) else None, float(m.group(3)), float(m.group(4))


def run_twin(*flags: str) -> dict[str, Any] | None:
    """The twin's summary line (JSON), or None when torch or the twin is missing."""
    if not os.path.exists(TWIN):
        print(f"no torch twin at {TWIN} (set TWIN=): skipped", file=sys.stderr)
        return None
    cmd = [sys.executable, TWIN, "--big", "--time-limit", str(TWIN_SECONDS), "--eval-every", "1000000", *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    summary = next((x for x in lines if x.get("summary")), None)
    if summary is None:
        print(f"torch twin {flags}: no summary (exit {proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
    return summary


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in DTYPES:
            cachedb, capture = os.path.join(tmp, f"{dtype}.db"), os.path.join(tmp, f"{dtype}.tgjit")
            if (cold := run_tg(dtype, cachedb, capture)) is None:
                continue
            emit("gpt_shakespeare", "tg", cold[2], "steps/s", dtype=dtype, steps=STEPS)
            emit("gpt_shakespeare_every_step", "tg", cold[3], "steps/s", dtype=dtype, steps=STEPS)
            emit("gpt_first_step", "tg", cold[0], "s", dtype=dtype, cache="empty")
            if cold[1] is not None:
                emit("gpt_capture_step", "tg", cold[1], "s", dtype=dtype)
            if dtype != "fp32":
                continue
            for jit_file, jit_cache in (("saved capture", capture), ("none", "0")):
                if (warm := run_tg(dtype, cachedb, jit_cache)) is not None:
                    emit("gpt_first_step", "tg", warm[0], "s", dtype=dtype, cache="second process", jit_file=jit_file)
    twins = {
        "fp32": ("torch", ()),
        "tf32": ("torch", ("--tf32",)),
        "bf16": ("torch.compile", ("--compile", "--dtype", "bf16")),
    }
    for dtype in DTYPES:
        impl, flags = twins[dtype]
        if (summary := run_twin(*flags)) is not None:
            emit("gpt_shakespeare", impl, 1 / summary["median_step_s"], "steps/s", dtype=dtype)
            emit("gpt_first_step", impl, summary["warmup_step_s"][0], "s", dtype=dtype)


if __name__ == "__main__":
    main()
