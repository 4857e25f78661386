"""One bad plugin never takes `import torch` down (docs/operators/plugins.md).

tests/fixtures/plugin_faulty.c re-exports the reference plugin's table with one
fault chosen at build time (-DFAULT=...).  Each is loaded next to the reference
plugin in a fresh interpreter: the reference devices still compute the CPU's
results, the faulty plugin is refused (or, for a bad kernel table, its kernels
are) with a reason naming the plugin and the field, and `torch-fl doctor --json`
shows it.  A plugin that aborts or segfaults in its constructor or entry point,
or hangs there, is caught by the isolated probe (fl_runtime.plugins.probe): the
process survives and the reason names the signal.  The probe cache lives in a
per-module directory, so every run probes afresh.
"""
import json
import os
from pathlib import Path

import pytest
from conftest import ROOT


SOURCE = ROOT / "tests" / "fixtures" / "plugin_faulty.c"
REFERENCE = ROOT / "reference_vendor" / "libfl_reference.so"




_SCRIPT = """
import json, torch, torch_fl
from fl_runtime.tools.cli import main
rt = torch_fl.runtime()
a = torch.arange(12.0).reshape(3, 4)
ref = [d["device"] for d in torch_fl.list_devices() if d["type"] == "reference"]
results = [torch.equal((a.to(dev) @ a.t().to(dev)).cpu(), a @ a.t()) for dev in ref]
report = {"reference": ref, "results": results,
          "faulty": [d["device"] for d in torch_fl.list_devices() if d["type"] == "zz_faulty"],
          "load_failures": [str(f.error) for f in rt.load_failures],
          "notes": list(rt.device_notes)}
print("@@@" + json.dumps(report))
main(["doctor", "--json"])
"""

# fault -> (the text naming the field, the doctor check that shows it)
FAULTS = {
    "info_null": ("info = NULL", "plugins load"),
    "null_function": ("memcpy_h2d_async = NULL", "plugins load"),
    "huge_device_count": ("device_count reported 2147483647 devices", "driver"),
    "negative_device_count": ("device_count reported -1 devices", "driver"),
    "kernel_op_null": ("kernel_table entry 0 has op = NULL", "logs"),
    "huge_kernel_count": ("kernel_table reported 4294967295 entries", "logs"),
}
# Faults that would kill or hang the process that loads the library: the isolated probe's.
# All three load in one process next to the reference (one interpreter start for CI).  A
# hang (-DFAULT=get_api_hang) is tests/abi/test_plugin_probe.py's: its timeout here would race
# the reference's own probe on a loaded machine.
CRASHES = {
    "constructor_abort": "crashed with SIGABRT during its isolated probe",
    "get_api_abort": "crashed with SIGABRT during its isolated probe",
    "get_api_segfault": "crashed with SIGSEGV during its isolated probe",
}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    if not REFERENCE.is_file():
        pytest.fail(f"{REFERENCE} is not built: python -m fl_sdk build reference_vendor")
    return tmp_path_factory.mktemp("faulty")


@pytest.fixture(scope="module")
def faulty(out, build_plugin):
    """faulty(fault) -> the fixture built with -DFAULT=fault (None: none), as out/libfaulty_<fault>.so."""
    def build(fault: str | None) -> str:
        defines = [f"-DFAULT={fault}"] if fault else []
        return str(build_plugin(SOURCE, f'-DREFERENCE_PATH="{REFERENCE}"', *defines,
                                output=out / f"libfaulty_{fault or 'none'}.so"))
    return build


