"""Matrix products with weights kept in GGUF's quantized blocks (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K).

`quantized_matmul(x, w)` is `x @ W.T` for a `QuantizedWeight` W: the raw blocks on the device and the type and
shape they hold. On the CPU, CL and CUDA it is one fused kernel that reads the blocks as they are (C with AVX2 or
a generic target: tg_nn.quant_cpu_float, float32 activations, and with `int8=True` tg_nn.quant_cpu, llama.cpp's
8-bit activations; OpenCL/CUDA C: tg_nn.quant_gpu), written as device source and run through `tg.source_kernel`,
so TinyJit records it like any kernel. Elsewhere (the PYTHON device) it is tg's own graph: the blocks'
dequantization (tg_nn.gguf.dequantize), which the scheduler fuses into the matmul that reads it.

Why source kernels and not the graph on the CPU (measured on one core, SmolLM2's shapes, TG_QUANT_GRAPH=1 for the
graph): a Q4_1 1536x576 matrix-vector product 80 us against 680, the Q8_0 49152x576 output head 1.5 ms against
38 ms, a 128-row prompt product 3 ms against 6 ms. The graph's kernel unpacks each weight to a float with scalar
code; the C kernels unpack 32 at a time into vector registers (and with int8, multiply 8-bit integers with
`maddubs`/`dpbusd`).

>>> import numpy as np
>>> from tg_tensor import Tensor
>>> from tg_uop import dtypes
>>> raw = Tensor(np.array([0, 60] + [1] * 32, np.uint8))  # one Q8_0 block: scale 1.0, 32 ones
>>> w = QuantizedWeight(raw, "Q8_0", (1, 32))
>>> quantized_matmul(Tensor.ones(2, 32), w).tolist()
[[32.0], [32.0]]
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

from tg_nn.gguf import _NATIVE, _Source, _tensor, dequantize
from tg_nn.gguf_format import parse_gguf
from tg_nn.quant_cpu import CPU_TYPES, cpu_source
from tg_nn.quant_cpu_float import cpu_float_source
from tg_nn.quant_gpu import gpu_launch, gpu_source
from tg_nn.util import swiglu
from tg_runtime.device import Device
from tg_tensor import KernelSource, Tensor, source_kernel
from tg_uop import DType, dtypes

__all__ = ["QUANTIZED_TYPES", "QuantizedWeight", "gguf_load_quantized", "quantized_matmul"]

QUANTIZED_TYPES = tuple(CPU_TYPES)


@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """A (rows, cols) matrix kept as raw GGUF blocks: `blocks` a uint8 Tensor of rows * cols / BS * block bytes."""

    blocks: Tensor
    qtype: str
    shape: tuple[int, int]

    def __post_init__(self) -> None:
        if self.qtype not in CPU_TYPES:
            raise ValueError(f"QuantizedWeight: {self.qtype!r} is not one of {', '.join(CPU_TYPES)}")
        if len(self.shape) != 2:
            raise ValueError(f"QuantizedWeight: shape {self.shape} must be (rows, cols)")
        bs, bb = CPU_TYPES[self.qtype]
        rows, cols = self.shape
        if cols % bs:
            raise ValueError(f"QuantizedWeight: {cols} columns are not whole {self.qtype} blocks of {bs}")
        if self.blocks.dtype != dtypes.uint8 or int(self.blocks.numel()) != rows * cols // bs * bb:
            raise ValueError(
                f"QuantizedWeight: {self.qtype} {self.shape} needs {rows * cols // bs * bb} uint8 bytes, got "
                f"{self.blocks.numel()} of {self.blocks.dtype}"
            )

    @property
    def nbytes(self) -> int:
        return int(self.blocks.numel())

    def dequantize(self) -> Tensor:
        """The float32 matrix (lazy)."""
        return dequantize(self.blocks, self.qtype, self.shape)

    def rows(self, start: int, stop: int) -> QuantizedWeight:
        """Rows start..stop-1 (a view of their blocks: each row is whole blocks)."""
        rb = self.shape[1] // CPU_TYPES[self.qtype][0] * CPU_TYPES[self.qtype][1]
        return QuantizedWeight(self.blocks[start * rb : stop * rb], self.qtype, (stop - start, self.shape[1]))

    @staticmethod
    def cat(parts: list[QuantizedWeight]) -> QuantizedWeight:
        """The matrices stacked by rows (one type and width), as one realized buffer of blocks."""
        if len({(p.qtype, p.shape[1]) for p in parts}) != 1:
            raise ValueError("QuantizedWeight.cat: the parts differ in type or width")
        blocks = parts[0].blocks.cat(*[p.blocks for p in parts[1:]]).contiguous().realize()
        return QuantizedWeight(blocks, parts[0].qtype, (sum(p.shape[0] for p in parts), parts[0].shape[1]))


def quantized_matmul(
    x: Tensor,
    w: QuantizedWeight,
    int8: bool = False,
    glu: bool = False,
    residual: Tensor | None = None,
    gated: bool = False,
) -> Tensor:
    """x (..., cols) @ W.T -> (..., rows), float32, W kept in its blocks (see the module doc). `int8`: on the CPU,
    round the rows of x to 8-bit blocks of 32 and multiply in integers (llama.cpp's numerics: faster, results move
    by ~0.5%); by default x is used in float32 (the float product of the dequantized weights). `glu`: x is
    (..., 2 * cols), a gate then an up projection, and the product is `silu(gate) * up @ W.T` (a SwiGLU MLP's down
    projection; on the CPU in float32 the activation is computed by the product's kernel, as it reads x).
    `gated`: W's rows are a gate then an up projection and the result is silu(x @ gate.T) * (x @ up.T), (..., rows
    / 2); `residual` is added to the result. On OpenCL and CUDA both are done by the product's kernel."""
    rows, cols = w.shape
    width = 2 * cols if glu else cols
    if int(x.shape[-1]) != width:
        raise ValueError(
            f"quantized_matmul: x of shape {x.shape} does not match W of shape {w.shape}: {width} columns"
            + (" (glu: gate and up, each as wide as W)" if glu else "")
        )
    if gated and rows % 2:
        raise ValueError(f"quantized_matmul: gated needs an even number of rows of W (gate then up), got {rows}")
    lead = tuple(int(s) for s in x.shape[:-1])
    n_out = rows // 2 if gated else rows
    if residual is not None and tuple(residual.shape) != lead + (n_out,):
        raise ValueError(f"quantized_matmul: residual {residual.shape} must be {lead + (n_out,)}, the result's shape")
    m = 1
    for s in lead:
        m *= s
    family = x.device.split(":")[0]
    fused_glu = glu and family == "CPU" and not int8
    graph = family not in ("CPU", "CL", "CUDA") or os.getenv("TG_QUANT_GRAPH") == "1" or m == 0
    if glu and (graph or not fused_glu):  # the activation in tg's graph, then the plain product
        x, glu, width = swiglu(x), False, cols
    epilogue = family in ("CL", "CUDA") and not graph  # (gated and residual in the GPU kernel)
    if graph:
        y = x.cast(dtypes.float32) @ w.dequantize().T
    else:
        xf = x.reshape(m, width).cast(dtypes.float32)
        inputs = [xf, w.blocks]
        res = residual if epilogue else None
        if res is not None:
            inputs.append(res.reshape(m, n_out).cast(dtypes.float32))
        gate = epilogue and gated
        make = functools.partial(_source, w.qtype, m, rows, cols, int8, glu, res is not None, gate)
        key = ("qmm", w.qtype, m, rows, cols, int8, glu, res is not None, gate)
        y = source_kernel((m, n_out if gate else rows), dtypes.float32, inputs, key, make)
        y = y.reshape(*lead, n_out if gate else rows)
        if epilogue:
            return y
    if gated:
        y = swiglu(y)
    return y if residual is None else residual + y


