"""A character-level GPT trained on the complete works of Shakespeare, then sampled.

    uv run examples/gpt_shakespeare.py                 # CPU defaults: 4 layers, 4 heads, 128 dims, block 64
    DEV=CUDA BIG=1 uv run examples/gpt_shakespeare.py  # GPU: 6 layers, 6 heads, 384 dims, block 256

The model is tg_nn.models.gpt.GPT (GPT-2's layout: token + position embeddings, pre-norm blocks with causal
multi-head attention and a GELU MLP, the output tied to the token embedding). Training: AdamW with a
linear warm-up and cosine decay, global gradient-norm clipping, dropout, one jitted step (forward,
backward and update), a progress line with train/val loss and tokens/s, a safetensors checkpoint at
the end, then a sample with temperature and top-k.

Settings (environment): STEPS, BS (sequences per step), BLOCK, LAYERS, HEADS, EMBD, DROPOUT, LR, WARMUP, CLIP,
EVAL_EVERY (0: only at the end), EVAL_BATCHES, LOG_EVERY (steps between progress lines), SEED, CKPT (checkpoint
path), SAMPLE (characters to generate), TEMP, TOPK, PROMPT, TIME_LIMIT (seconds; stop early and still evaluate, save,
sample), GPUS (n: data parallel over n devices of the default kind, e.g. `DEV=CUDA GPUS=2`: each batch split
over them, the parameters replicated, gradients all-reduced by NCCL; BS must split evenly; sampling and the
checkpoint use the first device), SHARDED=1 (that path on a set of one device too: `GPUS=1 SHARDED=1`),
JIT_CACHE (1, the default: the captures of the jitted training and evaluation steps are saved under the user cache
directory, in files named by the settings above, and the next run with the same settings replays them from their
first call, with no warm-up call, capture or scheduling; 0: off; any other value: the training step's file, the
evaluation's beside it; not with GPUS/SHARDED).
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time

import numpy as np

from tg import Device, Tensor, TinyJit, dtypes
from tg.nn.datasets import shakespeare
from tg.nn.optim import AdamW
from tg.nn.state import get_parameters, get_state_dict, safe_save
from tg_nn.models.gpt import GPT, GPTConfig
from tg_uop.helpers import cache_dir


def env(name: str, default: float | int | str) -> float | int | str:
    raw = os.getenv(name)
    return default if raw is None else type(default)(raw)


BIG = bool(int(env("BIG", 0)))
STEPS = int(env("STEPS", 5000 if BIG else 2000))
BS = int(env("BS", 64 if BIG else 32))
BLOCK = int(env("BLOCK", 256 if BIG else 64))
LAYERS = int(env("LAYERS", 6 if BIG else 4))
HEADS = int(env("HEADS", 6 if BIG else 4))
EMBD = int(env("EMBD", 384 if BIG else 128))
DROPOUT = float(env("DROPOUT", 0.2 if BIG else 0.0))
LR = float(env("LR", 1e-3 if BIG else 2e-3))
WARMUP = int(env("WARMUP", 100))
CLIP = float(env("CLIP", 1.0))
EVAL_EVERY = int(env("EVAL_EVERY", 250))
# DTYPE=bf16 (or fp16): mixed precision, the matmuls and the attention in that dtype on tensor cores; the weights,
# AdamW's state, the layer norms, the softmax and the loss stay float32. ALLOW_TF32=1: float32 matmuls in TF32.
_DTYPE = str(env("DTYPE", "fp32"))
DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(_DTYPE, _DTYPE)
LOG_EVERY = int(env("LOG_EVERY", 10))
EVAL_BATCHES = int(env("EVAL_BATCHES", 20))
SEED = int(env("SEED", 1337))
CKPT = str(env("CKPT", "gpt_shakespeare.safetensors"))
SAMPLE = int(env("SAMPLE", 400))
TEMP = float(env("TEMP", 0.8))
TOPK = int(env("TOPK", 20))
PROMPT = str(env("PROMPT", "ROMEO:\n"))
TIME_LIMIT = float(env("TIME_LIMIT", 0))
GPUS = tuple(f"{Device.DEFAULT.split(':')[0]}:{i}" for i in range(int(env("GPUS", 1))))
SHARDED = len(GPUS) > 1 or bool(int(env("SHARDED", 0)))
JIT_CACHE = str(env("JIT_CACHE", "1"))


def jit_cache_path(step: str = "train") -> str | None:
    """The file of a jitted step's capture: one per set of settings that its kernels bake in (the file's own
    checks catch other tg versions, devices, shapes and state, not a changed constant such as DROPOUT)."""
    if JIT_CACHE == "0" or SHARDED:
        return None
    if JIT_CACHE != "1":
        return JIT_CACHE if step == "train" else f"{JIT_CACHE}.{step}"
    settings = repr((Device.DEFAULT, BS, BLOCK, LAYERS, HEADS, EMBD, DROPOUT, DTYPE, CLIP, os.getenv("ALLOW_TF32")))
    name = f"gpt_shakespeare-{step}-{hashlib.sha256(settings.encode()).hexdigest()[:16]}.tgjit"
    return os.path.join(cache_dir(), "jit", name)


def split(*ts: Tensor) -> list[Tensor]:
    """GPUS=n: the batch split over the devices (each gets BS/n sequences)."""
    return [t.shard(GPUS, axis=0) for t in ts] if SHARDED else list(ts)


def one_device(t: Tensor) -> Tensor:
    return t.to(GPUS[0]) if SHARDED else t


def lr_at(step: int) -> float:
    """Linear warm-up to LR, then cosine decay to LR/10 at the last step."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    frac = (step - WARMUP) / max(1, STEPS - WARMUP)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def batches(data: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    starts = rng.integers(0, len(data) - BLOCK - 1, BS)
    x = np.stack([data[s : s + BLOCK] for s in starts])
    y = np.stack([data[s + 1 : s + BLOCK + 1] for s in starts])
    return x, y


