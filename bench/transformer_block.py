"""One GPT-2 block's train step (forward, backward, SGD update), tg (TinyJit) next to torch eager and torch.compile.

bench_gpu.py runs it on CUDA (`--only transformer`); on the CPU, for checking the script itself:

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/transformer_block.py

The block is tg_nn.models.gpt.Block (pre-norm LayerNorm, causal multi-head attention with GPT-2's fused q/k/v
projection, LayerNorm, a tanh-GELU MLP), fp32; torch gets the same weights and input, and the first step's
losses are compared (`loss_rel_err` in the row), so a fast wrong step shows at once. The loss is the mean
square of the block's output; the figure is steps/s over `steps` steps (inputs alternate between two
batches; synchronized once at the end), best of 3 runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tg import Device, Tensor, TinyJit, nn
from tg_nn.models.gpt import Block, GPTConfig


def _time_steps(step: Callable[[Any], Any], xs: list[Any], read: Callable[[Any], float], steps: int) -> float:
    """Steps/s: three warm-up steps (JIT capture, first replay), then the best of 3 runs of `steps` steps."""
    for i in range(3):
        read(step(xs[i % 2]))
    best = float("inf")
    for _ in range(3):
        st = time.perf_counter()
        for i in range(steps):
            loss = step(xs[i % 2])
        read(loss)
        best = min(best, time.perf_counter() - st)
    return steps / best


def run(emit: Callable[..., None], batch: int, seq: int, embd: int, heads: int, steps: int, torch_device: str) -> None:
    """Emit `transformer_block_step` rows (steps/s) for tg and, when torch is installed, torch and torch.compile."""
    cfg = GPTConfig(vocab_size=1, block_size=seq, n_layer=1, n_head=heads, n_embd=embd)
    Tensor.manual_seed(0)
    block = Block(cfg)
    params = nn.state.get_parameters(block)
    opt = nn.optim.SGD(params, lr=1e-4)
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((batch, seq, embd)).astype(np.float32) for _ in range(2)]
    weights = {k: v.numpy() for k, v in nn.state.get_state_dict(block).items()}  # (before any step changes them)

    @TinyJit
    def tg_step(x: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = block(x).square().mean().backward()
            return loss.realize(*opt.schedule_step())

    xs = [Tensor(h).realize() for h in host]
    first = tg_step(xs[0]).item()
    shape = {"batch": batch, "seq": seq, "embd": embd, "heads": heads}
    emit("transformer_block_step", "tg", _time_steps(tg_step, xs, lambda t: t.item(), steps), "steps/s", **shape)
    try:
        import torch
    except ImportError:
        return
    for impl in ("torch", "torch_compile"):
        try:
            model, topt = _torch_block(torch, weights, heads, torch_device)
            fwd = torch.compile(model) if impl == "torch_compile" else model

            def t_step(x: Any, fwd: Any = fwd, topt: Any = topt) -> Any:
                topt.zero_grad(set_to_none=True)
                loss = fwd(x).square().mean()
                loss.backward()
                topt.step()
                return loss

            txs = [torch.from_numpy(h).to(torch_device) for h in host]
            t_first = t_step(txs[0]).item()
            err = abs(t_first - first) / abs(t_first)
            sps = _time_steps(t_step, txs, lambda t: t.item(), steps)
            emit("transformer_block_step", impl, sps, "steps/s", **shape, loss_rel_err=float(f"{err:.2e}"))
        except Exception as e:  # torch.compile needs a working triton toolchain
            print(f"# transformer_block_step {impl}: {type(e).__name__}: {e}"[:400], file=sys.stderr)


def _torch_block(torch: Any, w: dict[str, np.ndarray], heads: int, device: str) -> tuple[Any, Any]:
    """torch's form of tg_nn.models.gpt.Block with the weights `w` (GPT-2 names and (in, out) layouts), and its SGD."""
    F = torch.nn.functional

    class TorchBlock(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.p = torch.nn.ParameterDict(
                {k.replace(".", "_"): torch.nn.Parameter(torch.from_numpy(v)) for k, v in w.items()}
            )

        def forward(self, x: Any) -> Any:
            p = self.p
            b, t, c = x.shape
            h = F.layer_norm(x, (c,), p["ln_1_weight"], p["ln_1_bias"], 1e-5)
            qkv = (h @ p["attn_c_attn_weight"] + p["attn_c_attn_bias"]).reshape(b, t, 3, heads, c // heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).permute(0, 2, 1, 3).reshape(b, t, c)
            x = x + (y @ p["attn_c_proj_weight"] + p["attn_c_proj_bias"])
            h = F.layer_norm(x, (c,), p["ln_2_weight"], p["ln_2_bias"], 1e-5)
            m = F.gelu(h @ p["mlp_c_fc_weight"] + p["mlp_c_fc_bias"], approximate="tanh")
            return x + (m @ p["mlp_c_proj_weight"] + p["mlp_c_proj_bias"])

    model = TorchBlock().to(device)
    return model, torch.optim.SGD(model.parameters(), lr=1e-4)


if __name__ == "__main__":

    def _emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
        print(json.dumps({"bench": bench, "impl": impl, "value": round(value, 3), "unit": unit, "params": params}))

    print(f"# device {Device.DEFAULT}", file=sys.stderr)
    run(_emit, 2, 32, 64, 4, int(os.getenv("STEPS", "5")), "cpu")
