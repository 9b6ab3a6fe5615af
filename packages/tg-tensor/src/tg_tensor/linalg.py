# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Linear algebra: dot/matmul (batched, broadcast), linear, einsum. A matmul is a multiply and a sum: one kernel.

>>> from tg_tensor import Tensor
>>> (Tensor([[1.0, 2.0]]) @ Tensor([[3.0], [4.0]])).tolist()
[[11.0]]
>>> Tensor.einsum("ij->ji", Tensor([[1, 2]])).tolist()
[[1], [2]]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg_codegen.renderer import OperandLayout
from tg_runtime.device import Device
from tg_tensor.engine.util import ShapeError, broadcast_shape, is_contiguous_buffer, to_dtype
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.helpers import ContextVar, all_int, prod
from tg_uop.structure import structure_as

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor


class LinalgMixin:
    """dot, matmul, @, linear, einsum."""

    __slots__ = ()

    def dot(self: Tensor, w: Tensor, dtype: DType | None = None) -> Tensor:
        """Matrix product with numpy's rules for 1-D operands and broadcast batch dims."""
        xs, ws = self.shape, w.shape  # (read once: a small matmul's checks are a share of its time)
        if not xs or not ws:  # numpy and torch refuse 0-d operands too (use * for a scalar)
            raise ShapeError(f"matmul: both operands need at least 1 dim, got shapes {xs} and {ws}")
        k_w = ws[-2] if len(ws) > 1 else ws[0]
        if xs[-1] != k_w:
            raise ShapeError(f"matmul: shapes {xs} and {ws} do not align: {xs[-1]} != {k_w}")
        if len(xs) == 2 and len(ws) == 2:
            if (direct := _direct_dot(self, w, dtype)) is not None:
                return direct
        elif len(xs) > 2 and len(ws) > 2:
            try:
                broadcast_shape(xs[:-2], ws[:-2])
            except ValueError:
                raise ShapeError(
                    f"matmul: batch dims {xs[:-2]} and {ws[:-2]} (of shapes {xs} and {ws}) cannot be broadcast together"
                ) from None
        if len(ws) == 1:
            return (self * w).sum(-1, dtype=dtype)
        if len(xs) == 1:
            return (self.reshape(-1, 1) * w).sum(-2, dtype=dtype)
        if panel := _packs(self, w):
            return _packed_dot(self, w, dtype, panel)
        if _k_major_copy(self, w):  # (x @ w.T with w the K-major copy: the layout the tensor cores read directly)
            w = w.transpose(-1, -2).contiguous().transpose(-1, -2)
        elif (direct := _direct_dot(self, w, dtype, True)) is not None:
            return direct
        x = self.unsqueeze(-2)  # (..., n, 1, k)
        wt = w.transpose(-1, -2).unsqueeze(-3)  # (..., 1, m, k)
        return (x * wt).sum(-1, dtype=dtype)

    def matmul(self: Tensor, x: Tensor, reverse: bool = False, dtype: DType | None = None) -> Tensor:
        """Matrix product (`@`); `reverse` computes x @ self.

        >>> from tg_tensor import Tensor
        >>> (Tensor([[1, 2]]).matmul(Tensor([[3], [4]]))).tolist()
        [[11]]
        """
        return x.dot(self, dtype) if reverse else self.dot(x, dtype)

    __matmul__ = matmul

    def __rmatmul__(self: Tensor, x: Tensor) -> Tensor:
        return self.matmul(x, True)

    def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:
        """self @ weight + bias, with weight of shape (in, out) as in tinygrad (1-D weights multiply).

        `dtype` is the matmul's accumulation/output dtype.
        """
        dt = to_dtype(dtype) if dtype is not None else None
        x = (self * weight).cast(dt or (self * weight).dtype) if weight.ndim == 1 else self.dot(weight, dt)
        return x if bias is None else x + bias

    @staticmethod
    def einsum(formula: str, *operands: Any, dtype: DType | str | None = None) -> Tensor:
        """Einstein summation over letters, e.g. "ij,jk->ik"; an implicit output lists the letters used once.

        Repeated letters in one operand take the diagonal ("ii->i"); "..." stands for broadcast leading dims.
        """
        ops = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
        formula = _expand_ellipsis(formula.replace(" ", ""), [t.ndim for t in ops])
        lhs, rhs = _parse_einsum(formula, len(ops))
        sizes: dict[str, int] = {}
        prepared = []
        for letters, t in zip(lhs, ops):
            letters, t = _take_diagonals(letters, t)
            for ch, n in zip(letters, t.shape):
                if n != 1 and sizes.setdefault(ch, int(n)) not in (1, n):
                    raise ShapeError(f"einsum: index {ch!r} has sizes {sizes[ch]} and {n} in {formula!r}")
                sizes[ch] = max(sizes.get(ch, 1), int(n))
            prepared.append((letters, t))
        order = list(rhs) + sorted(set(sizes) - set(rhs))
        total = None
        for letters, t in prepared:
            own = dict(zip(letters, t.shape))
            perm = sorted(range(len(letters)), key=lambda i: order.index(letters[i]))
            t = t.permute(tuple(perm)) if perm else t
            t = t.reshape(tuple(own.get(ch, 1) for ch in order))
            total = t if total is None else total * t
        assert total is not None
        summed = tuple(range(len(rhs), len(order)))
        dt = to_dtype(dtype) if dtype is not None else None
        return total.sum(summed, dtype=dt) if summed else (total.cast(dt) if dt is not None else total)


