"""GPU benchmark: tg on CUDA against torch in the same run (run on the lent GPU machine).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 bench/bench_gpu.py [--quick]

Prints one JSON line per figure: {"bench", "impl", "value", "unit", "params"}. Kernel times are the best of
several launches of the already-compiled kernels (tg) or of the op (torch), synchronized on the device.
Figures: the MNIST train step (batch 512, jitted Adam) vs tinygrad and torch; tiny realize; TinyJit replay per
kernel (CUDA graph, and JIT=2 launches); conv2d forward kernel and jitted forward+backward (the seed conv
(16,3,64,64)x(16,3,3,3) and (64,64,56,56)x(64,64,3,3)); elementwise and sum on 2^26 floats, as kernels and
through a TinyJit replay; matmul 4096 fp32/tf32/fp16/bf16 (--beam N adds BEAM=N matmuls); a GPT-2-small block's
train step vs torch and torch.compile (bench/transformer_block.py). --only mnist: the step.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

sys.setrecursionlimit(100_000)
os.environ.setdefault("DEV", "CUDA")

from cuda_timing import best_seconds, scheduled  # noqa: E402

from tg import Context, Tensor, dtypes  # noqa: E402
from tg_runtime import Device, get_runner  # noqa: E402
from tg_runtime.runner import clear_runner_cache  # noqa: E402


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    print(
        json.dumps({"bench": bench, "impl": impl, "value": round(value, 3), "unit": unit, "params": params}), flush=True
    )


def tg_kernel_seconds(t: Tensor, reps: int) -> float:
    """Best total time of the kernels that compute `t` (compiled once, then launched `reps` times)."""
    runners = [(get_runner("CUDA", it.ast), it.bufs) for it in scheduled(t) if it.ast.op.name == "SINK"]
    return best_seconds(lambda: [r(bufs) for r, bufs in runners], reps)


def torch_seconds(fn: Callable[[], Any], reps: int) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        st = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - st)
    return best


def tg_matmul(a: Tensor, b: Tensor) -> Tensor:
    if hasattr(Tensor, "matmul"):
        return a.matmul(b)
    n, k = a.shape
    m = b.shape[1]
    return (a.reshape(n, 1, k) * b.permute(1, 0).reshape(1, m, k)).sum(axis=2)


MATMUL_DTYPES = {"fp32": dtypes.float32, "fp16": dtypes.float16, "bf16": dtypes.bfloat16}


def bench_matmul(n: int, reps: int, names: tuple[str, ...] = ("fp32", "fp16", "bf16"), beam: int = 0) -> None:
    """torch and tg for each dtype; with beam > 0, tg's kernels are chosen by BEAM=beam (impl tg_beam<beam>)."""
    import torch

    for name in names:
        flop = 2 * n**3
        if not beam:
            torch.backends.cuda.matmul.allow_tf32 = False
            tdt = getattr(torch, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[name])
            ta, tb = torch.randn(n, n, dtype=tdt, device="cuda"), torch.randn(n, n, dtype=tdt, device="cuda")
            secs = torch_seconds(lambda ta=ta, tb=tb: ta @ tb, reps)
            emit("matmul", "torch", flop / secs * 1e-12, "TFLOPS", n=n, dtype=name)
        dt = MATMUL_DTYPES[name]
        a = Tensor(np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)).cast(dt).contiguous().realize()
        b = Tensor(np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)).cast(dt).contiguous().realize()
        impl = f"tg_beam{beam}" if beam else "tg"
        with Context(BEAM=beam):
            secs = tg_kernel_seconds(tg_matmul(a, b), reps)
        emit("matmul", impl, flop / secs * 1e-12, "TFLOPS", n=n, dtype=name)
    if beam:
        return
    torch.backends.cuda.matmul.allow_tf32 = True
    ta, tb = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    emit("matmul", "torch", 2 * n**3 / torch_seconds(lambda: ta @ tb, reps) * 1e-12, "TFLOPS", n=n, dtype="tf32")
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = Tensor.rand(n, n, device="CUDA").realize(), Tensor.rand(n, n, device="CUDA").realize()
    with Context(ALLOW_TF32=1):
        secs = tg_kernel_seconds(tg_matmul(a, b), reps)
    emit("matmul", "tg", 2 * n**3 / secs * 1e-12, "TFLOPS", n=n, dtype="tf32")


