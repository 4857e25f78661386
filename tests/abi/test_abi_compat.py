"""ABI compatibility, proven: plugins built from the frozen ABI 1.0 to 1.3 headers run under this runtime.

tests/fixtures/abi_1_0/ to abi_1_3/ hold the headers exactly as each minor shipped them and a
small plugin compiled against each (its table is that minor's table: shorter than today's; the
1.1 one carries the 1.1 collectives extension, the 1.2 one pinned host memory and the
collectives, the 1.3 one the IPC extension too, and serves the collectives as a 1.3 plugin
would: the runtime's 1.4 structs, with extension_start appended, in; the 1.3 structs out to the
1.4 plugin doing the work).  The runtime must load them, give them devices, run work on them,
read the feature sets each offers (1.0: none; 1.1: collectives; 1.2: and pinned host memory;
1.3: and IPC), never call what their minor lacks (plugin_initialize before 1.2), and the
conformance suite's categories of their minor must pass on them (fl_abi.h, "COMPATIBILITY
PROMISE").
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest
from conftest import ROOT

from fl_runtime import abi
from fl_runtime.abi import ffi, header, outofline

REFERENCE_LIB = ROOT / "reference_vendor" / "libfl_reference.so"


@dataclass(frozen=True)
class Frozen:
    minor: int
    name: str                # the fixture plugin's plugin_name and device type

    @property
    def folder(self):
        return ROOT / "tests" / "fixtures" / f"abi_1_{self.minor}"

    @property
    def inner_env(self) -> str:     # where the fixture finds the plugin doing its work
        return f"FL_ABI1{self.minor}_INNER"


FROZEN = [Frozen(minor, f"abi1{minor}") for minor in range(4)]
FROZEN_IDS = [f"abi_1_{fixture.minor}" for fixture in FROZEN]
# The functions of today's table that the 1.0 and 1.1 tables end before (ABI 1.2's).
NEWER_FUNCTIONS = {"plugin_initialize", "plugin_teardown", "stream_create_ex", "launch_kernel_ex"}


@pytest.fixture(scope="module", params=FROZEN, ids=FROZEN_IDS)
def frozen(request, build_plugin):
    fixture = request.param
    # Only the frozen header is on the include path: the plugin cannot see a later minor.
    lib = build_plugin(fixture.folder / f"plugin_{fixture.name}.c", include_dirs=[fixture.folder])
    return fixture, lib


def _env(fixture: Frozen, lib) -> dict:
    return {"TORCH_FL_PLUGINS": str(lib), "TORCH_FL_DISABLE_ENTRY_POINTS": "1", fixture.inner_env: str(REFERENCE_LIB)}


def _frozen_ffi(fixture: Frozen):
    """The frozen header read the way the runtime reads today's (abi.outofline's generated
    module), so type names compare like with like: an out-of-line ffi names a tagged typedef
    'struct fl_x' where an in-line cdef says 'fl_x'."""
    region = header.read_cdef(fixture.folder / "fl_abi.h")
    frozen = outofline.execute_source(outofline.generate_source(region)[0], fixture.folder / "fl_abi.h")
    assert isinstance(frozen, type(ffi)), "the frozen header's module did not build"
    return frozen


@pytest.mark.parametrize("fixture", FROZEN, ids=FROZEN_IDS)
def test_frozen_header_is_its_minor_and_todays_structs_only_append_to_it(fixture):
    """Every struct of the frozen minor keeps its fields at the same offsets with the same types
    (the collectives' args structs included, which 1.4 appends extension_start to)."""
    old = _frozen_ffi(fixture)
    consts = old.dlopen(None)
    assert (consts.FL_ABI_VERSION_MAJOR, consts.FL_ABI_VERSION_MINOR) == (1, fixture.minor)
    assert (abi.ABI_MAJOR, abi.ABI_MINOR, abi.ABI_MIN_SUPPORTED_MINOR) == (1, 4, 0)
    structs = re.findall(r"^typedef struct (fl_\w+) \{", header.read_cdef(fixture.folder / "fl_abi.h"), re.M)
    assert "fl_api" in structs and ("fl_all_reduce_args" in structs) == (fixture.minor >= 1)
    for type_name in structs:
        old_fields = old.typeof(type_name).fields
        new_fields = ffi.typeof(type_name).fields
        assert [n for n, _ in new_fields[:len(old_fields)]] == [n for n, _ in old_fields], type_name
        for name, field in old_fields:
            assert old.offsetof(type_name, name) == ffi.offsetof(type_name, name), (type_name, name)
            assert field.type.cname == dict(new_fields)[name].type.cname, (type_name, name)
    last = {0: "launch_kernel", 1: "extension_start", 2: "launch_kernel_ex", 3: "launch_kernel_ex"}[fixture.minor]
    assert old.sizeof("fl_api") == ffi.offsetof("fl_api", last) + ffi.sizeof("void*")   # later minors append
    old_status = dict(old.typeof("fl_status").elements)
    assert {k: v for k, v in abi.STATUS_NAMES.items() if k in old_status} == old_status
    old_dtypes = dict(old.typeof("fl_dtype").elements)
    new_dtypes = dict(ffi.typeof("fl_dtype").elements)
    kept = {code: name for code, name in old_dtypes.items() if name != "FL_DTYPE_COUNT"}
    assert {code: new_dtypes[code] for code in kept} == kept       # every old dtype keeps its code


def test_frozen_plugin_loads_gets_devices_and_runs(python, frozen):
    fixture, lib = frozen
    result = python("""
        import json, torch, torch_fl
        from fl_runtime.integration.process import start
        rt = start()
        devices = torch_fl.list_devices()
        a = torch.arange(12.0).reshape(3, 4)
        b = (a.to("fl:1") * 2 + 1).sum(0).cpu()
        from fl_runtime.plugins.extensions import collectives_of, ipc_of
        print(json.dumps({"devices": [(d["device"], d["abi"], d["plugin"]) for d in devices],
                          "result": b.tolist(), "expected": (a * 2 + 1).sum(0).tolist(),
                          "collectives": [collectives_of(p) is not None for p in rt.plugins],
                          "host_memory": [p.host_memory is not None for p in rt.plugins],
                          "ipc": [ipc_of(p) is not None for p in rt.plugins]}))
    """, _env(fixture, lib))
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    version = f"1.{fixture.minor}"
    assert got["devices"] == [["fl:0", version, fixture.name], ["fl:1", version, fixture.name]]
    assert got["result"] == got["expected"]
    # A 1.0 table has no extension chain to read; the 1.1 one chains the collectives.
    assert got["collectives"] == [fixture.minor >= 1]
    assert got["host_memory"] == [fixture.minor >= 2]     # ABI 1.2's extension
    assert got["ipc"] == [fixture.minor >= 3]             # ABI 1.3's


def test_frozen_plugin_passes_its_minors_conformance_categories(frozen, tmp_path):
    """abi, memory and streams pass; collectives pass on 1.1 and are not_supported on 1.0; the
    1.2 lifecycle checks are not_supported on 1.0 and 1.1 (their tables end before it) and pass
    on 1.2 and 1.3; the 1.3 IPC checks are not_supported before 1.3 and pass on 1.3."""
    fixture, lib = frozen
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), **_env(fixture, lib)}
    # Test-file names, not bare words: -k also matches the plugin's name ("abi10"), which would
    # select every kernel test.
    keyword = "suite_abi or suite_memory or suite_streams or " + (
        "suite_collectives" if fixture.minor == 0 else "(all_reduce and 2ranks)")
    result = subprocess.run([sys.executable, "-m", "fl_sdk", "test", str(lib), "--profile", "ci",
                             "--json", str(report), "-k", keyword],
                            capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    document = json.loads(report.read_text())
    categories = {t["category"] for t in document["tests"]}
    assert {"abi", "memory", "streams", "collectives"} <= categories, categories
    assert document["summary"]["fail"] == 0
    assert document["summary"]["pass"] > 0
    lifecycle = {t["test"]: t["status"] for t in document["tests"] if "lifecycle" in t["test"] or "_ex_" in t["test"]
                 or t["test"].removeprefix("test_function_pointer_is_set[").rstrip("]") in NEWER_FUNCTIONS}
    assert len(lifecycle) == 3 + len(NEWER_FUNCTIONS), lifecycle
    assert set(lifecycle.values()) == ({"pass"} if fixture.minor >= 2 else {"not_supported"}), lifecycle
    ipc = {t["test"]: t["status"] for t in document["tests"] if t["test"].startswith("test_ipc_")}
    assert ipc and set(ipc.values()) == ({"pass"} if fixture.minor >= 3 else {"not_supported"}), ipc
    collectives = document["summary"]["categories"]["collectives"]
    if fixture.minor == 0:     # a 1.0 table cannot offer collectives: not_supported, never fail or pass
        assert collectives == {"not_supported": 15}
    else:
        assert collectives.get("pass", 0) > 0 and not collectives.get("fail"), collectives
