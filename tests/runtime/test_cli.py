"""`torch-fl devices` and `torch-fl doctor` (docs/users/devices.md), text and --json.

Each scenario runs in a fresh process (the runtime is per process); the
doctor's verdict per check and its exit status are asserted."""
import json

import pytest
from conftest import ROOT


_BOTH = """
from fl_runtime.tools.cli import main
rc_text = main([{command!r}])
print("@@@")
rc_json = main([{command!r}, "--json"])
print("@@@", rc_text, rc_json)
"""


def _run(python, command: str, env: dict | None = None) -> tuple[str, dict, int]:
    """(text output, --json document, exit status) of one command; both forms must agree."""
    result = python(_BOTH.format(command=command), env)
    assert result.returncode == 0, result.stderr
    text, document, codes = result.stdout.split("@@@")
    rc_text, rc_json = (int(c) for c in codes.split())
    assert rc_text == rc_json
    return text, json.loads(document), rc_text


def _statuses(document: dict) -> dict[str, str]:
    return {check["name"]: check["status"] for check in document["checks"]}


@pytest.fixture(scope="module")
def major2_plugin(build_plugin) -> str:
    return str(build_plugin(ROOT / "tests" / "fixtures" / "plugin_claims_major2.c"))


def test_devices_table_and_json(python):
    text, document, rc = _run(python, "devices")
    assert rc == 0 and document["schema"] == "torch-fl.devices/1" and document["error"] is None
    rows = document["devices"]
    assert [r["device"] for r in rows] == [f"fl:{i}" for i in range(len(rows))] and len(rows) >= 2
    for row in rows:
        assert row["type"] == "reference" and row["driver_version"] == "1.0.0"
        assert 0 < row["memory_free"] <= row["memory_total"] and row["plugin_path"].endswith(".so")
        assert row["certified"] in (True, False, None) and row["certification"]
    header = text.splitlines()[0].split()
    assert header[:4] == ["#", "NAME", "VENDOR", "TYPE"] and "CERTIFIED" in header and "DRIVER" in header
    assert "Torch-FL Reference CPU Chip" in text and "libfl_reference.so" in text


def test_doctor_on_a_healthy_install(python):
    text, document, rc = _run(python, "doctor")
    assert rc == 0 and document["schema"] == "torch-fl.doctor/1" and document["verdict"] == "healthy"
    statuses = _statuses(document)
    assert list(statuses) == ["plugins found", "plugins load", "ABI compatible", "driver", "certified stack",
                              "device node permissions", "config", "lock", "autoload", "runtime start",
                              "compiled helpers", "native bridge", "logs"]
    assert statuses["plugins found"] == statuses["driver"] == statuses["config"] == "ok"
    assert statuses["compiled helpers"] == "ok"
    assert statuses["device node permissions"] == "not applicable"
    assert "verdict: healthy" in text and "[FAIL]" not in text


def test_doctor_without_any_plugin(python):
    text, document, rc = _run(python, "doctor", {"TORCH_FL_DISABLE_ENTRY_POINTS": "1", "TORCH_FL_PLUGINS": ""})
    assert rc == 1 and document["verdict"] == "problems"
    found = document["checks"][0]
    assert found["name"] == "plugins found" and found["status"] == "fail"
    assert "TORCH_FL_PLUGINS" in found["next_step"]
    assert _statuses(document)["runtime start"] == "fail"
    assert "[FAIL] plugins found" in text and "next step: install a vendor plugin" in text
    logs = document["checks"][-1]
    assert logs["name"] == "logs" and "at start-up: WARNING: no fl devices" in logs["detail"]


def test_doctor_on_a_plugin_with_an_incompatible_abi(python, major2_plugin):
    text, document, rc = _run(python, "doctor", {"TORCH_FL_DISABLE_ENTRY_POINTS": "1",
                                                 "TORCH_FL_PLUGINS": major2_plugin})
    assert rc == 1
    statuses = _statuses(document)
    assert statuses["plugins found"] == "ok" and statuses["ABI compatible"] == "fail"
    abi = next(c for c in document["checks"] if c["name"] == "ABI compatible")
    assert "speaks ABI 2.0" in abi["detail"] and abi["next_step"]
    assert "[FAIL] ABI compatible" in text and "verdict: problems" in text


def test_doctor_on_a_config_naming_a_missing_device_type(python, tmp_path):
    config = tmp_path / "config.yaml"
    log = tmp_path / "torch_fl.log"
    config.write_text(f"devices:\n  - type: npu9000\nlogging:\n  path: {log}\n")
    text, document, rc = _run(python, "doctor", {"TORCH_FL_CONFIG": str(config)})
    assert rc == 1
    statuses = _statuses(document)
    assert statuses["plugins found"] == statuses["driver"] == "ok" and statuses["config"] == "fail"
    check = next(c for c in document["checks"] if c["name"] == "config")
    assert "npu9000" in check["detail"] and "reference" in check["detail"]
    assert "[FAIL] config" in text
    logs = next(c for c in document["checks"] if c["name"] == "logs")   # the runtime's start, from the file
    assert logs["status"] == "warn" and "no fl devices" in logs["detail"] and str(log) in logs["detail"]


def test_doctor_and_devices_when_the_runtime_failed_to_start(python, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("devcies: []\n")        # a typo: the runtime refuses the config at start
    text, document, rc = _run(python, "doctor", {"TORCH_FL_CONFIG": str(config)})
    assert rc == 1
    statuses = _statuses(document)
    assert statuses["config"] == "fail" and statuses["runtime start"] == "fail"
    assert "devcies" in next(c for c in document["checks"] if c["name"] == "runtime start")["detail"]
    text, document, rc = _run(python, "devices", {"TORCH_FL_CONFIG": str(config)})
    assert rc == 1 and "ConfigError" in document["error"] and "torch-fl doctor" in text
