"""`python -m tg.llm --model F.gguf`: chat in the terminal (streamed); `--serve [PORT]`: an OpenAI-compatible
server on 127.0.0.1; `--benchmark N`: prefill and decode tokens/s; `--prompt TEXT`: one answer, then exit.

>>> main(["--model", "model.gguf", "--prompt", "Hello", "--max-tokens", "8"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any, TextIO

from tg_llm import load_model
from tg_llm.generate import Completion, Session
from tg_llm.tensor_parallel import plan_devices
from tg_nn.gguf import GGUFError
from tg_uop import dtypes

__all__ = ["benchmark", "main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tg.llm", description="Run a GGUF language model with tg.")
    p.add_argument("--model", required=True, help="path of a .gguf file (Llama, Mistral, Qwen2/3 architectures)")
    p.add_argument(
        "--serve",
        nargs="?",
        type=int,
        const=8000,
        default=None,
        metavar="PORT",
        help="serve the OpenAI API on 127.0.0.1:PORT (default 8000; 0 picks a free port)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="--serve: decode up to N requests together (a KV cache of --context for each; default 1)",
    )
    p.add_argument("--benchmark", type=int, default=None, metavar="N", help="time a prefill and N decode steps")
    p.add_argument("--prompt-tokens", type=int, default=128, help="--benchmark's prompt length (default 128)")
    p.add_argument("--prompt", default=None, help="answer this one message and exit")
    p.add_argument("--device", default=None, help="tg device (default: Device.DEFAULT)")
    p.add_argument(
        "--devices",
        default=None,
        metavar="D0,D1,...",
        help="split the model over these devices (tensor parallel; e.g. CUDA:0,CUDA:1; an F32/F16/BF16 file)",
    )
    p.add_argument(
        "--tp",
        type=int,
        default=None,
        metavar="N",
        help="split the model over N devices of --device's kind (default: Device.DEFAULT's), numbered from 0",
    )
    p.add_argument("--dtype", choices=["float32", "float16"], default=None, help="weight dtype (default: per device)")
    p.add_argument("--context", type=int, default=None, help="cap the context (KV cache) at this many tokens")
    p.add_argument(
        "--keep-quantized",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep quantized weights in their blocks (the default; --no-keep-quantized dequantizes them at load)",
    )
    p.add_argument(
        "--int8-activations",
        action="store_true",
        help="CPU: round activations to 8-bit blocks in the quantized products, as llama.cpp does (faster)",
    )
    p.add_argument("--max-tokens", type=int, default=512, help="most tokens per answer (default 512)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--system", default=None, help="a system message that starts the conversation")
    p.add_argument("--verbose", action="store_true", help="after each answer, its token counts and time on stderr")
    return p


def main(argv: list[str] | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Run the command line `argv`; the exit status (0, 1 for a bad file or prompt, 130 for Ctrl-C while loading)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.parallel < 1:
        parser.error(f"--parallel {args.parallel}: expected a number of requests >= 1")
    if args.devices is not None and args.tp is not None:
        parser.error("--devices and --tp both name the devices: give one of them")
    if args.devices is not None and args.device is not None:
        parser.error("--device and --devices: give --devices alone (the first one receives the tokens)")
    if (args.devices is not None or args.tp is not None) and args.parallel > 1:
        parser.error("--parallel > 1 decodes on one device; a split model (--devices/--tp) serves one at a time")
    try:
        return _run(args, stdin or sys.stdin, stdout or sys.stdout)
    except KeyboardInterrupt:  # while loading or benchmarking: no traceback
        print("\ntg.llm: interrupted", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    try:
        dtype = {"float32": dtypes.float32, "float16": dtypes.float16, None: None}[args.dtype]
        devices = None
        if args.devices is not None or args.tp is not None:
            kind = args.device.split(":")[0] if args.device else None
            devices = plan_devices(args.devices, args.tp, kind)
        t0 = time.perf_counter()
        model, tok = load_model(
            args.model, args.device, dtype, args.context, args.keep_quantized, args.int8_activations, devices
        )
        load_s = time.perf_counter() - t0
        where = ",".join(model.devices) if model.devices else model.device
        print(
            f"loaded {os.path.basename(args.model)} ({model.cfg.architecture}, {model.cfg.n_layers} layers, "
            f"context {model.cfg.context_length}) on {where} in {load_s:.1f} s",
            file=sys.stderr,
        )
    except (GGUFError, ValueError, OSError) as e:
        print(f"tg.llm: {e}", file=sys.stderr)
        return 1
    session = Session(model, tok)
    if args.benchmark is not None:
        for line in benchmark(session, args.benchmark, args.prompt_tokens, load_s):
            print(json.dumps(line), file=stdout)
        return 0
    if args.serve is not None:
        from tg_llm.server import LLMServer

        srv = LLMServer(session, os.path.basename(args.model), args.host, args.serve, slots=args.parallel)
        print(f"serving the OpenAI API on {srv.url}/v1 (model {srv.model_id!r}); Ctrl-C stops", file=sys.stderr)
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            srv.stop()
        return 0
    return _chat(session, args, stdin, stdout)


class _Interrupt:
    """While an answer streams, Ctrl-C (SIGINT) sets `hit` and the answer stops at its next piece, so the model
    is never interrupted inside a step; a second Ctrl-C raises KeyboardInterrupt at once. Outside the main thread
    (where Python cannot install a handler) Ctrl-C raises as usual."""

    def __init__(self) -> None:
        self.hit = False
        self.old: Any = None

    def _on_sigint(self, *_: object) -> None:
        if self.hit:
            raise KeyboardInterrupt
        self.hit = True

    def __enter__(self) -> _Interrupt:
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)


def _read_message(stdin: TextIO, stdout: TextIO) -> str | None:
    """The next non-empty line typed at the prompt; None at the end of input, /exit, /quit or Ctrl-C."""
    while True:
        print("> ", end="", file=stdout, flush=True)
        try:
            line = stdin.readline()
        except KeyboardInterrupt:  # Ctrl-C at the prompt: leave, on a fresh line
            print(file=stdout, flush=True)
            return None
        if not line or line.strip() in ("/exit", "/quit"):
            return None
        if line.strip():  # an empty line is not a message
            return line.rstrip("\n")


def _answer(session: Session, args: Any, messages: list[dict[str, str]], stdout: TextIO) -> str:
    """Stream the answer to `messages` to stdout and return it; Ctrl-C ends it early (what came is kept)."""
    prompt = session.encode_chat(messages)
    # at least 1: a prompt over the context then fails in prefill, which names both lengths
    n = max(1, min(args.max_tokens, session.model.cfg.context_length - len(prompt)))
    answer, reused, t0 = "", _shared_prefix(session.cached, prompt), time.perf_counter()
    done: Completion | None = None
    with _Interrupt() as stop:
        gen = session.generate(prompt, n, args.temperature, args.top_p, args.top_k, seed=args.seed)
        try:
            for piece, so_far in gen:
                done = so_far
                answer += piece
                print(piece, end="", file=stdout, flush=True)
                if stop.hit:
                    break
        finally:
            gen.close()
    print(file=stdout, flush=True)
    if args.verbose and done is not None:
        print(
            f"[prompt {len(prompt)} tokens ({reused} reused), answer {len(done.tokens)} tokens"
            f"{' (stopped by Ctrl-C)' if stop.hit else ''}, {time.perf_counter() - t0:.2f} s]",
            file=sys.stderr,
        )
    return answer


def _shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _chat(session: Session, args: Any, stdin: TextIO, stdout: TextIO) -> int:
    """The conversation: each answer is kept in it, also one Ctrl-C stopped; Ctrl-C at the prompt leaves."""
    start = [{"role": "system", "content": args.system}] if args.system else []
    messages = list(start)
    interactive = args.prompt is None
    while True:
        text = _read_message(stdin, stdout) if interactive else args.prompt
        if text is None:
            return 0
        messages.append({"role": "user", "content": text})
        try:
            answer = _answer(session, args, messages, stdout)
        except ValueError as e:  # the conversation outgrew the context: say so and start over
            print(f"tg.llm: {e}; starting a new conversation", file=sys.stderr)
            messages = list(start)
            if not interactive:
                return 1
            continue
        except KeyboardInterrupt:  # a second Ctrl-C inside a step: the cache may be half-written, so forget it
            session.cached = []
            print("\ntg.llm: interrupted", file=sys.stderr)
            messages.pop()
            if not interactive:
                return 130
            continue
        messages.append({"role": "assistant", "content": answer})
        if not interactive:
            return 0


def benchmark(session: Session, n: int, prompt_len: int = 128, load_s: float | None = None) -> list[dict[str, Any]]:
    """Prefill of a `prompt_len`-token prompt and `n` decode steps (each after two warm-up runs that compile and
    capture the jitted step), as JSON-able figures; with `load_s`, the load time (seconds) first."""
    model = session.model
    ctx = model.cfg.context_length
    prompt_len = max(2, min(prompt_len, ctx // 2))
    n = max(1, min(n, ctx - prompt_len - 3))
    prompt = [(7 * i + 3) % model.cfg.vocab_size for i in range(prompt_len)]
    for _ in range(2):  # compile the prefill kernels (and, where the prompt's length is jitted, capture them)
        model.forward(prompt, 0, all_logits=False).numpy()
    t0 = time.perf_counter()
    logits = model.forward(prompt, 0, all_logits=False).numpy()
    prefill = time.perf_counter() - t0
    tok, pos = int(logits[-1].argmax()), prompt_len
    for _ in range(2):  # the eager run and the capture of the decode step
        tok, pos = next(model.greedy_tokens(tok, pos, 1)), pos + 1
    t0 = time.perf_counter()
    *_, tok = model.greedy_tokens(tok, pos, n)  # greedy decoding, steps chained on the device
    decode = time.perf_counter() - t0
    gb = model.weight_bytes / 1e9
    params = {
        "device": ",".join(model.devices) if model.devices else model.device,
        "dtype": str(model.dtype),
        "prompt_tokens": prompt_len,
        "decode_tokens": n,
        "weights_GB": round(gb, 4),
    }
    load = (
        [] if load_s is None else [{"bench": "llm_load", "impl": "tg", "value": load_s, "unit": "s", "params": params}]
    )
    return load + [
        {"bench": "llm_prefill", "impl": "tg", "value": prompt_len / prefill, "unit": "tok/s", "params": params},
        {"bench": "llm_decode", "impl": "tg", "value": n / decode, "unit": "tok/s", "params": params},
        {"bench": "llm_decode_bandwidth", "impl": "tg", "value": gb * n / decode, "unit": "GB/s", "params": params},
    ]
