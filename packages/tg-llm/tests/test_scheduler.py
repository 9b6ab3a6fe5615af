"""The server's generation queue: arrival order, cancellation, its bound, errors reaching their request only."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tg_llm import load_model
from tg_llm.generate import Completion, Session
from tg_llm.random_model import write_random_gguf
from tg_llm.scheduler import QueueFull, Scheduler


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    path = tmp_path_factory.mktemp("sched") / "tiny.gguf"
    write_random_gguf(path, qtype="F32", context_length=256, n_layers=1)
    return Session(*load_model(path, "CPU"))


def _text(session: Session, prompt: list[int], **args: object) -> str:
    return "".join(p for p, _ in session.generate(prompt, **args))  # type: ignore[arg-type]


def test_requests_get_what_they_get_alone(session: Session) -> None:
    prompts = [session.tokenizer.encode(t) for t in ("The quick", "Hello there", "Numbers 12")]
    alone = [_text(session, p, max_tokens=6, temperature=0) for p in prompts]
    sched = Scheduler(session).start()
    try:
        jobs = [sched.submit(p, {"max_tokens": 6, "temperature": 0}) for p in prompts]
        assert ["".join(piece for piece, _ in job) for job in jobs] == alone
    finally:
        sched.stop()


class Endless:
    """A session whose generations never end by themselves: a piece every 10 ms until closed (what a cancel does)."""

    def __init__(self) -> None:
        self.closed: list[int] = []  # pieces made by each generation when it was closed

    def generate(self, prompt: list[int], **args: object) -> Iterator[tuple[str, Completion]]:
        done = Completion()
        try:
            while True:
                time.sleep(0.01)
                done.tokens.append(1)
                yield "x", done
        finally:
            self.closed.append(len(done.tokens))


def test_cancel_stops_a_running_request_and_the_next_one_runs() -> None:
    fake = Endless()
    sched = Scheduler(fake).start()  # type: ignore[arg-type]
    try:
        job, after = sched.submit([1], {}), sched.submit([2], {})
        assert job.next(timeout=60) is not None
        job.cancel()
        assert len(list(job)) < 100  # it ends: nothing but a cancel could end it
        assert after.next(timeout=60) is not None  # the next request runs
        after.cancel()
        list(after)  # read to its end
    finally:
        sched.stop()
    assert len(fake.closed) == 2 and max(fake.closed) < 100


def test_cancelled_while_waiting_never_runs_and_the_bound_holds(session: Session) -> None:
    sched = Scheduler(session, max_waiting=2)  # not started: everything waits
    prompt = session.tokenizer.encode("Hi")
    a = sched.submit(prompt, {"max_tokens": 2})
    sched.submit(prompt, {"max_tokens": 2})
    with pytest.raises(QueueFull, match="2 requests waiting"):
        sched.submit(prompt, {"max_tokens": 2})
    a.cancel()
    sched.start()
    try:
        assert list(a) == []  # dropped without running
    finally:
        sched.stop()


def test_an_error_goes_to_its_request_only(session: Session) -> None:
    sched = Scheduler(session).start()
    try:
        too_long = sched.submit(list(range(300)), {"max_tokens": 2})  # over the 256-token context
        fine = sched.submit(session.tokenizer.encode("Hi"), {"max_tokens": 2, "temperature": 0})
        with pytest.raises(ValueError, match="the prompt has 300 tokens; the context holds 256"):
            list(too_long)
        assert list(fine)[-1][1].finish_reason in ("stop", "length")
    finally:
        sched.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        sched.submit([1], {})
    with pytest.raises(ValueError, match="max_running=2: the model decodes one sequence at a time"):
        Scheduler(session, max_running=2)
