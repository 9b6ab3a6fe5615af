"""DOT rendering in one Graphviz run, view labels a fact a line, and the trace's recording of hand-written passes."""

from __future__ import annotations

import os
import shutil
import stat
from types import SimpleNamespace as NS

import pytest

from tg_uop import Ops, UOp, dtypes, map_graph, run_pass
from tg_uop.dot import graph_data, render_dots, view_lines
from tg_uop.trace import TRACE, Trace, tracing


def test_render_dots_runs_graphviz_once_for_all_files(tmp_path, monkeypatch):
    log = tmp_path / "calls.txt"
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    # a stand-in for Graphviz: `dot -Tsvg -O a.dot b.dot` writes a.dot.svg and b.dot.svg
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\nshift 2\nfor f in "$@"; do echo "<svg/>" > "$f.svg"; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    dots = []
    for i in range(3):
        (p := tmp_path / f"g{i}.dot").write_text("digraph { a -> b }")
        dots.append(str(p))
    svgs = render_dots(dots)
    assert svgs == [str(tmp_path / f"g{i}.svg") for i in range(3)]
    assert all(os.path.exists(s) for s in svgs)
    assert len(log.read_text().splitlines()) == 1  # one process for the three files


def test_view_label_lines_show_strides_and_mask():
    st = NS(views=(NS(shape=(4, 6), strides=(6, 1), offset=2, mask=((0, 4), (1, 5))),))
    assert view_lines(st) == ["shape (4, 6)", "strides (6, 1)", "offset 2", "mask ((0, 4), (1, 5))"]


def test_map_graph_and_fire_record_hand_written_rewrites():
    x = UOp.const(dtypes.int, 1) + 2

    def times10(u: UOp, src: tuple[UOp, ...]) -> UOp:
        return UOp.const(u.dtype, u.arg * 10) if u.op.name == "CONST" else u.replace(src=src)

    with tracing() as tr:
        with tr.group("kernel", "demo"):
            out = map_graph("consts x10", times10, x)
    (step,) = tr.groups[-1].steps
    assert [(r.pattern, r.before.arg, r.after.arg) for r in step.rules] == [
        ("consts x10", 1, 10),
        ("consts x10", 2, 20),
    ]
    assert step.rules[0].location.startswith("test_dot_trace.py:") and step.rules[0].path.endswith("test_dot_trace.py")
    changed = {n["label"] for n in graph_data(out, old=set(x.toposort))["nodes"] if n.get("changed")}
    assert changed == {"10 int", "20 int", "ADD"}
    assert TRACE.log is None  # closed with the pass


def test_fire_outside_a_recorded_pass_is_a_no_op():
    t = Trace()
    t.fire("nothing", UOp.const(dtypes.int, 1), UOp.const(dtypes.int, 2))  # no pass open: not recorded, no error
    assert t.groups == [] and run_pass("id", lambda u: u, UOp.const(dtypes.int, 1)).arg == 1


def test_too_many_groups_stops_recording_with_a_message(capsys):
    with tracing() as tr:
        saved, tr.max_groups = tr.max_groups, 2
        try:
            for i in range(4):
                with tr.group("kernel", f"k{i}"):
                    pass
        finally:
            tr.max_groups = saved
        assert [g.name for g in tr.groups] == ["k0", "k1"] and not tr.active
    assert "VIZ: recording stopped after 2 groups" in capsys.readouterr().err
    assert tr.overflow is not None and "VIZ_MAX_GROUPS=2" in tr.overflow


def test_too_many_events_stops_profiling_with_a_message(capsys):
    t = Trace()
    t.profiling, t.max_events = True, 3
    for i in range(5):
        t.event(f"k{i}", "kernel", "CPU", float(i), 1.0)
    assert [e.name for e in t.events] == ["k0", "k1", "k2"] and not t.profiling
    assert "PROFILE: recording stopped after 3 events" in capsys.readouterr().err


def test_a_bad_limit_names_the_variable(monkeypatch):
    monkeypatch.setenv("VIZ_MAX_GROUPS", "lots")
    with pytest.raises(ValueError, match="VIZ_MAX_GROUPS='lots' is not a limit"):
        Trace()


def test_a_pass_that_reports_nothing_still_shows_what_it_changed():
    a, b = UOp.const(dtypes.int, 1) + 2, UOp.const(dtypes.int, 3) + 4
    sink = UOp(Ops.SINK, dtypes.void, (a, b))

    def double_first(s: UOp) -> UOp:  # a hand-written pass that calls no TRACE.fire
        return s.replace(src=(s.src[0] * 2, s.src[1]))

    with tracing() as tr:
        with tr.group("kernel", "demo"):
            run_pass("double the first output", double_first, sink)
    (step,) = tr.groups[-1].steps
    (fired,) = step.rules  # one step: the output that changed, not the whole graph
    assert fired.before is a and fired.after.op.name == "MUL" and fired.location.startswith("test_dot_trace.py:")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed (apt-get install graphviz)")
def test_render_dots_with_graphviz(tmp_path):
    from tg_uop.dot import to_dot

    path = tmp_path / "g.dot"
    path.write_text(to_dot(UOp.const(dtypes.int, 1) + 2, title="one plus two"))
    (svg,) = render_dots([str(path)])
    assert svg == str(tmp_path / "g.svg") and "<svg" in (tmp_path / "g.svg").read_text()
