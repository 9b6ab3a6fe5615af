"""CPU graphs (tg_runtime.cpu_graph): a TinyJit replay on the CPU is one call into C that runs every kernel; new
inputs, fresh outputs and new variable values reach the kernels through `update`."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, TinyJit, Variable
from tg_runtime.cpu_graph import CALLS_PER_FUNCTION, CPUGraph


def test_replays_are_one_graph_call_with_new_inputs_and_values() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    wt = Tensor(w, device="CPU").realize()

    def step(x: Tensor, n: object) -> Tensor:  # several kernels, one of them over a symbolic length
        h = (x @ wt).relu() + 1
        return (h[:, :n].sum(-1) * 2 + x.sum(-1)).contiguous()

    jitted = TinyJit(step)
    for i, n in enumerate((3, 5, 1, 8, 2, 7)):
        x = rng.standard_normal((4, 8)).astype(np.float32)
        got = jitted(Tensor(x, device="CPU"), Variable("n", 1, 8).bind(n)).numpy()
        want = (np.maximum(x @ w, 0) + 1)[:, :n].sum(-1) * 2 + x.sum(-1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        if i >= 2:  # (recorded on the second call: the replays after it are graph calls)
            assert jitted.recording is not None and isinstance(jitted.recording.graph, CPUGraph)


def test_source_splits_long_graphs_into_functions() -> None:
    src = CPUGraph.source([(1, 0)] * (CALLS_PER_FUNCTION + 3) + [(2, 2)])
    assert src.count("static void tg_graph_part") == 2
    assert "(int)(intptr_t)a[" in src  # values passed as ints, after the launch's buffers
    assert CPUGraph.source([(0, 0)]).count("((void (*)(void))f[0])();") == 1


def test_update_with_the_wrong_buffer_count_is_refused() -> None:
    jitted = TinyJit(lambda x: (x * 2).contiguous())
    for _ in range(3):
        jitted(Tensor(np.ones(4, np.float32), device="CPU"))
    rec = jitted.recording
    assert rec is not None and isinstance(rec.graph, CPUGraph)
    with pytest.raises(ValueError, match="launch 0 takes 2 buffers, got 1"):
        rec.graph.update(0, [rec.launches[0].bufs[0]._opaque])
