"""Batched decode (tg_llm.batch.BatchDecoder, tg_llm.scheduler.BatchScheduler) on a small random model: sequences
decoded together get the logits they get alone in the batch, in any slot (to the last bits: ~1e-7 apart at most),
and the logits of the single-sequence model up to float rounding; the scheduler's answers equal the sequential ones."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest

from tg_llm import load_model
from tg_llm.batch import BatchDecoder
from tg_llm.generate import Session
from tg_llm.random_model import write_random_gguf
from tg_llm.scheduler import BatchScheduler


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    path: pathlib.Path = tmp_path_factory.mktemp("batch") / "tiny.gguf"
    write_random_gguf(path, qtype="Q4_1", context_length=64, n_layers=2)
    return Session(*load_model(path, "CPU"))


PROMPTS = [[5, 9, 13], [7, 7, 2, 30, 11], [40], [3, 1, 4, 1, 5, 9, 2, 6]]


def _run(decoder: BatchDecoder, slots: dict[int, int], steps: int) -> dict[int, np.ndarray]:
    """Greedy decode of PROMPTS[i] in slot s for each {s: i}; the logits rows of every step, per prompt index."""
    tokens, positions, rows = {}, {}, {i: [] for i in slots.values()}
    for s, i in slots.items():
        tokens[s], positions[s] = int(decoder.prefill(s, PROMPTS[i]).argmax()), len(PROMPTS[i])
    for _ in range(steps):
        logits = decoder.step(tokens, positions)
        for s, i in slots.items():
            rows[i].append(logits[s].copy())
            tokens[s], positions[s] = int(logits[s].argmax()), positions[s] + 1
    return {i: np.stack(r) for i, r in rows.items()}


def test_a_sequence_gets_the_same_logits_alone_or_together_in_any_slot(session: Session) -> None:
    decoder = BatchDecoder(session.model, 4)
    together = _run(decoder, {0: 0, 1: 1, 2: 2, 3: 3}, 6)
    for slot, i in ((0, 2), (3, 0), (1, 3)):
        alone = _run(decoder, {slot: i}, 6)[i]
        np.testing.assert_allclose(alone, together[i], rtol=0, atol=1e-6)
        assert (alone.argmax(-1) == together[i].argmax(-1)).all()


def test_batched_logits_match_the_single_sequence_model(session: Session) -> None:
    decoder, model = BatchDecoder(session.model, 2), session.model
    got = _run(decoder, {0: 1, 1: 3}, 4)
    for i in (1, 3):
        logits = model.forward(PROMPTS[i], 0, all_logits=False).numpy()[-1]
        want, pos = [], len(PROMPTS[i])
        for _ in range(4):
            logits = model.forward([int(logits.argmax())], pos).numpy()[0]
            want.append(logits)
            pos += 1
        np.testing.assert_allclose(got[i], np.stack(want), rtol=1e-4, atol=1e-4)


def test_scheduler_answers_equal_the_sequential_ones(session: Session) -> None:
    sched = BatchScheduler(session, slots=3).start()
    args = {"max_tokens": 8, "temperature": 0}
    try:
        alone = ["".join(p for p, _ in sched.submit(p, args)) for p in PROMPTS]
        jobs = [sched.submit(p, args) for p in PROMPTS]  # 4 requests, 3 slots: one waits for a free slot
        assert ["".join(p for p, _ in job) for job in jobs] == alone
        sampled = [sched.submit(PROMPTS[0], {"max_tokens": 6, "temperature": 0.9, "seed": 3}) for _ in range(2)]
        first, second = ("".join(p for p, _ in job) for job in sampled)
        assert first == second  # (the same seed: the same tokens, whichever slot)
    finally:
        sched.stop()


def test_bad_input_is_named(session: Session) -> None:
    decoder = BatchDecoder(session.model, 2)
    with pytest.raises(ValueError, match=r"slot 2 is not one of 0..1"):
        decoder.prefill(2, [1])
    with pytest.raises(ValueError, match=r"the prompt has 64 tokens; a slot holds 64"):
        decoder.prefill(0, [1] * 64)
    with pytest.raises(ValueError, match=r"64 cache rows do not fit a slot of 64"):
        decoder.take(0, 64)
    with pytest.raises(ValueError, match=r"slot -1 is not one of 0..1"):
        decoder.take(-1, 3)
    with pytest.raises(ValueError, match=r"slots=0 must be a positive int"):
        BatchDecoder(session.model, 0)
    with pytest.raises(ValueError, match=r"position 64 is outside"):
        decoder.step({0: 1}, {0: 64})
    with pytest.raises(ValueError, match=r"tokens for slots \[0\], positions for \[1\]"):
        decoder.step({0: 1}, {1: 3})
    sched = BatchScheduler(session, slots=2).start()
    try:  # an error reaches its request only; the next one is answered
        with pytest.raises(ValueError, match=r"max_tokens=0"):
            list(sched.submit([1, 2], {"max_tokens": 0}))
        assert len(list(sched.submit([1, 2], {"max_tokens": 2, "temperature": 0}))) >= 1
    finally:
        sched.stop()


def test_scheduler_prefills_only_what_a_prompt_does_not_share(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch scheduler prefills on the session's cache: a prompt that starts as the one before it (a chat
    template's system turn) computes only the rest, from that position, and its answer is the one it gets alone
    from an empty cache."""
    shared = [5, 9, 13, 2, 8, 21]
    prompts = [shared + [7, 1], shared + [30], shared + [7, 4, 4]]
    args = {"max_tokens": 6, "temperature": 0}
    alone = []
    for p in prompts:
        session.cached = []
        alone.append([c.tokens for _, c in session.generate(p, **args)][-1])
    model, starts = session.model, []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda toks, start, **kw: starts.append(start) or forward(toks, start, **kw))
    session.cached = []
    sched = BatchScheduler(session, slots=3).start()
    try:
        jobs = [sched.submit(p, args) for p in prompts]
        assert [[c.tokens for _, c in job][-1] for job in jobs] == alone
    finally:
        sched.stop()
    assert starts[:3] == [0, len(shared), len(shared)]  # (each against the prompt prefilled just before it)


