"""Tensor-parallel LLaMA inference over several GPUs: load time, prefill and decode tokens/s of a random
LLaMA-shaped F16 model split with `--tp N`, beside the memory-bandwidth bound of the N GPUs.

    DEV=CUDA SIZE=70b TP=4 python3 bench/bench_llm_tp.py    # LLaMA-2-70B shape, 138 GB file, 4 GPUs
    DEV=CUDA SIZE=34b TP=2 python3 bench/bench_llm_tp.py    # CodeLlama-34B shape, 67 GB, 2 GPUs
    DEV=CUDA SIZE=1b TP=2 python3 bench/bench_llm_tp.py     # Llama 3.2 1B: --tp 2 against one GPU, and the logits
    SIZE=tiny ONE_GPU=1 TP=2 DEV=CPU DECODE=4 PROMPT=8 python3 bench/bench_llm_tp.py  # smoke run: CPU:0, CPU:1

Steps, each printing JSON lines ({"bench", "impl", "value", "unit", "params"}):
1. The model file `$LLM_DIR/llama-$SIZE-F16-tp.gguf` (LLM_DIR default /tmp/tg_bench_llm) is written by
   tg_llm.big_model.write_big_gguf, or reused when one of the same layout is there. Writing is limited by the
   disk, not Python: the GGUF layout is streamed by hand, and up to 64 threads (WRITE_WORKERS) os.pwrite 64 MiB
   chunks at their offsets, each a window of one 128 MiB pool of random float16 values (made once, ~0.2 s);
   memory stays small. On a host with more RAM than the file, the file then sits in the page cache. A reused file
   is read once first (threads, 64 MiB reads: `llm_tp_warm`), so the load is timed with the file in the cache.
2. `python -m tg_llm --model F --tp N --benchmark DECODE --prompt-tokens PROMPT --context CONTEXT` in a child
   process (TIMEOUT seconds, default 420): its `llm_load` (s, the whole load_model), `llm_prefill`,
   `llm_decode` (tok/s, greedy steps chained on the device, one TinyJit-captured step with its all-reduces) and
   `llm_decode_bandwidth` lines, re-emitted with impl `tg_tp{N}`, plus `llm_decode_bound` (tok/s at peak
   bandwidth: N * PEAK_GBS / bytes read per token; PEAK_GBS or nvidia-smi's GPU name, H200 4800 GB/s).
3. SIZE=1b (and any model that fits one GPU, ONE_GPU=1): the same on one GPU (impl `tg_1gpu`, the plain
   single-device path) and `llm_tp_speedup` (decode tok/s of --tp N over one GPU); then one child loads the
   model both ways in float32 and prints `llm_tp_logits_maxdiff` (prefill and 3 decode steps) and whether 16
   greedy tokens agree (`llm_tp_greedy_equal`, 1 or 0): the NCCL path's correctness.
DELETE=1 removes the model file at the end (a 138 GB 70B and a 67 GB 34B file do not both fit a 235 GB disk).
Every child's stderr is passed through; a child that fails or times out prints an `llm_tp_error` line and the
script goes on. Needs numpy; the repository's packages are put on sys.path / PYTHONPATH by the script itself.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench_llm import peak_gbs  # (the GPU's peak bandwidth: PEAK_GBS or nvidia-smi's name; bench/ is sys.path[0])

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = sorted(glob.glob(os.path.join(ROOT, "packages", "*", "src")))
sys.path[:0] = SRC
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(SRC + [os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}

SIZE = os.getenv("SIZE", "1b")
TP = int(os.getenv("TP", "2"))
DEV = os.getenv("DEV", "CUDA")
LLM_DIR = os.getenv("LLM_DIR", "/tmp/tg_bench_llm")
CONTEXT = int(os.getenv("CONTEXT", "512"))
DECODE = int(os.getenv("DECODE", "32"))
PROMPT = int(os.getenv("PROMPT", "64"))
TIMEOUT = int(os.getenv("TIMEOUT", "420"))
ONE_GPU = os.getenv("ONE_GPU", "1" if SIZE == "1b" else "0") == "1"
DELETE = os.getenv("DELETE", "0") == "1"


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    print(json.dumps({"bench": bench, "impl": impl, "value": round(value, 4), "unit": unit, "params": params}))
    sys.stdout.flush()


def model_file() -> str:
    from tg_llm.big_model import SHAPES, file_bytes, write_big_gguf

    os.makedirs(LLM_DIR, exist_ok=True)
    path = os.path.join(LLM_DIR, f"llama-{SIZE}-F16-tp.gguf")
    t0 = time.perf_counter()
    workers = int(os.getenv("WRITE_WORKERS", "0")) or None
    wrote = write_big_gguf(path, SIZE, context=max(CONTEXT, 4096), workers=workers)
    took = time.perf_counter() - t0
    gb = file_bytes(SHAPES[SIZE], max(CONTEXT, 4096)) / 1e9
    if wrote:
        emit("llm_tp_write", "tg", took, "s", size=SIZE, GB=round(gb, 2), GBps=round(gb / took, 2))
    else:
        emit("llm_tp_warm", "tg", warm(path), "s", size=SIZE, GB=round(gb, 2))
    return path


def warm(path: str) -> float:
    """Read the whole file once (threads, 64 MiB reads) so that it sits in the page cache; the seconds it took."""
    size, chunk = os.path.getsize(path), 64 << 20
    t0 = time.perf_counter()

    def read(start: int) -> None:
        buf = bytearray(chunk)
        fd = os.open(path, os.O_RDONLY)
        try:
            for at in range(start, size, chunk * 32):
                os.preadv(fd, [memoryview(buf)[: min(chunk, size - at)]], at)
        finally:
            os.close(fd)

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(read, [i * chunk for i in range(32)]))
    return time.perf_counter() - t0


def run_child(args: list[str], impl: str) -> list[dict[str, Any]]:
    """Run `python <args>` with the repository on PYTHONPATH; its JSON lines (errors reported, never raised)."""
    env = {**CHILD_ENV, "DEV": DEV}
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, *args], env=env, stdout=subprocess.PIPE, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        emit("llm_tp_error", impl, time.perf_counter() - t0, "s", size=SIZE, error=f"timed out after {TIMEOUT} s")
        return []
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0:
        emit("llm_tp_error", impl, time.perf_counter() - t0, "s", size=SIZE, error=f"exit status {p.returncode}")
    return lines


def bench(path: str, devices: list[str], impl: str) -> float | None:
    """The CLI's benchmark of the model on `devices` (--tp when several); its decode tok/s."""
    where = ["--devices", ",".join(devices)] if len(devices) > 1 else ["--device", devices[0]]
    args = ["-m", "tg_llm", "--model", path, *where, "--benchmark", str(DECODE), "--prompt-tokens", str(PROMPT)]
    args += ["--context", str(CONTEXT), "--dtype", "float16" if DEV != "CPU" else "float32"]
    decode = None
    for line in run_child(args, impl):
        params = {**line["params"], "size": SIZE, "devices": len(devices)}
        emit(line["bench"], impl, line["value"], line["unit"], **params)
        if line["bench"] == "llm_decode":
            decode = line["value"]
            gb = params["weights_GB"]
            if (peak := peak_gbs()) is not None and DEV == "CUDA":
                emit("llm_decode_bound", impl, len(devices) * peak / gb, "tok/s", **params, peak_GBps=peak)
    return decode


