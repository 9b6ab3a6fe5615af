"""Every OptOp, alone and combined, computes what NOOPT computes (and what numpy computes).

Kernel ASTs are built by hand (elementwise, reduce, matmul, conv) so these tests need only codegen and
the runtime. `FUZZ=1` runs 5,000 random opt sequences instead of 200.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from tg_codegen import KernelOptError, Opt, OptOps
from tg_codegen.program import get_program
from tg_runtime import Buffer, CompiledRunner, Device
from tg_shape import ShapeTracker, View
from tg_uop import Ops, UOp, dtypes


def _opens(name: str) -> bool:
    """A device is tested only where it opens (CL needs pyopencl and an OpenCL driver)."""
    try:
        Device[name]
        return True
    except Exception:
        return False


DEVICES = [d for d in ("PYTHON", "CPU", "CL") if _opens(d)]

F32 = dtypes.float32


def _view(shape: tuple[int, ...], strides: tuple[int, ...] | None = None) -> UOp:
    return UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create(shape, strides),)))


def _load(i: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> UOp:
    return UOp(Ops.LOAD, F32, (UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), i), _view(shape, strides)))


def _sink(out_shape: tuple[int, ...], value: UOp) -> UOp:
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), 0), _view(out_shape), value))
    return UOp(Ops.SINK, dtypes.void, (store,))


Case = tuple[UOp, list[np.ndarray], np.ndarray]


def elementwise(n: int, m: int) -> Case:
    a, b = np.random.rand(n, m).astype(np.float32), np.random.rand(m, n).astype(np.float32)
    val = _load(1, (n, m), (m, 1)) * _load(2, (n, m), (1, n)) + UOp.const(F32, 0.5)
    return _sink((n, m), val.maximum(UOp.const(F32, 0.6))), [a, b], np.maximum(a * b.T + 0.5, 0.6)


def reduce_sum(n: int, m: int, op: Ops = Ops.ADD) -> Case:
    a = np.random.rand(n, m).astype(np.float32)
    red = UOp(Ops.REDUCE_AXIS, F32, (_load(1, (n, m), (m, 1)),), (op, (1,)))
    want = a.sum(1, keepdims=True) if op is Ops.ADD else a.max(1, keepdims=True)
    return _sink((n, 1), red), [a], want


def matmul(n: int, k: int, m: int) -> Case:
    a, b = np.random.rand(n, k).astype(np.float32), np.random.rand(k, m).astype(np.float32)
    prod_ = _load(1, (n, k, m), (k, 1, 0)) * _load(2, (n, k, m), (0, m, 1))
    red = UOp(Ops.REDUCE_AXIS, F32, (prod_,), (Ops.ADD, (1,)))
    return _sink((n, 1, m), red), [a, b], a @ b


def conv(n: int, c: int, o: int, h: int, w: int) -> Case:
    """A valid 3x3 convolution: out[n,o,y,x] = sum_{c,i,j} x[n,c,y+i,x+j] * w[o,c,i,j]."""
    x, wt = np.random.rand(n, c, h, w).astype(np.float32), np.random.rand(o, c, 3, 3).astype(np.float32)
    oh, ow = h - 2, w - 2
    full = (n, o, oh, ow, c, 3, 3)
    xv = _load(1, full, (c * h * w, 0, w, 1, h * w, w, 1))
    wv = _load(2, full, (0, c * 9, 0, 0, 9, 3, 1))
    red = UOp(Ops.REDUCE_AXIS, F32, (xv * wv,), (Ops.ADD, (4, 5, 6)))
    want = np.zeros((n, o, oh, ow), np.float32)
    for i in range(3):
        for j in range(3):
            want += np.einsum("nchw,oc->nohw", x[:, :, i : i + oh, j : j + ow], wt[:, :, i, j])
    return _sink((n, o, oh, ow, 1, 1, 1), red), [x, wt], want


def run(case: Case, device: str, opts: list[Opt] | None) -> np.ndarray:
    ast, inputs, want = case
    spec = get_program(ast, Device[device].renderer, opts=opts)
    out = Buffer(device, want.size, F32)
    bufs = [out] + [Buffer(device, a.size, F32).copyin(memoryview(np.ascontiguousarray(a))) for a in inputs]
    CompiledRunner(spec)(bufs)
    return np.frombuffer(out.as_bytes(), np.float32).reshape(want.shape)


def small_cases() -> dict[str, Case]:
    np.random.seed(0)
    return {
        "elementwise": elementwise(4, 6),
        "reduce": reduce_sum(4, 8),
        "max": reduce_sum(6, 4, Ops.MAX),
        "matmul": matmul(4, 6, 8),
        "conv": conv(1, 2, 4, 6, 6),
    }


SINGLE = [
    [Opt(OptOps.UPCAST, 0, 2)],
    [Opt(OptOps.UPCAST, 0, 0)],
    [Opt(OptOps.UNROLL, 0, 2)],
    [Opt(OptOps.UNROLL, 0, 0)],
    [Opt(OptOps.THREAD, 0, 2)],
    [Opt(OptOps.PADTO, 0, 5)],
    [Opt(OptOps.SWAP, 0, 1)],
    [Opt(OptOps.NOLOCALS)],
]
COMBOS = [
    [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 2)],
    [Opt(OptOps.THREAD, 0, 2), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 2)],
    [Opt(OptOps.PADTO, 0, 3), Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.THREAD, 0, 2)],
    [Opt(OptOps.SWAP, 0, 1), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.NOLOCALS)],
    [Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.PADTO, 0, 3), Opt(OptOps.UNROLL, 0, 2)],
]
LOCAL_OPTS = [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 2), Opt(OptOps.GROUPTOP, 0, 2)]


LOCAL_COMBOS = [
    [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UPCAST, 0, 2)],
    [Opt(OptOps.GROUP, 0, 2), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 2)],
    [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUPTOP, 0, 2), Opt(OptOps.UPCAST, 0, 2)],
    [Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 2)],
    [Opt(OptOps.PADTO, 0, 3), Opt(OptOps.LOCAL, 0, 3), Opt(OptOps.SWAP, 0, 1)],
    [Opt(OptOps.NOLOCALS), Opt(OptOps.UPCAST, 0, 2)],
    # a GROUP after an UNROLL (the (loop, lane, 8) order of the GPU matvec heuristic)
    [Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.GROUP, 0, 2)],
    [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.GROUP, 0, 2), Opt(OptOps.UNROLL, 0, 2)],
    [Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.GROUPTOP, 0, 2), Opt(OptOps.UPCAST, 0, 2)],
    # STAGE: the reduction's shared operand tiles copied to shared memory once per step of the reduce loop
    [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE)],
    [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.STAGE)],
    [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.UNROLL, 0, 3), Opt(OptOps.STAGE)],  # 8 threads
    [Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.STAGE), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UPCAST, 0, 2)],
    [
        Opt(OptOps.LOCAL, 0, 2),
        Opt(OptOps.LOCAL, 1, 2),
        Opt(OptOps.UPCAST, 0, 2),
        Opt(OptOps.UPCAST, 1, 2),
        Opt(OptOps.UNROLL, 0, 0),
        Opt(OptOps.STAGE),
    ],  # fmt: skip
    [Opt(OptOps.PADTO, 1, 3), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.STAGE)],  # masked B
    # pipelined: 2 or 3 slots per tile, the next steps copied before this one is read (a prologue before the loop)
    [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.STAGE, None, 2)],
    [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.UNROLL, 0, 3), Opt(OptOps.STAGE, None, 3)],
    [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE, None, 4)],  # more slots than some kernels have steps
    [Opt(OptOps.PADTO, 1, 3), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.STAGE, None, 2)],
]


def _apply_or_none(case: Case, device: str, opts: list[Opt]) -> np.ndarray | None:
    try:
        return run(case, device, opts)
    except KernelOptError:
        return None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opts", SINGLE + COMBOS, ids=lambda o: "+".join(f"{x.op.name}{x.axis}:{x.arg}" for x in o))
def test_opts_match_noopt(device: str, opts: list[Opt]) -> None:
    applied = 0
    for name, case in small_cases().items():
        base = run(case, device, [])
        np.testing.assert_allclose(base, case[2], rtol=1e-5, err_msg=name)
        got = _apply_or_none(case, device, opts)
        if got is not None:
            applied += 1
            np.testing.assert_allclose(got, base, rtol=1e-5, err_msg=f"{name} {opts}")
    if any(o.op is OptOps.THREAD for o in opts) and not Device[device].renderer.has_threads:
        assert applied == 0, f"{device} has no CPU threads: THREAD must raise KernelOptError"
    else:
        assert applied >= 1, f"{opts} applied to none of the kernels"


@pytest.mark.parametrize(
    "opts", [[o] for o in LOCAL_OPTS] + LOCAL_COMBOS, ids=lambda o: "+".join(f"{x.op.name}{x.axis}:{x.arg}" for x in o)
)
def test_local_opts_match_noopt_on_cl(opts: list[Opt]) -> None:
    if "CL" not in DEVICES:
        pytest.skip("no CL device here")
    test_opts_match_noopt("CL", opts)


def test_stage_refusals() -> None:
    """STAGE needs a workgroup, does not combine with GROUP, and is refused past the shared-memory limit."""
    from tg_codegen.kernel import Kernel
    from tg_codegen.limits import LaunchLimits
    from tg_codegen.renderer.opencl import OpenCLRenderer
    from tg_codegen.tc.stage import stage_bytes

    ast = matmul(16, 32, 16)[0]
    with pytest.raises(KernelOptError, match="LOCAL"):
        Kernel(ast, OpenCLRenderer()).apply_opts([Opt(OptOps.STAGE)])
    with pytest.raises(KernelOptError, match="GROUP"):
        Kernel(ast, OpenCLRenderer()).apply_opts([Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 2), Opt(OptOps.STAGE)])
    with pytest.raises(KernelOptError, match="STAGE"):
        Kernel(ast, OpenCLRenderer()).apply_opts([Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE), Opt(OptOps.GROUP, 0, 2)])
    with pytest.raises(KernelOptError, match="no load"):  # a row sum: no load is shared by the threads
        Kernel(reduce_sum(8, 8)[0], OpenCLRenderer()).apply_opts([Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE)])
    renderer = OpenCLRenderer()
    renderer.limits = LaunchLimits(shared_bytes=256)
    opts = [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.UNROLL, 0, 8), Opt(OptOps.STAGE)]
    k = Kernel(ast, renderer).apply_opts(opts)
    assert k.staged and stage_bytes(k) == 256  # 4 rows x 8 of A and 8 x 4 columns of B: the limit, not past it
    with pytest.raises(KernelOptError, match="shared memory per block; the device's limit is 256"):
        k.apply_opt(Opt(OptOps.UPCAST, 0, 2))  # 8 rows of A: 384 bytes
    assert not any(o.op is OptOps.UPCAST for o in k.applied_opts)


def test_nolocals_blocks_locals() -> None:
    if "CL" not in DEVICES:
        pytest.skip("no CL device here")
    with pytest.raises(KernelOptError, match="NOLOCALS"):
        run(matmul(4, 4, 4), "CL", [Opt(OptOps.NOLOCALS), Opt(OptOps.LOCAL, 0, 2)])


@pytest.mark.parametrize("opt", LOCAL_OPTS + [Opt(OptOps.TC, 0, 0), Opt(OptOps.STAGE)], ids=lambda o: o.op.name)
def test_local_opts_need_a_device_with_locals(opt: Opt) -> None:
    for device in ("PYTHON", "CPU"):
        with pytest.raises(KernelOptError, match="local|tensor cores"):
            run(matmul(4, 4, 4), device, [opt])


@pytest.mark.parametrize(
    "opts, match",
    [
        ([Opt(OptOps.UPCAST, 0, 3)], "cannot split"),
        ([Opt(OptOps.UPCAST, 7, 2)], "does not exist"),
        ([Opt(OptOps.UNROLL, 1, 2)], "does not exist"),
        ([Opt(OptOps.THREAD, 0, 2), Opt(OptOps.THREAD, 0, 2), Opt(OptOps.THREAD, 1, 2)], "already split"),
        ([Opt(OptOps.PADTO, 0, 4)], "multiple already"),
        ([Opt(OptOps.SWAP, 1, 0)], "axis < arg"),
        ([Opt(OptOps.NOLOCALS), Opt(OptOps.NOLOCALS)], "already"),
    ],
)
def test_invalid_opts_raise(opts: list[Opt], match: str) -> None:
    with pytest.raises(KernelOptError, match=match):
        run(matmul(4, 4, 4), "CPU", opts)


def test_padto_refuses_a_max_reduce() -> None:
    with pytest.raises(KernelOptError, match="ADD reduction"):
        run(reduce_sum(4, 6, Ops.MAX), "CPU", [Opt(OptOps.PADTO, 1, 4)])


def test_bad_opt_values() -> None:
    with pytest.raises(TypeError, match="OptOps"):
        Opt("UPCAST", 0, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        Opt(OptOps.UPCAST, -1, 2)


def packed_matmul(batch: int, n: int, k: int, m: int, panel: int) -> Case:
    """A (batched) matmul whose right operand is packed in panels of `panel` columns: (batch, m/panel, k, panel)."""
    a, b = np.random.rand(batch, n, k).astype(np.float32), np.random.rand(batch, k, m).astype(np.float32)
    packed = np.ascontiguousarray(b.reshape(batch, k, m // panel, panel).transpose(0, 2, 1, 3))
    full = (batch, n, m // panel, k, panel)
    prod_ = _load(1, full, (n * k, k, 0, 1, 0)) * _load(2, full, (k * m, 0, k * panel, panel, 1))
    red = UOp(Ops.REDUCE_AXIS, F32, (prod_,), (Ops.ADD, (3,)))
    return _sink((batch, n, m // panel, 1, panel), red), [a, packed], (a @ b).reshape(batch, n, m // panel, 1, panel)


@pytest.mark.parametrize("device", [d for d in DEVICES if d != "CL"])
@pytest.mark.parametrize("shape", [(0, 16, 12, 32), (1, 16, 12, 32), (2, 24, 5, 48)])
@pytest.mark.parametrize("vector_bytes", [32, 64])
def test_heuristic_panel_order_matches_numpy(
    device: str, shape: tuple[int, ...], vector_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU heuristic's loop order for long reductions (SWAP of the tile loops, heuristic._panel_outer), with the
    strip size it waits for lowered so that small kernels take it; with AVX2- and AVX-512-wide vectors (twice the
    lanes and twice the rows: the columns, panels and rows scale with them)."""
    from tg_codegen import heuristic
    from tg_codegen.kernel import Kernel

    monkeypatch.setattr(heuristic, "CPU_PANEL_BYTES", 128)
    wide = 1
    if Device[device].renderer.vector_bytes:
        monkeypatch.setattr(Device[device].renderer, "vector_bytes", vector_bytes)
        wide = vector_bytes // 32
    elif vector_bytes != 32:
        pytest.skip(f"{device} writes no vector code")
    shape = (shape[0], shape[1] * wide, shape[2], shape[3] * wide)
    c = packed_matmul(*shape, 16 * wide) if shape[0] else matmul(*shape[1:])  # batch 0: B as it is, not packed
    opts = heuristic.hand_coded_optimizations(Kernel(c[0], Device[device].renderer))
    assert any(o.op is OptOps.SWAP for o in opts), opts
    np.testing.assert_allclose(run(c, device, opts), c[2], rtol=1e-4, atol=1e-5)


