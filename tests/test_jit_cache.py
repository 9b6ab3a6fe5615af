"""TinyJit(cache=path): a capture saved by one process is replayed by the next without capturing again, and a
file that does not fit (another tg version or device, other shapes or state, a damaged file) is refused with
a warning naming the value, captured again (right results) and rewritten."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tg import Tensor, TinyJit
from tg_tensor.jit import JitCacheWarning, JitError
from tg_tensor.jit_file import JitCacheError, check_header, load, write_file
from tg_uop import Variable

PROGRAM = Path(__file__).with_name("jit_cache_program.py")
STEPS = 4


def run(path: Path | str, *args: str, cachedb: Path, device: str = "CPU", steps: int = STEPS) -> dict[str, Any]:
    """Run jit_cache_program.py in a new process; its JSON result."""
    env = {**os.environ, "DEV": device, "CACHEDB": str(cachedb)}
    cmd = [sys.executable, str(PROGRAM), str(path), str(steps), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


def same_training(got: dict[str, Any], want_losses: list[float], want_weights: list[Any]) -> None:
    np.testing.assert_allclose(got["losses"], want_losses, rtol=1e-5, atol=1e-6)
    for g, w in zip(got["weights"], want_weights, strict=True):
        np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Path]:
    """A file saved by a first process (capturing), that process's result, and the program cache it used."""
    folder = tmp_path_factory.mktemp("jit_cache")
    path, cachedb = folder / "step.tgjit", folder / "cache.db"
    first = run(path, "--ref", cachedb=cachedb)
    return path, first, cachedb


def test_first_process_captures_and_saves(saved: tuple[Path, dict[str, Any], Path]) -> None:
    path, first, _ = saved
    assert not first["loaded"] and first["warnings"] == []
    assert first["counts"]["schedule"] > 0  # it captured
    assert path.exists()
    same_training(first, first["ref_losses"], first["ref_weights"])


def test_second_process_replays_without_capturing(saved: tuple[Path, dict[str, Any], Path], tmp_path: Path) -> None:
    """Several training steps (AdamW's state, the weights and the dropout stream mutate) replayed from the file
    give the numbers of a fresh capture, and nothing is scheduled or lowered inside the jitted calls."""
    path, first, cachedb = saved
    second = run(path, cachedb=cachedb)
    assert second["loaded"], second["warnings"]
    assert second["warnings"] == []
    assert second["counts"] == {"schedule": 0, "lower": 0}
    same_training(second, first["ref_losses"], first["ref_weights"])
    assert len(set(second["losses"])) == STEPS  # (the steps trained: every loss differs)


def test_second_process_replays_on_each_device(device: str, tmp_path: Path) -> None:
    """The device matrix (the PYTHON device's programs are its UOps, pickled in the program's source)."""
    if device == "CPU":
        pytest.skip("CPU: test_second_process_replays_without_capturing")
    path, cachedb = tmp_path / "step.tgjit", tmp_path / "cache.db"
    first = run(path, "--hidden", "4", "--batch", "2", cachedb=cachedb, device=device, steps=3)
    second = run(path, "--hidden", "4", "--batch", "2", "--ref", cachedb=cachedb, device=device, steps=3)
    assert not first["loaded"] and second["loaded"] and second["counts"] == {"schedule": 0, "lower": 0}
    same_training(second, first["losses"], first["weights"])
    same_training(second, second["ref_losses"], second["ref_weights"])


def _spoil_bytes(how: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def spoil(path: Path) -> None:
        path.write_bytes(how(path.read_bytes()))

    return spoil


def _spoil_payload(change: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Path], None]:
    def spoil(path: Path) -> None:
        payload = load(str(path))
        payload.update(change(payload))
        write_file(str(path), payload)  # (a valid checksum: only the changed value is wrong)

    return spoil


def _other_device(payload: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {dev: ident + "-another-arch" for dev, ident in payload["devices"].items()}}