def bench_elementwise(n: int, reps: int) -> None:
    import torch

    ta, tb, tc = (torch.randn(n, device="cuda") for _ in range(3))
    nbytes = 4 * n * 4

    def fused(x: Any, y: Any, z: Any) -> Any:
        return ((x + y) * z).relu()

    emit("elementwise", "torch", nbytes / torch_seconds(lambda: fused(ta, tb, tc), reps) * 1e-9, "GB/s", n=n)
    try:
        compiled = torch.compile(fused)
        secs = torch_seconds(lambda: compiled(ta, tb, tc), reps)
        emit("elementwise", "torch_compile", nbytes / secs * 1e-9, "GB/s", n=n)
    except Exception as e:  # torch.compile needs a working triton toolchain
        print(f"# torch.compile unavailable: {e}", file=sys.stderr)
    rng = np.random.default_rng(0)
    a, b, c = (Tensor(rng.standard_normal(n, dtype=np.float32)).realize() for _ in range(3))
    emit("elementwise", "tg", nbytes / tg_kernel_seconds(((a + b) * c).relu(), reps) * 1e-9, "GB/s", n=n)
    emit("sum", "torch", 4 * n / torch_seconds(lambda: ta.sum(), reps) * 1e-9, "GB/s", n=n)
    emit("sum", "tg", 4 * n / tg_kernel_seconds(a.sum(), reps) * 1e-9, "GB/s", n=n)


def replay_seconds(fn: Callable[[], Any], calls: int, sync: Callable[[], Any]) -> float:
    """Seconds per call of `fn` over `calls` calls (after 3 warm-ups), synchronized once at the end."""
    for _ in range(3):
        fn()
    sync()
    st = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - st) / calls


def bench_jit_elementwise(n: int, calls: int, rounds: int = 3) -> None:
    """The fused elementwise op and the sum through a TinyJit replay (launch, output buffer, everything), next to
    torch and torch.compile: `rounds` rounds of `calls` calls each, the implementations alternating within a
    round (a GPU's clocks and a host's speed drift over seconds: one window per implementation would compare
    the moments); the best round is the figure, every round's in `params`."""
    import torch

    from tg import TinyJit

    rng = np.random.default_rng(0)
    # two sets of inputs, alternated (the same inputs twice would be the same, already computed, graph)
    sets = [[Tensor(rng.standard_normal(n, dtype=np.float32)).realize() for _ in range(3)] for _ in range(2)]
    fused = TinyJit(lambda x, y, z: ((x + y) * z).relu().realize())
    total = TinyJit(lambda x: x.sum().realize())
    sync, i = Device["CUDA"].synchronize, itertools.count()
    ta, tb, tc = (torch.randn(n, device="cuda") for _ in range(3))
    tsync = torch.cuda.synchronize
    # (row, impl) -> (bytes per call, call, sync)
    cases: dict[tuple[str, str], tuple[int, Callable[[], Any], Callable[[], Any]]] = {
        ("elementwise_jit", "tg"): (16 * n, lambda: fused(*sets[next(i) % 2]), sync),
        ("sum_jit", "tg"): (4 * n, lambda: total(sets[next(i) % 2][0]), sync),
        ("elementwise_jit", "torch"): (16 * n, lambda: ((ta + tb) * tc).relu(), tsync),
        ("sum_jit", "torch"): (4 * n, lambda: ta.sum(), tsync),
    }
    try:
        cfused, csum = torch.compile(lambda x, y, z: ((x + y) * z).relu()), torch.compile(lambda x: x.sum())
        cfused(ta, tb, tc), csum(ta)
        cases[("elementwise_jit", "torch_compile")] = (16 * n, lambda: cfused(ta, tb, tc), tsync)
        cases[("sum_jit", "torch_compile")] = (4 * n, lambda: csum(ta), tsync)
    except Exception as e:  # torch.compile needs a working triton toolchain
        print(f"# torch_compile: {type(e).__name__}: {e}"[:300], file=sys.stderr)
    got: dict[tuple[str, str], list[float]] = {key: [] for key in cases}
    for _ in range(rounds):
        for key, (nbytes, fn, synchronize) in cases.items():
            got[key].append(nbytes / replay_seconds(fn, calls, synchronize) * 1e-9)
    for (row, impl), gbs in got.items():
        emit(row, impl, max(gbs), "GB/s", n=n, calls=calls, rounds=[round(g, 1) for g in gbs])


