"""The certificate check cannot be raced (docs/operators/certificates.md).

A symlink flipped between a certified library and an uncertified one while the
loader runs: the uncertified library's code (a constructor that writes a marker
file) must never run; every load loads the certified bytes or is refused.  Also:
a plugin's `$ORIGIN`-relative dependencies still resolve when it is loaded by its
real path, through its descriptor or from a private copy (fl_runtime.plugins.pinned).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_certificate import issue, keys, library  # noqa: F401  (fixtures)

from fl_runtime.plugins import certification as cert
from fl_runtime.plugins import pinned

EVIL_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void ran(void) {
    const char *marker = getenv("FL_RACE_MARKER");
    FILE *f = marker ? fopen(marker, "a") : NULL;
    if (f) { fputs("uncertified code ran\n", f); fclose(f); }
}
int fl_plugin_get_api(const void *requested, const void **out) { (void)requested; *out = 0; return 1; }
"""

FLIP = """
import os, sys
link, good, evil = sys.argv[1:4]
spare = link + ".next"
while True:
    for target in (good, evil):
        try:
            os.unlink(spare)
        except FileNotFoundError:
            pass
        os.symlink(target, spare)
        os.replace(spare, link)
"""

RACE = """
import json, os, subprocess, sys, time
from fl_runtime.plugins.certification import CertificationPolicy, trust_store
from fl_runtime.plugins.loader import PluginSource, load_plugin
from fl_runtime.errors import PluginLoadError, UncertifiedPluginError
link, good, evil, public, flip = sys.argv[1:6]
policy = CertificationPolicy(True, trust_store([public]))
# The flipper is another process, so it runs truly in parallel with the loads (no GIL).
flipper = subprocess.Popen([sys.executable, "-c", flip, link, good, evil])
time.sleep(0.2)
outcome = {"loaded": 0, "refused": 0, "other": [], "paths": set()}
for _ in range(200):
    try:
        plugin = load_plugin(PluginSource("race", link, "config"), policy)
        outcome["loaded"] += 1
        outcome["paths"].add(plugin.source.path)
        assert plugin.certification.certified
    except UncertifiedPluginError as exc:
        outcome["refused"] += 1
    except PluginLoadError as exc:
        outcome["other"].append(str(exc))
flipper.kill(); flipper.wait()
outcome["paths"] = sorted(outcome["paths"])
print(json.dumps(outcome))
"""


def _cc(source: str, out: Path, *flags: str) -> Path:
    # Plain ELF libraries for the pinned loader (no fl_abi.h, not plugins); the plugin is build_plugin's.
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True)
    return out


def test_a_symlink_flipped_during_loads_never_gets_uncertified_code_run(tmp_path, library, keys,  # noqa: F811
                                                                          build_plugin):
    source = tmp_path / "libevil.c"
    source.write_text(EVIL_C)
    evil = build_plugin(source, output=tmp_path / "libevil.so")
    link = tmp_path / "libplugin.so"
    link.symlink_to(library)
    issue(library, keys["private"])
    # The certificate is found beside the path the user gave (the symlink).
    cert.default_certificate_path(library).rename(cert.default_certificate_path(link))
    marker = tmp_path / "marker"
    result = subprocess.run(
        [_interpreter(), "-c", RACE, str(link), str(library), str(evil), str(keys["public"]), FLIP],
        env=_env({"FL_RACE_MARKER": str(marker)}), check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert not marker.exists(), f"the uncertified library ran: {marker.read_text()}"
    assert outcome["other"] == []
    assert outcome["loaded"] + outcome["refused"] == 200
    # The flip really raced the loads: both outcomes happened.
    assert outcome["loaded"] > 0 and outcome["refused"] > 0, outcome
    # Users see their own path, never /proc/self/fd/N.
    assert outcome["paths"] == [str(link)]


def _interpreter() -> str:
    import sys
    return sys.executable


def _env(extra: dict) -> dict:
    import os
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), **extra}


DEP_C = "int dep_value(void) { return 42; }\n"
PLUG_C = "int dep_value(void);\nint plug(void) { return dep_value(); }\n"

ORIGIN_PROBE = """
import ctypes, json, sys
from fl_runtime.plugins import pinned
if sys.argv[2] == "copy":
    pinned._PROC_FD = "/nonexistent/proc/self/fd"   # as on a system without /proc
library = pinned.open_pinned(sys.argv[1])
lib = pinned.load_pinned(library, ctypes.CDLL)
print(json.dumps({"value": lib.plug(), "loaded_as": library.loaded_as}))
"""


@pytest.mark.parametrize("how", ["path", "fd", "copy"])
def test_origin_relative_dependencies_resolve_when_loaded_pinned(tmp_path, how):
    # path: the plugin's directory is its owner's alone, so it is loaded by its real path;
    # fd and copy: a group that cannot write the library can write its directory, so the
    # descriptor is loaded (or, without /proc, a private copy).
    deps = tmp_path / "pkg" / "deps"
    deps.mkdir(parents=True)
    # A real dependency carries its soname (the linker matches DT_NEEDED to it).
    _cc(DEP_C, deps / "libdep.so", "-Wl,-soname,libdep.so")
    plugdir = tmp_path / "pkg" / "plugin"
    plugdir.mkdir()
    plug = _cc(PLUG_C, plugdir / "libplug.so", f"-L{deps}", "-ldep", "-Wl,-rpath,$ORIGIN/../deps")
    plug.chmod(0o755)
    plugdir.chmod(0o755 if how == "path" else 0o775)
    assert pinned.elf_needed_and_search_path_of(plug) == (["libdep.so"], ["$ORIGIN/../deps"])
    result = subprocess.run([_interpreter(), "-c", ORIGIN_PROBE, str(plug), how], env=_env({}), check=False,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["value"] == 42
    expected = {"path": str(plug), "fd": "/proc/self/fd/", "copy": "/torch-fl-plugin-"}[how]
    assert expected in outcome["loaded_as"], outcome


def test_the_reference_plugins_runpath_is_read(library):  # noqa: F811
    needed, search = pinned.elf_needed_and_search_path_of(library)
    assert "libscipy_openblas.so" in needed
    assert "$ORIGIN/../scipy_openblas32/lib" in search


def test_a_non_regular_file_is_refused(tmp_path):
    with pytest.raises(OSError, match="not a regular file"):
        pinned.open_pinned(str(tmp_path))


TWO_PROBE = """
import ctypes, json, sys
from fl_runtime.plugins import pinned
values = []
for path in sys.argv[1:]:
    lib = pinned.load_pinned(pinned.open_pinned(path), ctypes.CDLL)
    values.append(lib.value())
print(json.dumps(values))
"""


def test_libraries_loaded_one_after_another_are_each_their_own(tmp_path):
    # glibc matches loaded libraries by name too: a reused /proc/self/fd/N must not
    # hand back the library loaded before under that name.
    paths = [str(_cc(f"int value(void) {{ return {i}; }}\n", tmp_path / f"lib{i}.so")) for i in range(3)]
    result = subprocess.run([_interpreter(), "-c", TWO_PROBE, *paths], env=_env({}), check=False,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [0, 1, 2]
