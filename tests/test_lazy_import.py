"""`import tg` stays light: numpy, OpenCL, CUDA, the datasets module, BEAM's process pool and SQLite load on use."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("numpy", "pyopencl", "tg_nn.datasets", "tg.nn.datasets", "tg_runtime.ops_cl", "tg_runtime.ops_cuda")
LIGHTER = ("multiprocessing", "concurrent.futures", "sqlite3", "urllib.request", "ssl", "tarfile")


def loaded_after(code: str) -> set[str]:
    """The module names in sys.modules after running `code` in a fresh interpreter."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_tg_loads_no_numpy_nor_devices_nor_datasets() -> None:
    mods = loaded_after("import tg")
    assert "tg" in mods and "tg_tensor" in mods
    assert not mods & set(HEAVY + LIGHTER), sorted(mods & set(HEAVY + LIGHTER))


def test_numpy_interop_and_datasets_load_on_use() -> None:
    code = (
        "import tg, numpy as np\n"
        "t = tg.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))\n"
        "assert (t * 2).numpy().tolist() == [[0, 2, 4], [6, 8, 10]]\n"
        "assert callable(tg.nn.datasets.mnist)\n"
        "from tg.nn.datasets import mnist_numpy\n"
        "import tg_nn\n"
        "assert tg_nn.datasets.mnist_numpy is mnist_numpy"
    )
    mods = loaded_after(code)
    assert {"numpy", "tg_nn.datasets", "tg.nn.datasets"} <= mods
