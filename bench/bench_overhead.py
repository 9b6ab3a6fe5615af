"""The eager feel: what a user waits for outside the kernels, next to numpy / torch / tinygrad in the same run.

Figures (one JSON line each, {"bench", "impl", "value", "unit", "params"}):
- tiny_realize: `(t * 2.5).realize()` on a 4-element tensor, a structure seen before with new buffers (us);
  numpy's `a * 2.5` is timed in the same process, round by round alternating with tg (best of TINY_ROUNDS
  each), and `tiny_realize_ratio` is tg's CPU time over numpy's
- tiny_realize_new: `(t * c).realize()` with a new constant `c` each time: a graph never seen before whose
  kernel compiled before (us); these two rows also give `cpu_us`, the process's CPU time per call, which a
  loaded machine disturbs least
- import: `import <package>` in a fresh interpreter, median of IMPORT_RUNS (ms)
- mnist_first_step: a fresh process builds beautiful_mnist's model and Adam and runs its first jitted train
  step (batch 128) to the loss: schedule, codegen, compile, run (s, and `cpu_s`: CPU seconds of the process
  and its compiler processes, the figure a loaded machine disturbs least); `cold` with an empty compile
  cache, `warm` in a later process sharing a cold one's cache; medians of FIRST_STEP_RUNS processes each
- jit_replay: a TinyJit of KERNELS tiny kernels replayed, us per kernel (torch: one eager op), and `cpu_us`

`ROWS=tiny_realize,jit_replay` runs only those rows (import, tiny_realize, jit_replay, mnist_first_step), for
iterating; report figures from a full run.

Run: `uv run python bench/bench_overhead.py`. torch and tinygrad are never dependencies: to compare, run it
with an interpreter that has them and tg's sources on the path, e.g.
`PYTHONPATH=$(ls -d packages/*/src | paste -sd:) /work/venv-peers/bin/python bench/bench_overhead.py`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = int(os.getenv("KERNELS", "50"))
IMPORT_RUNS = int(os.getenv("IMPORT_RUNS", "7"))
FIRST_STEP_RUNS = int(os.getenv("FIRST_STEP_RUNS", "3"))  # processes per (impl, cold/warm): the median is reported
REALIZES = int(os.getenv("REALIZES", "500"))
TINY_ROUNDS = int(os.getenv("TINY_ROUNDS", "40"))  # rounds of REALIZES calls, tg and numpy alternating
# ROWS=tiny_realize,jit_replay runs only those figures (while iterating); the figures to report come from a full run
ROWS = {r for r in os.getenv("ROWS", "").split(",") if r}


def emit(bench: str, impl: str, value: float, unit: str, **params: Any) -> None:
    print(json.dumps({"bench": bench, "impl": impl, "value": round(value, 4), "unit": unit, "params": params}))
    sys.stdout.flush()


def has(mod: str) -> bool:
    return importlib.util.find_spec(mod) is not None


def per_call_us_cpu(fn: Callable[[int], object], n: int, rounds: int = 3) -> tuple[float, float]:
    """(wall us, CPU us) per call, each the best of `rounds` rounds of n calls. The CPU time of this process is
    what a loaded machine disturbs least (other processes take wall time, not this process's CPU time)."""
    wall, cpu = float("inf"), float("inf")
    for _ in range(rounds):
        st, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            fn(i)
        wall, cpu = min(wall, (time.perf_counter() - st) / n), min(cpu, (time.process_time() - c0) / n)
    return wall * 1e6, cpu * 1e6


def emit_timed(bench: str, impl: str, fn: Callable[[int], object], calls: int, **params: Any) -> None:
    wall, cpu = per_call_us_cpu(fn, calls)
    emit(bench, impl, wall, "us", cpu_us=round(cpu, 2), **params)


# ---------------------------------------------------------------- tiny realize
def tiny_realize_tg() -> None:
    import numpy as np

    from tg import Tensor

    ts = [Tensor(np.full(4, i, np.float32)).realize() for i in range(REALIZES)]
    a = [np.full(4, i, np.float32) for i in range(REALIZES)]
    for t in ts[:3]:
        (t * 2.5).realize()  # compile once
    # tg and numpy alternate, round by round, in this one process: this machine's speed drifts by up to 1.7x
    # over seconds (shared host), so figures taken at different moments would compare the moments
    best: dict[str, tuple[float, float]] = {}
    for _ in range(TINY_ROUNDS):
        for impl, fn in (("tg", lambda i: (ts[i] * 2.5).realize()), ("numpy", lambda i: a[i] * 2.5)):
            wall, cpu = per_call_us_cpu(fn, REALIZES, rounds=1)
            old = best.get(impl, (float("inf"), float("inf")))
            best[impl] = (min(old[0], wall), min(old[1], cpu))
    for impl, (wall, cpu) in best.items():
        emit("tiny_realize", impl, wall, "us", cpu_us=round(cpu, 2), n=4, rounds=TINY_ROUNDS, interleaved=True)
    emit("tiny_realize_ratio", "tg/numpy", best["tg"][1] / best["numpy"][1], "x", of="cpu_us")
    t = ts[0]
    for c in (0.5, 0.25):
        (t * c).realize()  # the family of `t * c` switches to constants loaded from buffers
    counter = iter(range(10**9))
    emit_timed("tiny_realize_new", "tg", lambda i: (t * (3.0 + next(counter))).realize(), REALIZES, n=4)


def tiny_realize_peers() -> None:
    if has("torch"):
        import torch

        ta = [torch.full((4,), float(i)) for i in range(REALIZES)]
        emit_timed("tiny_realize", "torch", lambda i: ta[i] * 2.5, REALIZES, n=4)
    if has("tinygrad"):
        from tinygrad import Tensor as TT

        n = min(REALIZES, 200)
        ts = [TT.full((4,), float(i)).contiguous().realize() for i in range(n)]
        for t in ts[:3]:
            (t * 2.5).realize()
        emit_timed("tiny_realize", "tinygrad", lambda i: (ts[i] * 2.5).realize(), n, n=4)
        counter = iter(range(10**9))
        t0 = ts[0]
        emit_timed("tiny_realize_new", "tinygrad", lambda i: (t0 * (3.0 + next(counter))).realize(), n, n=4)


# ---------------------------------------------------------------- import time
def import_ms(mod: str) -> tuple[float, float]:
    """(wall ms, CPU ms) of `import mod` in a fresh interpreter, medians; a first run writes the bytecode caches
    (as a user's first run does), so the runs timed load them as every later start does."""
    code = (
        "import resource, time\n"
        "cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])\n"
        f"c0, st = cpu(), time.perf_counter()\nimport {mod}\nprint(time.perf_counter() - st, cpu() - c0)"
    )
    walls, cpus = [], []
    for i in range(IMPORT_RUNS + 1):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=child_env())
        wall, cpu = (float(v) * 1e3 for v in out.stdout.strip().splitlines()[-1].split())
        if i:
            walls.append(wall)
            cpus.append(cpu)
    return statistics.median(walls), statistics.median(cpus)


