"""Plugin discovery and ABI negotiation: a bad plugin is named,
explained and skipped, never fatal."""
import json

import pytest

from fl_runtime import abi
from fl_runtime.errors import IncompatibleABIError, PluginLoadError
from fl_runtime.plugins.loader import PluginSource, discover_sources, load_plugin
from conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="module")
def built(build_plugin):
    """Compile each fixture into a shared library; {name: path}."""
    return {source.stem: str(build_plugin(source)) for source in FIXTURES.glob("*.c")}


def test_reference_plugin_is_found_through_its_entry_point():
    sources = discover_sources()
    assert any(s.name == "reference" and s.origin == "entry point" for s in sources)


def test_env_and_config_paths_are_sources(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_FL_PLUGINS", f"{tmp_path}/a.so:{tmp_path}/b.so")
    sources = discover_sources((str(tmp_path / "c.so"),))
    origins = {s.name: s.origin for s in sources}
    assert origins["a"] == origins["b"] == "TORCH_FL_PLUGINS" and origins["c"] == "config"


def test_missing_library_is_named(tmp_path):
    with pytest.raises(PluginLoadError, match="does not exist"):
        load_plugin(PluginSource("ghost", str(tmp_path / "ghost.so"), "config"))


def test_file_that_is_not_a_library(tmp_path):
    path = tmp_path / "text.so"
    path.write_text("not ELF")
    with pytest.raises(PluginLoadError, match="cannot load"):
        load_plugin(PluginSource("text", str(path), "config"))


def test_library_without_entry_symbol(built):
    with pytest.raises(PluginLoadError, match="does not export 'fl_plugin_get_api'"):
        load_plugin(PluginSource("np", built["not_a_plugin"], "config"))


def test_plugin_refusing_our_abi_is_incompatible(built):
    with pytest.raises(IncompatibleABIError, match=rf"refuses ABI 1\.{abi.ABI_MINOR}"):
        load_plugin(PluginSource("future", built["plugin_refuses_abi"], "config"))


def test_plugin_answering_with_another_major_is_refused(built):
    with pytest.raises(IncompatibleABIError, match="speaks ABI 2.0"):
        load_plugin(PluginSource("buggy", built["plugin_claims_major2"], "config"))


def test_bad_plugins_are_skipped_and_reported_while_good_ones_work(built, python):
    env = {"TORCH_FL_PLUGINS": ":".join([built["plugin_refuses_abi"], built["not_a_plugin"], "/nope/x.so"])}
    result = python("""
        import json, torch, torch_fl
        rt = torch_fl.runtime()
        x = torch.ones(3, device="fl:0") * 2
        print(json.dumps({"devices": len(torch_fl.list_devices()), "value": x.cpu().tolist(),
                          "failures": [str(f.error) for f in rt.load_failures]}))
    """, env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["devices"] >= 2 and report["value"] == [2.0, 2.0, 2.0]
    assert len(report["failures"]) == 3
    assert "skipping plugin" in result.stderr     # logged at warning level


def test_no_plugin_gives_an_empty_list_with_a_reason(python, tmp_path):
    # Entry points are per environment: hide them by pointing the plugin group at nothing.
    result = python("""
        import importlib.metadata as md
        real = md.entry_points
        md.entry_points = lambda **kw: [] if kw.get("group") == "torch_fl.plugins" else real(**kw)
        import torch_fl
        print(torch_fl.list_devices()); print(torch_fl.why_no_devices())
    """, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert result.returncode == 0, result.stderr
    assert "[]" in result.stdout and "no Torch-FL plugin is installed" in result.stdout


def test_debug_logging_shows_every_probe_step(python, tmp_path):
    log_file = tmp_path / "logs" / "torch_fl.log"
    config = tmp_path / "config.yaml"
    config.write_text(f"logging:\n  level: debug\n  path: {log_file}\n"
                      "devices:\n  - type: reference\n    count: 1\n")
    result = python("import torch_fl", {"TORCH_FL_CONFIG": str(config), "TORCH_FL_PLUGINS": "/nope/libx.so"})
    assert result.returncode == 0, result.stderr
    for text in (result.stderr, log_file.read_text()):
        assert "loading plugin 'reference'" in text
        assert "reports 2 device(s)" in text
        assert "skipping plugin 'libx'" in text and "does not exist" in text
        assert "skipped: config count is 1" in text


def test_plugin_whose_driver_fails_is_left_out_with_the_reason(built, python):
    result = python("""
        import json, torch, torch_fl
        x = (torch.ones(2, device="fl:0") + 1).cpu().tolist()
        print(json.dumps({"types": [d["type"] for d in torch_fl.list_devices()], "x": x,
                          "notes": torch_fl.runtime().device_notes}))
    """, {"TORCH_FL_PLUGINS": built["plugin_broken_driver"]})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert "broken" not in report["types"] and report["types"].count("reference") >= 2
    assert report["x"] == [2.0, 2.0]
    assert any("broken-0 left out" in n and "simulated driver failure" in n for n in report["notes"])