def _random_case(rng: random.Random) -> Case:
    kind = rng.choice(["elementwise", "reduce", "matmul", "conv"])
    pick = lambda: rng.choice([1, 2, 3, 4, 6, 8, 12])
    if kind == "elementwise":
        return elementwise(pick(), pick())
    if kind == "reduce":
        return reduce_sum(pick(), pick(), rng.choice([Ops.ADD, Ops.MAX]))
    if kind == "matmul":
        return matmul(pick(), pick(), pick())
    return conv(rng.choice([1, 2]), rng.choice([1, 3]), rng.choice([2, 4]), rng.choice([3, 5, 6]), rng.choice([4, 6]))


ACTIONS = [Opt(OptOps.UPCAST, a, n) for a in range(3) for n in (0, 2, 3, 4)]
ACTIONS += [Opt(OptOps.UNROLL, a, n) for a in range(3) for n in (0, 2, 3, 4)]
ACTIONS += [Opt(OptOps.THREAD, a, n) for a in range(2) for n in (2, 3, 4)]
ACTIONS += [Opt(OptOps.PADTO, a, n) for a in range(3) for n in (4, 5)]
ACTIONS += [Opt(OptOps.SWAP, a, n) for a, n in ((0, 1), (0, 2), (1, 2))] + [Opt(OptOps.NOLOCALS)]