def _expand_ellipsis(formula: str, ndims: list[int]) -> str:
    """Replace each "..." by capital letters for the dims it covers (right-aligned, so they broadcast)."""
    if "..." not in formula:
        return formula
    lhs, arrow, rhs = formula.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(ndims):
        raise ShapeError(f"einsum: {formula!r} names {len(inputs)} operands, got {len(ndims)}")
    if any(part.count("...") > 1 for part in inputs + [rhs]):
        raise ShapeError(f"einsum: an operand of {formula!r} has more than one '...'")
    counts = [nd - len(part.replace("...", "")) if "..." in part else 0 for part, nd in zip(inputs, ndims)]
    if any(c < 0 for c in counts):
        raise ShapeError(f"einsum: operands of {ndims} dims do not fit {formula!r}")
    pool = "".join(ch for ch in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if ch not in formula)[: max(counts)]
    inputs = [p.replace("...", pool[len(pool) - c :] if c else "") for p, c in zip(inputs, counts)]
    if arrow:
        return ",".join(inputs) + "->" + rhs.replace("...", pool)
    letters = "".join(inputs)
    singles = "".join(sorted(ch for ch in set(letters) if letters.count(ch) == 1 and ch.islower()))
    return ",".join(inputs) + "->" + pool + singles


def _parse_einsum(formula: str, n_operands: int) -> tuple[list[str], str]:
    if "." in formula:
        raise ShapeError(f"einsum: a '.' outside '...' in {formula!r}")
    lhs, _, rhs = formula.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != n_operands:
        raise ShapeError(f"einsum: {formula!r} names {len(inputs)} operands, got {n_operands}")
    if not all(ch.isalpha() for part in inputs for ch in part) or not all(ch.isalpha() for ch in rhs):
        raise ShapeError(f"einsum: {formula!r} must use letters only")
    if "->" not in formula:
        letters = "".join(inputs)
        rhs = "".join(sorted(ch for ch in set(letters) if letters.count(ch) == 1))
    missing = set(rhs) - set("".join(inputs))
    if missing or len(set(rhs)) != len(rhs):
        raise ShapeError(f"einsum: output {rhs!r} of {formula!r} repeats letters or uses unknown ones {missing}")
    return inputs, rhs


def _take_diagonals(letters: str, t: Tensor) -> tuple[str, Tensor]:
    """Fold repeated letters of one operand into a single axis (its diagonal)."""
    if len(letters) != t.ndim:
        raise ShapeError(f"einsum: operand of shape {t.shape} has {t.ndim} dims but its letters are {letters!r}")
    while len(set(letters)) != len(letters):
        ch = next(c for c in letters if letters.count(c) > 1)
        a = letters.index(ch)
        b = letters.index(ch, a + 1)
        n = int(t.shape[a])
        if t.shape[b] != n:
            raise ShapeError(f"einsum: repeated index {ch!r} has sizes {n} and {t.shape[b]}")
        ar = type(t).arange(n, device=t.device)
        shape_a = tuple(n if i == a else 1 for i in range(t.ndim))
        shape_b = tuple(n if i == b else 1 for i in range(t.ndim))
        t = (ar.reshape(shape_a) == ar.reshape(shape_b)).where(t, 0).sum(b)
        letters = letters[:b] + letters[b + 1 :]
    return letters, t


# The right operand of a big matmul is first copied into the layout the device's renderer reads best
# (Renderer.operand_layout). CPU: panels of P columns, each contiguous (shape (..., m/P, k, P)), so the kernel's inner
# loop over k reads one panel front to back; the copy costs k*m reads and writes against n*k*m multiply-adds.
# bench/bench_cpu.py, one core: matmul 2048 16 -> 99 GFLOPS (numpy 102), 1024 64 -> 102. CPU_PACK=0 turns it off.
CPU_PACK = ContextVar("CPU_PACK", 1)
PACK_MIN_MACS = 1 << 25  # smaller products stay in cache unpacked, and the copy's launch would cost more
PACK_MIN_ROWS = 32  # each panel is reused by every row of the left operand: the copy must be amortized
# a strip of w (k x panel) up to this size stays in L1 unpacked: the copy (and the backward through the
# panels) would only cost. bench/bench_transformer.py's train step (k = 128 and 512) ran at 0.5-0.85x packed
PACK_MIN_STRIP_BYTES = 32 << 10


