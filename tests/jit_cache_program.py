"""A tiny training run under a TinyJit with `cache=` (run in subprocesses by tests/test_jit_cache.py).

usage: python jit_cache_program.py CACHE_PATH|- STEPS [--hidden H] [--batch B] [--state all|model] [--ref]

Prints one JSON line: the losses of each step, the final weights, whether the recording came from the
file, how many schedules and program lowerings ran inside the jitted calls, the warnings they gave, and with
--ref the losses and weights of the same run under a TinyJit without a file (a freshly seeded twin model).
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

import tg_runtime.runner as runner
from tg import Tensor, TinyJit, nn
from tg.nn.optim import AdamW
from tg.nn.state import get_parameters, get_state_dict
from tg_tensor.engine.realizer import Realizer


class Net:
    def __init__(self, hidden: int) -> None:
        self.l1, self.l2 = nn.Linear(4, hidden), nn.Linear(hidden, 3)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu().dropout(0.25))


def train(path: str | None, steps: int, hidden: int, batch: int, which: str) -> dict[str, object]:
    """Train a seeded Net for `steps` jitted steps (with `cache=path`); what main() prints."""
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

    jit = TinyJit(step, cache=path, state=state)
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
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x, y in data:
            x_t, y_t = Tensor(x.astype(np.float32)).realize(), Tensor(y.astype(np.float32)).realize()
            Realizer.schedule = counted_schedule  # type: ignore[assignment,method-assign]
            setattr(runner, "get_program_cached", counted_lower)  # noqa: B010
            try:
                losses.append(jit(x_t, y_t).item())
            finally:
                Realizer.schedule = schedule  # type: ignore[method-assign]
                setattr(runner, "get_program_cached", lower)  # noqa: B010
    weights = [p.numpy().tolist() for p in get_parameters(model)]
    warned = [str(w.message) for w in caught]
    return {"losses": losses, "weights": weights, "loaded": jit.loaded, "counts": counts, "warnings": warned}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("steps", type=int)
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--state", choices=("all", "model"), default="all")
    parser.add_argument("--ref", action="store_true")
    args = parser.parse_args()
    out = train(None if args.path == "-" else args.path, args.steps, args.hidden, args.batch, args.state)
    if args.ref:
        ref = train(None, args.steps, args.hidden, args.batch, "all")
        out["ref_losses"], out["ref_weights"] = ref["losses"], ref["weights"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
