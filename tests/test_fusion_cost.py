"""The scheduler's cost rule (tg_tensor.engine: fusion_cost, split_reduce): what is computed once, what is split, and
what the GPT example's training step costs in kernels, FLOPs and thread blocks."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from tg import Device, GlobalCounters, Tensor, TinyJit, dtypes
from tg.nn.optim import AdamW
from tg.nn.state import get_parameters
from tg_codegen import get_program
from tg_codegen.renderer.cstyle import ClangRenderer
from tg_codegen.renderer.cuda import CUDARenderer
from tg_nn.models.gpt import GPT, GPTConfig
from tg_runtime.device import Compiled
from tg_tensor.engine.realizer import ScheduleItem, current
from tg_uop import Ops


def _kernels(*ts: Tensor) -> list[ScheduleItem]:
    items = Tensor.schedule(*ts)
    for it in items:
        current().unqueue(it)
    return [it for it in items if it.ast.op is Ops.SINK]


def test_a_sum_many_kernels_read_is_computed_once() -> None:
    """A sum of 8 buffers read by 4 reductions of other shapes is stored once; it was recomputed in each (as the
    gradient of a transformer's residual stream was, by every kernel of each layer's backward)."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((64, 32)).astype(np.float32) for _ in range(8)]

    def graph() -> list[Tensor]:
        total = Tensor(arrays[0])
        for a in arrays[1:]:
            total = total + Tensor(a)
        return [total.sum(0), total.max(1), (total * 2).sum(1), total.exp().sum(0)]

    reads_all = [it for it in _kernels(*graph()) if len(it.bufs) - 1 >= 8]
    assert len(reads_all) == 1, "one kernel reads the 8 buffers"
    outs = graph()
    s = np.sum(arrays, axis=0, dtype=np.float64)
    for got, want in zip(outs, [s.sum(0), s.max(1), (s * 2).sum(1), np.exp(s).sum(0)]):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


def test_x_plus_bias_stays_fused() -> None:
    """x + bias read by two kernels costs no more to recompute than to store and load: no kernel of its own."""
    x, b = Tensor.empty(64, 32), Tensor.empty(32)
    h = x + b
    items = _kernels(h.sum(0), h.max(1))
    assert len(items) == 2


def test_a_cast_of_a_broadcast_is_cast_before_it() -> None:
    """cast(expand(x)) is built as expand(cast(x)): once per element, and a matmul operand narrowed to bf16 stays a
    16-bit read (the gradient reaching an autocast product), which the tensor cores take."""
    x = Tensor.empty(4, 1).expand(4, 8).cast(dtypes.bfloat16)
    assert x.uop.op is Ops.EXPAND and x.uop.src[0].op is Ops.CAST
    half = Tensor([[1.5], [2.0]]).expand(2, 3).cast(dtypes.float16)
    np.testing.assert_array_equal(half.numpy(), [[1.5] * 3, [2.0] * 3])


class _Units(ClangRenderer):
    compute_units = 132  # the scheduler sees a GPU of 132 SMs; kernels run as C on this machine


def _gpu_like(name: str) -> Compiled:
    cpu = Device["CPU"]
    return Compiled(name, cpu.allocator, _Units(1), cpu.compiler, cpu.runtime)


@pytest.fixture
def gpu_like() -> Any:
    """The default device: C on the CPU, scheduled as for a GPU of 132 compute units (split-K applies)."""
    Device.register("UNITS132", _gpu_like)
    old = Device.DEFAULT
    Device.DEFAULT = "UNITS132"
    yield "UNITS132"
    Device.DEFAULT = old


def _gpt_step_items(cfg: GPTConfig, bs: int) -> list[ScheduleItem]:
    """The kernels of one training step of examples/gpt_shakespeare.py (fused AdamW, the gradient-norm clip)."""
    Tensor.manual_seed(0)
    model = GPT(cfg)
    opt = AdamW(get_parameters(model), lr=1e-3, weight_decay=0.1, fused=True)
    x = Tensor(np.random.default_rng(0).integers(0, cfg.vocab_size, (bs, cfg.block_size)).astype(np.int32)).realize()
    before = list(current().pending)
    with Tensor.train():
        opt.zero_grad()
        loss = model.loss(x, x)
        loss.backward()
        opt.clip_grad_norm(1.0)
        loss.schedule(*opt.schedule_step())
    items = [it for it in current().pending if not any(it is b for b in before)]
    for it in items:
        current().unqueue(it)
    return [it for it in items if it.ast.op is Ops.SINK]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_big_gpt_step_fills_an_h200(gpu_like: str, dtype: str) -> None:
    """Every kernel of the BIG GPT step (one of its six identical layers, batch 64, block 256, width 384) doing more
    than 1 GFLOP launches at least as many thread blocks as an H200 has SMs (132) when rendered for sm_90; the weight
    gradients (16384-long reductions into 384 x 1536 outputs) made 72 before split-K. In bf16 every product of
    the layers takes the tensor cores."""
    assert Device.DEFAULT == gpu_like
    cfg = GPTConfig(vocab_size=65, block_size=256, n_layer=1, n_head=6, n_embd=384, dropout=0.2, compute_dtype=dtype)
    renderer = CUDARenderer("sm_90")
    big, tc = 0, 0
    for it in _gpt_step_items(cfg, 64):
        spec = get_program(it.ast, renderer)
        on_tc = any(getattr(o, "op", None) is not None and o.op.name == "TC" for o in spec.applied_opts)
        tc += on_tc
        if spec.estimated_ops > 1e9 or on_tc:  # (a tensor-core kernel counts its MMAs, not their FLOPs)
            big += 1
            blocks = math.prod(spec.global_size or (1,))
            assert blocks >= 132, f"{spec.name}: {spec.estimated_ops / 1e9:.1f} GFLOP on {blocks} blocks"
    assert big >= 8, "expected the layer's matmuls"
    if dtype == "bfloat16":
        assert tc >= 8, f"only {tc} of the step's products take the tensor cores"