def bench_import() -> None:
    for mod in ("tg", "numpy", "torch", "tinygrad"):
        if mod == "tg" or has(mod):
            wall, cpu = import_ms(mod)
            emit("import", "tg" if mod == "tg" else mod, wall, "ms", cpu_ms=round(cpu, 1), runs=IMPORT_RUNS)


# ---------------------------------------------------------------- first MNIST train step (child processes)
def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's interpreter keeps bytecode caches
    env.setdefault("DEV", "CPU")
    env.update(extra)
    return env


def first_step(impl: str, cachedb: str) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--first-step", impl],
        capture_output=True,
        text=True,
        env=child_env(CACHEDB=cachedb),
    )
    if out.returncode != 0:
        raise RuntimeError(f"first step of {impl} failed:\n{out.stderr[-2000:]}")
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def bench_first_step() -> None:
    """Median of FIRST_STEP_RUNS processes each: cold ones each with a fresh, empty cache, then warm ones sharing
    the last cold one's cache (one process is one sample of a machine whose speed drifts by up to 1.7x)."""
    impls = ["tg"] + [p for p in ("torch", "tinygrad") if has(p)]
    for impl in impls:
        runs: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
        with tempfile.TemporaryDirectory(prefix=f"bench-overhead-{impl}-") as tmp:
            for k in range(FIRST_STEP_RUNS):
                runs["cold"].append(first_step(impl, os.path.join(tmp, f"cache{k}.db")))
            if impl != "torch":  # (torch compiles nothing)
                for _ in range(FIRST_STEP_RUNS):
                    runs["warm"].append(first_step(impl, os.path.join(tmp, f"cache{FIRST_STEP_RUNS - 1}.db")))
        for label, samples in runs.items():
            if samples:
                wall, cpu = statistics.median(w for w, _ in samples), statistics.median(c for _, c in samples)
                walls = [round(w, 3) for w, _ in samples]
                emit("mnist_first_step", impl, wall, "s", cache=label, batch=128, cpu_s=round(cpu, 3), runs=walls)