def _random_opts(case: Case, rng: random.Random, device: str) -> list[Opt]:
    from tg_codegen.kernel import Kernel

    k = Kernel(case[0], Device[device].renderer)
    want = rng.randint(1, 5)
    for _ in range(40):
        if len(k.applied_opts) >= want:
            break
        try:
            k.apply_opt(rng.choice(ACTIONS))
        except KernelOptError:
            pass
    return list(k.applied_opts)


FUZZ_CASES = 5000 if os.getenv("FUZZ", "0") not in ("", "0") else 200
SHARDS = 8


@pytest.mark.parametrize("shard", range(SHARDS))
def test_fuzz_random_opts_vs_numpy(shard: int) -> None:
    """Random valid opt sequences on random kernels, compared with numpy (CPU; every 10th case also PYTHON)."""
    rng = random.Random(1234 + shard)
    np.random.seed(shard)
    applied = 0
    for i in range(FUZZ_CASES // SHARDS):
        case = _random_case(rng)
        device = "PYTHON" if i % 10 == 0 else "CPU"
        opts = _random_opts(case, rng, device)
        applied += bool(opts)
        got = run(case, device, opts)
        np.testing.assert_allclose(got, case[2], rtol=1e-4, atol=1e-5, err_msg=f"{device} {opts}")
    assert applied > FUZZ_CASES // SHARDS * 3 // 4  # most cases really are optimized


GPU_LOCALS = [
    Opt(op, a, n) for op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP) for a in range(3) for n in (2, 3, 4, 6)
]
GPU_AFTER = [Opt(op, a, n) for op in (OptOps.UPCAST, OptOps.UNROLL) for a in range(3) for n in (0, 2, 3, 4)]
GPU_UNROLLS = [Opt(OptOps.UNROLL, a, n) for a in range(2) for n in (2, 3, 4)]
GPU_GROUPS = [Opt(op, a, n) for op in (OptOps.GROUP, OptOps.GROUPTOP) for a in range(2) for n in (2, 3, 4)]
GPU_FUZZ_CASES = 1000 if os.getenv("FUZZ", "0") not in ("", "0") else 40