def test_a_sequence_moved_to_another_slot_goes_on_as_before(session: Session) -> None:
    """BatchDecoder.move copies a sequence's cache rows to another slot: decoded there (a step of fewer rows), it
    gets the logits it gets where it was; moved on after each step (3 -> 2 -> 1 -> 0: the move's warm-up, capture
    and a replay, each at a longer length)."""
    decoder = BatchDecoder(session.model, 4, sizes=range(1, 5))
    stay = _run(decoder, {3: 1}, 5)[1]
    tokens, positions = {3: int(decoder.prefill(3, PROMPTS[1]).argmax())}, {3: len(PROMPTS[1])}
    moved = []
    for step in range(5):
        ((slot, token),) = tokens.items()
        if 1 <= step <= 3:
            decoder.move(slot, slot - 1, positions[slot])
            tokens, positions, slot = {slot - 1: token}, {slot - 1: positions[slot]}, slot - 1
        logits = decoder.step(tokens, positions)
        assert logits.shape[0] == slot + 1  # (the rows up to the slot)
        moved.append(logits[slot].copy())
        tokens[slot], positions[slot] = int(logits[slot].argmax()), positions[slot] + 1
    np.testing.assert_allclose(np.stack(moved), stay, rtol=0, atol=1e-6)
    assert (np.stack(moved).argmax(-1) == stay.argmax(-1)).all()
    with pytest.raises(ValueError, match=r"the source and destination slot are both 2"):
        decoder.move(2, 2, 3)
    with pytest.raises(ValueError, match=r"slot 4 is not one of 0..3"):
        decoder.move(4, 0, 3)


