"""The server's generation queue: one worker thread owns the model and runs the requests handed to it.

Handler threads `submit` a request and read its pieces as the worker produces them; a request whose client
went away is cancelled and the worker drops it (waiting) or stops it at its next token (running). The queue
has a bound: past it `submit` raises `QueueFull` (the server answers 503), so a burst of clients cannot pile up
unbounded work.

`Scheduler` runs requests one at a time, in arrival order, on the session's model and its one KV cache.
`BatchScheduler` runs up to `slots` of them together (tg_llm.batch.BatchDecoder): a request admitted to a free slot
is prefilled alone on the session's cache (Session.prefill: the start it shares with the prompt before it, the chat
template's system turn, is not computed again) and its rows copied into the slot, then every step decodes one token
of each running request in one batched step, each at its own position in its own cache slot. Each step of the worker
is `_admit` (take waiting requests while there is room) then `_step` (advance every running request by one piece).
A step runs the rows up to the highest slot in use (rounded up to a size the decoder has), so the requests are kept in
the lowest slots: one admitted takes the lowest free slot, and when one finishes below others, the highest moves down
into its slot (`_compact`).

>>> sched = Scheduler(session).start()                              # doctest: +SKIP
>>> "".join(p for p, _ in sched.submit(prompt, {"max_tokens": 8}))  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tg_llm.batch import BatchDecoder
from tg_llm.generate import Completion, Decoding, Session

__all__ = ["BatchScheduler", "QueueFull", "Request", "Scheduler"]


class QueueFull(RuntimeError):
    """`Scheduler.submit` with the queue at its bound."""


_END = object()  # marks the end of a request's pieces


@dataclass
class Request:
    """One generation: its pieces arrive in `pieces` (iterate the request to read them; an error the worker
    met is raised there). `cancel()` from the reading side stops it."""

    prompt: list[int]
    args: dict[str, Any]
    pieces: queue.Queue[Any] = field(default_factory=queue.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancelled.set()

    def next(self, timeout: float | None = None) -> tuple[str, Completion] | None:
        """The next (piece, completion so far); None at the end. Raises queue.Empty after `timeout` seconds,
        or the worker's error."""
        item = self.pieces.get(timeout=timeout)
        if item is _END:
            self.pieces.put(_END)  # later reads see the end too
            return None
        if isinstance(item, BaseException):
            raise item
        piece: tuple[str, Completion] = item
        return piece

    def __iter__(self) -> Iterator[tuple[str, Completion]]:
        while (item := self.next()) is not None:
            yield item


