"""A tiny training run under a TinyJit with `cache=` (run in subprocesses by tests/test_jit_cache.py).

usage: python jit_cache_program.py CACHE_PATH|- STEPS [HIDDEN] [BATCH] [STATE=all|model]

Prints one JSON line: the losses of each step, the final weights, whether the recording came from the
file, and how many schedules and program lowerings ran inside the jitted calls.
"""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np

import tg_runtime.runner as runner
from tg import Tensor, TinyJit, nn
from tg.nn.optim import AdamW
from tg.nn.state import get_parameters, get_state_dict
from tg_tensor.realizer import Realizer


class Net:
    def __init__(self, hidden: int) -> None:
        self.l1, self.l2 = nn.Linear(4, hidden), nn.Linear(hidden, 3)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu().dropout(0.25))


def main() -> None:
    path, steps = sys.argv[1], int(sys.argv[2])
    hidden, batch = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (8, 5)
    which = sys.argv[5] if len(sys.argv) > 5 else "all"
    Tensor.manual_seed(0)
    model = Net(hidden)
    opt = AdamW(get_parameters(model), lr=0.05, weight_decay=0.1, fused=True)
    state = get_state_dict(model, "model") | (get_state_dict(opt, "opt") if which == "all" else {})

    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.clip_grad_norm(1.0)
            opt.step()
        return loss.realize()

    jit = TinyJit(step, cache=None if path == "-" else path, state=state)
    counts = {"schedule": 0, "lower": 0}
    schedule, lower = Realizer.schedule, getattr(runner, "get_program_cached")  # noqa: B009

    def counted_schedule(self: Realizer, *a: object, **k: object) -> object:
        counts["schedule"] += 1
        return schedule(self, *a, **k)  # type: ignore[arg-type]

    def counted_lower(*a: object, **k: object) -> object:
        counts["lower"] += 1
        return lower(*a, **k)

    rng = np.random.default_rng(1)
    data = [(rng.standard_normal((batch, 4)), rng.standard_normal((batch, 3))) for _ in range(steps)]
    Realizer.schedule = counted_schedule  # type: ignore[assignment,method-assign]
    setattr(runner, "get_program_cached", counted_lower)  # noqa: B010
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x, y in data:
            x_t, y_t = Tensor(x.astype(np.float32)), Tensor(y.astype(np.float32))
            x_t.realize(), y_t.realize()
            losses.append(jit(x_t, y_t).item())
    Realizer.schedule = schedule  # type: ignore[method-assign]
    setattr(runner, "get_program_cached", lower)  # noqa: B010
    weights = [p.numpy().tolist() for p in get_parameters(model)]
    out = {"losses": losses, "weights": weights, "loaded": jit.loaded, "counts": counts}
    out["warnings"] = [str(w.message) for w in caught]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