def test_fuzz_gpu_opts_within_tight_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random LOCAL/GROUP/UPCAST/UNROLL/STAGE sequences on CL under tiny launch limits: every accepted sequence launches
    within them and matches numpy; refused ones raise KernelOptError naming a limit."""
    if "CL" not in DEVICES:
        pytest.skip("no CL device here")
    from tg_codegen.kernel import Kernel
    from tg_codegen.limits import LaunchLimits

    tight = LaunchLimits(max_threads=8, block=(4, 4, 2), shared_bytes=32, registers_per_block=64)
    monkeypatch.setattr(Device["CL"].renderer, "limits", tight)
    rng = random.Random(99)
    refused = 0
    for _ in range(GPU_FUZZ_CASES):
        case = _random_case(rng)
        k = Kernel(case[0], Device["CL"].renderer)
        # locals come before upcasts and unrolls; a GROUP may also follow UNROLLs
        steps = ((GPU_LOCALS, 4), (GPU_UNROLLS, 1), (GPU_GROUPS, 1), (GPU_AFTER, 2), ([Opt(OptOps.STAGE)], 1))
        for actions, most in steps:
            for _ in range(rng.randint(0, most)):
                try:
                    k.apply_opt(rng.choice(actions))
                except KernelOptError as e:
                    refused += any(w in str(e) for w in ("limit", "do not fit"))
        spec = get_program(case[0], Device["CL"].renderer, opts=k.applied_opts)
        local = spec.local_size or (1,)
        assert int(np.prod(local)) <= 8 and all(s <= m for s, m in zip(local, tight.block)), (spec.name, local)
        np.testing.assert_allclose(run(case, "CL", list(k.applied_opts)), case[2], rtol=1e-4, atol=1e-5)
    assert refused > 0, "the tight limits should refuse some opts"


def test_fuzz_stage_on_cl() -> None:
    """Random LOCAL/UNROLL/UPCAST sequences ending in STAGE (one slot or pipelined) on random matmuls and convs, on CL
    against numpy."""
    if "CL" not in DEVICES:
        pytest.skip("no CL device here")
    from tg_codegen.kernel import Kernel

    rng = random.Random(7)
    np.random.seed(7)
    staged = pipelined = 0
    for _ in range(GPU_FUZZ_CASES):
        case = _random_case(rng)
        k = Kernel(case[0], Device["CL"].renderer)
        for actions, most in ((GPU_LOCALS[:12], 2), (GPU_UNROLLS, 1), (GPU_AFTER, 2)):
            for _ in range(rng.randint(1, most)):
                try:
                    k.apply_opt(rng.choice(actions))
                except KernelOptError:
                    pass
        # pipelined in 2 or 3 slots (one reduce loop only), else one slot
        k.apply_first([Opt(OptOps.STAGE, None, d) for d in (rng.choice((0, 2, 3)), 0)])
        staged += k.staged
        pipelined += k.stage_depth >= 2
        np.testing.assert_allclose(run(case, "CL", list(k.applied_opts)), case[2], rtol=1e-4, atol=1e-5)
    assert staged >= GPU_FUZZ_CASES // 8, f"only {staged} of {GPU_FUZZ_CASES} kernels were staged"
    assert pipelined >= GPU_FUZZ_CASES // 16, f"only {pipelined} of {GPU_FUZZ_CASES} kernels were pipelined"


@pytest.mark.parametrize("rows", [1, 16, 512])
def test_gpu_matvec_heuristic_opts_on_cl(rows: int) -> None:
    """The opts the CUDA heuristic picks for a matrix-vector product / row sums (UNROLL, then GROUP: the (loop,
    lane, 4) order), run on CL against numpy."""
    if "CL" not in DEVICES:
        pytest.skip("no CL device here")
    from tg_codegen.heuristic import hand_coded_optimizations
    from tg_codegen.kernel import Kernel
    from tg_codegen.renderer.cuda import CUDARenderer

    np.random.seed(rows)
    case = matmul(1, 1024, rows) if rows > 1 else reduce_sum(3, 1024)
    if rows > 1:  # the weight as (rows, 1024), each row read with stride 1 like the decode step's matvecs
        a, b = case[1]
        w = np.ascontiguousarray(b.T)
        prod_ = _load(1, (rows, 1024), (0, 1)) * _load(2, (rows, 1024), (1024, 1))
        case = (_sink((rows, 1), UOp(Ops.REDUCE_AXIS, F32, (prod_,), (Ops.ADD, (1,)))), [a, w], (a @ b).T)
    opts = hand_coded_optimizations(Kernel(case[0], CUDARenderer()))
    assert opts.index(Opt(OptOps.UNROLL, 0, 4)) < [o.op for o in opts].index(OptOps.GROUP), opts
    np.testing.assert_allclose(run(case, "CL", opts), case[2], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "op, opts, barriers",
    [
        (Ops.ADD, [Opt(OptOps.GROUP, 0, 256)], 2),  # 16 chunks of 16
        (Ops.MAX, [Opt(OptOps.GROUP, 0, 256)], 2),
        (Ops.MAX, [Opt(OptOps.GROUPTOP, 0, 128)], 2),  # 8 chunks of 16
        (Ops.ADD, [Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.GROUP, 0, 64)], 2),
        (Ops.ADD, [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 96)], 2),  # a LOCAL axis beside it; 8 x 12
        (Ops.MAX, [Opt(OptOps.GROUP, 0, 32)], 1),  # under 64 threads: one stage
    ],
    ids=str,
)
def test_big_groups_combine_in_two_stages_on_cl(op: Ops, opts: list[Opt], barriers: int) -> None:
    """A GROUP of 64 or more threads combines its partials in two stages (lowerer._two_stage): rows of 768 values
    summed or maxed, each row's result against numpy."""
    if "CL" not in DEVICES:
        pytest.skip("no CL device here")
    np.random.seed(1)
    ast, (a,), _ = reduce_sum(4, 768, op)
    a[2, 700] = 50.0  # one large value late in a row (a max that only the last chunk sees)
    want = a.sum(1, keepdims=True) if op is Ops.ADD else a.max(1, keepdims=True)
    assert get_program(ast, Device["CL"].renderer, opts=opts).src.count("barrier(") == barriers
    np.testing.assert_allclose(run((ast, [a], want), "CL", opts), want, rtol=1e-5)