class Scheduler:
    """Runs submitted requests on `session` in a worker thread; at most `max_waiting` wait for their turn."""

    def __init__(self, session: Session, max_waiting: int = 64, max_running: int = 1) -> None:
        if max_running != 1 and type(self) is Scheduler:
            raise ValueError(
                f"Scheduler: max_running={max_running}: the model decodes one sequence at a time (BatchScheduler:"
                " several)"
            )
        self.session, self.max_waiting, self.max_running = session, max_waiting, max_running
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: dict[int, Any] = {}  # (request, its generator) by id; BatchScheduler: _Slot by slot
        self.wake = threading.Condition()
        self.stopping = False
        self.thread: threading.Thread | None = None

    def start(self) -> Scheduler:
        self.thread = threading.Thread(target=self._run, name="tg-llm-scheduler", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.wake:
            self.stopping = True
            self.wake.notify()
        if self.thread is not None:
            self.thread.join()

    def submit(self, prompt: list[int], args: dict[str, Any]) -> Request:
        """Queue a generation of `session.generate(prompt, **args)`; raises QueueFull past the bound."""
        req = Request(prompt, args)
        with self.wake:
            if self.stopping:
                raise RuntimeError("Scheduler: stopped")
            if len(self.waiting) >= self.max_waiting:
                raise QueueFull(f"the server has {len(self.waiting)} requests waiting; try again later")
            self.waiting.append(req)
            self.wake.notify()
        return req

    def _run(self) -> None:
        while True:
            with self.wake:
                while not self.waiting and not self.running and not self.stopping:
                    self.wake.wait()
                if self.stopping:
                    left = [req for req, _ in self.running.values()] + list(self.waiting)
                    break
                self._admit()
            self._step()
        self._close_running()
        for req in left:
            req.pieces.put(RuntimeError("the server is stopping"))

    def _close_running(self) -> None:
        for _, gen in self.running.values():
            gen.close()

    def _admissible(self) -> Iterator[Request]:
        """Waiting requests, oldest first, while there is room to run them (cancelled ones are ended and dropped)."""
        while self.waiting and len(self.running) < self.max_running:
            req = self.waiting.popleft()
            if req.cancelled.is_set():
                req.pieces.put(_END)
                continue
            yield req

    def _admit(self) -> None:
        """Move waiting requests to running while there is room."""
        for req in self._admissible():
            self.running[id(req)] = (req, self.session.generate(req.prompt, **req.args))

    def _step(self) -> None:
        """Advance each running request by one piece; finished, failed and cancelled ones leave."""
        for key, (req, gen) in list(self.running.items()):
            item: tuple[str, Completion] | Exception | None
            try:
                item = None if req.cancelled.is_set() else next(gen, None)
            except Exception as e:  # the request's error goes to its reader; the worker keeps serving
                item = e
            if item is None or isinstance(item, Exception):
                gen.close()
                del self.running[key]
                req.pieces.put(_END if item is None else item)
                continue
            req.pieces.put(item)


@dataclass
class _Slot:
    """A request running in a BatchScheduler slot: its text state, the token to feed next and its position."""

    req: Request
    state: Decoding
    token: int
    pos: int
    t0: float


class BatchScheduler(Scheduler):
    """Runs up to `slots` requests together on `session`'s model: one batched decode step advances each running
    request by a token (tg_llm.batch.BatchDecoder, its own `slots` KV-cache rows of the model's context each; `sizes`:
    the row counts its steps run, BatchDecoder's)."""

    def __init__(self, session: Session, slots: int, max_waiting: int = 64, sizes: Sequence[int] | None = None) -> None:
        super().__init__(session, max_waiting, max_running=slots)
        self.decoder = BatchDecoder(session.model, slots, sizes)
        self.running: dict[int, _Slot] = {}

    def _close_running(self) -> None:
        self.running.clear()

    def _admit(self) -> None:
        """Prefill waiting requests into free slots (the lowest first) and give them their first token."""
        for req in self._admissible():
            slot = min(set(range(self.max_running)) - set(self.running))
            try:
                args = {k: v for k, v in req.args.items() if k != "max_tokens"}
                state = Decoding(self.session.tokenizer, len(req.prompt), req.args.get("max_tokens", 256), **args)
                t0 = time.perf_counter()
                # (on the session's cache: the part of the prompt it holds already, the chat template's system
                # turn say, is not computed again; then the prompt's rows are copied into the slot)
                logits = self.session.prefill(req.prompt)
                self.decoder.take(slot, len(req.prompt))
                state.out.prefill_s = time.perf_counter() - t0
                running = _Slot(req, state, state.sample(logits), len(req.prompt), time.perf_counter())
            except Exception as e:  # the request's error goes to its reader; the worker keeps serving
                req.pieces.put(e)
                continue
            self.running[slot] = running
            self._advance(slot, running)

    def _compact(self) -> None:
        """Move the requests of the highest slots into free lower ones (their cache rows copied) when that lets the
        steps run fewer rows: a step runs the rows up to the highest slot in use, rounded up to one of the decoder's
        sizes, so one request done early below the others would otherwise keep costing rows (no move that saves
        none: by default, 1 or all rows, only the last request left moves to slot 0)."""
        if not self.running:
            return
        fit = next(r for r in self.decoder.sizes if r >= len(self.running))  # the fewest rows they could run in
        if next(r for r in self.decoder.sizes if r > max(self.running)) == fit:
            return
        for top in sorted((s for s in self.running if s >= fit), reverse=True):
            free = min(s for s in range(fit) if s not in self.running)
            run = self.running.pop(top)
            try:
                self.decoder.move(top, free, run.pos)
            except Exception as e:  # the request's error goes to its reader; the worker keeps serving
                run.req.pieces.put(e)
                continue
            self.running[free] = run

    def _advance(self, slot: int, run: _Slot) -> None:
        """Hand the slot's new token to its request; it leaves when it is done, cancelled or at the context's end."""
        for piece in run.state.push(run.token):
            run.req.pieces.put(piece)
        if run.state.done or run.req.cancelled.is_set() or run.pos >= self.decoder.context:
            del self.running[slot]
            run.state.out.decode_s = time.perf_counter() - run.t0
            for piece in run.state.finish():
                run.req.pieces.put(piece)
            run.req.pieces.put(_END)

    def _step(self) -> None:
        """One batched decode step for every running request."""
        for slot, run in list(self.running.items()):
            if run.req.cancelled.is_set():
                del self.running[slot]
                run.req.pieces.put(_END)
        self._compact()
        if not self.running:
            return
        tokens = {slot: run.token for slot, run in self.running.items()}
        positions = {slot: run.pos for slot, run in self.running.items()}
        try:
            logits: np.ndarray = self.decoder.step(tokens, positions)
        except Exception as e:  # (a broken step fails every request in it; the worker keeps serving)
            for slot, run in list(self.running.items()):
                del self.running[slot]
                run.req.pieces.put(e)
            return
        for slot, run in list(self.running.items()):
            run.token, run.pos = run.state.sample(logits[slot]), run.pos + 1
            self._advance(slot, run)
