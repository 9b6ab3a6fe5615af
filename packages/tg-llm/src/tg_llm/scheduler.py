"""The server's generation queue: one worker thread owns the model and runs the requests handed to it.

Handler threads `submit` a request and read its pieces as the worker produces them; a request whose client
went away is cancelled and the worker drops it (waiting) or stops it at its next token (running). The queue
has a bound: past it `submit` raises `QueueFull` (the server answers 503), so a burst of clients cannot pile up
unbounded work.

Requests run one at a time, in arrival order: the model has one KV cache, for one sequence. Each step of
the worker is `_admit` (take waiting requests while there is room) then `_step` (advance every running
request by one piece); with a model that decodes several sequences per step, `max_running` above 1 and a
`_step` that runs one batched decode for all of them are what change.

>>> sched = Scheduler(session).start()                              # doctest: +SKIP
>>> "".join(p for p, _ in sched.submit(prompt, {"max_tokens": 8}))  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from tg_llm.generate import Completion, Session

__all__ = ["QueueFull", "Request", "Scheduler"]


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
        if max_running != 1:
            raise ValueError(f"Scheduler: max_running={max_running}: the model decodes one sequence at a time")
        self.session, self.max_waiting, self.max_running = session, max_waiting, max_running
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: dict[int, tuple[Request, Generator[tuple[str, Completion]]]] = {}
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
        for _, gen in self.running.values():
            gen.close()
        for req in left:
            req.pieces.put(RuntimeError("the server is stopping"))

    def _admit(self) -> None:
        """Move waiting requests to running while there is room (cancelled ones are dropped)."""
        while self.waiting and len(self.running) < self.max_running:
            req = self.waiting.popleft()
            if req.cancelled.is_set():
                req.pieces.put(_END)
                continue
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