def main() -> None:
    Tensor.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    train_t, val_t, vocab = shakespeare()
    train, val = train_t.numpy(), val_t.numpy()
    cfg = GPTConfig(
        vocab_size=len(vocab),
        block_size=BLOCK,
        n_layer=LAYERS,
        n_head=HEADS,
        n_embd=EMBD,
        dropout=DROPOUT,
        compute_dtype=DTYPE,
    )
    model = GPT(cfg)
    params = get_parameters(model)
    n_params = sum(int(np.prod(p.shape)) for p in params)
    print(
        f"GPT {LAYERS} layers, {HEADS} heads, {EMBD} dims, block {BLOCK}, vocab {len(vocab)}: {n_params / 1e6:.2f}M "
        f"parameters; {STEPS} steps of {BS}x{BLOCK} characters on {train_t.device}"
    )
    if SHARDED:  # data parallel: a full copy of the model on every device
        for p in params:
            p.to_(GPUS)
    # fused: the parameters in one flat buffer, so the update and the clipping are a few kernels for all of them
    # (data parallel: a flat buffer on every device, the gradients all-reduced in one collective)
    opt = AdamW(params, lr=LR, weight_decay=0.1, fused=True)

    def train_step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            x, y = split(x, y)
            loss = model.loss(x, y)
            loss.backward()
            if CLIP > 0:
                opt.clip_grad_norm(CLIP)  # the global gradient norm, clipped to CLIP (0: no clipping)
            opt.step()
        return one_device(loss).realize()

    # the tensors the step reads and updates besides its inputs, by name: a saved capture binds them by these names
    state = {**get_state_dict(model, "model"), **get_state_dict(opt, "opt")}
    jitted_step = TinyJit(train_step, cache=(cache := jit_cache_path()), state=state)
    if cache is not None:
        found = "found" if os.path.exists(cache) else "not there yet"
        print(f"TinyJit capture file: {cache} ({found}; JIT_CACHE=0: off)")

    def eval_step(x: Tensor, y: Tensor) -> Tensor:
        return one_device(model.loss(*split(x, y))).realize()

    jitted_eval = TinyJit(eval_step, cache=jit_cache_path("eval"), state=get_state_dict(model, "model"))

    def evaluate(data: np.ndarray) -> float:
        erng = np.random.default_rng(0)  # the same batches every time: comparable figures
        losses = []
        for _ in range(EVAL_BATCHES):
            x, y = batches(data, erng)
            losses.append(jitted_eval(Tensor(x, dtype=dtypes.int32), Tensor(y, dtype=dtypes.int32)).item())
        return float(np.mean(losses))

    start = time.perf_counter()
    last_t, last_step, val_loss = start, 0, "-"  # no validation loss before the first evaluation
    # one-time costs, timed apart from training: the first step compiles its kernels, the second is TinyJit's capture
    # (none when the first step replayed a saved capture); evaluations are not training either
    step, eval_s = 0, 0.0
    warmup_s: list[float] = []
    for step in range(STEPS):
        step_start = time.perf_counter()
        opt.lr.assign(Tensor([lr_at(step)], dtype=dtypes.float32, device=opt.lr.device)).realize()
        x, y = batches(train, rng)
        loss = jitted_step(Tensor(x, dtype=dtypes.int32), Tensor(y, dtype=dtypes.int32))
        if step < (1 if jitted_step.loaded else 2):
            loss.item()
            warmup_s.append(time.perf_counter() - step_start)
        if step % LOG_EVERY == 0 or step == STEPS - 1:
            train_loss = loss.item()
            now = time.perf_counter()
            tok_s = (step - last_step) * BS * BLOCK / max(now - last_t, 1e-9) if step > last_step else 0.0
            last_t, last_step = now, step
            bar = "#" * int(30 * (step + 1) / STEPS)
            print(
                f"\r[{bar:<30s}] step {step + 1:5d}/{STEPS} loss {train_loss:.3f} val {val_loss} "
                f"{tok_s:8.0f} tok/s {now - start:6.0f}s",
                end="",
                flush=True,
            )
        if EVAL_EVERY > 0 and (step + 1) % EVAL_EVERY == 0:  # EVAL_EVERY=0: only at the end
            eval_start = time.perf_counter()
            loss_val = evaluate(val)
            val_loss, seconds = f"{loss_val:.3f}", time.perf_counter() - start
            print(f"\nstep {step + 1}: train {evaluate(train):.4f} val {loss_val:.4f} ({seconds:.0f}s)")
            eval_s += time.perf_counter() - eval_start
        if TIME_LIMIT and time.perf_counter() - start > TIME_LIMIT:
            print(f"\nTIME_LIMIT={TIME_LIMIT:.0f}s reached at step {step + 1}")
            break
    loss.item()
    elapsed = time.perf_counter() - start
    train_s, trained = elapsed - sum(warmup_s) - eval_s, step + 1 - len(warmup_s)
    how = "replayed from the saved capture" if jitted_step.loaded else "its kernels compile"
    capture = f", second step {warmup_s[1]:.2f}s (TinyJit capture)" if len(warmup_s) > 1 else ""
    print(
        f"\nfirst step {warmup_s[0]:.2f}s ({how}){capture}, then {trained / max(train_s, 1e-9):.2f} train steps/s "
        f"({(step + 1) / max(elapsed - eval_s, 1e-9):.2f} counting every step)"
    )
    train_final, val_final = evaluate(train), evaluate(val)
    print(
        f"final: train loss {train_final:.4f} val loss {val_final:.4f} after {step + 1} steps in {elapsed:.0f}s "
        f"({(step + 1) * BS * BLOCK / elapsed:.0f} tokens/s)"
    )
    if SHARDED:  # the checkpoint and the sample from the first device's copy
        for p in params:
            p.to_(GPUS[0])
    safe_save(get_state_dict(model), CKPT)
    print(f"checkpoint: {CKPT}")
    stoi = {c: i for i, c in enumerate(vocab)}
    prompt = [stoi[c] for c in PROMPT if c in stoi] or [0]
    out = model.generate(prompt[-BLOCK:], SAMPLE, temperature=TEMP, top_k=TOPK, seed=SEED)
    print("sample:\n" + "".join(vocab[i] for i in out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
