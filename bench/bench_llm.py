"""LLM inference: prefill and decode tokens/s of a random Llama-style GGUF model in tg and tinygrad, beside
the memory-bandwidth bound (weights bytes read per token / peak bandwidth).

    MODEL=F.gguf uv run python bench/bench_llm.py          # CPU: that file in tg beside llama.cpp's llama-bench
    uv run python bench/bench_llm.py                       # tiny model on the default device (a smoke run)
    DEV=CUDA SIZE=1b uv run python bench/bench_llm.py      # the ~1.2B model (Llama 3.2 1B shapes), Q8_0 and F16
    QTYPES=Q8_0,F16,Q4_K DECODE=64 PROMPT=128 CONTEXT=1024 TINYGRAD_PYTHON=/path/to/python  ...

The model files are written once into $LLM_DIR (default /tmp/tg_bench_llm) with `gguf` (a dev dependency)
and reused. tinygrad: `$TINYGRAD_PYTHON -m tinygrad.llm --model F --benchmark N --max_context C` (or
tinygrad.apps.llm for older versions), median of the tok/s it prints after warm-up; skipped with a note
when that python has no tinygrad. The PyPI wheel of tinygrad 0.14.0 cannot run `-m tinygrad.llm` (its
model.py imports tinygrad.llm.kernels, which the wheel lacks): point TINYGRAD_PATH at a source tree
(e.g. `git archive <commit> tinygrad | tar -x -C DIR` from a clone) and it goes first on PYTHONPATH.
tinygrad's CLI times decode only; its prefill is timed through tinygrad.llm.model's generate() in a second
process (TINYGRAD_PREFILL=0 skips it). DECODE_KERNELS=1 adds tg's per-kernel time of one decode step, summed per
kernel name, to stderr (CUDA: CUDA events between back-to-back launches, plus the step's graph alone and the host's
part of a token; elsewhere DEBUG=2 lines). tg's decode figure is greedy, steps chained on the device
(Llama.greedy_tokens).
Peak bandwidth: PEAK_GBS, else from nvidia-smi's GPU name (H100 SXM
3350, H100 PCIe 2000, H200 4800 GB/s), else no bound row. Prints one JSON line per figure.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

SIZES: dict[str, dict[str, Any]] = {
    # Llama 3.2 1B: 16 layers, dim 2048, 32 heads, 8 kv heads, ffn 8192, vocab 128256, tied embeddings
    "1b": dict(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, hidden_dim=8192, vocab_size=128256, tied=True),
    "tiny": dict(dim=256, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=512, vocab_size=1024, tied=True),
}
SIZE = os.getenv("SIZE", "tiny")
QTYPES = os.getenv("QTYPES", "Q8_0,F16").split(",")
DECODE = int(os.getenv("DECODE", "64" if SIZE != "tiny" else "16"))
PROMPT = int(os.getenv("PROMPT", "128" if SIZE != "tiny" else "32"))
CONTEXT = int(os.getenv("CONTEXT", "1024" if SIZE != "tiny" else "128"))
LLM_DIR = os.getenv("LLM_DIR", "/tmp/tg_bench_llm")
PEAKS = {"H200": 4800.0, "H100 PCIe": 2000.0, "H100": 3350.0, "A100": 2039.0}


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    print(json.dumps({"bench": bench, "impl": impl, "value": round(value, 3), "unit": unit, "params": params}))
    sys.stdout.flush()


def model_file(qtype: str) -> str:
    from tg_llm.random_model import write_random_gguf

    os.makedirs(LLM_DIR, exist_ok=True)
    path = os.path.join(LLM_DIR, f"llama-{SIZE}-{qtype}.gguf")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        write_random_gguf(path + ".tmp", qtype=qtype, context_length=CONTEXT, **SIZES[SIZE])
        os.replace(path + ".tmp", path)
        print(f"# wrote {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def file_weight_bytes(path: str) -> int:
    """Bytes of the weights a decode step must read in the file's own format (the embedding table only when
    it is also the output head, since a lookup reads one row)."""
    from tg_nn.gguf import gguf_read_header

    tensors = {t.name: t.nbytes for t in gguf_read_header(path).tensors}
    tied = "output.weight" not in tensors
    return sum(n for k, n in tensors.items() if k != "token_embd.weight" or tied)


def peak_gbs() -> float | None:
    if os.getenv("PEAK_GBS"):
        return float(os.environ["PEAK_GBS"])
    try:
        name = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        ).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None
    return next((v for k, v in PEAKS.items() if k in name), None)


def bench_tg(path: str, qtype: str, keep_quantized: bool, impl: str | None = None) -> None:
    """impl "tg": weights dequantized once at load (float16 on GPUs); "tg-kept": quantized blocks stay on
    the device and the matmuls are fused kernels that read them (load_model(keep_quantized=True), tg_nn.quant);
    "tg-kept-graph" (QUANT_GRAPH=1): the same blocks unpacked by tg's own graph fused into its matmuls."""
    from tg_llm import load_model
    from tg_llm.cli import benchmark
    from tg_llm.generate import Session

    t0 = time.perf_counter()
    model, tok = load_model(path, context=CONTEXT, keep_quantized=keep_quantized)
    load_s = time.perf_counter() - t0
    impl = impl or ("tg-kept" if keep_quantized else "tg")
    for row in benchmark(Session(model, tok), DECODE, PROMPT):
        emit(
            row["bench"],
            impl,
            row["value"],
            row["unit"],
            qtype=qtype,
            size=SIZE,
            load_s=round(load_s, 1),
            **row["params"],
        )
    if os.getenv("DECODE_KERNELS"):
        if model.device.split(":")[0] == "CUDA":
            profile_decode_events(model, impl, qtype)
        else:
            profile_decode(model, impl, qtype)


