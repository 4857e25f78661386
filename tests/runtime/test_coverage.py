"""Op coverage (docs/users/profiling.md): trace forward + backward on fake tensors, classify each ATen op
per device; the API, the text and JSON reports, and the `torch-fl coverage` command."""
import json

import pytest
import torch
from conftest import ROOT

MODEL_FILE = """
import torch

def build():
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Hardswish(), torch.nn.Linear(8, 2))
    return model, (torch.randn(3, 6),)
"""


def _model():
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Hardswish(), torch.nn.Linear(8, 2))


@pytest.fixture
def no_vendor_hardswish(fl):
    """Hide the vendor's hardswish kernel (if any) so the op's generic path is known."""
    devices = fl.runtime().devices
    hidden = [d.kernels.pop("hardswish", None) for d in devices]
    chain = fl.runtime().launcher.chain
    chain.configure(chain.enable_generic, chain.enable_cpu)     # forget earlier decisions
    yield
    for device, kernel in zip(devices, hidden):
        if kernel is not None:
            device.kernels["hardswish"] = kernel
    chain.configure(chain.enable_generic, chain.enable_cpu)


def test_coverage_lists_forward_and_backward_ops_per_device(fl, no_vendor_hardswish):
    model, x = _model(), torch.randn(3, 6)
    report = fl.coverage(model, (x,))
    print(report)
    status = {o.op: o.status["fl:0"] for o in report.ops}
    assert status["aten::addmm"] == "native" and status["aten::mm"] == "native"     # forward, backward
    assert status["aten::hardswish"] == "generic" and "aten::hardswish_backward" in status
    assert report.devices == [f"fl:{i}" for i in range(fl.device_count())]
    totals = report.totals()["fl:0"]
    assert sum(totals.values()) == len(report.ops) and totals["native"] >= 4
    assert next(p for p in model.parameters()).device.type == "cpu"   # nothing moved


def test_forward_only_and_device_selection(fl):
    report = fl.coverage(_model(), torch.randn(3, 6), devices=[1], backward=False)
    assert report.devices == ["fl:1"]
    assert "aten::mm" not in {o.op for o in report.ops}            # mm only appears in backward
    data = json.loads(report.to_json())
    assert data["backward"] is False and data["totals"]["fl:1"]


def test_unknown_device_is_named(fl):
    with pytest.raises(fl.DeviceNotFoundError, match="fl:99"):
        fl.coverage(_model(), torch.randn(3, 6), devices=[99])


def test_cli_json_and_text(python, tmp_path):
    (tmp_path / "mymodels.py").write_text(MODEL_FILE)
    result = python(f"""
        import sys
        from fl_runtime.tools.cli import main
        code = main(["coverage", "--json", "--device", "0", {str(tmp_path / 'mymodels.py') + ':build'!r}])
        print("TEXT")
        sys.path.insert(0, {str(tmp_path)!r})
        code += main(["coverage", "mymodels:build"])
        code += 10 * main(["coverage", "mymodels:nothing"])
        sys.exit(code)
    """, cwd=ROOT)
    assert result.returncode == 20, result.stderr            # only the missing function failed (exit 2)
    data = json.loads(result.stdout.split("TEXT")[0])
    assert data["devices"] == ["fl:0"]
    hardswish = next(o for o in data["ops"] if o["op"] == "aten::hardswish")
    assert hardswish["calls"] == 1 and hardswish["status"]["fl:0"] in ("native", "generic")
    text = result.stdout.split("TEXT")[1]
    assert "distinct ATen ops (forward + backward)" in text and "fl:1:" in text
    assert "'mymodels' has no function 'nothing'" in result.stderr