def _alternate(fn: Callable[..., Any], args: list[Any], counter: Any) -> Any:
    return fn(*args[next(counter) % len(args)])


CONVS = {"seed": ((16, 3, 64, 64), (16, 3, 3, 3), 0), "c64": ((64, 64, 56, 56), (64, 64, 3, 3), 1)}


def bench_conv_train(calls: int, quick: bool) -> None:
    """conv2d forward + backward (input and weight gradients) as one jitted step, tg vs torch eager."""
    import torch

    from tg import TinyJit

    for name, (xs, ws, pad) in CONVS.items():
        if quick:
            xs, ws = (2, xs[1], 8, 8), (4, ws[1], 3, 3)
        oh = xs[2] + 2 * pad - 2
        flop = 3 * 2 * xs[0] * ws[0] * oh * oh * ws[1] * 9  # forward, input gradient, weight gradient
        # two sets of inputs, alternated: the same inputs twice would be the same (already computed) graph
        pairs = [
            (
                Tensor.rand(*xs, device="CUDA", requires_grad=True).realize(),
                Tensor.rand(*ws, device="CUDA", requires_grad=True).realize(),
            )
            for _ in range(2)
        ]
        calls_made = itertools.count()

        def step(x: Tensor, w: Tensor, pad: int = pad) -> tuple[Tensor, Tensor]:
            x.grad, w.grad = None, None
            x.conv2d(w, padding=pad).sum().backward()
            assert x.grad is not None and w.grad is not None
            return x.grad.realize(), w.grad.realize()

        jitted = TinyJit(step)
        call = functools.partial(_alternate, jitted, pairs, calls_made)
        secs = replay_seconds(call, calls, Device["CUDA"].synchronize)
        emit("conv2d_fwd_bwd", "tg", flop / secs * 1e-12, "TFLOPS", conv=name, x=xs, w=ws)
        tx = torch.rand(*xs, device="cuda", requires_grad=True)
        tw = torch.rand(*ws, device="cuda", requires_grad=True)

        def tstep(tx: Any = tx, tw: Any = tw, pad: int = pad) -> None:
            tx.grad, tw.grad = None, None
            torch.nn.functional.conv2d(tx, tw, padding=pad).sum().backward()

        for impl, tf32 in (("torch", False), ("torch_tf32", True)):
            torch.backends.cudnn.allow_tf32 = tf32
            secs = replay_seconds(tstep, calls, torch.cuda.synchronize)
            emit("conv2d_fwd_bwd", impl, flop / secs * 1e-12, "TFLOPS", conv=name, x=xs, w=ws)
        torch.backends.cudnn.allow_tf32 = False


def bench_tiny_realize(reps: int) -> None:
    t = Tensor([1.0, 2.0, 3.0]).realize()
    (t + 1).realize()
    best = float("inf")
    for _ in range(reps):
        st = time.perf_counter()
        (t + 1).realize()
        Device["CUDA"].synchronize()
        best = min(best, time.perf_counter() - st)
    emit("tiny_realize", "tg", best * 1e6, "us")