def test_gpt_step_flops_and_kernels() -> None:
    """The GPT example's jitted step (2 layers, dropout, fused AdamW, clipping) executes at most 1.3x the model's
    analytic FLOPs (6 x parameters x tokens + attention) in at most 160 kernels (measured here: 153; 169 with
    MERGE_SIBLINGS=0, one kernel per output)."""
    layers, width, heads, block, bs, vocab = 2, 128, 4, 64, 8, 65
    Tensor.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab, block_size=block, n_layer=layers, n_head=heads, n_embd=width, dropout=0.1))
    params = get_parameters(model)
    opt = AdamW(params, lr=1e-3, weight_decay=0.1, fused=True)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = model.loss(x, y)
            loss.backward()
            opt.clip_grad_norm(1.0)
            opt.step()
        return loss.realize()

    rng = np.random.default_rng(0)
    for _ in range(3):
        x = Tensor(rng.integers(0, vocab, (bs, block)).astype(np.int32))
        GlobalCounters.reset()
        loss = step(x, Tensor(rng.integers(0, vocab, (bs, block)).astype(np.int32))).item()
    n = sum(int(np.prod(p.shape)) for p in params)
    analytic = 6 * n * bs * block + layers * 12 * bs * block * block * width
    assert math.isfinite(loss)
    assert GlobalCounters.global_ops <= 1.3 * analytic, GlobalCounters.global_ops / analytic
    assert GlobalCounters.kernel_count <= 160, GlobalCounters.kernel_count


def test_a_split_k_result_is_not_computed_again_by_a_later_schedule(gpu_like: str) -> None:
    """A product split in parts for the compute units (split-K) and realized by one schedule is read, not computed
    again, by the next schedule that needs it (an LLM decode step realizes layer after layer: each layer computed
    every earlier layer's MLP again, 95 kernels for 2 layers instead of 45, 3763 a step for 16)."""
    rng = np.random.default_rng(0)
    a_np, w_np = rng.standard_normal((1, 8192), dtype=np.float32), rng.standard_normal((8192, 512), dtype=np.float32)
    a, w = Tensor(a_np).realize(), Tensor(w_np).realize()
    y = a @ w  # 512 outputs, each a sum of 8192: split in parts on a device of 132 units
    first, total = y + 1, y.sum()
    first.realize(total)  # two kernels read y: it is stored by a kernel of its own
    GlobalCounters.reset()
    second = (y * 2).realize()
    assert GlobalCounters.kernel_count == 1, GlobalCounters.kernel_count  # one elementwise kernel reading y
    np.testing.assert_allclose(first.numpy(), a_np @ w_np + 1, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(total.numpy(), (a_np @ w_np).sum(), rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(second.numpy(), (a_np @ w_np) * 2, rtol=1e-4, atol=1e-3)


def test_llm_decode_step_kernels_grow_linearly_with_layers(gpu_like: str) -> None:
    """The captured decode step of a Llama whose MLP down projection is split-K: each layer adds the same kernels
    (before the fix above a layer also computed every earlier layer's MLP again: quadratic in the layers)."""
    from tg_llm.config import LlamaConfig
    from tg_llm.model import Llama

    counts = []
    for layers in (1, 2, 3):
        cfg = LlamaConfig(64, 128, n_layers=layers, n_heads=4, n_kv_heads=2, hidden_dim=4096, context_length=16)
        model = Llama(cfg, device=gpu_like)
        list(model.greedy_tokens(3, 0, 3))  # eager, capture, replay
        counts.append(len(model._chain.recording.launches))
    assert counts[2] - counts[1] == counts[1] - counts[0], counts


def test_layernorm_of_a_stored_sum_recomputes_its_normalized_x() -> None:
    """A layer norm of a residual stream (here a sum of 8 buffers, stored: every kernel below reads it), forward and
    backward in one schedule: x - mean and the normalized x are recomputed from the stored sum and the row statistics,
    not stored. Weighed from the roots down, they counted the sum's 8 buffers as their own inputs and were stored
    (9 kernels, 5 tensors of x's size written); the second look, producers first, takes them back: 7 kernels writing
    the sum, the output and the gradient."""
    n = 512
    parts = [Tensor.empty(n, 384, requires_grad=True) for _ in range(8)]
    x = parts[0]
    for p in parts[1:]:
        x = x + p
    w, b = Tensor.empty(384, requires_grad=True), Tensor.empty(384, requires_grad=True)
    y = x.layernorm(weight=w, bias=b)
    ((y * Tensor.empty(n, 384)).sum() + (x * Tensor.empty(n, 384)).sum()).backward()
    assert parts[0].grad is not None and w.grad is not None and b.grad is not None
    items = _kernels(y, parts[0].grad, w.grad, b.grad)
    assert sum(it.bufs[0].size == n * 384 for it in items) == 3, [it.bufs[0].size for it in items]
    assert len(items) == 7