# a row-major right operand is copied K-major first where the device's tensor cores want that (Hopper's TF32
# warpgroup MMA, OperandLayout.k_major) and the product is big enough to pay for the copy: fp32 4096 under
# ALLOW_TF32 on an H100, 182 TFLOPS on mma.sync -> 204 with the copy, both kernels timed (docs/gpu.md)
K_MAJOR_MIN_MACS = 1 << 30


def _k_major_copy(x: Tensor, w: Tensor) -> bool:
    """Whether `x @ w` (both at least 2-D) first copies w, a row-major (k, m) buffer, K-major (OperandLayout)."""
    if x.ndim != 2 or w.ndim != 2 or x.dtype != w.dtype or not (all_int(x.shape) and all_int(w.shape)):
        return False
    n, k, m = int(x.shape[0]), int(x.shape[1]), int(w.shape[1])
    if n % 128 or m % 128 or k % 32 or n * k * m < K_MAJOR_MIN_MACS or not is_contiguous_buffer(w.uop):
        return False
    return _layout(w).k_major


def _layout(t: Tensor) -> OperandLayout:
    """The layout t's device reads a matmul's right operand best in (as stored on several devices: "CPU,CPU:1")."""
    one = isinstance(t.device, str) and "," not in t.device
    return Device[t.device].renderer.operand_layout(t.dtype) if one else OperandLayout()


def _direct_dot(x: Tensor, w: Tensor, dtype: DType | None, big: bool = False) -> Tensor | None:
    """`x @ w` of two realized fp32 matrices built as UOps directly: the very graph the general
    path builds (the same nodes: UOps are hash-consed), without its eight intermediate Tensors and their broadcast and
    dtype checks, its structure (tg_uop.structure) recalled from the last product of these sizes on operands alike.
    A 256x256 matmul's graph took ~80 us of Python on a 2-core EPYC (~170 on the 16-core Xeon host), more than
    its kernel on 16 cores; this takes ~10. None where the general path differs (`_matrices`); and, unless `big`
    (asked after those), products big enough that the device may want w packed or copied K-major."""
    if (sizes := _matrices(x, w, dtype)) is None:
        return None
    n, k, m = sizes
    if not big and n * k * m >= min(PACK_MIN_MACS, K_MAJOR_MIN_MACS):
        return None
    # (the nodes built as they are: every shape here is valid by construction, so UOp.reshape's checks are skipped)
    xu, wu, f32, nmk = x.uop, w.uop, dtypes.float32, (n, m, k)
    xe = UOp(Ops.EXPAND, f32, (UOp(Ops.RESHAPE, f32, (xu,), (n, 1, k)),), nmk)
    wt = UOp(Ops.RESHAPE, f32, (UOp(Ops.PERMUTE, f32, (wu,), (1, 0)),), (1, m, k))
    total = UOp(Ops.REDUCE_AXIS, f32, (UOp(Ops.MUL, f32, (xe, UOp(Ops.EXPAND, f32, (wt,), nmk))),), (Ops.ADD, (2,)))
    structure_as(total, ("dot", n, k, m), (xu, wu))
    return type(x)(UOp(Ops.RESHAPE, f32, (total,), (n, m)))  # (x's class: Tensor, without importing it here)


def _matrices(x: Tensor, w: Tensor, dtype: DType | None) -> tuple[int, int, int] | None:
    """(n, k, m) when `x @ w` may be built directly (`_direct_dot`, `_direct_packed_dot`): two realized fp32
    matrices on one device, no size-1 axis; None where the general path's graph differs: other dtypes (accumulation
    casts), no_grad (DETACH nodes), lazy or constant operands (a constant's sum is folded), several devices."""
    xu, wu = x.uop, w.uop
    f32 = dtypes.float32
    if dtype is not None or xu.dtype is not f32 or wu.dtype is not f32 or type(x).no_grad:
        return None
    xs, ws = xu.shape, wu.shape
    if xs is None or ws is None or len(xs) != 2 or len(ws) != 2:
        return None
    n, k, m = xs[0], xs[1], ws[1]
    if type(n) is not int or type(k) is not int or type(m) is not int:
        return None
    if min(n, k, m) < 2:  # (size-1 axes: the general path's reshapes and reduce differ)
        return None
    if xu.base.op is not Ops.BUFFER or wu.base.op is not Ops.BUFFER:
        return None
    if type(device := xu.device) is not str or device != wu.device:
        return None
    return n, k, m


