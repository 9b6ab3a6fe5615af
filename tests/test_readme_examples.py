"""Every package README's usage example runs: its ```python blocks, in order, as one script in a fresh process
(in a temporary directory: the examples write files there)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = sorted((ROOT / "packages").glob("*/README.md"))
# what an example assumes exists: tg-llm's loads a GGUF model (a small random one here)
SETUP = {"tg-llm": "from tg_llm.random_model import write_random_gguf\nwrite_random_gguf('model.gguf')\n"}


def python_blocks(readme: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", readme.read_text(), re.S | re.M)


def test_every_package_has_a_readme_example() -> None:
    assert len(READMES) >= 9 and all(python_blocks(r) for r in READMES), [r for r in READMES if not python_blocks(r)]


@pytest.mark.parametrize("readme", READMES, ids=lambda p: p.parent.name)
def test_readme_example_runs(readme: Path, tmp_path: Path) -> None:
    name = readme.parent.name
    if name == "tg-llm":
        pytest.importorskip("gguf", reason="the example's model is written with the gguf package")
    script = tmp_path / "readme_example.py"
    script.write_text(SETUP.get(name, "") + "\n".join(python_blocks(readme)))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{readme.relative_to(ROOT)}'s example failed:\n{run.stderr[-4000:]}"