def test_scheduler_keeps_requests_in_the_lowest_slots(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step runs the rows up to the highest slot in use (a decoder of every size): when the request in slot 0 is
    done, the one in the highest slot moves down into it, and the steps after run two rows, not three; the answers
    are the sequential ones."""
    prompts, args, alone = _sequential_answers(session, (2, 7, 7))
    sched = BatchScheduler(session, slots=3, sizes=(1, 2, 3))
    steps = _record_steps(sched, monkeypatch)
    _assert_batched_answers(sched, prompts, args, alone)
    assert len(alone[0]) == 2 and len(alone[1]) == len(alone[2]) == 7, alone  # (no early end of turn)
    assert steps[0] == ([0, 1, 2], 3)
    assert steps[1:] == [([0, 1], 2)] * 5, steps


def test_steps_run_one_row_or_all_by_default(session: Session) -> None:
    """By default a step runs one row (slot 0 alone: a lone request on a batched server) or all the slots."""
    decoder = BatchDecoder(session.model, 4)
    assert decoder.step({0: 5}, {0: 1}).shape[0] == 1
    assert decoder.step({1: 5}, {1: 1}).shape[0] == 4
    assert BatchDecoder(session.model, 4, sizes=[2, 4]).step({0: 5}, {0: 1}).shape[0] == 2
    with pytest.raises(ValueError, match=r"sizes=\[1, 2\] must be row counts in 1..4, 4 among them"):
        BatchDecoder(session.model, 4, sizes=[1, 2])
    with pytest.raises(ValueError, match=r"sizes=\[0, 4\] must be row counts"):
        BatchDecoder(session.model, 4, sizes=[0, 4])


def test_scheduler_moves_a_request_only_to_save_rows(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the default sizes (1 or all rows) a request done early moves nothing while two others run (they need all
    the rows either way); the last one left moves to slot 0 and runs one row."""
    prompts, args, alone = _sequential_answers(session, (2, 4, 7))
    sched = BatchScheduler(session, slots=3)
    steps = _record_steps(sched, monkeypatch)
    moves: list[tuple[int, int]] = []
    move = sched.decoder.move
    monkeypatch.setattr(sched.decoder, "move", lambda src, dst, n: moves.append((src, dst)) or move(src, dst, n))
    _assert_batched_answers(sched, prompts, args, alone)
    assert [len(a) for a in alone] == [2, 4, 7], alone  # (no early end of turn)
    assert steps == [([0, 1, 2], 3)] + [([1, 2], 3)] * 2 + [([0], 1)] * 3, steps
    assert moves == [(2, 0)]


Answers = list[list[int]]


def _sequential_answers(session: Session, lengths: tuple[int, ...]) -> tuple[Answers, list[dict[str, Any]], Answers]:
    """Three prompts, greedy request arguments of `lengths` tokens, and each one's answer generated alone."""
    args = [{"max_tokens": n, "temperature": 0} for n in lengths]
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[3]]
    alone: Answers = []
    for p, a in zip(prompts, args):
        session.cached = []  # (the other tests' decoders prefilled on the model's cache)
        alone.append([c.tokens for _, c in session.generate(p, **a)][-1])
    session.cached = []
    return prompts, args, alone


def _record_steps(sched: BatchScheduler, monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[int], int]]:
    """Each decoder step's slots and rows, as the scheduler runs them."""
    steps: list[tuple[list[int], int]] = []
    step = sched.decoder.step

    def recorded(tokens: dict[int, int], positions: dict[int, int]) -> np.ndarray:
        logits = step(tokens, positions)
        steps.append((sorted(tokens), logits.shape[0]))
        return logits

    monkeypatch.setattr(sched.decoder, "step", recorded)
    return steps


def _assert_batched_answers(
    sched: BatchScheduler, prompts: Answers, args: list[dict[str, Any]], alone: Answers
) -> None:
    """The requests submitted together (queued before the worker starts: admitted together) answer as alone."""
    jobs = [sched.submit(p, a) for p, a in zip(prompts, args)]
    sched.start()
    try:
        assert [[c.tokens for _, c in job][-1] for job in jobs] == alone
    finally:
        sched.stop()
