"""The isolated probe's verdict cache and switch (fl_runtime.plugins.probe,
docs/operators/plugins.md "Isolated probing"): one child per library build, never one per start-up; the
bytes probed are the bytes the loader holds, not whatever the path names later.
The faulty plugins themselves are tests/abi/test_faulty_plugins.py's."""
from __future__ import annotations

import shutil

import pytest
from conftest import ROOT

from fl_runtime.config import parse_config
from fl_runtime.plugins import probe
from fl_runtime.plugins.pinned import open_pinned

REFERENCE = ROOT / "reference_vendor" / "libfl_reference.so"
FAULTY = ROOT / "tests" / "fixtures" / "plugin_faulty.c"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "torch_fl" / "probe"


@pytest.fixture
def spawned(monkeypatch):
    """Every child the probe starts, by library path."""
    calls: list[str] = []
    real = probe.run_probe

    def counting(pinned, timeout):
        calls.append(pinned.path)
        return real(pinned, timeout)
    monkeypatch.setattr(probe, "run_probe", counting)
    return calls


def _verdict(path) -> probe.Verdict:
    pinned = open_pinned(str(path))
    try:
        return probe.verdict_for(pinned)
    finally:
        pinned.close()


@pytest.fixture
def faulty(tmp_path, build_plugin):
    """faulty(fault) -> the fixture built with -DFAULT=fault, copied to tmp_path/lib<fault>.so
    (a copy of this test's own: one test moves it over another library)."""
    def build(fault: str):
        return build_plugin(FAULTY, f'-DREFERENCE_PATH="{REFERENCE}"', f"-DFAULT={fault}",
                            output=tmp_path / f"lib{fault}.so")
    return build


def test_the_verdict_is_cached_and_reused_until_the_bytes_change(tmp_path, cache, spawned):
    lib = tmp_path / "libplug.so"
    shutil.copy(REFERENCE, lib)
    assert _verdict(lib).outcome == probe.OK
    assert _verdict(lib).outcome == probe.OK
    assert len(spawned) == 1                                  # the second start-up spawned nothing
    assert len(list(cache.glob("*.json"))) == 1
    with open(lib, "ab") as handle:                           # another build: other bytes, other hash
        handle.write(b"\0rebuilt")
    assert _verdict(lib).outcome == probe.OK
    assert len(spawned) == 2 and len(list(cache.glob("*.json"))) == 2


def test_a_crash_verdict_is_cached_with_its_signal(cache, spawned, faulty):
    lib = faulty("get_api_abort")
    first, second = _verdict(lib), _verdict(lib)
    assert first == second and first.outcome == probe.CRASHED and first.signal == "SIGABRT"
    assert "abort() in fl_plugin_get_api" in first.message
    assert len(spawned) == 1


def test_the_bytes_probed_are_the_pinned_ones_not_the_paths(tmp_path, cache, faulty):
    # The path is swapped for a crashing library after the loader opened it: the probe
    # (like the load) sees the opened bytes (fl_runtime.plugins.pinned).
    lib = tmp_path / "libplug.so"
    shutil.copy(REFERENCE, lib)
    pinned = open_pinned(str(lib))
    try:
        faulty("get_api_abort").replace(lib)
        assert probe.verdict_for(pinned).outcome == probe.OK
    finally:
        pinned.close()
    assert _verdict(lib).outcome == probe.CRASHED             # the new bytes, opened anew


def test_a_damaged_cache_entry_is_probed_again(tmp_path, cache, spawned):
    lib = tmp_path / "libplug.so"
    shutil.copy(REFERENCE, lib)
    _verdict(lib)
    entry = next(cache.glob("*.json"))
    entry.write_text("{not json")
    assert _verdict(lib).outcome == probe.OK and len(spawned) == 2


def test_exit_in_a_constructor_is_refused_like_a_crash(cache, faulty):
    from fl_runtime.errors import PluginProbeError
    lib = faulty("constructor_exit")
    pinned = open_pinned(str(lib))
    try:
        with pytest.raises(PluginProbeError, match="ended its isolated probe's process without a verdict") as error:
            probe.check_isolated("exits", pinned)
    finally:
        pinned.close()
    assert "exit status 3" in str(error.value) and error.value.signal == ""


def test_a_hang_is_reported_and_not_cached(cache, monkeypatch, faulty):
    lib = faulty("get_api_hang")
    monkeypatch.setenv(probe.TIMEOUT_ENV, "1")
    assert _verdict(lib).outcome == probe.HUNG
    assert not cache.exists() or not list(cache.glob("*.json"))


@pytest.mark.parametrize("env, config, expected", [
    ("", True, True), ("", False, False), ("0", True, False), ("1", False, True), ("off", True, False)])
def test_the_environment_overrides_the_config_key(monkeypatch, env, config, expected):
    monkeypatch.setenv(probe.PROBE_ENV, env)
    assert probe.probing_enabled(config) is expected


def test_the_config_key(tmp_path):
    from fl_runtime.errors import ConfigError
    assert parse_config({}).probe_plugins is True
    assert parse_config({"probe_plugins": False}).probe_plugins is False
    with pytest.raises(ConfigError, match="probe_plugins"):
        parse_config({"probe_plugins": "no"})


def test_the_child_imports_neither_torch_nor_the_runtime_package(tmp_path, cache, monkeypatch):
    # The probe's cost is an interpreter and cffi; torch (seconds) would make every
    # first start-up after an install pay twice.  A `torch` that refuses to import proves it.
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "torch.py").write_text("raise SystemExit('the probe child imported torch')\n")
    monkeypatch.setenv("PYTHONPATH", f"{fake}:{ROOT}")
    lib = tmp_path / "libplug.so"
    shutil.copy(REFERENCE, lib)
    assert _verdict(lib) == probe.Verdict(probe.OK)


def test_without_an_interpreter_to_start_the_library_loads_unprobed(tmp_path, cache, monkeypatch):
    # An embedding application's sys.executable may not be Python: no child, no refusal.
    monkeypatch.setattr(probe.sys, "executable", str(tmp_path / "no-such-python"))
    lib = tmp_path / "libplug.so"
    shutil.copy(REFERENCE, lib)
    assert _verdict(lib).outcome == probe.UNPROBED
    assert not cache.exists() or not list(cache.glob("*.json"))      # tried again next time
