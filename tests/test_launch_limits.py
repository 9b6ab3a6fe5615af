"""Every kernel of the MNIST train step, rendered for CUDA without a GPU, launches within an H100's limits.

The launch shape (grid and block sizes) of each kernel is checked against the device's limits here, so a
kernel that a GPU would refuse at launch (`cuLaunchKernel ... invalid argument`) fails in CI instead.
FUZZ=1 renders many more batch sizes.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from tg import Tensor, nn
from tg_codegen import Kernel, KernelOptError, Opt, OptOps, get_program
from tg_codegen.limits import LaunchLimits, assign_dims
from tg_codegen.renderer import ProgramSpec
from tg_codegen.renderer.cuda import CUDARenderer
from tg_tensor.engine.realizer import current
from tg_uop.helpers import prod

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from beautiful_mnist import Model  # noqa: E402

H100 = LaunchLimits()  # what an H100 reports (cuDeviceGetAttribute), and the renderer's default
BATCHES = [1, 3, 10, 128, 500, 1024]
FUZZ_BATCHES = sorted({*range(1, 33), *(2**i + d for i in range(5, 11) for d in (-1, 0, 1)), 100, 500, 1000})


def mnist_step_programs(bs: int) -> list[ProgramSpec]:
    """The CUDA programs of one jitted-style Adam train step at batch `bs` (scheduled, rendered, never run)."""
    Tensor.manual_seed(0)
    model = Model()
    opt = nn.optim.Adam(nn.state.get_parameters(model))
    rng = np.random.default_rng(bs)
    x = Tensor(rng.random((bs, 1, 28, 28), dtype=np.float32))
    y = Tensor(rng.integers(0, 10, bs).astype(np.int32))
    with Tensor.train():
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y).backward()
        items = loss.schedule(*opt.schedule_step())
    for item in items:
        current().unqueue(item)
    renderer = CUDARenderer("sm_90")
    return [get_program(it.ast, renderer) for it in items if it.ast.op.name == "SINK"]


def check_launch(spec: ProgramSpec, lim: LaunchLimits) -> None:
    grid, block = tuple(spec.global_size or (1,)), tuple(spec.local_size or (1,))
    assert len(grid) <= 3 and len(block) <= 3, f"{spec.name}: more than 3 launch dimensions {grid} {block}"
    assert all(g <= m for g, m in zip(grid, lim.grid)), f"{spec.name}: grid {grid} exceeds {lim.grid}"
    assert all(b <= m for b, m in zip(block, lim.block)), f"{spec.name}: block {block} exceeds {lim.block}"
    assert prod(block) <= lim.max_threads, f"{spec.name}: block {block} has more than {lim.max_threads} threads"


@pytest.mark.parametrize("bs", FUZZ_BATCHES if os.getenv("FUZZ") else BATCHES)
def test_mnist_step_launches_fit_h100(bs: int) -> None:
    specs = mnist_step_programs(bs)
    assert len(specs) > 20, "expected the whole train step"
    for spec in specs:
        check_launch(spec, H100)


def test_too_many_threads_refused_and_kernel_unchanged() -> None:
    t = Tensor(np.ones((128, 10), np.float32)).sum(axis=0)
    (item,) = [it for it in t.schedule() if it.ast.op.name == "SINK"]
    current().unqueue(item)
    k = Kernel(item.ast, CUDARenderer("sm_90"))
    k.apply_opt(Opt(OptOps.LOCAL, 0, 10))
    before = (k.full_shape, list(k.axis_types), list(k.applied_opts))
    with pytest.raises(KernelOptError, match="1280 threads per block .* limit of 1024"):
        k.apply_opt(Opt(OptOps.GROUPTOP, 0, 128))
    assert (k.full_shape, k.axis_types, k.applied_opts) == before
    k.apply_opt(Opt(OptOps.GROUPTOP, 0, 64))  # 640 threads fit
    assert prod(get_program(item.ast, k.opts, opts=k.applied_opts).local_size or ()) == 640


def test_shared_memory_and_registers_refused() -> None:
    t = Tensor(np.ones((256, 4096), np.float32)).sum(axis=1)
    (item,) = [it for it in t.schedule() if it.ast.op.name == "SINK"]
    current().unqueue(item)
    small = CUDARenderer("sm_90", LaunchLimits(shared_bytes=1024))
    with pytest.raises(KernelOptError, match="bytes of shared memory per block; the device's limit is 1024"):
        Kernel(item.ast, small).apply_opt(Opt(OptOps.GROUP, 0, 512))
    k = Kernel(item.ast, CUDARenderer("sm_90", LaunchLimits(registers_per_thread=16)))
    with pytest.raises(KernelOptError, match="32 accumulator registers per thread; the device's limit is 16"):
        k.apply_opt(Opt(OptOps.UPCAST, 0, 32))
    k = Kernel(item.ast, CUDARenderer("sm_90", LaunchLimits(registers_per_block=128)))
    k.apply_opt(Opt(OptOps.LOCAL, 0, 32))
    with pytest.raises(KernelOptError, match=r"8 registers x 32 threads = 256 .* the device's limit is 128"):
        k.apply_opt(Opt(OptOps.UPCAST, 0, 8))


def test_grid_dimensions_repacked_to_fit() -> None:
    # 3+ output axes share dimension 2 (at most 65535 blocks); a large one moves to dimension 0 instead
    dims = dict(assign_dims([70000, 3, 4], H100.grid))
    assert sorted(len(v) for v in dims.values()) == [1, 1, 1] and dims[0] == [0]
    with pytest.raises(KernelOptError, match="do not fit the device's per-dimension limits"):
        assign_dims([2**31, 2**31], H100.grid)
    a = np.arange(70000 * 2 * 2, dtype=np.float32).reshape(70000, 2, 2)
    t = Tensor(a).permute(2, 1, 0).contiguous()
    (item,) = [it for it in t.schedule() if it.ast.op.name == "SINK"]
    current().unqueue(item)
    spec = get_program(item.ast, CUDARenderer("sm_90"), opts=[])
    check_launch(spec, H100)


def test_conv_2d_tile_matches_numpy_on_cl(device: str) -> None:
    """The GPU conv tile (a 16x4 register tile of channels x images) applies to batch 128 x 32 channels, with odd
    5x5 outputs (as MNIST's 11x11 and 13x13) its workgroup along the rows (5x5 threads x 2 channels, the first tap
    row unrolled; the 32x2 workgroup along the batch before); values vs numpy."""
    if device != "CL":
        pytest.skip("the GPU heuristics run on the CL device here (CUDA: tests/test_cuda_*.py on the GPU)")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 2, 7, 7)).astype(np.float32)
    w = rng.standard_normal((32, 2, 3, 3)).astype(np.float32)
    out = Tensor(x, device=device).conv2d(Tensor(w, device=device))
    (item,) = [it for it in out.schedule() if it.ast.op.name == "SINK"]
    spec = get_program(item.ast, CUDARenderer("sm_90"))
    assert [o.arg for o in spec.applied_opts] == [5, 5, 2, 16, 4, 0], spec.applied_opts
    current().unqueue(item)
    out = Tensor(x, device=device).conv2d(Tensor(w, device=device))
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))  # (128, 2, 5, 5, 3, 3)
    ref = np.einsum("bcyxij,ocij->boyx", windows, w)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)
