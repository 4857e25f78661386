"""Discovery, one flat stable list fl:0..N, list_devices, __version__."""
import json

import pytest
import torch


def test_version_and_reference_devices(fl):
    assert fl.__version__ == "0.1.0"
    devices = fl.list_devices()
    assert [d["device"] for d in devices] == [f"fl:{i}" for i in range(len(devices))]
    assert len(devices) >= 2
    for d in devices:
        assert d["type"] == "reference" and d["plugin"] == "reference"
        assert d["total_memory"] > 0 and d["alignment"] & (d["alignment"] - 1) == 0
        assert "float32" in d["dtypes"]
    assert len({d["uuid"] for d in devices}) == len(devices)


def test_torch_sees_the_fl_device(fl):
    assert torch.fl.is_available() and torch.fl.device_count() == len(fl.list_devices())
    x = torch.empty(2, 3, device="fl:1")
    assert x.device == torch.device("fl", 1) and x.is_fl
    assert torch.empty(1, device="fl").device.index == torch.fl.current_device()


def test_unknown_device_index_names_what_exists(fl):
    with pytest.raises(fl.DeviceNotFoundError, match="fl:7 does not exist"):
        torch.empty(1, device="fl:7")


def _device_uuids(python, env=None, config=None, tmp_path=None):
    extra = dict(env or {})
    if config is not None:
        path = tmp_path / "config.yaml"
        path.write_text(config)
        extra["TORCH_FL_CONFIG"] = str(path)
    result = python("import json, torch_fl; print(json.dumps(torch_fl.list_devices()))", extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_ids_are_stable_across_restarts(python):
    first = [d["uuid"] for d in _device_uuids(python)]
    second = [d["uuid"] for d in _device_uuids(python)]
    assert first == second


def test_config_limits_count_and_sets_memory_fraction(python, tmp_path):
    devices = _device_uuids(python, {"FL_REFERENCE_DEVICES": "3"},
                            "devices:\n  - type: reference\n    count: 2\n    memory_fraction: 0.25\n", tmp_path)
    assert len(devices) == 2 and all(d["memory_fraction"] == 0.25 for d in devices)


def test_config_naming_an_absent_type_explains_the_empty_list(python, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("devices:\n  - type: npu9000\n")
    result = python("import torch_fl; print(torch_fl.list_devices()); print(torch_fl.why_no_devices())",
                    {"TORCH_FL_CONFIG": str(path)})
    assert result.returncode == 0, result.stderr
    assert "[]" in result.stdout and "npu9000" in result.stdout