def bench_conv(reps: int, quick: bool) -> None:
    """conv2d (64,64,56,56)x(64,64,3,3), padding 1, fp32: tg's one kernel vs torch (cuDNN)."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    for name, (xs, ws, pad) in CONVS.items():
        if quick:
            xs, ws = (2, xs[1], 8, 8), (4, ws[1], 3, 3)
        oh = xs[2] + 2 * pad - 2
        flop = 2 * xs[0] * ws[0] * oh * oh * ws[1] * ws[2] * ws[3]
        x, w = Tensor.rand(*xs, device="CUDA").realize(), Tensor.rand(*ws, device="CUDA").realize()
        secs = tg_kernel_seconds(x.conv2d(w, padding=pad), reps)
        emit("conv2d", "tg", flop / secs * 1e-12, "TFLOPS", conv=name, x=xs, w=ws)
        tx, tw = torch.rand(*xs, device="cuda"), torch.rand(*ws, device="cuda")
        secs = torch_seconds(lambda tx=tx, tw=tw, pad=pad: torch.nn.functional.conv2d(tx, tw, padding=pad), reps)
        emit("conv2d", "torch", flop / secs * 1e-12, "TFLOPS", conv=name, x=xs, w=ws)
        _conv_jit(name, xs, ws, pad, flop)


def _conv_jit(name: str, xs: tuple[int, ...], ws: tuple[int, ...], pad: int, flop: int) -> None:
    """The forward conv through a TinyJit replay, tg and tinygrad (two input sets, alternated)."""
    from tg import TinyJit

    pairs = [(Tensor.rand(*xs, device="CUDA").realize(), Tensor.rand(*ws, device="CUDA").realize()) for _ in range(2)]
    jitted = TinyJit(lambda x, w: x.conv2d(w, padding=pad).realize())
    call = functools.partial(_alternate, jitted, pairs, itertools.count())
    secs = replay_seconds(call, 20, Device["CUDA"].synchronize)
    emit("conv2d_jit", "tg", flop / secs * 1e-12, "TFLOPS", conv=name)
    try:
        emit("conv2d_jit", "tinygrad", flop / _tinygrad_conv_seconds(xs, ws, pad) * 1e-12, "TFLOPS", conv=name)
    except Exception as e:  # tinygrad is not installed here
        print(f"# conv2d tinygrad: {type(e).__name__}: {e}"[:300], file=sys.stderr)
    finally:
        Device["CUDA"].drv.make_current()


def _tinygrad_conv_seconds(xs: tuple[int, ...], ws: tuple[int, ...], pad: int) -> float:
    """Seconds per call of tinygrad's forward conv through its TinyJit (two input sets, alternated)."""
    import tinygrad  # type: ignore[import-not-found]

    TT = tinygrad.Tensor
    pairs = [(TT.rand(*xs).realize(), TT.rand(*ws).realize()) for _ in range(2)]
    jitted = tinygrad.TinyJit(lambda x, w: x.conv2d(w, padding=pad).realize())
    dev = tinygrad.Device[tinygrad.Device.DEFAULT]
    return replay_seconds(functools.partial(_alternate, jitted, pairs, itertools.count()), 20, dev.synchronize)


def bench_jit_replay(kernels: int = 50, calls: int = 200) -> None:
    """TinyJit replay cost per kernel for a chain of tiny kernels (a CUDA graph launch; JIT=2: one by one)."""
    from tg import TinyJit

    for jit, impl in ((1, "tg_cuda_graph"), (2, "tg_launches")):
        with Context(JIT=jit):

            @TinyJit
            def chain(x: Tensor) -> Tensor:
                for _ in range(kernels):
                    x = (x + 1).contiguous()
                return x

            x = Tensor.zeros(4, device="CUDA").contiguous().realize()
            for _ in range(3):
                chain(x)
            Device["CUDA"].synchronize()
            st = time.perf_counter()
            for _ in range(calls):
                chain(x)
            Device["CUDA"].synchronize()
            emit("jit_replay", impl, (time.perf_counter() - st) / calls / kernels * 1e6, "us/kernel", kernels=kernels)


