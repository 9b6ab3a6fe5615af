"""Rendered programs cached on disk by AST: a hit is the program codegen would render, read without codegen;
a changed code generator, setting, renderer or optimization list misses; a garbled entry is rendered again."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tg import Tensor
from tg_codegen import program_cache
from tg_codegen.diskcache import diskcache_put, reset_connections
from tg_codegen.opt import Opt, OptOps
from tg_codegen.program import get_program
from tg_codegen.program_cache import get_program_cached, program_key
from tg_codegen.renderer import ProgramSpec
from tg_codegen.renderer.cstyle import ClangRenderer
from tg_uop import Ops, UOp
from tg_uop.helpers import Context


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv("CACHEDB", str(tmp_path / "cache.db"))
    reset_connections()
    yield tmp_path / "cache.db"
    reset_connections()


def kernel_asts() -> list[UOp]:
    x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8)).realize()
    y = Tensor(np.arange(8, dtype=np.int32)).realize()
    outs = [(x * 2 + 1).relu().sum(axis=1), x.T @ x, (x.max(axis=0) + y.cast("float32")).exp2(), y * 3 - 1]
    items = Tensor.schedule(*outs)
    Tensor.realize(*outs)
    return [it.ast for it in items if it.ast.op is not Ops.COPY]


def same(a: ProgramSpec, b: ProgramSpec) -> bool:
    return replace(a, uops=()) == replace(b, uops=())


def refuse_codegen(*args: object, **kwargs: object) -> ProgramSpec:
    raise AssertionError("codegen ran on a cache hit")


def test_hit_is_the_program_codegen_renders(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    renderer = ClangRenderer(2)
    asts = kernel_asts()
    assert len(asts) >= 3
    fresh = [get_program_cached(ast, renderer) for ast in asts]
    monkeypatch.setattr(program_cache, "get_program", refuse_codegen)
    for ast, want in zip(asts, fresh):
        assert same(get_program_cached(ast, renderer), want)
    monkeypatch.undo()
    for ast, want in zip(asts, fresh):
        assert same(get_program(ast, renderer), want)


def test_changes_miss(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ast = kernel_asts()[0]
    renderer = ClangRenderer(2)
    key = program_key(ast, renderer, None)
    with Context(NOOPT=1):
        assert program_key(ast, renderer, None) != key
    assert program_key(ast, ClangRenderer(1), None) != key
    assert program_key(ast, renderer, [Opt(OptOps.UPCAST, 0, 4)]) != key
    assert program_key(kernel_asts()[1], renderer, None) != key
    with Context(DEBUG=1):  # what is printed does not change the program
        assert program_key(ast, renderer, None) == key
    monkeypatch.setattr(program_cache, "codegen_fingerprint", lambda: "an edited code generator")
    assert program_key(ast, renderer, None) != key


def test_garbled_entry_is_rendered_again(cache: Path) -> None:
    ast, renderer = kernel_asts()[0], ClangRenderer(2)
    want = get_program(ast, renderer)
    good = program_cache._to_data(want)
    assert good is not None
    for junk in ({"name": 3}, [1, 2], {**good, "buffer_dtypes": ["no such dtype"]}, {**good, "outs": "x"}, "text"):
        diskcache_put("program", program_key(ast, renderer, None), junk)
        assert same(get_program_cached(ast, renderer), want)


def test_fingerprint_covers_the_code_generator() -> None:
    fp = program_cache.codegen_fingerprint()
    assert len(fp) == 64 and fp == program_cache.codegen_fingerprint()