BAD_FILES: dict[str, tuple[Callable[[Path], None] | None, list[str], str]] = {
    # case: (how the good file is spoiled, other program arguments, what the warning must name)
    "corrupted": (_spoil_bytes(lambda d: d[:-40] + bytes(b ^ 1 for b in d[-40:])), [], "checksum mismatch"),
    "truncated": (_spoil_bytes(lambda d: d[: len(d) // 2]), [], "truncated or corrupted"),
    "not_a_file": (_spoil_bytes(lambda d: b"PK\x03\x04 zip"), [], "not a TinyJit file"),
    "tg_version": (_spoil_payload(lambda p: {"tg_version": "0.0.1"}), [], "tg version: the file has '0.0.1'"),
    "tg_build": (_spoil_payload(lambda p: {"tg_sources": "0" * 64}), [], "tg source fingerprint"),
    "device": (_spoil_payload(_other_device), [], "device CPU (renderer, compiler): the file has"),
    "shapes": (None, ["--batch", "6"], "tensor input 0 (shape, dtype, device): the file has [[5, 4]"),
    "state_shapes": (None, ["--hidden", "9"], "(buffer size, dtype, device): the file has [67"),
    "state_missing": (None, ["--state", "model"], "is not in `state` here"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_is_refused_and_recaptured(
    case: str, saved: tuple[Path, dict[str, Any], Path], tmp_path: Path
) -> None:
    """The warning names the value and what was expected; the run captures again, trains as a run without a
    file does, and rewrites the file."""
    good, _, cachedb = saved
    spoil, args, message = BAD_FILES[case]
    path = tmp_path / "step.tgjit"
    path.write_bytes(good.read_bytes())
    if spoil is not None:
        spoil(path)
    bad = path.read_bytes()
    got = run(path, *args, "--ref", cachedb=cachedb)
    assert not got["loaded"]
    assert "not replaying the saved recording" in got["warnings"][0]
    assert message in got["warnings"][0], got["warnings"][0]
    same_training(got, got["ref_losses"], got["ref_weights"])
    if case == "state_missing":  # the new capture cannot be saved either (the optimizer's state is not named)
        assert len(got["warnings"]) == 2 and "lives across calls" in got["warnings"][1]
        assert path.read_bytes() == bad
        return
    assert len(got["warnings"]) == 1
    assert path.read_bytes() != bad  # rewritten with this run's capture
    check_header(path.read_bytes())


# in this process: what save refuses, and the argument checks


def test_save_before_capture_and_bad_state_argument(tmp_path: Path) -> None:
    f = TinyJit(lambda x: x + 1)
    with pytest.raises(JitError, match="nothing recorded yet"):
        f.save(tmp_path / "f.tgjit")
    with pytest.raises(TypeError, match="state must map names to Tensors"):
        TinyJit(lambda x: x, state=[Tensor([1.0])])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got 'w': ndarray"):
        TinyJit(lambda x: x, state={"w": np.ones(2)})  # type: ignore[dict-item]


def test_unnamed_state_is_not_saved(tmp_path: Path) -> None:
    """A buffer the function updates that `state` does not name cannot be bound elsewhere: no file, a warning,
    and the jitted function still runs right."""
    w = Tensor([1.0, 2.0]).realize()

    def step(x: Tensor) -> Tensor:
        w.assign(w + x)
        return (w * 2).contiguous().realize()

    path = tmp_path / "step.tgjit"
    f = TinyJit(step, cache=path, state={})
    with pytest.warns(JitCacheWarning, match="2 float on [A-Z]+.*lives across calls but no tensor of `state` holds"):
        outs = [f(Tensor([1.0, 1.0])).tolist() for _ in range(3)]
    assert outs == [[4.0, 6.0], [6.0, 8.0], [8.0, 10.0]]
    assert not path.exists()
    with pytest.raises(JitCacheError, match="lives across calls"):
        f.save(path)


def test_state_bound_by_name_in_a_new_jit(tmp_path: Path) -> None:
    """A second TinyJit of the same function loads the file, binds the new tensor by name and writes it."""
    path = tmp_path / "step.tgjit"

    def make(start: list[float]) -> tuple[Tensor, TinyJit[Tensor]]:
        w = Tensor(start).realize()

        def step(x: Tensor) -> Tensor:
            w.assign(w * x)
            return (w + 0).contiguous().realize()

        return w, TinyJit(step, cache=path, state={"w": w})

    w1, f1 = make([1.0, 2.0])
    for _ in range(2):
        f1(Tensor([2.0, 3.0]))
    w2, f2 = make([5.0, 7.0])
    assert f2(Tensor([2.0, 3.0])).tolist() == [10.0, 21.0] and f2.loaded
    assert w2.tolist() == [10.0, 21.0] and w1.tolist() == [4.0, 18.0]  # the new tensor was written, not the old
    f2.reset()  # records again (no replay of the file), and the new capture overwrites it
    inode = path.stat().st_ino
    assert [f2(Tensor([2.0, 1.0])).tolist() for _ in range(2)] == [[20.0, 21.0], [40.0, 21.0]]
    assert path.stat().st_ino != inode  # (written again, atomically: a new file; its bytes are the same recording)


def test_viz_recording_captures_instead_of_reading_the_file(tmp_path: Path) -> None:
    """While VIZ records, a TinyJit with a saved file captures its function again, so the viewer sees the kernels
    being scheduled (a replayed file would show none); the results are the same."""
    from tg_uop.trace import tracing

    path = tmp_path / "f.tgjit"
    f1 = TinyJit(lambda x: (x * 2 + 1).realize(), cache=path)
    for _ in range(2):
        f1(Tensor([1.0, 2.0]))
    assert path.exists()
    f2 = TinyJit(lambda x: (x * 2 + 1).realize(), cache=path)
    with tracing() as tr:
        got = [f2(Tensor([3.0, 4.0])).tolist() for _ in range(3)]
    assert got == [[7.0, 9.0]] * 3 and not f2.loaded
    assert any(g.kind == "kernel" for g in tr.groups)


def test_symbolic_and_identity_arguments_are_not_saved(tmp_path: Path) -> None:
    path = tmp_path / "f.tgjit"
    f = TinyJit(lambda x, n: x[:n].sum().realize(), cache=path)
    with pytest.warns(JitCacheWarning, match="symbolic"):
        got = [f(Tensor([1.0, 2.0, 3.0]), Variable("n", 1, 3).bind(i)).item() for i in (1, 2, 3)]
    assert got == [1.0, 3.0, 6.0] and not path.exists()

    class Scale:
        factor = 2.0

    g = TinyJit(lambda x, s: (x * s.factor).contiguous().realize(), cache=path)
    with pytest.warns(JitCacheWarning, match="type Scale is compared by identity"):
        scale = Scale()
        assert [g(Tensor([1.0]), scale).item() for _ in range(3)] == [2.0, 2.0, 2.0]


def test_a_window_of_a_flat_buffer_is_checked(tmp_path: Path) -> None:
    """A fused optimizer's parameters are windows of one flat buffer: the same names, sizes and buffer in another
    order would read each other's values, so each name's view of the buffer is checked too."""
    from tg.nn.optim import SGD
    from tg.nn.state import get_state_dict

    path = tmp_path / "step.tgjit"

    def make(order: str) -> tuple[TinyJit[Tensor], dict[str, Tensor]]:
        ws = {"a": Tensor([1.0, 2.0]), "b": Tensor([3.0, 4.0, 5.0])}
        opt = SGD([ws[order[0]], ws[order[1]]], lr=0.1, fused=True)

        def step(x: Tensor) -> Tensor:
            with Tensor.train():
                opt.zero_grad()
                loss = (ws["a"].sum() * x).sum() + (ws["b"] * ws["b"]).sum()
                loss.backward()
                opt.step()
            return loss.realize()

        return TinyJit(step, cache=path, state={**ws, **get_state_dict(opt, "opt")}), ws

    first, _ = make("ab")
    for _ in range(2):
        first(Tensor([1.0]))
    swapped, ws = make("ba")
    with pytest.warns(JitCacheWarning, match=r"state tensor 'a' \(its view of the buffer: movement ops\)"):
        losses = [swapped(Tensor([1.0])).item() for _ in range(3)]
    assert not swapped.loaded  # recaptured, and right: a -= 0.1, b -= 0.2 b each step
    np.testing.assert_allclose(losses, [53.0, 2.8 + 50 * 0.64, 2.6 + 50 * 0.64**2], rtol=1e-5)
    np.testing.assert_allclose(ws["b"].numpy(), np.array([3.0, 4.0, 5.0]) * 0.8**3, rtol=1e-5)
    same_layout, _ = make("ba")
    same_layout(Tensor([1.0]))
    assert same_layout.loaded  # the file now holds the "ba" layout