MNIST_STEPS = 50


def mnist_batches(n: int, bs: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [(rng.random((bs, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, bs).astype(np.int32)) for _ in range(n)]


def _steps_per_s(
    step: Callable[[Any, Any], Any],
    make: Callable[[np.ndarray, np.ndarray], tuple[Any, Any]],
    sync: Callable[[Any], Any],
    steps: int,
    bs: int,
) -> float:
    """Steps/s of a whole train step (inputs copied in, every launch, the replay's own costs), best of 3 runs."""
    data = mnist_batches(4, bs)
    for x, y in data[:3]:  # warm-up, JIT capture, first replay
        sync(step(*make(x, y)))
    best = float("inf")
    for _ in range(3):
        st = time.perf_counter()
        for i in range(steps):
            loss = step(*make(*data[i % 4]))
        sync(loss)
        best = min(best, time.perf_counter() - st)
    return steps / best


def tg_mnist_step(bs: int) -> Callable[[Tensor, Tensor], Tensor]:
    """beautiful_mnist.py's model and jitted Adam step."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    from beautiful_mnist import Model

    from tg import TinyJit, nn

    Tensor.manual_seed(0)
    model = Model()
    opt = nn.optim.Adam(nn.state.get_parameters(model))

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            Tensor.realize(loss, *opt.schedule_step())
            return loss

    return step


def _tg_inputs(x: np.ndarray, y: np.ndarray) -> tuple[Tensor, Tensor]:
    return Tensor(x), Tensor(y)


def tg_mnist_steps_per_s(bs: int, steps: int) -> float:
    return _steps_per_s(tg_mnist_step(bs), _tg_inputs, lambda loss: loss.item(), steps, bs)


def bench_mnist_step(bs: int, steps: int, profile: bool) -> None:
    """The MNIST convnet's jitted Adam train step (beautiful_mnist.py), tg vs tinygrad (TinyJit) vs torch eager."""
    step = tg_mnist_step(bs)
    emit(
        "mnist_train_step",
        "tg",
        _steps_per_s(step, _tg_inputs, lambda loss: loss.item(), steps, bs),
        "steps/s",
        batch=bs,
    )
    if profile:  # one replay with a timed line per kernel (diagnostic)
        with Context(DEBUG=2):
            step(*_tg_inputs(*mnist_batches(1, bs)[0])).item()
    for impl, fn in (("tinygrad", _tinygrad_mnist), ("torch", _torch_mnist)):
        try:
            emit("mnist_train_step", impl, fn(bs, steps, profile), "steps/s", batch=bs)
        except Exception as e:  # the peer is not installed or fails here
            print(f"# mnist_train_step {impl}: {type(e).__name__}: {e}"[:400], file=sys.stderr)


def _tinygrad_mnist(bs: int, steps: int, profile: bool = False) -> float:
    import tinygrad  # type: ignore[import-not-found]
    from tinygrad import nn as tnn  # type: ignore[import-not-found]

    assert os.environ["DEV"] == "CUDA", "tinygrad reads DEV=CUDA from the environment"
    TT = tinygrad.Tensor

    class Model:
        def __init__(self) -> None:
            self.c1, self.c2, self.l1 = tnn.Conv2d(1, 32, 3), tnn.Conv2d(32, 64, 3), tnn.Linear(1600, 10)

        def __call__(self, x: Any) -> Any:
            x = self.c1(x).relu().max_pool2d((2, 2))
            x = self.c2(x).relu().max_pool2d((2, 2))
            return self.l1(x.flatten(1).dropout(0.5))

    model = Model()
    opt = tnn.optim.Adam(tnn.state.get_parameters(model))

    def train(x: Any, y: Any) -> Any:
        with tinygrad.Context(TRAINING=1):
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            return loss.realize(*opt.schedule_step())

    if profile:  # one step outside the JIT, with tinygrad's timed line per kernel (diagnostic)
        x, y = mnist_batches(1, bs)[0]
        train(TT(x), TT(y)).item()
        with tinygrad.Context(DEBUG=2):
            train(TT(x), TT(y)).item()
    step = tinygrad.TinyJit(train)
    try:
        return _steps_per_s(step, lambda x, y: (TT(x), TT(y)), lambda loss: loss.item(), steps, bs)
    finally:  # tinygrad made its own CUDA context current; tg's kernels (and torch's) live in the primary one
        Device["CUDA"].drv.make_current()


def _torch_mnist(bs: int, steps: int, profile: bool = False) -> float:
    import torch

    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Dropout(0.5), torch.nn.Linear(1600, 10),
    ).cuda()  # fmt: skip
    opt = torch.optim.Adam(net.parameters())

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss

    def make(x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        return torch.from_numpy(x).cuda(), torch.from_numpy(y).long().cuda()

    return _steps_per_s(step, make, lambda loss: loss.item(), steps, bs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, to check the script itself")
    parser.add_argument("--beam", type=int, default=0, help="also time the fp16/bf16 matmuls with BEAM=n")
    parser.add_argument("--only", default="", help="comma-separated figures to run (default: all): mnist,conv,...")
    parser.add_argument("--profile", action="store_true", help="print one timed line per kernel of a tg MNIST step")
    args = parser.parse_args()
    reps = 3 if args.quick else 10
    n = 64 if args.quick else 4096
    only = set(filter(None, args.only.split(",")))
    quick = args.quick
    n_elem = 2**12 if quick else 2**26
    figures: list[tuple[str, Callable[[], None]]] = [
        ("mnist", lambda: bench_mnist_step(16 if quick else 512, 3 if quick else MNIST_STEPS, args.profile)),
        ("tiny", lambda: bench_tiny_realize(reps)),
        ("jit_replay", lambda: bench_jit_replay(5 if quick else 50)),
        ("conv", lambda: bench_conv(reps, quick)),
        ("conv_train", lambda: bench_conv_train(3 if quick else 20, quick)),
        ("elementwise", lambda: bench_elementwise(n_elem, reps)),
        ("elementwise_jit", lambda: bench_jit_elementwise(n_elem, 3 if quick else 100)),
        ("matmul", lambda: bench_matmul(n, reps)),
        ("transformer", lambda: bench_transformer_block(quick)),
    ]
    if args.beam:
        figures.append(("matmul_beam", lambda: bench_matmul_beam(n, reps, args.beam)))
    with Context(DEBUG=0):
        for name, run in figures:
            if only and name not in only:
                continue
            try:
                run()
            except Exception:  # one broken figure must not cost the others (GPU time is scarce)
                print(f"# {name} failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)


def bench_transformer_block(quick: bool) -> None:
    """One GPT-2-small block (768 wide, 12 heads), batch 8 x 512 tokens, fp32: forward, backward and an SGD
    update, tg's TinyJit next to torch eager and torch.compile (bench/transformer_block.py)."""
    import transformer_block

    if quick:
        transformer_block.run(emit, 2, 32, 64, 4, 3, "cuda")
    else:
        transformer_block.run(emit, 8, 512, 768, 12, 20, "cuda")


def bench_matmul_beam(n: int, reps: int, beam: int) -> None:
    clear_runner_cache()  # the default kernels are cached per AST; BEAM must choose again
    bench_matmul(n, reps, ("fp16", "bf16"), beam=beam)


if __name__ == "__main__":
    main()
