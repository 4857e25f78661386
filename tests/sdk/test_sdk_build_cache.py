"""`fl-sdk build` compiles each source once per content (fl_sdk/object_cache.py).

A tiny two-source library stands in for a plugin (the cache does not care what the
code does); ctypes calls it to prove the linked library is the one its sources say.
"""
from __future__ import annotations

import ctypes
import shutil
import uuid
from pathlib import Path

import pytest

from fl_sdk.build import BuildError, build

PLUGIN_YAML = "library: libtiny.so\nsources: [src/*.c]\n"
HEADER = "#pragma once\n#define SCALE 10\nint twice(int x);\n"
TWICE = '#include "tiny.h"\nint twice(int x) { return 2 * x; }\n'
ANSWER = '#include "tiny.h"\nint answer(void) { return SCALE * twice(2); }\n'


def make_plugin(root: Path, answer: str = ANSWER, header: str = HEADER) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "plugin.yaml").write_text(PLUGIN_YAML)
    (root / "src" / "tiny.h").write_text(header)
    (root / "src" / "twice.c").write_text(TWICE)
    (root / "src" / "answer.c").write_text(answer)
    return root


def answer_of(library: Path) -> int:
    # A copy per load: dlopen of a path already loaded returns the first library (and
    # overwriting a loaded copy would crash the process that mapped it).
    copy = library.with_name(f"{library.stem}-{uuid.uuid4().hex}.so")
    shutil.copy(library, copy)
    return ctypes.CDLL(str(copy)).answer()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "objects"
    monkeypatch.setenv("FL_SDK_BUILD_CACHE", str(directory))
    return directory


def test_a_copy_with_one_changed_source_compiles_only_that_source(tmp_path, cache):
    first = build(make_plugin(tmp_path / "a"))
    assert answer_of(first) == 40 and len(list(cache.glob("*.o"))) == 2
    second = build(make_plugin(tmp_path / "b", answer=ANSWER.replace("twice(2)", "twice(3)")))
    assert answer_of(second) == 60
    assert len(list(cache.glob("*.o"))) == 3          # twice.c came from the cache


def test_a_header_change_recompiles_every_source(tmp_path, cache):
    build(make_plugin(tmp_path / "a"))
    library = build(make_plugin(tmp_path / "b", header=HEADER.replace("SCALE 10", "SCALE 100")))
    assert answer_of(library) == 400
    assert len(list(cache.glob("*.o"))) == 4


def test_force_recompiles_and_the_result_is_the_same(tmp_path, cache):
    plugin = make_plugin(tmp_path / "a")
    build(plugin)
    stamps = {p.name: p.stat().st_mtime_ns for p in cache.glob("*.o")}
    library = build(plugin, force=True)
    assert answer_of(library) == 40
    assert {p.name for p in cache.glob("*.o")} == set(stamps)
    assert all(p.stat().st_mtime_ns >= stamps[p.name] for p in cache.glob("*.o"))


def test_cache_off_writes_nothing_outside_the_plugin(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_SDK_BUILD_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert answer_of(build(make_plugin(tmp_path / "a"))) == 40
    assert not (tmp_path / "xdg").exists()


def test_a_compile_error_names_the_source_and_leaves_no_library(tmp_path, cache):
    plugin = make_plugin(tmp_path / "a", answer="int answer(void) { return undeclared; }\n")
    with pytest.raises(BuildError, match=r"answer\.c.*undeclared"):
        build(plugin)
    assert not (plugin / "libtiny.so").exists()
    assert not list(cache.glob("*.partial"))


def test_a_change_to_an_included_file_of_another_suffix_rebuilds(tmp_path, cache):
    """Kernel code in another language travels as an included file (plugins/opencl's
    `*.cl` programs): its change must rebuild, though it is no `.h`."""
    plugin = make_plugin(tmp_path / "a", answer='#include "tiny.h"\nint answer(void) {\n#include "factor.inc"\n}\n')
    (plugin / "src" / "factor.inc").write_text("return 7 * twice(2);\n")
    assert answer_of(build(plugin)) == 28
    (plugin / "src" / "factor.inc").write_text("return 9 * twice(2);\n")
    assert answer_of(build(plugin)) == 36


def test_a_deleted_source_rebuilds_the_library(tmp_path, cache):
    """Up to date means built from today's sources: a source that is gone leaves no
    stale code behind (the build record beside the library lists the sources)."""
    root = make_plugin(tmp_path / "a")
    (root / "src" / "extra.c").write_text("int extra(void) { return 7; }\n")
    library = build(root)
    copy = library.with_name("with-extra.so")
    shutil.copy(library, copy)
    assert ctypes.CDLL(str(copy)).extra() == 7
    (root / "src" / "extra.c").unlink()
    build(root)
    copy = library.with_name("without-extra.so")
    shutil.copy(library, copy)
    assert not hasattr(ctypes.CDLL(str(copy)), "extra")


def test_a_missing_compiler_is_named_in_one_line(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(BuildError, match=r"^CC=/nonexistent/cc names no compiler .* set CC to an installed"):
        build(make_plugin(tmp_path / "a"), force=True)
