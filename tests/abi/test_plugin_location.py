"""A plugin that finds its own files with dladdr() + dirname() loads
(docs/vendors/plugin-location.md, fl_runtime/plugins/pinned.py).

tests/fixtures/plugin_self_locating.c locates its install directory with dladdr in its
constructor and again in fl_plugin_get_api, and forwards to a private library it finds
there.  Installed as pip would (files and directories writable by their owner only), it
loads under its real path and computes, with and without `require_certified`, reached
through a symlink too, and under `fl-sdk test`.  Installed where another group could
switch the path, it is loaded through its verified descriptor instead, and the failure
says why.  The certificate race itself is tests/sdk/test_certificate_race.py's.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from conftest import ROOT
from test_certificate import issue, keys  # noqa: F401  (fixtures)
from test_conformance_reference import fl_sdk_test

from fl_runtime.plugins import pinned
from fl_runtime.plugins.loader import PluginSource, load_plugin

SOURCE = ROOT / "tests" / "fixtures" / "plugin_self_locating.c"
FAULTY = ROOT / "tests" / "fixtures" / "plugin_faulty.c"
REFERENCE = ROOT / "reference_vendor" / "libfl_reference.so"
PLUGIN, PRIVATE = "libfl_selfloc.so", "libselfloc_private.so"


REFERENCE_DEFINE = f'-DREFERENCE_PATH="{REFERENCE}"'


@pytest.fixture(scope="module")
def built(tmp_path_factory, build_plugin) -> Path:
    """The plugin and its private library, built once, in a directory of their own."""
    if not REFERENCE.is_file():
        pytest.fail(f"{REFERENCE} is not built: python -m fl_sdk build reference_vendor")
    out = tmp_path_factory.mktemp("selfloc-build")
    build_plugin(SOURCE, REFERENCE_DEFINE, output=out / PLUGIN)
    build_plugin(SOURCE, REFERENCE_DEFINE, "-DPRIVATE_PART", output=out / PRIVATE)
    return out


def _install(built: Path, where: Path, directory_mode: int = 0o755) -> Path:
    """Copy the two libraries into `where` (mode 0755 files, `directory_mode` directory),
    as a package manager would; returns the plugin's path."""
    where.mkdir(parents=True)
    for name in (PLUGIN, PRIVATE):
        (where / name).write_bytes((built / name).read_bytes())
        (where / name).chmod(0o755)
    where.chmod(directory_mode)
    return where / PLUGIN


_SCRIPT = """
import ctypes, json, os, torch, torch_fl
rt = torch_fl.runtime()
devices = [d["device"] for d in torch_fl.list_devices() if d["type"] == "selfloc"]
a = torch.arange(12.0).reshape(3, 4)
results = [torch.equal((a.to(dev) @ a.t().to(dev)).cpu(), a @ a.t()) for dev in devices]
plugin = next((p for p in rt.plugins if p.name == "selfloc"), None)
real = os.path.realpath(os.environ["TORCH_FL_PLUGINS"])
seen = ctypes.CDLL(real, mode=os.RTLD_NOLOAD).selfloc_seen
seen.restype = ctypes.c_char_p
print("@@@" + json.dumps({
    "devices": devices, "results": results, "failures": [str(f.error) for f in rt.load_failures],
    "certified": plugin.certification.certified if plugin else None,
    "note": plugin.location_note if plugin else None, "seen": seen().decode().split(chr(10))}))
"""


def _run(python, plugin: Path, tmp_path: Path, config: Path | None = None) -> dict:
    env = {"TORCH_FL_PLUGINS": str(plugin), "TORCH_FL_DISABLE_ENTRY_POINTS": "1", "TORCH_FL_PROBE_PLUGINS": "1",
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONWARNINGS": "ignore"}
    if config is not None:
        env["TORCH_FL_CONFIG"] = str(config)
    result = python(_SCRIPT, env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.split("@@@", 1)[1])


def test_a_self_locating_plugin_loads_and_computes_through_a_symlink(python, built, tmp_path):
    # The user's path is a symlink in another directory: dladdr names the real file, so the
    # private library is found beside it (as realpath() would find it), in the constructor too.
    plugin = _install(built, tmp_path / "vendor")
    link = tmp_path / "links" / PLUGIN
    link.parent.mkdir()
    link.symlink_to(plugin)
    report = _run(python, link, tmp_path)
    assert report["failures"] == [] and report["devices"], report
    assert all(report["results"]), report
    assert report["seen"] == [str(plugin.parent)] * 2, report
    assert report["note"] == ""


def test_a_self_locating_plugin_loads_when_certificates_are_required(python, built, tmp_path, keys):  # noqa: F811
    plugin = _install(built, tmp_path / "vendor")
    issue(plugin, keys["private"])
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"certification": {"require_certified": True,
                                                    "trusted_keys": [str(keys["public"])]}}))
    report = _run(python, plugin, tmp_path, config)
    assert report["failures"] == [] and report["devices"] and all(report["results"]), report
    assert report["certified"] is True
    assert report["seen"] == [str(plugin.parent)] * 2, report