def _source(
    qtype: str,
    m: int,
    n: int,
    k: int,
    int8: bool,
    glu: bool,
    res: bool,
    gated: bool,
    device: str,
    dts: tuple[DType, ...],
) -> KernelSource | None:
    family = device.split(":")[0]
    name = f"qmm_{qtype}_{m}_{n}_{k}"
    if family == "CPU":
        threads = Device[device].renderer.threads
        if int8:
            return KernelSource(cpu_source(qtype, m, n, k, threads), name)
        kind = "glu" if glu else "f"
        return KernelSource(cpu_float_source(qtype, m, n, k, threads, glu=glu), f"qmm_{kind}_{qtype}_{m}_{n}_{k}")
    if family in ("CL", "CUDA"):
        name += ("_res" if res else "") + ("_glu" if gated else "")
        return KernelSource(gpu_source(qtype, m, n, k, family, res, gated), name, *gpu_launch(m, n, gated))
    return None


def gguf_load_quantized(
    src: Tensor | str | os.PathLike[str], device: str | None = None
) -> tuple[dict[str, Any], dict[str, Tensor | QuantizedWeight]]:
    """`gguf_load`, with every 2-D matrix of a quantized type kept as a QuantizedWeight (its blocks a lazy copy of
    the file's bytes to the device) and F16/BF16 tensors in their 16 bits (BF16 widened lazily, by the kernel that
    reads it): nothing is widened to float32 in memory. Other tensors as gguf_load gives them.
    A quantized tensor of another rank is dequantized when realized, as gguf_load does.
    """
    source = _Source(src)
    header = parse_gguf(source.mapping)
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    state: dict[str, Tensor | QuantizedWeight] = {}
    for info in header.tensors:
        name = info.type_name
        if name in CPU_TYPES and len(info.shape) == 2:
            raw = source.window(info.offset, info.nbytes, dtypes.uint8, dev)
            state[info.name] = QuantizedWeight(raw, name, (int(info.shape[0]), int(info.shape[1])))
        elif name in _NATIVE and name != "F32":
            n = info.nbytes // 2
            bits = source.window(info.offset, n, _NATIVE[name], dev)
            if name == "BF16":
                bits = (bits.cast(dtypes.uint32) << 16).bitcast(dtypes.float32)
            state[info.name] = bits.reshape(info.shape)
        else:  # F32, a quantized vector, or a type tg cannot read (gguf's _tensor names it)
            state[info.name] = _tensor(source, info, dev, keep_quantized=True)
    return header.metadata, state
