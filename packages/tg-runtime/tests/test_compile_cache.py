"""Compiled CPU binaries are cached on disk by source, compiler build (path, size, mtime, `--version`), flags
and host CPU: a hit runs no compiler, and any change of those misses (nothing stale is ever loaded)."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tg_codegen.diskcache import reset_connections
from tg_runtime import ops_cpu
from tg_runtime.ops_cpu import ClangCompiler, CPUProgram, compiler_build, compiler_version, half_type

SRC = "void k(float* restrict out) { out[0] = %s; }\n"
CC = shutil.which("clang") or shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler on PATH")


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv("CACHEDB", str(tmp_path / "cache.db"))
    reset_connections()
    yield tmp_path / "cache.db"
    reset_connections()


def _clear_compiler_facts() -> None:
    """What a new process would find out again (these are kept per process)."""
    for fn in (compiler_build, compiler_version, half_type):
        fn.cache_clear()


def run(lib: bytes) -> float:
    import ctypes

    out = (ctypes.c_float * 1)()
    CPUProgram("k", lib)(ctypes.addressof(out))
    return out[0]


def test_same_source_hits_and_runs_no_compiler(cache: Path) -> None:
    first = ClangCompiler(args=("-O1",))
    lib = first.compile(SRC % "2.5f")
    assert first.invocations == 1 and run(lib) == 2.5
    again = ClangCompiler(args=("-O1",))  # a new compiler object: nothing in memory, only the disk cache
    assert again.compile(SRC % "2.5f") == lib and again.invocations == 0


def test_changed_source_misses(cache: Path) -> None:
    c = ClangCompiler(args=("-O1",))
    c.compile(SRC % "1.0f")
    assert run(c.compile(SRC % "3.0f")) == 3.0 and c.invocations == 2


def test_changed_flags_miss(cache: Path) -> None:
    ClangCompiler(args=("-O1",)).compile(SRC % "1.0f")
    other = ClangCompiler(args=("-O2",))
    assert run(other.compile(SRC % "1.0f")) == 1.0 and other.invocations == 1


@pytest.mark.skipif(not (shutil.which("clang") and shutil.which("gcc")), reason="needs both clang and gcc")
def test_changed_compiler_misses(cache: Path) -> None:
    ClangCompiler(cc="clang", args=("-O1",)).compile(SRC % "1.0f")
    gcc = ClangCompiler(cc="gcc", args=("-O1",))
    gcc.compile(SRC % "1.0f")
    assert gcc.invocations == 1


def test_changed_compiler_version_misses(cache: Path, tmp_path: Path) -> None:
    """The same compiler name after an upgrade (another binary, another `--version`) compiles again."""
    wrapper = tmp_path / "bin" / "mycc"
    wrapper.parent.mkdir()

    def install(version: str) -> None:
        wrapper.write_text(
            f'#!/bin/sh\nif [ "$1" = --version ]; then echo "mycc {version}"; exit 0; fi\nexec {CC} "$@"\n'
        )
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        _clear_compiler_facts()

    install("1.0")
    old = ClangCompiler(cc=str(wrapper), args=("-O1",))
    old.compile(SRC % "1.0f")
    assert "mycc 1.0" in compiler_version(str(wrapper))
    same = ClangCompiler(cc=str(wrapper), args=("-O1",))
    same.compile(SRC % "1.0f")
    assert same.invocations == 0
    install("2.0-upgraded")
    new = ClangCompiler(cc=str(wrapper), args=("-O1",))
    assert run(new.compile(SRC % "1.0f")) == 1.0 and new.invocations == 1
    assert "mycc 2.0-upgraded" in compiler_version(str(wrapper))
    _clear_compiler_facts()


def test_host_cpu_is_part_of_the_key(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """-march=native code is built for one CPU: a cache file shared with another machine misses there."""
    c = ClangCompiler(args=("-O1",))
    key = c.cache_key(SRC % "1.0f")
    monkeypatch.setattr(ops_cpu, "host_cpu", lambda: "another-cpu")
    assert c.cache_key(SRC % "1.0f") != key


def test_unwritable_cache_warns_once_and_compiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")  # a file where the cache directory should be: fails even for root
    monkeypatch.setenv("CACHEDB", str(blocker / "cache.db"))
    reset_connections()
    try:
        with pytest.warns(UserWarning, match="continuing without it") as caught:
            c = ClangCompiler(args=("-O1",))
            libs = [c.compile(SRC % f"{v}.0f") for v in (1, 2, 1)]
        assert [run(lib) for lib in libs] == [1.0, 2.0, 1.0] and c.invocations == 3
        assert len([w for w in caught if "tg disk cache" in str(w.message)]) == 1
    finally:
        reset_connections()


def test_corrupt_cache_file_warns_once_and_compiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    db.write_bytes(b"not an sqlite file " * 200)
    monkeypatch.setenv("CACHEDB", str(db))
    reset_connections()
    try:
        with pytest.warns(UserWarning, match="continuing without it") as caught:
            c = ClangCompiler(args=("-O1",))
            libs = [c.compile(SRC % f"{v}.0f") for v in (4, 5)]
        assert [run(lib) for lib in libs] == [4.0, 5.0] and c.invocations == 2
        assert len([w for w in caught if "tg disk cache" in str(w.message)]) == 1
    finally:
        reset_connections()


def test_cache_can_be_turned_off(cache: Path) -> None:
    from tg_uop.helpers import Context

    with Context(CACHELEVEL=0):
        ClangCompiler(args=("-O1",)).compile(SRC % "1.0f")
        c = ClangCompiler(args=("-O1",))
        c.compile(SRC % "1.0f")
    assert c.invocations == 1 and not os.path.exists(cache)


def _kernel(name: str, value: str, define: str = "") -> str:
    return f"{define}void {name}(float* restrict out) {{ out[0] = {value}; }}\n"


def _call(name: str, lib: bytes) -> float:
    import ctypes

    out = (ctypes.c_float * 1)()
    CPUProgram(name, lib)(ctypes.addressof(out))
    return out[0]


def test_batch_compiles_in_one_run_per_function_name(cache: Path) -> None:
    """Kernels of different names share a compiler run; two kernels named alike are built in two runs."""
    srcs = [_kernel("a", "1.0f"), _kernel("b", "2.0f"), _kernel("a", "3.0f")]
    c = ClangCompiler(args=("-O1",))
    libs = c.compile_many(srcs)
    assert c.invocations == 2
    assert [_call(n, lib) for n, lib in zip("aba", libs)] == [1.0, 2.0, 3.0]
    assert ops_cpu.load_library(libs[0]) is ops_cpu.load_library(libs[1])  # one object, loaded once
    again = ClangCompiler(args=("-O1",))  # a new process would find each kernel on disk
    assert [_call(n, lib) for n, lib in zip("aba", again.compile_many(srcs))] == [1.0, 2.0, 3.0]
    assert again.invocations == 0


def test_batch_keeps_each_kernels_macros(cache: Path) -> None:
    srcs = [_kernel("a", "V", "#define V 1.5f\n"), _kernel("b", "V", "#define V 2.5f\n")]
    c = ClangCompiler(args=("-O1",))
    assert [_call(n, lib) for n, lib in zip("ab", c.compile_many(srcs))] == [1.5, 2.5]
    assert c.invocations == 1


def test_changed_source_in_a_batch_misses(cache: Path) -> None:
    ClangCompiler(args=("-O1",)).compile_many([_kernel("a", "1.0f"), _kernel("b", "2.0f")])
    c = ClangCompiler(args=("-O1",))
    libs = c.compile_many([_kernel("a", "4.0f"), _kernel("b", "2.0f")])
    assert [_call(n, lib) for n, lib in zip("ab", libs)] == [4.0, 2.0] and c.invocations == 1


def test_bad_kernel_in_a_batch_fails_alone(cache: Path) -> None:
    """The batch is rebuilt one kernel at a time: the error names the bad kernel, the others are cached."""
    good, bad = [_kernel("a", "1.0f"), _kernel("c", "3.0f")], _kernel("b", "2.0f +")
    c = ClangCompiler(args=("-O1",))
    with pytest.raises(ops_cpu.CompileError, match=r"out\[0\] = 2.0f \+"):
        c.compile_many([good[0], bad, good[1]])
    again = ClangCompiler(args=("-O1",))
    assert [_call(n, lib) for n, lib in zip("ac", again.compile_many(good))] == [1.0, 3.0]
    assert again.invocations == 0


def test_joined_helpers_of_one_name_and_different_bodies_do_not_compile_together(cache: Path) -> None:
    """A clash the join cannot resolve fails the batch, and each kernel is built alone with its own helper."""
    helper = "static inline float h(void) {{ return {}; }}\n"
    srcs = [helper.format("1.0f") + _kernel("a", "h()"), helper.format("2.0f") + _kernel("b", "h()")]
    c = ClangCompiler(args=("-O1",))
    assert [_call(n, lib) for n, lib in zip("ab", c.compile_many(srcs))] == [1.0, 2.0]
    assert c.invocations == 3  # the batch, then each alone


def test_assembler_rejecting_native_code_falls_back_to_the_generic_target(cache: Path, tmp_path: Path) -> None:
    """A compiler newer than its assembler (gcc 13, older binutils: "unsupported masking for `vmovsh'" on an
    AVX512-FP16 CPU) fails on -march=native code: the kernel is built for the generic target, with one warning."""
    wrapper = tmp_path / "bin" / "oldas-cc"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do if [ "$a" = -march=native ]; then\n'
        '  echo "/tmp/cc.s: Assembler messages:" >&2; echo "/tmp/cc.s:17: Error: unsupported masking for '
        "\\`vmovsh'\" >&2; exit 1\nfi; done\n"
        f'exec {CC} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    _clear_compiler_facts()
    cc = ClangCompiler(cc=str(wrapper), args=("-O1", "-march=native"))
    with pytest.warns(RuntimeWarning, match="assembler rejected -march=native"):
        assert run(cc.compile(SRC % "2.5f")) == 2.5
    # other compile errors still raise, naming the compiler's message
    with pytest.raises(ops_cpu.CompileError, match="failed to compile"):
        cc.compile("void k(float* restrict out) { out[0] = undefined_name; }\n")
    _clear_compiler_facts()