def _direct_packed_dot(x: Tensor, w: Tensor, dtype: DType | None, panel: int) -> Tensor | None:
    """`_packed_dot` of two realized fp32 matrices whose rows divide into panels, built as UOps directly (the same
    nodes as its Tensor ops make, its structure recalled as `_direct_dot`'s): a 1024x1024 matmul's graph took
    ~400 us of Python on the 2-core EPYC and ~450 on the 16-core Xeon host (its kernels: ~2.5 ms there). None
    where `_matrices` says no or the rows do not divide."""
    if (sizes := _matrices(x, w, dtype)) is None or sizes[0] % panel:
        return None
    (n, k, m), f32, p = sizes, dtypes.float32, panel

    def node(op: Ops, src: UOp, arg: object) -> UOp:
        return UOp(op, f32, (src,), arg)

    def packed(u: UOp, split: tuple[int, int, int], order: tuple[int, int, int], shape: tuple[int, ...]) -> UOp:
        """u split into panels, copied panel-major (CONTIGUOUS), seen as `shape` with the panel's rows last."""
        copy = node(Ops.CONTIGUOUS, node(Ops.PERMUTE, node(Ops.RESHAPE, u, split), order), None)
        return node(Ops.RESHAPE, node(Ops.PERMUTE, copy, (0, 2, 1)), shape)

    full = (n // p, p, m // p, p, k)
    rows = node(Ops.EXPAND, packed(x.uop, (n // p, p, k), (0, 2, 1), (n // p, p, 1, 1, k)), full)
    cols = node(Ops.EXPAND, packed(w.uop, (k, m // p, p), (1, 0, 2), (1, 1, m // p, p, k)), full)
    total = UOp(Ops.REDUCE_AXIS, f32, (UOp(Ops.MUL, f32, (rows, cols)),), (Ops.ADD, (4,)))
    structure_as(total, ("packed dot", n, k, m, p), (x.uop, w.uop))
    return type(x)(node(Ops.RESHAPE, node(Ops.RESHAPE, total, (n // p, p, m // p, p)), (n, m)))


def _packs(x: Tensor, w: Tensor) -> int:
    """The panel width `x @ w` (both at least 2-D) packs w in (its device's layout, if big enough), else 0."""
    if not CPU_PACK.value or not (all_int(x.shape) and all_int(w.shape)):
        return 0
    n, k, m = int(x.shape[-2]), int(x.shape[-1]), int(w.shape[-1])
    batch = prod(int(s) for s in broadcast_shape(x.shape[:-2], w.shape[:-2]))
    if n < PACK_MIN_ROWS or batch * n * k * m < PACK_MIN_MACS or not (panel := _layout(x).panel):
        return 0  # (the sizes first: asking the device for its layout is the costly part of a small matmul's check)
    if k * panel * w.dtype.itemsize <= PACK_MIN_STRIP_BYTES:
        return 0
    return panel if m % panel == 0 and m > panel else 0


def _packed_dot(x: Tensor, w: Tensor, dtype: DType | None, P: int) -> Tensor:
    """x @ w on w packed in panels (..., m/P, k, P) and, when its rows divide into them, x in panels (..., n/P, k, P).

    Both packed: (x (..., n/P, P, 1, 1, k) * w (..., 1, 1, m/P, P, k)).sum(k) is (..., n/P, P, m/P, P), which is
    (..., n, m) as it is stored. Only w packed: (x (..., n, 1, k, 1) * w (..., 1, m/P, k, P)).sum(k)."""
    if (direct := _direct_packed_dot(x, w, dtype, P)) is not None:
        return direct
    b, k, m = w.ndim - 2, int(w.shape[-2]), int(w.shape[-1])
    panels = w.reshape(*w.shape[:-2], k, m // P, P)
    panels = panels.permute(*range(b), b + 1, b, b + 2).contiguous()  # (..., m/P, k, P)
    n, lead = int(x.shape[-2]), x.shape[:-2]
    if n % P == 0:
        rows = x.reshape(*lead, n // P, P, k).transpose(-1, -2).contiguous()  # (..., n/P, k, P)
        rows = rows.transpose(-1, -2).reshape(*lead, n // P, P, 1, 1, k)
        cols = panels.transpose(-1, -2).reshape(*w.shape[:-2], 1, 1, m // P, P, k)
        out = (rows * cols).sum(-1, dtype=dtype)  # (..., n/P, P, m/P, P)
        return out.reshape(*out.shape[:-4], n, m)
    prod_ = x.reshape(*x.shape[:-1], 1, k, 1) * panels.unsqueeze(-4)  # (..., n, m/P, k, P)
    out = prod_.sum(-2, dtype=dtype)  # (..., n, m/P, P)
    return out.reshape(*out.shape[:-2], m)
