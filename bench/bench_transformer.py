"""The same GPT in tg and in PyTorch (eager and torch.compile): train-step and decode tokens/s.

    uv run python bench/bench_transformer.py            # tg only
    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) /path/to/venv-with-torch/bin/python bench/bench_transformer.py
    DEV=CUDA ... (on the GPU machine; BIG=1 for the 6-layer, 384-dim, block-256 model)

Train step: forward, backward, AdamW update of a batch of BS sequences of BLOCK characters, jitted in
tg (TinyJit), as is in torch eager, and torch.compile'd; timed as the user waits for it (from the
call to the loss on the host), median of REPS steps after warm-up. Decode: greedy generation of
TOKENS tokens after a 16-token prompt with a KV cache (tg: GPT.generate_cached, one jitted step per
token; torch: the same model with its own cache), tokens/s over the whole generation after a
warm-up generation. Prints one JSON line per figure; torch rows are skipped when torch is missing.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

BIG = os.getenv("BIG", "0") not in ("", "0")
CFG = dict(vocab=84, block=256 if BIG else 64, layers=6 if BIG else 4, heads=6 if BIG else 4, embd=384 if BIG else 128)
BS = int(os.getenv("BS", "64" if BIG else "32"))
REPS = int(os.getenv("REPS", "10"))
TOKENS = int(os.getenv("TOKENS", "100" if BIG else "40"))
PROMPT = list(range(1, 17))


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    print(json.dumps({"bench": bench, "impl": impl, "value": round(value, 2), "unit": unit, "params": params}))
    sys.stdout.flush()


def batch(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.integers(0, CFG["vocab"], (BS, CFG["block"])).astype(np.int32)
    return x, np.roll(x, -1, axis=1)


# ---------------------------------------------------------------- tg
def bench_tg() -> None:
    from tg import Device, Tensor, TinyJit, dtypes
    from tg.nn.optim import AdamW
    from tg.nn.state import get_parameters
    from tg_nn.models.gpt import GPT, GPTConfig

    cfg = GPTConfig(CFG["vocab"], CFG["block"], CFG["layers"], CFG["heads"], CFG["embd"])
    Tensor.manual_seed(0)
    model = GPT(cfg)
    opt = AdamW(get_parameters(model), lr=1e-3)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = model.loss(x, y)
            loss.backward()
            opt.step()
        return loss.realize()

    rng = np.random.default_rng(0)
    times = []
    first = time.perf_counter()
    for i in range(REPS + 3):
        x, y = batch(rng)
        st = time.perf_counter()
        step(Tensor(x, dtype=dtypes.int32), Tensor(y, dtype=dtypes.int32)).item()
        if i == 2:
            emit("train_first_3_steps", "tg", time.perf_counter() - first, "s", **CFG, bs=BS)
        if i >= 3:
            times.append(time.perf_counter() - st)
    params = dict(**CFG, bs=BS, device=Device.DEFAULT)
    emit("train_step", "tg", BS * CFG["block"] / statistics.median(times), "tokens/s", **params)
    model.generate_cached(PROMPT, TOKENS, temperature=0.0)  # warm-up: prefill and the decode step compiled
    st = time.perf_counter()
    model.generate_cached(PROMPT, TOKENS, temperature=0.0)
    emit("decode_kv_cache", "tg", TOKENS / (time.perf_counter() - st), "tokens/s", **params, tokens=TOKENS)


# ---------------------------------------------------------------- torch
def torch_model(torch: Any) -> Any:
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = CFG["embd"]
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: Any, cache: Any = None, pos: int = 0) -> Any:
            b, t, c = x.shape
            h = CFG["heads"]
            q, k, v = self.c_attn(self.ln_1(x)).view(b, t, 3, h, c // h).permute(2, 0, 3, 1, 4)
            if cache is None:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                cache[0][:, :, pos : pos + t], cache[1][:, :, pos : pos + t] = k, v
                keys, values = cache[0][:, :, : pos + t], cache[1][:, :, : pos + t]
                y = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1)
            x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(CFG["vocab"], CFG["embd"]), nn.Embedding(CFG["block"], CFG["embd"])
            self.h = nn.ModuleList([Block() for _ in range(CFG["layers"])])
            self.ln_f = nn.LayerNorm(CFG["embd"])

        def forward(self, idx: Any, caches: Any = None, pos: int = 0) -> Any:
            t = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(pos, pos + t, device=idx.device))
            for i, blk in enumerate(self.h):
                x = blk(x, None if caches is None else caches[i], pos)
            return self.ln_f(x) @ self.wte.weight.T

    return GPT()


def bench_torch(compiled: bool) -> None:
    try:
        import torch
    except ImportError:
        return
    impl = "torch.compile" if compiled else "torch"
    dev = "cuda" if os.getenv("DEV", "").upper() == "CUDA" and torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch_model(torch).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x).view(-1, CFG["vocab"]), y.view(-1))
        loss.backward()
        opt.step()
        return loss

    run = torch.compile(step) if compiled else step
    rng = np.random.default_rng(0)
    times = []
    first = time.perf_counter()
    for i in range(REPS + 3):
        x, y = (torch.from_numpy(a.astype(np.int64)).to(dev) for a in batch(rng))
        st = time.perf_counter()
        run(x, y).item()
        if i == 2:
            emit("train_first_3_steps", impl, time.perf_counter() - first, "s", **CFG, bs=BS)
        if i >= 3:
            times.append(time.perf_counter() - st)
    params = dict(**CFG, bs=BS, device=dev)
    emit("train_step", impl, BS * CFG["block"] / statistics.median(times), "tokens/s", **params)
    if compiled:
        return  # decode: eager only (a growing cache recompiles under torch.compile)

    @torch.no_grad()
    def generate() -> list[int]:
        hd = CFG["embd"] // CFG["heads"]
        caches = [
            [torch.zeros(1, CFG["heads"], CFG["block"], hd, device=dev) for _ in range(2)] for _ in range(CFG["layers"])
        ]
        toks = list(PROMPT)
        logits = model(torch.tensor([toks], device=dev), caches, 0)[0, -1]
        for _ in range(TOKENS):
            toks.append(int(logits.argmax()))
            logits = model(torch.tensor([[toks[-1]]], device=dev), caches, len(toks) - 1)[0, -1]
        return toks

    model.eval()
    generate()
    st = time.perf_counter()
    generate()
    emit("decode_kv_cache", impl, TOKENS / (time.perf_counter() - st), "tokens/s", **params, tokens=TOKENS)


if __name__ == "__main__":
    bench_tg()
    bench_torch(compiled=False)
    bench_torch(compiled=True)