def _run(python, lib: str) -> tuple[dict, dict]:
    cache = Path(lib.split(os.pathsep)[0]).parent / "cache"
    result = python(_SCRIPT, {"TORCH_FL_PLUGINS": lib, "PYTHONWARNINGS": "ignore", "XDG_CACHE_HOME": str(cache),
                              "TORCH_FL_PROBE_PLUGINS": "1"},
                    timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report_part, doctor_part = result.stdout.split("@@@", 1)[1].split("\n", 1)
    return json.loads(report_part), json.loads(doctor_part)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_faulty_plugin_is_refused_and_the_reference_keeps_working(python, faulty, fault):
    said, check_name = FAULTS[fault]
    report, doctor = _run(python, faulty(fault))
    assert len(report["reference"]) >= 2 and all(report["results"]), report
    everything = " ".join(report["load_failures"] + report["notes"])
    if check_name != "logs":
        assert report["faulty"] == [], report
        assert "plugin 'libfaulty_" in everything and said in everything, report
    check = next(c for c in doctor["checks"] if c["name"] == check_name)
    assert said in check["detail"], check
    assert check["status"] in ("fail", "warn"), check


def test_plugins_that_crash_or_hang_are_probed_in_isolation(python, faulty):
    libs = {fault: faulty(fault) for fault in CRASHES}
    report, doctor = _run(python, os.pathsep.join(libs.values()))
    assert len(report["reference"]) >= 2 and all(report["results"]), report
    assert report["faulty"] == [], report
    loads = next(c for c in doctor["checks"] if c["name"] == "plugins load")
    assert loads["status"] == "fail", loads
    for fault, said in CRASHES.items():
        reason = next((f for f in report["load_failures"] if f"libfaulty_{fault}.so" in f), "")
        assert said in reason and f"plugin 'libfaulty_{fault}'" in reason, (fault, report["load_failures"])
        assert f"libfaulty_{fault}.so {said}" in loads["detail"], (fault, loads)
    aborted = next(f for f in report["load_failures"] if "libfaulty_constructor_abort" in f)
    assert "abort() in the constructor" in aborted      # the plugin's own last words are kept


def test_without_the_probe_a_crashing_plugin_kills_the_process(python, faulty):
    # What the probe prevents (and proof that TORCH_FL_PROBE_PLUGINS=0 switches it off).
    lib = faulty("get_api_abort")
    result = python("import torch; print(torch.fl.device_count())",
                    {"TORCH_FL_PLUGINS": lib, "TORCH_FL_PROBE_PLUGINS": "0", "PYTHONWARNINGS": "ignore"})
    assert result.returncode == -6, (result.returncode, result.stderr[-2000:])     # SIGABRT


def test_kernel_table_faults_leave_the_devices_on_the_fallbacks(python, faulty):
    # A bad kernel table refuses the plugin's kernels, not its devices: they compute
    # through the fallbacks (docs/users/profiling.md).
    report, _ = _run(python, faulty("kernel_op_null"))
    assert report["faulty"], report


def test_the_fixture_without_a_fault_works(python, faulty):
    report, doctor = _run(python, faulty(None))
    assert report["faulty"] and report["load_failures"] == [], report
    assert all(report["results"])
    loads = next(c for c in doctor["checks"] if c["name"] == "plugins load")
    assert loads["status"] == "ok" and "faulty" in loads["detail"], loads


def test_fl_sdk_test_reports_a_plugin_that_crashes_while_loading(faulty, tmp_path):
    # The suite loads the plugin in an isolation worker first (conformance.isolation):
    # a crash there is one abi failure naming the signal, with the JSON/JUnit/HTML
    # reports written, and a non-zero exit, instead of `fl-sdk test` dying.
    from test_conformance_reference import fl_sdk_test
    lib = faulty("get_api_segfault")
    result, report, junit = fl_sdk_test(lib, tmp_path, "-k", "test_entry_symbol_is_exported")
    assert result.returncode == 1, (result.returncode, result.stderr[-3000:])
    assert report is not None and junit.exists(), result.stderr[-3000:]
    [failure] = report["tests"]
    assert (failure["category"], failure["status"], failure["signal"]) == ("abi", "fail", "SIGSEGV"), failure
    assert "crashed the worker process with SIGSEGV" in failure["message"] and lib in failure["message"]
    assert report["summary"]["fail"] == 1 and report["exit_status"] == 1
    assert "crashed the worker process with SIGSEGV" in result.stdout + result.stderr
