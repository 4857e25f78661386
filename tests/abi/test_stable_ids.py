"""device IDs are stable across restarts and across plugin load order, with
two vendor plugins installed (the reference vendor and a rebuild of it posing
as vendor type 'reference2', see tests/second_vendor/)."""
import json
import shutil

import pytest
import yaml
from conftest import ROOT

from fl_sdk.build import build, read_spec

REFERENCE = ROOT / "reference_vendor"


@pytest.fixture(scope="module")
def two_plugins(tmp_path_factory) -> tuple[str, str]:
    """(reference library, second-vendor library), the second built from the same sources."""
    directory = tmp_path_factory.mktemp("second_vendor")
    (directory / "src").symlink_to(REFERENCE / "src")
    shutil.copy(ROOT / "tests" / "second_vendor" / "second_vendor.c", directory / "second_vendor.c")
    spec = read_spec(REFERENCE)       # the reference's own flags, plus the two that rename it
    # -O0: the copy only has to behave, not to be fast, and it compiles in a fraction of the time.
    cflags = [*spec.cflags, "-O0", "-Dfl_plugin_get_api=ref_inner_get_api", '-DFL_REFERENCE_UUID_PREFIX="ref2"']
    (directory / "plugin.yaml").write_text(yaml.safe_dump({
        "library": "libfl_reference2.so", "sources": [*spec.sources, "second_vendor.c"],
        "cflags": cflags, "link": spec.links}))
    second = build(directory)
    return str(build(REFERENCE)), str(second)


def _devices(python, libraries: list[str], config: str | None = None) -> list[tuple[str, str, str]]:
    env = {"TORCH_FL_DISABLE_ENTRY_POINTS": "1", "TORCH_FL_PLUGINS": ":".join(libraries),
           "FL_REFERENCE_DEVICES": "2", **({"TORCH_FL_CONFIG": config} if config else {})}
    result = python("import json, torch_fl; print(json.dumps(torch_fl.list_devices()))", env)
    assert result.returncode == 0, result.stderr
    return [(d["device"], d["type"], d["uuid"]) for d in json.loads(result.stdout.strip().splitlines()[-1])]


def test_ids_hold_across_load_orders_and_restarts(two_plugins, python):
    reference, second = two_plugins
    first_order = _devices(python, [reference, second])
    assert first_order == [("fl:0", "reference", "ref-0000-0000-0000-0000"),
                           ("fl:1", "reference", "ref-0000-0000-0000-0001"),
                           ("fl:2", "reference2", "ref2-0000-0000-0000-0000"),
                           ("fl:3", "reference2", "ref2-0000-0000-0000-0001")]
    assert _devices(python, [second, reference]) == first_order
    assert _devices(python, [reference, second]) == first_order      # a restart


def test_the_config_devices_list_pins_the_order_of_types(two_plugins, python, tmp_path):
    """docs/operators/plugins.md "Device numbering": listed types come in the list's order."""
    config = tmp_path / "config.yaml"
    config.write_text("devices:\n  - type: reference2\n  - type: reference\n")
    pinned = _devices(python, list(two_plugins), str(config))
    assert [(device, kind) for device, kind, _ in pinned] == [("fl:0", "reference2"), ("fl:1", "reference2"),
                                                              ("fl:2", "reference"), ("fl:3", "reference")]


def test_both_vendors_compute_and_exchange_tensors(two_plugins, python):
    env = {"TORCH_FL_DISABLE_ENTRY_POINTS": "1", "TORCH_FL_PLUGINS": ":".join(reversed(two_plugins))}
    result = python("""
        import torch, torch_fl
        a = torch.arange(6.).reshape(2, 3).to("fl:0")
        b = (a * 2).to("fl:3") + 1          # reference -> second vendor (staged on the host)
        print(b.cpu().tolist(), torch_fl.list_devices()[3]["plugin"])
    """, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "[[1.0, 3.0, 5.0], [7.0, 9.0, 11.0]] reference2"