_KERNEL_LINE = re.compile(
    r"\*\*\* \S+\s+\d+ (?:\x1b\[\d+m)?(\S+)\s*(?:\x1b\[0m)?\s+arg\s+\d+ mem\s+[\d.]+ GB tm\s+([\d.]+)us/"
)


def profile_decode(model: Any, impl: str, qtype: str, top: int = 12) -> None:
    """DECODE_KERNELS=1: the DEBUG=2 kernel list of one jitted decode step, summed per kernel name, to stderr, and one
    JSON line with the kernel count and summed kernel time per step (the wall time per step is the decode row's)."""
    import contextlib
    import io
    from collections import defaultdict

    from tg_uop.helpers import Context

    out = io.StringIO()
    with contextlib.redirect_stdout(out), Context(DEBUG=2):
        model.forward([1], CONTEXT // 2).numpy()
    per: dict[str, list[float]] = defaultdict(list)
    for line in out.getvalue().splitlines():
        if m := _KERNEL_LINE.search(line):
            per[m.group(1)].append(float(m.group(2)))
    total, count = sum(sum(v) for v in per.values()), sum(len(v) for v in per.values())
    for name, ts in sorted(per.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(
            f"# {impl} {qtype} {name:36s} x{len(ts):<4d} {sum(ts):9.1f} us {sum(ts) / max(total, 1e-9):6.1%}",
            file=sys.stderr,
        )
    emit("llm_decode_kernels", impl, total, "us", qtype=qtype, size=SIZE, kernels=count)


_SPIN = 'extern "C" __global__ void tg_bench_spin(int us) { for (int i = 0; i < us; i++) __nanosleep(1000); }'


def profile_decode_events(model: Any, impl: str, qtype: str, top: int = 14) -> None:
    """DECODE_KERNELS=1 on CUDA: each kernel of the captured decode step timed on the GPU with CUDA events.

    A spinning kernel holds the stream while the host queues the whole step, one launch at a time with an event
    between launches, so the kernels then run back to back (caches as in the real step, no host gaps): kernel i
    takes event i+1 - event i (an event record adds about a microsecond). Also: the step's CUDA graph replayed
    alone (GPU time per step), beside the decode row's wall time per token. Summed per kernel name, to stderr."""
    import ctypes
    from collections import defaultdict

    from tg_runtime import Device
    from tg_runtime.ops_cuda import CUDAProgram

    rec = model._chain.recording  # the step benchmark() ran (Llama.greedy_tokens')
    dev = Device[model.device]
    drv, graph = dev.drv, rec.graph
    spin = CUDAProgram(drv, "tg_bench_spin", dev.compiler.compile(_SPIN))

    def events(n: int) -> list[ctypes.c_void_p]:
        evs = [ctypes.c_void_p() for _ in range(n)]
        for e in evs:
            drv.check(drv.lib.cuEventCreate(ctypes.byref(e), 0), "cuEventCreate")
        return evs

    def ms(a: ctypes.c_void_p, b: ctypes.c_void_p) -> float:
        out = ctypes.c_float()
        drv.check(drv.lib.cuEventElapsedTime(ctypes.byref(out), a, b), "cuEventElapsedTime")
        return out.value

    launches = graph.launches
    evs = events(len(launches) + 1)
    per: dict[str, list[float]] = defaultdict(list)
    for rep in range(3):
        spin(global_size=(1,), local_size=(1,), vals=(20000,))
        for i, (prog, bufs, gsz, lsz, vals) in enumerate(launches):
            drv.check(drv.lib.cuEventRecord(evs[i], None), "cuEventRecord")
            prog(*bufs, global_size=gsz, local_size=lsz, vals=vals)
        drv.check(drv.lib.cuEventRecord(evs[-1], None), "cuEventRecord")
        drv.synchronize()
        if rep == 2:
            for i, (prog, *_) in enumerate(launches):
                per[prog.name].append(ms(evs[i], evs[i + 1]) * 1000)
    total, count = sum(sum(v) for v in per.values()), sum(len(v) for v in per.values())
    for name, ts in sorted(per.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(
            f"# {impl} {qtype} {name:28s} x{len(ts):<4d} {sum(ts):8.1f} us {sum(ts) / max(total, 1e-9):6.1%}",
            file=sys.stderr,
        )
    emit("llm_decode_kernels", impl, total, "us", qtype=qtype, size=SIZE, kernels=count, timing="events")
    g0, g1 = events(2)
    spin(global_size=(1,), local_size=(1,), vals=(5000,))
    drv.check(drv.lib.cuEventRecord(g0, None), "cuEventRecord")
    for _ in range(20):
        graph()
    drv.check(drv.lib.cuEventRecord(g1, None), "cuEventRecord")
    drv.synchronize()
    emit("llm_decode_graph", impl, ms(g0, g1) * 1000 / 20, "us", qtype=qtype, size=SIZE, kernels=count)
    # the host's part of a token: one step with its logits copied out and the argmax on the host (forward's call,
    # the wait for the GPU, the copy and argmax), against Llama.greedy_tokens (steps chained on the device, 16 per
    # read of the tokens), per token, interleaved
    tok, pos, parts = 1, CONTEXT // 2, defaultdict(list)
    for _ in range(4):
        for _ in range(8):
            t0 = time.perf_counter()
            out = model.forward([tok], pos)
            t1 = time.perf_counter()
            dev.synchronize()
            t2 = time.perf_counter()
            tok = int(out.numpy()[0].argmax())
            t3 = time.perf_counter()
            parts["forward_call"].append(t1 - t0)
            parts["gpu_wait"].append(t2 - t1)
            parts["copy_argmax"].append(t3 - t2)
            parts["logits_token"].append(t3 - t0)
        t0 = time.perf_counter()
        *_, tok = model.greedy_tokens(tok, pos, 32)
        parts["chained_token"].append((time.perf_counter() - t0) / 32)
    emit(
        "llm_decode_host",
        impl,
        statistics.median(parts["chained_token"]) * 1e6,
        "us",
        qtype=qtype,
        size=SIZE,
        **{k: round(statistics.median(v) * 1e6, 1) for k, v in parts.items()},
    )


def bench_tinygrad(path: str, qtype: str) -> None:
    python = os.getenv("TINYGRAD_PYTHON", sys.executable)
    env = dict(os.environ)
    if os.getenv("TINYGRAD_PATH"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ["TINYGRAD_PATH"], env.get("PYTHONPATH")) if p)
    for module in ("tinygrad.llm", "tinygrad.apps.llm"):
        cmd = [python, "-m", module, "--model", path, "--benchmark", str(DECODE + 4), "--max_context", str(CONTEXT)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
        except (OSError, subprocess.TimeoutExpired) as e:
            print(f"# tinygrad ({module}): {e}", file=sys.stderr)
            continue
        rates = [float(x) for x in re.findall(r"([\d.]+) tok/s", r.stdout + r.stderr)]
        if r.returncode == 0 and rates:
            steady = rates[len(rates) // 2 :]  # the first steps compile and capture
            emit(
                "llm_decode",
                "tinygrad",
                statistics.median(steady),
                "tok/s",
                qtype=qtype,
                size=SIZE,
                module=module,
                context=CONTEXT,
            )
            return
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"# tinygrad ({module}) exit {r.returncode}: {tail[0][:300]}", file=sys.stderr)
    print("# tinygrad: no figure (not installed, or it cannot run this file)", file=sys.stderr)


_TINYGRAD_PREFILL = """
import json, sys, time
from tinygrad.llm.model import Transformer
path, ctx, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
model, _ = Transformer.from_gguf(path, ctx)
def prompt(seed): return [(7 * i + seed) % vocab for i in range(n)]
for seed in (3, 5): next(model.generate(prompt(seed)))  # compile, then capture the jitted chunks
times = []
for seed in (11, 13, 17):  # a new first token each time: nothing of the cache is reused
    t0 = time.perf_counter(); next(model.generate(prompt(seed))); times.append(time.perf_counter() - t0)
print(json.dumps({"prefill_tok_s": n / min(times)}))
"""


def bench_tinygrad_prefill(path: str, qtype: str) -> None:
    """tinygrad's CLI benchmark times decode only: its prefill is timed through tinygrad.llm.model's own
    generate() (chunks of 32 tokens, as its chat does), the first token of a PROMPT-token prompt, best of 3."""
    python = os.getenv("TINYGRAD_PYTHON", sys.executable)
    env = dict(os.environ)
    if os.getenv("TINYGRAD_PATH"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ["TINYGRAD_PATH"], env.get("PYTHONPATH")) if p)
    vocab = SIZES[SIZE]["vocab_size"]
    cmd = [python, "-c", _TINYGRAD_PREFILL, path, str(CONTEXT), str(PROMPT), str(vocab)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"# tinygrad prefill: {e}", file=sys.stderr)
        return
    found = re.findall(r'\{"prefill_tok_s": ([\d.e+-]+)\}', r.stdout)
    if r.returncode != 0 or not found:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"# tinygrad prefill exit {r.returncode}: {tail[0][:300]}", file=sys.stderr)
        return
    emit(
        "llm_prefill",
        "tinygrad",
        float(found[0]),
        "tok/s",
        qtype=qtype,
        size=SIZE,
        prompt_tokens=PROMPT,
        context=CONTEXT,
    )


def main() -> None:
    if os.getenv("MODEL"):  # a GGUF file on the CPU, beside llama.cpp (bench/llm_llamacpp.py)
        from llm_llamacpp import bench_cpu_peer

        bench_cpu_peer(emit, os.environ["MODEL"])
        return
    peak = peak_gbs()
    for qtype in QTYPES:
        path = model_file(qtype)
        gb = file_weight_bytes(path) / 1e9
        if peak:
            emit(
                "llm_decode_bound",
                "bandwidth",
                peak / gb,
                "tok/s",
                qtype=qtype,
                size=SIZE,
                weights_GB=round(gb, 3),
                peak_GBs=peak,
            )
        bench_tg(path, qtype, keep_quantized=False)
        if qtype.startswith("Q"):
            bench_tg(path, qtype, keep_quantized=True)
            if os.getenv("QUANT_GRAPH", "0") == "1":  # the kept blocks through tg's graph instead of source kernels
                os.environ["TG_QUANT_GRAPH"] = "1"
                bench_tg(path, qtype, keep_quantized=True, impl="tg-kept-graph")
                del os.environ["TG_QUANT_GRAPH"]
        if os.getenv("TINYGRAD", "1") != "0":
            bench_tinygrad(path, qtype)
            if os.getenv("TINYGRAD_PREFILL", "1") != "0":
                bench_tinygrad_prefill(path, qtype)


if __name__ == "__main__":
    main()