def test_fl_sdk_test_loads_a_self_locating_plugin_under_its_real_path(built, tmp_path):
    plugin = _install(built, tmp_path / "vendor")
    result, report, _ = fl_sdk_test(str(plugin), tmp_path, "-k", "loaded_under_its_real_path or negotiation")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    names = {t["nodeid"].split("::")[-1].split("[")[0] for t in report["tests"] if t["status"] == "pass"}
    assert "test_loaded_under_its_real_path" in names, report["tests"]


def test_an_install_another_group_can_change_loads_through_the_descriptor_and_says_why(
        built, tmp_path, monkeypatch):
    # The directory is writable by a group that cannot write the library: its name could be
    # switched between the check and the load, so the verified descriptor is loaded, which
    # this plugin cannot locate itself from.  The refusal says so (probed, as at start-up).
    plugin = _install(built, tmp_path / "shared", directory_mode=0o775)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(Exception, match="FL_ERROR_DRIVER") as caught:
        load_plugin(PluginSource("selfloc", str(plugin), "config"), probe_plugins=True)
    message = str(caught.value)
    assert f"it was loaded as {pinned._PROC_FD}/" in message, message
    assert f"{plugin.parent} can be changed by group {plugin.parent.stat().st_gid}" in message, message
    assert "docs/vendors/plugin-location.md" in message


def test_the_conformance_check_names_why_a_plugin_is_not_under_its_real_path(tmp_path, build_plugin):
    # A plugin that does not look for itself loads either way; the suite still tells its
    # vendor that theirs would not find its files, and why.
    where = tmp_path / "shared"
    where.mkdir()
    build_plugin(FAULTY, REFERENCE_DEFINE, output=where / "libfl_plain.so").chmod(0o755)
    where.chmod(0o775)
    result, report, _ = fl_sdk_test(str(where / "libfl_plain.so"), tmp_path, "-k", "loaded_under_its_real_path")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    [failure] = report["tests"]
    assert failure["status"] == "fail", failure
    assert f"{where} can be changed by group" in failure["message"], failure["message"]


# -- the rule: who could change what the real path names ------------------------------

def _stat(mode: int, uid: int = 1000, gid: int = 1000) -> os.stat_result:
    return os.stat_result((mode, 1, 1, 1, uid, gid, 0, 0, 0, 0))


LIBRARY = _stat(stat.S_IFREG | 0o755)


@pytest.mark.parametrize("directory, library, who", [
    (_stat(stat.S_IFDIR | 0o755), LIBRARY, ""),
    (_stat(stat.S_IFDIR | 0o755, uid=0, gid=0), LIBRARY, ""),                         # root's
    (_stat(stat.S_IFDIR | 0o755, uid=1001), LIBRARY, "its owner (uid 1001)"),
    (_stat(stat.S_IFDIR | 0o775, gid=1000), LIBRARY, "group 1000"),
    (_stat(stat.S_IFDIR | 0o775), _stat(stat.S_IFREG | 0o775), ""),        # the group can write the library
    (_stat(stat.S_IFDIR | 0o775, gid=5), _stat(stat.S_IFREG | 0o775), "group 5"),     # another group
    (_stat(stat.S_IFDIR | 0o757), LIBRARY, "every user"),
    (_stat(stat.S_IFDIR | 0o1777, uid=0, gid=0), LIBRARY, ""),                  # /tmp: sticky
    (_stat(stat.S_IFDIR | 0o777, uid=7), _stat(stat.S_IFREG | 0o757), ""),   # anyone can write the library
    (_stat(stat.S_IFLNK | 0o777), LIBRARY, "whoever can replace it (it is no longer a directory)"),
], ids=["owner-only", "root", "another-owner", "group-writable", "group-writes-library-too",
        "other-group", "world-writable", "sticky", "world-writable-library", "symlink"])
def test_who_else_could_change_a_directory_on_the_path(directory, library, who):
    assert pinned._other_writer(directory, library) == who


def test_a_replaced_file_is_not_loaded_by_its_path(tmp_path):
    (tmp_path / "lib.so").write_bytes(b"first")
    library = pinned.open_pinned(str(tmp_path / "lib.so"))
    try:
        assert pinned.real_path_or_reason(library) == (str(tmp_path / "lib.so"), "")
        (tmp_path / "new.so").write_bytes(b"second")
        os.replace(tmp_path / "new.so", tmp_path / "lib.so")
        real, why = pinned.real_path_or_reason(library)
        assert real == "" and "no longer names the file that was opened and hashed" in why
    finally:
        library.close()
