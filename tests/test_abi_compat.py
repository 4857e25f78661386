"""ABI compatibility, proven: a plugin built from the frozen ABI 1.0 header runs under this runtime.

tests/fixtures/abi_1_0/ holds fl_abi.h exactly as ABI 1.0 shipped it and a small
plugin compiled against it (its table is the 1.0 table: shorter than today's,
minor 0).  The runtime must load it, give it devices, run work on them, report
that it offers no 1.1 feature set (collectives), and the conformance suite's
1.0 categories must pass on it (fl_abi.h, "COMPATIBILITY PROMISE").
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from fl_runtime import abi
from fl_runtime.abi import ffi, outofline
from fl_sdk.build import compiler

FIXTURE = ROOT / "tests" / "fixtures" / "abi_1_0"
REFERENCE_LIB = ROOT / "reference_vendor" / "libfl_reference.so"


@pytest.fixture(scope="module")
def abi10_plugin(tmp_path_factory):
    lib = tmp_path_factory.mktemp("abi10") / "libplugin_abi10.so"
    # Only the frozen header is on the include path: the plugin cannot see 1.1.
    subprocess.run([compiler(), "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", f"-I{FIXTURE}",
                    str(FIXTURE / "plugin_abi10.c"), "-o", str(lib)], check=True)
    return lib


def _env(lib) -> dict:
    return {"TORCH_FL_PLUGINS": str(lib), "TORCH_FL_DISABLE_ENTRY_POINTS": "1",
            "FL_ABI10_INNER": str(REFERENCE_LIB)}


def _frozen_ffi():
    """The frozen header read the way the runtime reads today's (abi.outofline's generated
    module), so type names compare like with like: an out-of-line ffi names a tagged typedef
    'struct fl_x' where an in-line cdef says 'fl_x'."""
    text = (FIXTURE / "fl_abi.h").read_text()
    region = text.split("/* FL_CDEF_BEGIN */", 1)[1].split("/* FL_CDEF_END */", 1)[0]
    frozen = outofline.execute_source(outofline.generate_source(region)[0], FIXTURE / "fl_abi.h")
    assert isinstance(frozen, type(ffi)), "the frozen header's module did not build"
    return frozen


def test_frozen_header_is_abi_1_0_and_todays_table_only_appends_to_it():
    """Every 1.0 struct keeps its fields at the same offsets with the same types (append-only)."""
    frozen = _frozen_ffi()
    consts = frozen.dlopen(None)
    assert (consts.FL_ABI_VERSION_MAJOR, consts.FL_ABI_VERSION_MINOR) == (1, 0)
    assert (abi.ABI_MAJOR, abi.ABI_MINOR, abi.ABI_MIN_SUPPORTED_MINOR) == (1, 1, 0)
    for type_name in ("fl_api", "fl_abi_version", "fl_device_properties", "fl_tensor", "fl_arg",
                      "fl_kernel_entry", "fl_plugin_info"):
        old_fields = frozen.typeof(type_name).fields
        new_fields = ffi.typeof(type_name).fields
        assert [n for n, _ in new_fields[:len(old_fields)]] == [n for n, _ in old_fields], type_name
        for name, field in old_fields:
            assert frozen.offsetof(type_name, name) == ffi.offsetof(type_name, name), (type_name, name)
            assert field.type.cname == dict(new_fields)[name].type.cname, (type_name, name)
    assert frozen.sizeof("fl_api") == ffi.offsetof("fl_api", "extension_start")    # 1.1 appends one field
    old_status = dict(frozen.typeof("fl_status").elements)
    assert {k: v for k, v in abi.STATUS_NAMES.items() if k in old_status} == old_status


def test_abi_1_0_plugin_loads_gets_devices_and_runs(python, abi10_plugin):
    result = python("""
        import json, torch, torch_fl
        from fl_runtime.integration.process import start
        rt = start()
        devices = torch_fl.list_devices()
        a = torch.arange(12.0).reshape(3, 4)
        b = (a.to("fl:1") * 2 + 1).sum(0).cpu()
        from fl_runtime.plugins.extensions import collectives_of
        print(json.dumps({"devices": [(d["device"], d["abi"], d["plugin"]) for d in devices],
                          "result": b.tolist(), "expected": (a * 2 + 1).sum(0).tolist(),
                          "collectives": [collectives_of(p) is not None for p in rt.plugins]}))
    """, _env(abi10_plugin))
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["devices"] == [["fl:0", "1.0", "abi10"], ["fl:1", "1.0", "abi10"]]
    assert got["result"] == got["expected"]
    assert got["collectives"] == [False]          # a 1.0 table has no extension chain to read


def test_abi_1_0_plugin_passes_the_1_0_conformance_categories(abi10_plugin, tmp_path):
    """And its collectives category is not_supported."""
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), **_env(abi10_plugin)}
    result = subprocess.run([sys.executable, "-m", "fl_sdk", "test", str(abi10_plugin), "--profile", "ci",
                             "--json", str(report), "-k", "abi or memory or streams or collective"],
                            capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    document = json.loads(report.read_text())
    categories = {t["category"] for t in document["tests"]}
    assert {"abi", "memory", "streams", "collectives"} <= categories, categories
    assert document["summary"]["fail"] == 0
    assert document["summary"]["pass"] > 0
    # A 1.0 table cannot offer collectives: the category says not_supported, never fail or pass.
    assert document["summary"]["categories"]["collectives"] == {"not_supported": 15}