@pytest.mark.parametrize("depth", [2, 3, 4])
@pytest.mark.parametrize("k", [2, 3, 5])
def test_pipelined_stage_with_few_steps(depth: int, k: int) -> None:
    """A pipelined STAGE whose reduce loop has fewer steps than the tiles in flight (the prologue's copies past
    the end are skipped, the loop's are gated off) still computes the matmul."""
    if "CL" not in DEVICES:
        pytest.skip("no CL device here")
    case = matmul(4, k, 6)
    got = run(case, "CL", [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.STAGE, None, depth)])
    np.testing.assert_allclose(got, case[2], rtol=1e-5)


def test_pipelined_stage_refusals() -> None:
    """More tiles in flight than STAGE keeps, or a pipeline over two reduce loops, is refused."""
    from tg_codegen.kernel import Kernel
    from tg_codegen.renderer.opencl import OpenCLRenderer

    with pytest.raises(KernelOptError, match="at most 4"):
        Kernel(matmul(4, 4, 4)[0], OpenCLRenderer()).apply_opts([Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE, None, 5)])
    with pytest.raises(KernelOptError, match="one reduce loop, got 3"):
        Kernel(conv(2, 2, 4, 6, 6)[0], OpenCLRenderer()).apply_opts(
            [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE, None, 2)]
        )