def child_first_step(impl: str) -> None:
    """In a fresh process: seconds from building the model to the first jitted step's loss (printed)."""
    import numpy as np

    rng = np.random.default_rng(0)
    x, y = rng.random((128, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 128).astype(np.int32)
    st, cpu0 = time.perf_counter(), cpu_s()
    if impl == "tg":
        loss = tg_first_step(x, y)
    elif impl == "tinygrad":
        loss = tinygrad_first_step(x, y)
    else:
        loss = torch_first_step(x, y)
    print(f"# loss {loss}", file=sys.stderr)
    print(time.perf_counter() - st, cpu_s() - cpu0)


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (the C compiler), all threads."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def tg_first_step(x: Any, y: Any) -> float:
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    from beautiful_mnist import Model

    from tg import Tensor, TinyJit, nn

    model = Model()
    opt = nn.optim.Adam(nn.state.get_parameters(model))

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            Tensor.realize(loss, *opt.schedule_step())
            return loss

    return float(step(Tensor(x), Tensor(y)).item())


def tinygrad_first_step(x: Any, y: Any) -> float:
    from tinygrad import Context, Tensor, TinyJit, nn

    class Model:
        def __init__(self) -> None:
            self.c1, self.c2, self.l1 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3), nn.Linear(1600, 10)

        def __call__(self, x: Tensor) -> Tensor:
            x = self.c1(x).relu().max_pool2d((2, 2))
            x = self.c2(x).relu().max_pool2d((2, 2))
            return self.l1(x.flatten(1).dropout(0.5))

    model = Model()
    opt = nn.optim.Adam(nn.state.get_parameters(model))

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Context(TRAINING=1):  # (tinygrad 0.14's switch; Tensor.train() in older ones)
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            Tensor.realize(loss, *opt.schedule_step())
            return loss

    return float(step(Tensor(x), Tensor(y)).item())


def torch_first_step(x: Any, y: Any) -> float:
    import torch

    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Dropout(0.5), torch.nn.Linear(1600, 10),
    )  # fmt: skip
    opt = torch.optim.Adam(net.parameters())
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y).long())
    loss.backward()
    opt.step()
    return float(loss.item())


# ---------------------------------------------------------------- TinyJit replay
def bench_jit_replay() -> None:
    import numpy as np

    from tg import Tensor, TinyJit

    def chain(x: Tensor) -> Tensor:
        for _ in range(KERNELS):
            x = (x + 1).contiguous()
        return x

    jitted, x = TinyJit(chain), Tensor(np.zeros(4, np.float32)).realize()
    for _ in range(3):
        jitted(x).realize()
    wall, cpu = per_call_us_cpu(lambda i: jitted(x), 200)
    emit("jit_replay", "tg", wall / KERNELS, "us/kernel", cpu_us=round(cpu / KERNELS, 3), kernels=KERNELS)
    if has("torch"):
        import torch

        tx = torch.zeros(4)
        wall, cpu = per_call_us_cpu(lambda i: tx + 1, 2000)
        emit("jit_replay", "torch", wall, "us/kernel", cpu_us=round(cpu, 3), note="one eager op")
    if has("tinygrad"):
        from tinygrad import Tensor as TT
        from tinygrad import TinyJit as TJ

        def tchain(x: TT) -> TT:
            for _ in range(KERNELS):
                x = (x + 1).contiguous()
            return x.realize()

        tj, tx2 = TJ(tchain), TT.zeros(4).contiguous().realize()
        for _ in range(3):
            tj(tx2)
        wall, cpu = per_call_us_cpu(lambda i: tj(tx2), 200)
        emit("jit_replay", "tinygrad", wall / KERNELS, "us/kernel", cpu_us=round(cpu / KERNELS, 3), kernels=KERNELS)


def peer(fn: Callable[[], None]) -> None:
    """A peer that is installed but cannot run here is reported on stderr, not fatal."""
    try:
        fn()
    except Exception as e:
        print(f"{fn.__name__}: skipped ({type(e).__name__}: {e})", file=sys.stderr)


def main() -> None:
    os.environ.setdefault("DEV", "CPU")  # tinygrad would pick an OpenCL CPU driver first; tg's default here
    for row, fns in (
        ("import", (bench_import,)),
        ("tiny_realize", (tiny_realize_tg, lambda: peer(tiny_realize_peers))),
        ("jit_replay", (bench_jit_replay,)),
        ("mnist_first_step", (bench_first_step,)),
    ):
        if not ROWS or row in ROWS:
            for fn in fns:
                fn()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--first-step":
        child_first_step(sys.argv[2])
    else:
        main()
