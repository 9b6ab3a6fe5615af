"""What fusion costs: which lazy nodes are computed once, by a kernel of their own, instead of inside every
kernel that reads them.

The scheduler fuses by recomputing: an elementwise node that two kernels read is computed inside both. That is
right when the node is as cheap to compute as to load (a relu of one buffer, a cast, x + bias), and wasteful
when it reads more bytes than it holds. The gradient of a transformer's residual stream is the sum of what every
later layer sends back: at the first layer of six it adds 30 buffers, and each of the ~8 kernels that read it
(layer-norm backward, bias gradient, the gradients of the matmuls) read all 30 again.

The rule. A kernel is anchored at a root of the schedule, at a reduction, or at a node that is computed on its
own anyway (CONTIGUOUS, ASSIGN, COPY, a collective); a node belongs to the kernel of every anchor that reaches it
through elementwise and movement ops. For an elementwise node `n` that k >= 2 kernels read:

    recompute it in each:  k * work(n)                      work = in_bytes(n) + alu(n) / ALU_PER_BYTE
    compute it once:       work(n) + (k + 1) * out_bytes(n)  (computed once and stored, then k loads)

in_bytes: the buffers n's computation reads, each once; alu: its ALU operations (a padded view, a masked read,
counts two), ALU_PER_BYTE of which cost what one byte of memory traffic does. `n` gets its own kernel when
recomputing costs more: (k - 1) * work > (k + 1) * out_bytes. x + bias (in ~ out, one add) stays fused; a + b of
two full buffers stays fused for up to 3 readers (it is cheaper to read both again than to store and load the
sum); the sum of 30 gradient buffers that 8 kernels read is computed once, and so is a concatenation of 28
gradients that five kernels read (in = out, but ~80 operations per element). A node larger than what it reads (a
broadcast: a matmul's operand expanded over the other's columns) is never stored: that would multiply memory.
Nodes are decided from the roots down, so a node computed once is an anchor for the nodes it reads; a second look,
producers first, takes back a node that, with the nodes chosen under it as anchors, costs at most LOAD_LIKE times
its own bytes to compute (a layer norm's x - mean once the residual stream under it is stored).

Reductions follow the same idea elsewhere: a reduction read through an expand is its own kernel (schedule.py),
and a long reduction to few outputs is split in two kernels (split_reduce.py).

>>> from tg_tensor.engine.fusion_cost import worth_computing_once
>>> worth_computing_once(readers=2, in_bytes=8192, alus=1024, out_bytes=4096)  # a + b, two readers
False
>>> worth_computing_once(readers=8, in_bytes=30 * 4096, alus=30 * 1024, out_bytes=4096)  # 30 buffers summed
True
>>> worth_computing_once(readers=2, in_bytes=4100, alus=1024, out_bytes=4096)  # x + bias
False
>>> worth_computing_once(readers=5, in_bytes=4096, alus=83 * 1024, out_bytes=4096)  # a cat of 28 pieces
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tg_tensor.engine.split_reduce import compares_with_arange
from tg_uop import GroupOp, Ops, UOp
from tg_uop.helpers import prod

MAX_WALK = 1024  # nodes visited to find what a node reads; a node with a larger graph under it is not weighed
ALU_PER_BYTE = 8  # ALU operations that cost what a byte of memory traffic does (GPUs and CPUs: ~8-16 per byte)
# a node reading fewer inputs than this stays fused. The kernels reading a mask or a select of a few tensors (relu's
# and max-pool's backward in the MNIST step: 3 to 6 inputs) load most of those inputs anyway, so storing it only
# added work (on an H200: 280 steps/s with those stored, 330 fused); what the rule is for reads many (a residual
# stream's gradient: 12 to 30 buffers, a concatenation of gradients: 52)
MIN_INPUTS = 8
LOAD_LIKE = 1.25  # a node whose computation reads and computes at most this times its own bytes: cheap as a load


def worth_computing_once(readers: int, in_bytes: int, alus: int, out_bytes: int) -> bool:
    """Is computing a node once (a store, then a load per reader) cheaper than recomputing it in each reader?"""
    if readers < 2 or out_bytes > in_bytes:  # (a broadcast, or a node of constants: never stored)
        return False
    return (readers - 1) * (in_bytes + alus / ALU_PER_BYTE) > (readers + 1) * out_bytes


def _nbytes(n: UOp) -> int | None:
    shape = (n.arg[1],) if n.op is Ops.BUFFER else tuple(n.shape or ())
    if not all(isinstance(s, int) for s in shape):
        return None
    return int(prod(shape)) * n.dtype.itemsize


class FusionCost:
    """Finds the nodes of a graph (given by its roots) worth computing once; `resolve` maps a node to what
    stands for it now (a realized node to its BUFFER), `is_own` whether a node gets its own kernel anyway (CONTIGUOUS,
    ASSIGN, COPY, a collective, a source kernel, a node the scheduler forced), `memory` the memory a BUFFER node is a
    version of."""

    def __init__(
        self, resolve: Callable[[UOp], UOp], is_own: Callable[[UOp], bool], memory: Callable[[UOp], object]
    ) -> None:
        self.resolve, self.is_own, self.memory = resolve, is_own, memory
        self.anchors: set[UOp] = set()
        self.versioned: set[int] = set()  # ids of the memories the graph reads in more than one version

    def is_anchor(self, n: UOp) -> bool:
        return n in self.anchors or n.op is Ops.REDUCE_AXIS or self.is_own(n)

    def computed_once(self, roots: Iterable[UOp]) -> list[UOp]:
        """The elementwise nodes under `roots` that the rule gives a kernel of their own, consumers first."""
        roots = [self.resolve(r) for r in roots]
        self.anchors = set(roots)
        order = self._users_first(roots)
        versions: dict[int, set[UOp]] = {}  # the versions of each memory that are read (not an assign's target)
        for n in order:
            for b in (s for s in map(self.resolve, n.src[n.op is Ops.ASSIGN :]) if s.op is Ops.BUFFER):
                versions.setdefault(id(self.memory(b)), set()).add(b)
        self.versioned = {mem for mem, nodes in versions.items() if len(nodes) > 1}
        readers: dict[UOp, set[UOp]] = {}
        chosen: list[UOp] = []
        for n in order:
            mine = readers.get(n, set())
            if n.op in GroupOp.Elementwise and not self.is_anchor(n) and len(mine) >= 2 and self._costly(n, len(mine)):
                chosen.append(n)
                self.anchors.add(n)
            label = {n} if self.is_anchor(n) else mine
            for s in n.src:
                s = self.resolve(s)
                if s.op is not Ops.BUFFER:
                    readers.setdefault(s, set()).update(label)
        # a second look, producers first: a node was weighed before the nodes under it were decided, so the inputs
        # of a producer that is itself computed once counted as its own (a layer norm's x - mean read the ~8
        # buffers of the residual stream under it, which is stored too). A node that then reads about what it
        # holds (x - mean: one buffer of its size and a row statistic) is as cheap to compute as to load: it is
        # recomputed in its readers again
        for n in reversed(chosen):
            if self._load_like(n):
                self.anchors.discard(n)
        return [n for n in chosen if n in self.anchors]

    def _load_like(self, n: UOp) -> bool:
        """Does computing `n` (with the current anchors) read and compute at most LOAD_LIKE times its own bytes?"""
        work, out = self._work(n), _nbytes(n)
        if work is None or out is None:
            return False
        return work[0] + work[1] * (out // n.dtype.itemsize) / ALU_PER_BYTE <= LOAD_LIKE * out

    def _users_first(self, roots: list[UOp]) -> list[UOp]:
        """Every node under `roots` (stopping at buffers), each after all the nodes that read it."""
        order: list[UOp] = []
        seen: set[UOp] = set()
        for root in roots:
            stack: list[tuple[UOp, bool]] = [(root, False)]
            while stack:
                n, done = stack.pop()
                if done:
                    order.append(n)
                    continue
                if n in seen:
                    continue
                seen.add(n)
                stack.append((n, True))
                stack.extend((s, False) for s in map(self.resolve, n.src) if s not in seen and s.op is not Ops.BUFFER)
        return order[::-1]

    def _costly(self, n: UOp, readers: int) -> bool:
        out = _nbytes(n)
        if out is None or compares_with_arange(n):  # (a one-hot index mask folds into an indexed load: keep it)
            return False
        work = self._work(n)  # (None: too large a graph under it to weigh; it stays fused, as without this rule)
        if work is None or work[2] < MIN_INPUTS:
            return False
        return worth_computing_once(readers, work[0], work[1] * (out // n.dtype.itemsize), out)

    def _work(self, n: UOp) -> tuple[int, int, int] | None:
        """(bytes of the distinct buffers and anchors' outputs the computation of `n` reads, its ALU operations per
        element, how many such inputs); None past MAX_WALK nodes or for a symbolic shape."""
        total, alus, inputs, seen, stack = 0, 1, 0, {n}, list(n.src)
        elements = prod(n.shape or ())  # (each element of n reads at most one element of each buffer)
        while stack:
            s = self.resolve(stack.pop())
            if s in seen:
                continue
            seen.add(s)
            if len(seen) > MAX_WALK:
                return None
            if s.op is Ops.BUFFER and id(self.memory(s)) in self.versioned:
                # (a memory read in several versions, between in-place writes of this graph, as a random counter
                # read by each draw: stored once, such a node could pin its version between two writes)
                return None
            if s.op is Ops.BUFFER or self.is_anchor(s):
                if (b := _nbytes(s)) is None:
                    return None
                total += min(b, elements * s.dtype.itemsize)  # (a window of a larger buffer reads only the window)
                inputs += 1
            elif s.op in GroupOp.Elementwise or s.op in GroupOp.Movement or s.op is Ops.DETACH:
                alus += 1 if s.op in GroupOp.Elementwise else 2 if s.op is Ops.PAD else 0
                stack.extend(s.src)
        return total, alus, inputs
