"""The compile cache across processes: a second process of the same program starts no compiler at all (no
kernel compile, no `--version`, no thread pool build); a corrupt or unwritable cache warns once and compiles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(
    not (shutil.which("clang") or shutil.which("gcc") or shutil.which("cc")), reason="no C compiler on PATH"
)

CHILD = """
import json, subprocess
launched = []
_run = subprocess.run
def counting_run(cmd, *a, **kw):
    launched.append(cmd[0])
    return _run(cmd, *a, **kw)
subprocess.run = counting_run  # every compiler process tg starts goes through subprocess.run
import numpy as np
from tg import Tensor
a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
rows = ((a * 2 + 1).relu().sum(axis=1)).numpy().tolist()
top = (a.exp2() - a).max().item()
print(json.dumps({"compiler_runs": len(launched), "rows": rows, "top": top}))
"""


def child(db: Path) -> tuple[dict[str, object], str]:
    env = {**os.environ, "CACHEDB": str(db), "DEV": "CPU", "CACHELEVEL": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


EXPECT_ROWS = [16.0, 48.0, 80.0]
EXPECT_TOP = 2.0**11 - 11


def test_second_process_starts_no_compiler(tmp_path: Path) -> None:
    first, _ = child(tmp_path / "cache.db")
    second, _ = child(tmp_path / "cache.db")
    assert first["compiler_runs"] and first["compiler_runs"] >= 2  # type: ignore[operator]
    assert second["compiler_runs"] == 0
    for run in (first, second):
        assert run["rows"] == EXPECT_ROWS and run["top"] == EXPECT_TOP


@pytest.mark.parametrize("broken", ["corrupt", "unwritable"])
def test_broken_cache_warns_once_and_compiles(tmp_path: Path, broken: str) -> None:
    if broken == "corrupt":
        db = tmp_path / "cache.db"
        db.write_bytes(b"not an sqlite database " * 100)
    else:
        (tmp_path / "a_file").write_text("x")  # a file where the cache directory should be (fails for root too)
        db = tmp_path / "a_file" / "cache.db"
    run, stderr = child(db)
    assert run["compiler_runs"] and run["rows"] == EXPECT_ROWS and run["top"] == EXPECT_TOP
    assert stderr.count("tg disk cache") == 1, stderr


SCHEDULE_CHILD = """
import json, subprocess
kernel_runs = []
_run = subprocess.run
def counting_run(cmd, *a, **kw):
    if "-lm" in cmd and "-pthread" not in cmd:  # a kernel build (not `--version` nor the thread pool)
        kernel_runs.append(cmd[0])
    return _run(cmd, *a, **kw)
subprocess.run = counting_run
import numpy as np
from tg import GlobalCounters, Tensor
a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5)
outs = [a + 1.25, a * 3.5, (a - 2.75).sum(axis=0), a.exp2(), (a * a).max(axis=1), a.relu() + 0.5]
GlobalCounters.reset()
Tensor.realize(*outs)
print(json.dumps({"kernel_runs": len(kernel_runs), "kernels": GlobalCounters.kernel_count,
                  "outs": [o.numpy().tolist() for o in outs]}))
"""


def test_kernels_of_a_schedule_build_in_few_compiler_runs(tmp_path: Path) -> None:
    """One realize of six kernels runs the C compiler fewer times than there are kernels (batches), every result
    matches numpy, and a second process builds nothing."""
    import numpy as np

    # (MERGE_SIBLINGS=0: kernels over one shape stay separate kernels, the several compiles this test batches)
    env = {**os.environ, "CACHEDB": str(tmp_path / "cache.db"), "DEV": "CPU", "CACHELEVEL": "1", "MERGE_SIBLINGS": "0"}
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    want = [a + 1.25, a * 3.5, (a - 2.75).sum(axis=0), np.exp2(a), (a * a).max(axis=1), np.maximum(a, 0) + 0.5]
    runs = _run_twice(SCHEDULE_CHILD, env)
    for run in runs:
        assert run["kernels"] == 6
        for got, exp in zip(run["outs"], want):
            np.testing.assert_allclose(np.array(got, np.float32), exp, rtol=1e-6)
    assert 1 <= runs[0]["kernel_runs"] < 6 and runs[1]["kernel_runs"] == 0


def _run_twice(child: str, env: dict[str, str]) -> list[dict[str, Any]]:
    """The JSON report (last stdout line) of `child` run in two fresh processes sharing `env`'s cache."""
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return runs


def test_kernels_of_one_name_share_a_compiler_run(tmp_path: Path) -> None:
    """Four small elementwise kernels over one shape (one function name, E_3_4) build in one compiler run (the
    clashing functions are renamed in the batch), each computes its own maths, and a second process builds
    nothing: the renaming is the same there, so its sources hit the cache."""
    import numpy as np

    # (MERGE_SIBLINGS=0: kernels over one shape stay separate kernels, the several compiles this test batches)
    env = {**os.environ, "CACHEDB": str(tmp_path / "cache.db"), "DEV": "CPU", "CACHELEVEL": "1", "MERGE_SIBLINGS": "0"}
    child = SCHEDULE_CHILD.replace(
        "outs = [a + 1.25, a * 3.5, (a - 2.75).sum(axis=0), a.exp2(), (a * a).max(axis=1), a.relu() + 0.5]",
        "outs = [a + 1.25, a * 3.5, a.exp2(), a.relu() + 0.5]",
    )
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    want = [a + 1.25, a * 3.5, np.exp2(a), np.maximum(a, 0) + 0.5]
    runs = _run_twice(child, env)
    for run in runs:
        assert run["kernels"] == 4
        for got, exp in zip(run["outs"], want):
            np.testing.assert_allclose(np.array(got, np.float32), exp, rtol=1e-6)
    assert runs[0]["kernel_runs"] == 1 and runs[1]["kernel_runs"] == 0