def _cuda_heuristic(ast: UOp) -> list[Opt]:
    from tg_codegen.heuristic import hand_coded_optimizations
    from tg_codegen.kernel import Kernel
    from tg_codegen.renderer.cuda import CUDARenderer

    return hand_coded_optimizations(Kernel(ast, CUDARenderer("sm_90")))


def test_narrow_matmul_heuristic_on_cl() -> None:
    """A character model's logits (rows x 65 over 384, both operands K-contiguous): the CUDA heuristic shares each
    row's reduction among 8 threads and keeps 13 of its 65 outputs per thread; run on CL against numpy."""
    if "CL" not in DEVICES:
        pytest.skip("no CL device here")
    np.random.seed(65)
    x, w = np.random.rand(256, 384).astype(np.float32), np.random.rand(65, 384).astype(np.float32)
    prod_ = _load(1, (256, 65, 384), (384, 0, 1)) * _load(2, (256, 65, 384), (0, 384, 1))
    case = (_sink((256, 65, 1), UOp(Ops.REDUCE_AXIS, F32, (prod_,), (Ops.ADD, (2,)))), [x, w], (x @ w.T)[:, :, None])
    opts = _cuda_heuristic(case[0])
    assert Opt(OptOps.GROUP, 0, 8) in opts and Opt(OptOps.UPCAST, 1, 13) in opts, opts
    np.testing.assert_allclose(run(case, "CL", opts), case[2], rtol=1e-4, atol=1e-3)


