"""One bad plugin never takes `import torch` down (README "Pointing Torch-FL at a plugin").

tests/fixtures/plugin_faulty.c re-exports the reference plugin's table with one
fault chosen at build time (-DFAULT=...).  Each is loaded next to the reference
plugin in a fresh interpreter: the reference devices still compute the CPU's
results, the faulty plugin is refused (or, for a bad kernel table, its kernels
are) with a reason naming the plugin and the field, and `torch-fl doctor --json`
shows it.
"""
import json
import subprocess

import pytest
from conftest import ROOT

from fl_sdk import INCLUDE_DIR
from fl_sdk.build import compiler

SOURCE = ROOT / "tests" / "fixtures" / "plugin_faulty.c"
REFERENCE = ROOT / "reference_vendor" / "libfl_reference.so"


def _build(out, fault: str | None) -> str:
    lib = out / f"libfaulty_{fault or 'none'}.so"
    defines = [f"-DFAULT={fault}"] if fault else []
    subprocess.run([compiler(), "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE_DIR}",
                    f'-DREFERENCE_PATH="{REFERENCE}"', *defines, str(SOURCE), "-o", str(lib)],
                   check=True)
    return str(lib)


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


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    if not REFERENCE.is_file():
        pytest.fail(f"{REFERENCE} is not built: python -m fl_sdk build reference_vendor")
    return tmp_path_factory.mktemp("faulty")


def _run(python, lib: str) -> tuple[dict, dict]:
    result = python(_SCRIPT, {"TORCH_FL_PLUGINS": lib, "PYTHONWARNINGS": "ignore"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report_part, doctor_part = result.stdout.split("@@@", 1)[1].split("\n", 1)
    return json.loads(report_part), json.loads(doctor_part)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_faulty_plugin_is_refused_and_the_reference_keeps_working(python, out, fault):
    said, check_name = FAULTS[fault]
    report, doctor = _run(python, _build(out, fault))
    assert len(report["reference"]) >= 2 and all(report["results"]), report
    everything = " ".join(report["load_failures"] + report["notes"])
    if check_name != "logs":
        assert report["faulty"] == [], report
        assert "plugin 'libfaulty_" in everything and said in everything, report
    check = next(c for c in doctor["checks"] if c["name"] == check_name)
    assert said in check["detail"], check
    assert check["status"] in ("fail", "warn"), check


def test_kernel_table_faults_leave_the_devices_on_the_fallbacks(python, out):
    # A bad kernel table refuses the plugin's kernels, not its devices: they compute
    # through the fallbacks (README "Fallbacks, profiling and coverage").
    report, _ = _run(python, _build(out, "kernel_op_null"))
    assert report["faulty"], report


def test_the_fixture_without_a_fault_works(python, out):
    report, doctor = _run(python, _build(out, None))
    assert report["faulty"] and report["load_failures"] == [], report
    assert all(report["results"])
    loads = next(c for c in doctor["checks"] if c["name"] == "plugins load")
    assert loads["status"] == "ok" and "faulty" in loads["detail"], loads