CHECK = """
import json, sys
import numpy as np
from tg_llm import load_model
from tg_uop import dtypes
path, devices = sys.argv[1], sys.argv[2].split(",")
one, _ = load_model(path, devices[0], dtypes.float32, context=64)
split, _ = load_model(path, dtype=dtypes.float32, context=64, devices=devices)
prompt = [(7 * i + 3) % one.cfg.vocab_size for i in range(12)]
diff = float(np.abs(one.forward(prompt, 0).numpy() - split.forward(prompt, 0).numpy()).max())
for pos in range(12, 15):
    diff = max(diff, float(np.abs(one.forward([pos], pos).numpy() - split.forward([pos], pos).numpy()).max()))
same = list(one.greedy_tokens(5, 15, 16)) == list(split.greedy_tokens(5, 15, 16))
print(json.dumps({"bench": "llm_tp_logits_maxdiff", "impl": "tg", "value": diff, "unit": "abs", "params": {}}))
print(json.dumps({"bench": "llm_tp_greedy_equal", "impl": "tg", "value": int(same), "unit": "bool", "params": {}}))
"""


def main() -> None:
    kind = DEV.split(":")[0]
    devices = [f"{kind}:{i}" for i in range(TP)]
    print(
        f"# tensor parallel bench: SIZE={SIZE} TP={TP} DEV={DEV} CONTEXT={CONTEXT} PROMPT={PROMPT} DECODE={DECODE}",
        file=sys.stderr,
    )
    path = model_file()
    try:
        split = bench(path, devices, f"tg_tp{TP}")
        if ONE_GPU:
            one = bench(path, devices[:1], "tg_1gpu")
            if split and one:
                emit("llm_tp_speedup", f"tg_tp{TP}", split / one, "x", size=SIZE, devices=TP)
            for line in run_child(["-c", CHECK, path, ",".join(devices)], "tg_check"):
                emit(line["bench"], f"tg_tp{TP}", line["value"], line["unit"], size=SIZE, devices=TP)
    finally:
        if DELETE:
            os.remove(path)


if __name__ == "__main__":
    main()