def test_row_sum_with_a_batch_broadcast_load_on_cl() -> None:
    """Per-token sums over 384 features of x + pos, where pos (one row per position) is the same for every
    sequence of the batch: not a matmul (both reused loads are reused along the batch only), so the CUDA heuristic
    reads each row with a group of threads (it gave 8 workgroups of one thread per row); on CL against numpy."""
    if "CL" not in DEVICES:
        pytest.skip("no CL device here")
    np.random.seed(384)
    x, pos, scale = (np.random.rand(*s).astype(np.float32) for s in ((16, 64, 384), (64, 384), (64,)))
    value = (_load(1, (16, 64, 384), (24576, 384, 1)) + _load(2, (16, 64, 384), (0, 384, 1))) * _load(
        3, (16, 64, 384), (0, 1, 0)
    )
    case = (_sink((16, 64, 1), UOp(Ops.REDUCE_AXIS, F32, (value,), (Ops.ADD, (2,)))), [x, pos, scale],
            ((x + pos) * scale[:, None]).sum(-1, keepdims=True))  # fmt: skip
    opts = _cuda_heuristic(case[0])
    assert any(o.op is OptOps.GROUP for o in opts), opts
    np.testing.assert_allclose(run(case, "CL", opts), case[2], rtol=1e-4, atol=1e-3)
