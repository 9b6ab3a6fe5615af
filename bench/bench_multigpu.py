"""Several GPUs: all-reduce bus bandwidth (tg's collective item, NCCL on CUDA) next to torch.distributed (NCCL
backend, one process per GPU) in the same run, and MNIST train-step throughput on 1 and n devices at the same
per-device batch. One JSON line per figure: {"bench", "impl", "value", "unit", "params"}.

    DEV=CUDA GPUS=2 python bench/bench_multigpu.py     # on a host with 2 GPUs (libnccl: nvidia-nccl-cu12)
    DEV=CUDA GPUS=1 python bench/bench_multigpu.py     # one GPU: overheads only (below)
    GPUS=2 uv run bench/bench_multigpu.py              # CPU:0 and CPU:1, host collectives (a smoke run)

Bus bandwidth is NCCL's definition for all-reduce: bytes * 2 * (n - 1) / n / time. Sizes run from 1 MB to
MAX_MB (default 1024) by powers of 4; ITERS timed runs after WARMUP. tg's all-reduce is timed out of place
(as its schedule items run it: inputs and outputs are distinct buffers) and in place (like torch's
`dist.all_reduce`); the ratio to torch uses the in-place figure. BS is the per-device batch of the MNIST step
(TinyJit, Adam; the batch split over the devices, parameters replicated, gradients all-reduced), compared
with the plain single-device step (no device set) on the first device.

GPUS=1 moves no data between GPUs, so there is no bus bandwidth (the formula gives 0): the figures are then
microseconds per all-reduce call on a 1-rank communicator (tg: ctypes + ncclGroupStart/End + NCCL's local
copy where out of place; torch: its process-group call) and the MNIST step through the device-set path on
one device next to the plain path: the cost of the multi-device machinery (lowering, 1-rank all-reduces of
the gradients, launch-by-launch replay instead of one CUDA graph), not a speedup.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off, for tg's NCCL and torch's alike
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from beautiful_mnist import Model  # noqa: E402

from tg import Device, Tensor, TinyJit, getenv, nn  # noqa: E402
from tg_runtime.device import Buffer  # noqa: E402
from tg_tensor.engine.collective import run_collective  # noqa: E402
from tg_uop import dtypes  # noqa: E402


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    row = {"bench": bench, "impl": impl, "value": round(value, 4), "unit": unit, "params": params}
    print(json.dumps(row), flush=True)


def sizes_mb() -> list[int]:
    out, mb = [], 1
    while mb <= getenv("MAX_MB", 1024):
        out.append(mb)
        mb *= 4
    return out


def tg_allreduce_s(devices: tuple[str, ...], nbytes: int, iters: int, warmup: int, in_place: bool = False) -> float:
    n = nbytes // 4
    ins = [Buffer(d, n, dtypes.float32).ensure_allocated() for d in devices]
    outs = ins if in_place else [Buffer(d, n, dtypes.float32).ensure_allocated() for d in devices]
    for _ in range(warmup):
        run_collective("allreduce", "SUM", outs, ins)
    for d in devices:
        Device[d].synchronize()
    st = time.perf_counter()
    for _ in range(iters):
        run_collective("allreduce", "SUM", outs, ins)
    for d in devices:
        Device[d].synchronize()
    return (time.perf_counter() - st) / iters


def _torch_worker(rank: int, world: int, sizes: list[int], iters: int, warmup: int, port: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    for mb in sizes:
        x = torch.ones(mb * 2**20 // 4, device=f"cuda:{rank}")
        for _ in range(warmup):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        st = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        if rank == 0:
            out.put((mb, (time.perf_counter() - st) / iters))
    dist.destroy_process_group()


def torch_allreduce_s(world: int, sizes: list[int], iters: int, warmup: int) -> dict[int, float]:
    """Seconds per all-reduce with torch.distributed (NCCL), one process per GPU; {} where torch is missing."""
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        return {}
    if not torch.cuda.is_available() or torch.cuda.device_count() < world:
        return {}
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(
        _torch_worker, args=(world, sizes, iters, warmup, 29511, q), nprocs=world, join=True, start_method="spawn"
    )
    res = {}
    while not q.empty():
        mb, s = q.get()
        res[mb] = s
    return res


def mnist_samples_per_s(devices: tuple[str, ...], per_device_bs: int, steps: int, multi: bool) -> float:
    """Samples/s of the jitted train step: on the device set `devices` (multi), else plainly on devices[0]."""
    Tensor.manual_seed(0)
    model = Model()
    if multi:
        for p in nn.state.get_parameters(model):
            p.to_(devices)
    opt = nn.optim.Adam(nn.state.get_parameters(model), fused=bool(getenv("FUSED", 1)))  # (one all-reduce a step)
    bs = per_device_bs * len(devices)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            if multi:
                x, y = x.shard(devices, axis=0), y.shard(devices, axis=0)
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            loss = loss.to(devices[0]) if multi else loss
            Tensor.realize(loss, *opt.schedule_step())
            return loss

    rng = np.random.default_rng(0)
    x = Tensor(rng.random((bs, 1, 28, 28), dtype=np.float32), device=devices[0]).realize()
    y = Tensor(rng.integers(0, 10, bs).astype(np.int32), device=devices[0]).realize()
    for _ in range(3):  # warm-up, capture, first replay
        step(x, y).item()
    st = time.perf_counter()
    for _ in range(steps):
        loss = step(x, y)
    loss.item()
    return steps * bs / (time.perf_counter() - st)


def main() -> None:
    kind = Device.DEFAULT.split(":")[0]
    n = getenv("GPUS", 2)
    devices = tuple(f"{kind}:{i}" for i in range(n))
    iters, warmup = getenv("ITERS", 20), getenv("WARMUP", 5)
    sizes = sizes_mb()
    peer = torch_allreduce_s(n, sizes, iters, warmup) if kind == "CUDA" else {}
    for mb in sizes:
        nbytes = mb * 2**20
        t_out = tg_allreduce_s(devices, nbytes, iters, warmup)
        t_in = tg_allreduce_s(devices, nbytes, iters, warmup, in_place=True)
        if n == 1:  # no bus traffic: the time of one call is the figure
            emit("allreduce_1rank_us", f"tg:{kind} out-of-place", t_out * 1e6, "us", mb=mb, devices=n)
            emit("allreduce_1rank_us", f"tg:{kind} in-place", t_in * 1e6, "us", mb=mb, devices=n)
            if mb in peer:
                emit("allreduce_1rank_us", "torch.distributed:nccl", peer[mb] * 1e6, "us", mb=mb, devices=n)
                emit("allreduce_1rank_time_ratio", "torch/tg in-place", peer[mb] / t_in, "x", mb=mb, devices=n)
            continue
        bus = nbytes * 2 * (n - 1) / n / t_in / 1e9
        emit("allreduce_busbw", f"tg:{kind} out-of-place", nbytes * 2 * (n - 1) / n / t_out / 1e9, "GB/s", mb=mb,
             devices=n)  # fmt: skip
        emit("allreduce_busbw", f"tg:{kind} in-place", bus, "GB/s", mb=mb, devices=n)
        if mb in peer:
            tbus = nbytes * 2 * (n - 1) / n / peer[mb] / 1e9
            emit("allreduce_busbw", "torch.distributed:nccl", tbus, "GB/s", mb=mb, devices=n)
            emit("allreduce_busbw_ratio", "tg in-place/torch", bus / tbus, "x", mb=mb, devices=n)
    bs, steps = getenv("BS", 512), getenv("STEPS", 20)
    one = mnist_samples_per_s(devices[:1], bs, steps, multi=False)
    many = mnist_samples_per_s(devices, bs, steps, multi=True)
    emit("mnist_train_samples_per_s", f"tg:{kind} plain", one, "samples/s", per_device_bs=bs)
    emit("mnist_train_samples_per_s", f"tg:{kind}x{n} device set", many, "samples/s", per_device_bs=bs)
    what = "mnist_train_speedup" if n > 1 else "mnist_1device_set_vs_plain"
    emit(what, f"tg:{kind}x{n}/plain", many / one, "x", per_device_bs=bs)


if __name__ == "__main__":
    main()
