"""The interactive chat as a person uses it, in a subprocess: Ctrl-C (SIGINT) stops an answer and keeps the
conversation, Ctrl-C at the prompt leaves without a traceback, an empty line is not a message."""

from __future__ import annotations

import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from tg_llm import cli
from tg_llm.random_model import write_random_gguf


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    p = tmp_path_factory.mktemp("cli") / "tiny.gguf"
    write_random_gguf(p, qtype="F32", context_length=1024, n_layers=1)
    return p


class Chat:
    """`python -m tg_llm` in a subprocess, its stdout and stderr read by threads as they come."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "tg_llm", "--device", "CPU", "--verbose", *args]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.out: queue.Queue[str] = queue.Queue()
        self.err: queue.Queue[str] = queue.Queue()
        self.seen = {"out": "", "err": ""}
        for stream, q in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, q), daemon=True).start()

    @staticmethod
    def _pump(stream: object, q: queue.Queue[str]) -> None:
        while ch := stream.read(1):  # type: ignore[attr-defined]
            q.put(ch)

    def wait_for(self, which: str, text: str, timeout: float = 120) -> str:
        """Read `which` ("out"/"err") until everything read so far holds `text` once more than before."""
        q = self.out if which == "out" else self.err
        want = self.seen[which].count(text) + 1
        end = time.monotonic() + timeout
        read = ""
        while (self.seen[which] + read).count(text) < want:
            try:
                read += q.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {text!r} on std{which} in {timeout} s; got {read!r}") from None
        self.seen[which] += read
        return read

    def wait_prompt(self, timeout: float = 120) -> str:
        """Read stdout until it ends with the prompt "> " and nothing more comes for 0.5 s (the CLI waits)."""
        end, read = time.monotonic() + timeout, ""
        while True:
            try:
                read += self.out.get(timeout=0.5)
            except queue.Empty:
                if (self.seen["out"] + read).endswith("> "):
                    self.seen["out"] += read
                    return read
                if time.monotonic() > end:
                    raise AssertionError(f"no prompt on stdout in {timeout} s; got {read!r}") from None

    def read_some(self, timeout: float = 120) -> str:
        """The next character of stdout."""
        ch = self.out.get(timeout=timeout)
        self.seen["out"] += ch
        return ch

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> tuple[int, str]:
        """Wait for the exit; the status and all of stderr."""
        code = self.proc.wait(timeout=60)
        time.sleep(0.2)
        while not self.err.empty():
            self.seen["err"] += self.err.get()
        return code, self.seen["err"]


def test_ctrl_c_stops_the_answer_and_keeps_the_conversation(path: pathlib.Path) -> None:
    chat = Chat("--model", str(path), "--temperature", "0.8", "--seed", "1", "--max-tokens", "900")
    try:
        chat.wait_prompt()
        chat.send("Tell me a long story")
        chat.read_some()  # the answer has started streaming
        chat.proc.send_signal(signal.SIGINT)
        stats = chat.wait_for("err", "]\n")
        chat.wait_prompt()  # back at the prompt
        assert "(stopped by Ctrl-C)" in stats and "Traceback" not in chat.seen["err"], stats
        first_prompt = int(stats.split("[prompt ")[1].split(" tokens")[0])
        chat.send("")  # an empty line is not sent: no answer, just the prompt again
        chat.wait_prompt()
        chat.send("And then?")
        stats = chat.wait_for("err", "]\n")
        chat.wait_prompt()
        # the second prompt holds the first message and the stopped answer: longer, and reusing the cache
        second_prompt, reused = (int(x) for x in stats.split("[prompt ")[1].split(" reused")[0].split(" tokens ("))
        assert second_prompt > first_prompt + 4 and reused >= first_prompt, stats
        chat.proc.send_signal(signal.SIGINT)  # at the prompt: leave
        code, err = chat.close()
    finally:
        chat.proc.kill()
    assert code == 0 and "Traceback" not in err and err.count("[prompt ") == 2, err


def test_ctrl_c_while_loading_exits_quietly(
    path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during the load (here: raised by it) is exit status 130 and one line, not a traceback."""

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "load_model", interrupted)
    assert cli.main(["--model", str(path), "--prompt", "hi"]) == 130
    assert capsys.readouterr().err == "\ntg.llm: interrupted\n"
