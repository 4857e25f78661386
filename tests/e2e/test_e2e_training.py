"""End to end: the README snippet and the CNN training loop as user scripts, in
fresh processes, with only the device string changed from the CPU version."""
import json
import subprocess
import sys

import pytest

from conftest import ROOT

EXAMPLES = ROOT / "examples"


def run_script(tmp_path, script: str, *args: str) -> dict:
    report = tmp_path / f"{script}-{'-'.join(a.replace(':', '') for a in args)}.json"
    result = subprocess.run([sys.executable, str(EXAMPLES / script), *args, "--report", str(report)],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(report.read_text())


def test_snippet_matmul_and_cross_device_copy(tmp_path):
    report = run_script(tmp_path, "snippet.py", "--device", "fl:0", "--to", "fl:1")
    assert report["z_device"] == "fl:1"
    # fp32 matmul of K=1000 against an fp64 reference: well inside 1e-4 of the magnitude.
    assert report["max_abs_error"] <= 1e-4 * report["max_abs_value"]
    assert abs(report["x_mean"]) < 0.01 and abs(report["x_std"] - 1) < 0.01   # randn really ran


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    return run_script(tmp_path_factory.mktemp("cpu"), "train_cnn.py", "--device", "cpu", "--steps", "5")


@pytest.mark.parametrize("device", ["fl:0", "fl:1"])
def test_cnn_training_matches_cpu_and_runs_only_vendor_kernels(tmp_path, cpu_run, device):
    run = run_script(tmp_path, "train_cnn.py", "--device", device, "--steps", "5")
    for step, (ours, ref) in enumerate(zip(run["losses"], cpu_run["losses"])):
        assert abs(ours - ref) <= 1e-4 * abs(ref), f"step {step}: {ours} vs CPU {ref}"
    assert run["param_devices"] == [device] and run["grad_devices"] == [device]
    paths = run["op_paths"]
    fell_back = {op: p for op, p in paths.items() if "cpu" in p}
    assert not fell_back, f"ops that left the vendor: {fell_back}"
    for expected in ("aten::convolution", "aten::convolution_backward", "aten::max_pool2d_with_indices",
                     "aten::_log_softmax", "aten::nll_loss_forward", "aten::addmm"):
        assert paths.get(expected, {}).get("native", 0) >= 5, (expected, sorted(paths))
