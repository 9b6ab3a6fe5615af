"""Batched decode: several sequences advanced by one token each in one step, each at its own position.

A `BatchDecoder` gives a model `slots` KV-cache rows of its own (tg_nn.models.kv_cache.KVCache with batch = slots,
each row the model's context long). A sequence is prefilled alone, through the model's own prefill and cache
(`prefill`: from position 0; tg_llm.scheduler.BatchScheduler prefills through its session instead, which skips the
start a prompt shares with the one before it), and its cache rows are then copied into its slot (`take`).
`step(tokens, positions)` runs one decode step for the slots given at once: the products with the weights take all
the rows together (each weight block, most of a step's memory traffic, is read and unpacked once for the batch), each
row's keys and values are written at its own position of its own slot, and its attention reads that slot up to that
position (tg_nn.models.decode_attention). A step runs rows 0..r-1 for r the smallest of `sizes` (1 and `slots` by
default, one TinyJit capture each) above the highest slot given: a slot below r that no sequence holds runs too
(token 0 at position 0) and its logits are ignored, so tg_llm.scheduler.BatchScheduler keeps its sequences in the
lowest slots (`move`: a sequence's cache rows copied to a lower slot when the one there is done).

Every row of a step is computed by the same kernels whatever the other rows hold and however many there are, and
each kernel computes a row from that row's inputs (the quantized products by the same operations in any row and any
number of rows, tested bit for bit): a sequence gets the same logits alone or beside seven others, in any slot
(tests/test_batch.py: equal, or ~1e-7 apart at one step out of six: a kernel's first run in a process can differ
from its later ones by that much, with any model), so greedy requests get the tokens they get one after another.

>>> decoder = BatchDecoder(model, slots=8)                          # doctest: +SKIP
>>> first = decoder.prefill(0, prompt_ids)                        # doctest: +SKIP
>>> logits = decoder.step({0: int(first.argmax())}, {0: len(prompt_ids)})  # (1, vocab)   # doctest: +SKIP
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from tg_llm.model import Llama
from tg_llm.weights import linear
from tg_nn.models.kv_cache import KVCache
from tg_tensor import Tensor, TinyJit
from tg_uop import UOp, dtypes

__all__ = ["BatchDecoder"]


class BatchDecoder:
    """`slots` sequences of `model` decoded together (see the module doc).

    `sizes`: the row counts a step runs (one TinyJit capture each, made on its first two runs): a step of the slots
    up to s runs the smallest of them above s. By default 1 and `slots`: one sequence alone runs one row, more run
    all of them. Each size's first two runs schedule the whole step in Python (SmolLM2, 8 rows: ~3.5 s of CPU each,
    2 rows ~1.5 s), so more sizes (the tail of a burst, 5 sequences left of 8, in a step of 5 rows: ~0.75x the
    time of 8) pay only on a server that runs long enough for them (~400 steps of 5 rows to win back a capture)."""

    def __init__(self, model: Llama, slots: int, sizes: Sequence[int] | None = None) -> None:
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
            raise ValueError(f"BatchDecoder: slots={slots!r} must be a positive int")
        if model.devices:
            raise ValueError("BatchDecoder: a model split over devices decodes one sequence at a time")
        cfg = model.cfg
        self.model, self.slots, self.context = model, slots, cfg.context_length
        self.caches = [
            KVCache(slots, cfg.n_kv_heads, cfg.context_length, cfg.head_dim, model.device, model.dtype)
            for _ in model.blocks
        ]
        # the row counts a step runs (see `sizes` in the class doc): each row's kernels do the same operations in a
        # step of any size (the quantized products' tiles, the norms, the attention; tests/test_batch.py), so a
        # sequence's logits do not depend on how many run beside it
        self.sizes = sorted({1, slots} if sizes is None else set(sizes))
        if any(not isinstance(r, int) or not 1 <= r <= slots for r in self.sizes) or slots not in self.sizes:
            raise ValueError(f"BatchDecoder: sizes={sizes!r} must be row counts in 1..{slots}, {slots} among them")
        self._inputs = {
            r: tuple(Tensor.zeros(r, dtype=dtypes.int32, device=model.device).contiguous().realize() for _ in "tp")
            for r in self.sizes
        }
        self._steps = {r: TinyJit(self._forward) for r in self.sizes}
        self._copies: dict[int, TinyJit[None]] = {}  # by the number of rows copied
        self._move = TinyJit(self._move_rows)
        for _ in range(2 if slots > 1 else 0):  # (its warm-up and capture now: the first moves of a burst replay)
            self.move(1, 0, 1)  # (no sequence holds a slot yet)

    def prefill(self, slot: int, prompt: list[int]) -> np.ndarray:
        """Run `prompt` (positions 0..len-1) into `slot`; the logits (vocab,) after its last token."""
        self._check_slot(slot)
        if not prompt:
            raise ValueError("BatchDecoder: the prompt is empty")
        if len(prompt) >= self.context:
            raise ValueError(
                f"BatchDecoder: the prompt has {len(prompt)} tokens; a slot holds {self.context} (prompt + answer)"
            )
        logits: np.ndarray = self.model.forward(prompt, 0, all_logits=False).numpy()[-1]
        self.take(slot, len(prompt))
        return logits

    def take(self, slot: int, length: int) -> None:
        """Copy the model's own cache rows 0..length-1 (a prompt just prefilled there) into `slot`."""
        self._check_slot(slot)
        rows = self._rows(length)
        slot_var = UOp.variable("slot", 0, self.slots - 1).bind(slot)
        if rows not in self._copies:
            self._copies[rows] = TinyJit(functools.partial(self._copy_rows, rows=rows))
        self.model._run(self._copies[rows], slot_var)

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy cache rows 0..length-1 of slot `src` into slot `dst` (a sequence moved to a lower slot, so that
        steps run fewer rows once the sequences above it are done). One TinyJit capture serves every length (a bound
        Variable): the slot a sequence leaves and the length it has reached vary from one move to the next."""
        self._check_slot(src)
        self._check_slot(dst)
        if src == dst:
            raise ValueError(f"BatchDecoder.move: the source and destination slot are both {src}")
        if not 0 < length < self.context:
            raise ValueError(f"BatchDecoder: {length} cache rows do not fit a slot of {self.context}")
        bound = [UOp.variable(n, 0, self.slots - 1).bind(v) for n, v in (("src", src), ("dst", dst))]
        self.model._run(self._move, *bound, UOp.variable("rows", 1, self.context - 1).bind(length))

    def _rows(self, length: int) -> int:
        """The cache rows a copy of `length` positions moves: a power of two (a few lengths: few kernels)."""
        if not 0 < length < self.context:
            raise ValueError(f"BatchDecoder: {length} cache rows do not fit a slot of {self.context}")
        return min(self.context, max(8, 1 << (length - 1).bit_length()))

    def _copy_rows(self, slot: UOp, rows: int) -> None:
        """Copy the model's cache rows 0..rows-1 into `slot` of the batched caches (what TinyJit captures)."""
        for mine, scratch in zip(self.caches, self.model.caches):
            mine.keys[slot : slot + 1, :, :rows].assign(scratch.keys[:, :, :rows])
            mine.values[slot : slot + 1, :, :, :rows].assign(scratch.values[:, :, :, :rows])
        Tensor.realize(*[c.keys for c in self.caches], *[c.values for c in self.caches])

    def _move_rows(self, src: UOp, dst: UOp, rows: UOp) -> None:
        """Copy rows 0..rows-1 of slot `src` into slot `dst` of the batched caches (what TinyJit captures)."""
        for c in self.caches:
            # (through a copy: the scheduler cannot tell that two slots of one buffer never overlap)
            c.keys[dst : dst + 1, :, :rows].assign(c.keys[src : src + 1, :, :rows].contiguous())
            c.values[dst : dst + 1, :, :, :rows].assign(c.values[src : src + 1, :, :, :rows].contiguous())
        Tensor.realize(*[c.keys for c in self.caches], *[c.values for c in self.caches])

    def step(self, tokens: dict[int, int], positions: dict[int, int]) -> np.ndarray:
        """Logits (rows, vocab) after one token per slot: `tokens[s]` at `positions[s]` for each slot s given. The step
        runs rows 0..rows-1, rows the smallest of `sizes` above the highest slot given (the slots below it not given
        run token 0 at position 0, and their rows mean nothing)."""
        if set(tokens) != set(positions):
            raise ValueError(f"BatchDecoder.step: tokens for slots {sorted(tokens)}, positions for {sorted(positions)}")
        for s in tokens:
            self._check_slot(s)
        rows = next(r for r in self.sizes if r > max(tokens, default=0))
        tok = np.zeros(rows, np.int32)
        pos = np.zeros(rows, np.int32)
        for s, t in tokens.items():
            if not 0 <= t < self.model.cfg.vocab_size:
                raise ValueError(f"BatchDecoder.step: token {t!r} is not an id in 0..{self.model.cfg.vocab_size - 1}")
            if not 0 <= positions[s] < self.context:
                raise ValueError(f"BatchDecoder.step: position {positions[s]} is outside the slot's {self.context}")
            tok[s], pos[s] = t, positions[s]
        tok_in, pos_in = self._inputs[rows]
        tok_in.copyin(tok.data)
        pos_in.copyin(pos.data)
        starts = [UOp.variable(f"pos{s}", 0, self.context - 1).bind(int(p)) for s, p in enumerate(pos)]
        out: np.ndarray = self.model._run(self._steps[rows], tok_in, pos_in, *starts).numpy()
        return out

    def _forward(self, tokens: Tensor, positions: Tensor, *starts: UOp) -> Tensor:
        """The batched step of the first len(tokens) slots (what TinyJit captures): their logits, the caches
        written."""
        model = self.model
        x = model.embed_tokens(tokens)
        angles = positions.cast(dtypes.float32).reshape(-1, 1) * model.inv_freq.reshape(1, -1)
        cos, sin = angles.cos(), angles.sin()
        for block, cache in zip(model.blocks, self.caches):
            x = block.batched(x, cache, list(starts), positions, cos, sin)
        norm = (model.output_norm, model.cfg.norm_eps)
        logits = linear(x, model.output, model.int8_activations, norm=norm).cast(dtypes.float32)
        Tensor.realize(logits, *[c.keys for c in self.caches], *[c.values for c in self.caches])
        return logits

    def _check_slot(self, slot: int) -> None:
        if not isinstance(slot, int) or not 0 <= slot < self.slots:
            raise ValueError(f"BatchDecoder: slot {slot!r} is not one of 0..{self.slots - 1}")
