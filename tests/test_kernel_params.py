"""The kernel parameter contract: buffer i of a launch is parameter data<i> of the kernel, used or not.

A rewrite that deletes the last use of an input (`c.where(b, b) -> b`) used to drop that parameter from the
rendered signature while the launcher still passed every buffer by position, so later arguments shifted.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg_codegen import get_program
from tg_codegen.renderer import KernelParamError, Renderer, buffer_params
from tg_codegen.renderer.cstyle import ClangRenderer
from tg_codegen.renderer.cuda import CUDARenderer
from tg_codegen.renderer.opencl import OpenCLRenderer
from tg_runtime.ops_cuda import CUDAError, NVRTCCompiler
from tg_runtime.ops_python import PythonRenderer
from tg_runtime.runner import get_runner
from tg_tensor.engine.realizer import ScheduleItem, current
from tg_uop import Ops, UOp

try:
    NVRTC: NVRTCCompiler | None = NVRTCCompiler("sm_90")
    NVRTC_REASON = ""
except CUDAError as e:
    NVRTC, NVRTC_REASON = None, str(e)


def test_where_with_equal_branches_reads_the_branch(device: str) -> None:
    """Issue 11, first program: the load of `a` simplifies away; the result must be `b`, not `a`."""
    a = Tensor(np.array([5.0, -1.0], np.float32), device=device)
    b = Tensor(np.array([-0.25, 0.5], np.float32), device=device)
    np.testing.assert_array_equal((a > 0).where(b, b).numpy(), np.array([-0.25, 0.5], np.float32))


def test_unused_middle_input_keeps_later_arguments_in_place(device: str) -> None:
    """Three inputs, the middle one simplified away (x - x = 0 on ints): the last must still be read."""
    a = Tensor(np.array([1, -2, 3], np.int32), device=device)
    b = Tensor(np.array([7, 8, 9], np.int32), device=device)
    c = Tensor(np.array([-10, 20, -30], np.int32), device=device)
    np.testing.assert_array_equal((a + (b - b) + c).numpy(), np.array([-9, 18, -27], np.int32))


def _lost_load_item(device: str) -> ScheduleItem:
    """The scheduled (not run) kernel of `(a > 0).where(b, b)`: its AST loads a and b, its program only b."""
    a = Tensor(np.array([5.0, -1.0], np.float32), device=device)
    b = Tensor(np.array([-0.25, 0.5], np.float32), device=device)
    Tensor.realize(a, b)
    items = (a > 0).where(b, b).schedule()
    for item in items:
        current().unqueue(item)
    (item,) = [i for i in items if i.ast.op is Ops.SINK]
    assert len(item.bufs) == 3, "the scheduler passes out, a, b"
    return item


def _signature(src: str, function_name: str) -> list[str]:
    """The parameter names of the rendered kernel function, in order."""
    m = re.search(rf"void\s+{function_name}\(([^)]*)\)", src)
    assert m is not None, src
    return [p.split()[-1] for p in m.group(1).split(",")]


def test_lost_load_keeps_its_parameter_on_every_device(device: str) -> None:
    """The launched arguments match the signature: one parameter per buffer of the schedule item."""
    item = _lost_load_item(device)
    runner = get_runner(device, item.ast)
    spec = runner.spec  # may come from the disk cache of programs (source and signature, no uops)
    fresh = get_program(item.ast, Device[device].renderer)  # rendered now: its uops show the loads
    assert spec.src == fresh.src and spec.globals == fresh.globals == (0, 1, 2)
    assert spec.buffer_dtypes == tuple(b.dtype for b in item.bufs)
    program_loads = {u.src[0].src[0].arg for u in fresh.uops if u.op is Ops.LOAD}
    assert program_loads == {2}, "the program should read only b (the load of a was simplified away)"
    if isinstance(Device[device].renderer, (ClangRenderer, OpenCLRenderer)):
        assert _signature(spec.src, spec.function_name) == ["data0", "data1", "data2"]
    for b in item.bufs:
        b.ensure_allocated()
    runner(item.bufs)
    out = np.frombuffer(bytes(item.bufs[0].as_bytes()), np.float32)
    np.testing.assert_array_equal(out, np.array([-0.25, 0.5], np.float32))
    with pytest.raises(KernelParamError, match=f"kernel {spec.name} takes 3 buffers"):
        runner(item.bufs[:1] + item.bufs[2:])


@pytest.mark.skipif(NVRTC is None, reason=f"NVRTC unavailable: {NVRTC_REASON}")
def test_lost_load_keeps_its_parameter_in_cuda() -> None:
    """Compile-only CUDA: the signature declares data0..data2 and NVRTC accepts it."""
    item = _lost_load_item("PYTHON")
    spec = get_program(item.ast, CUDARenderer("sm_90"))
    assert spec.globals == (0, 1, 2)
    assert _signature(spec.src, spec.function_name) == ["data0", "data1", "data2"]
    assert NVRTC is not None
    assert NVRTC.compile(spec.src)[:4] == b"\x7fELF"


def _program_with_gap() -> list[UOp]:
    """A linear program storing data2[0] into data0[0]: data1 is missing."""
    f = dtypes.float32
    g0, g2 = (UOp(Ops.DEFINE_GLOBAL, f.ptr(), (), i) for i in (0, 2))
    zero = UOp(Ops.CONST, dtypes.int32, (), 0)
    load = UOp(Ops.LOAD, f, (UOp(Ops.INDEX, f.ptr(), (g2, zero)),))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, f.ptr(), (g0, zero)), load))
    return [g0, g2, zero, load.src[0], load, store.src[0], store]


@pytest.mark.parametrize(
    "renderer", [ClangRenderer(), OpenCLRenderer(), CUDARenderer("sm_90"), PythonRenderer()], ids=lambda r: r.device
)
def test_renderers_refuse_a_parameter_gap(renderer: Renderer) -> None:
    with pytest.raises(KernelParamError, match=r"kernel E_gap: buffer parameters \['data0', 'data2'\] have a gap"):
        renderer.render("E_gap", _program_with_gap())


def test_buffer_params_refuses_one_number_with_two_dtypes() -> None:
    uops = [UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 0) for dt in (dtypes.float32, dtypes.int32)]
    with pytest.raises(KernelParamError, match="kernel E_2: buffer parameter data0 is both"):
        buffer_params("E_2", uops)


def test_launch_with_wrong_buffer_dtype_names_the_kernel() -> None:
    item = _lost_load_item("PYTHON")
    spec = get_runner("PYTHON", item.ast).spec
    with pytest.raises(KernelParamError, match=rf"kernel {spec.name} takes 3 buffers \(data0: float, "):
        spec.check_buffers([dtypes.float32, dtypes.int32, dtypes.float32])


def test_jit_replays_a_lost_load_kernel_with_the_right_buffers(device: str) -> None:
    """TinyJit's recorded launches (bound calls on CPU) pass one argument per parameter, in order."""
    from tg import TinyJit

    @TinyJit
    def f(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
        return (a > 0).where(b, b) + c * 0 + (c - c)

    rng = np.random.default_rng(0)
    for _ in range(4):
        a, b, c = (rng.integers(-5, 5, 6).astype(np.int32) for _ in range(3))
        got = f(*(Tensor(x, device=device) for x in (a, b, c))).numpy()
        np.testing.assert_array_equal(got, b)
