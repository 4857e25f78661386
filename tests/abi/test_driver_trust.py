"""The runtime does not trust the driver's allocations. A block that is 0, off the
device's alignment, or inside a block the allocator already holds is refused with a
VendorError naming the plugin; the other plugins keep working.
The faulty driver is tests/fixtures/plugin_bad_malloc.c (fault chosen by
$FL_BAD_MALLOC, or at build time with -DBAD_MALLOC_MODE)."""
import json

import pytest

from fl_runtime.devices.allocator import _HeldRanges
from conftest import ROOT

SOURCE = ROOT / "tests" / "fixtures" / "plugin_bad_malloc.c"


@pytest.fixture(scope="module")
def libs(build_plugin):
    return {"env": str(build_plugin(SOURCE)),
            "built_duplicate": str(build_plugin(SOURCE, '-DBAD_MALLOC_MODE="duplicate"'))}


_SCRIPT = """
    import json, torch, torch_fl
    bad = next(d["device"] for d in torch_fl.list_devices() if d["type"] == "zz_badmalloc")
    report = {"bad": bad}
    try:
        first = torch.ones(16, device=bad)
        second = torch.full((300,), 2.0, device=bad)
        report["values"] = [first.cpu().sum().item(), second.cpu().sum().item()]
    except torch_fl.VendorError as exc:
        report["error"] = str(exc)
        report["plugin"] = exc.plugin
    alloc = torch_fl.runtime().allocators[int(bad[3:])]
    alloc.settle()
    report["reserved"] = alloc.stats.reserved
    report["live_bytes"] = sum(b.size for b in alloc.live.values())
    report["reference"] = (torch.ones(3, device="fl:0") + torch.ones(3, device="fl:1").to("fl:0")).cpu().tolist()
    print(json.dumps(report))
"""


def _run(python, lib: str, mode: str | None) -> dict:
    env = {"TORCH_FL_PLUGINS": lib, "PYTHONWARNINGS": "ignore"}
    if mode is not None:
        env["FL_BAD_MALLOC"] = mode
    result = python(_SCRIPT, env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode, problem", [
    ("duplicate", "overlaps the block"),
    ("overlap", "overlaps the block"),
    ("zero", "returned address 0"),
    ("misaligned", "not a multiple of the device's alignment 256"),
])
def test_a_bad_block_is_refused_and_the_other_plugins_keep_working(libs, python, mode, problem):
    report = _run(python, libs["env"], mode)
    assert "values" not in report, f"a bad block was used: {report}"
    assert problem in report["error"] and "plugin 'badmalloc'" in report["error"]
    assert report["plugin"] == "badmalloc" and "fl_malloc" in report["error"]
    assert report["reserved"] == report["live_bytes"]      # a refused block is not counted as held
    assert report["reference"] == [2.0, 2.0, 2.0]


def test_the_fixture_driver_without_a_fault_works(libs, python):
    """The control: the same plugin with a correct fl_malloc runs ops (CPU fallback) right."""
    report = _run(python, libs["env"], None)
    assert report.get("values") == [16.0, 600.0], report
    assert report["reference"] == [2.0, 2.0, 2.0]


def test_fault_chosen_at_build_time(libs, python):
    report = _run(python, libs["built_duplicate"], None)
    assert "overlaps the block" in report["error"] and report["plugin"] == "badmalloc"


def test_held_ranges_find_every_overlap():
    held = _HeldRanges()
    held.add(1000, 100)
    held.add(2000, 50)
    assert held.overlapping(1000, 1) == (1000, 100)
    assert held.overlapping(1099, 10) == (1000, 100)
    assert held.overlapping(900, 101) == (1000, 100)       # ends inside
    assert held.overlapping(500, 5000) == (1000, 100)      # covers both
    assert held.overlapping(1100, 900) is None             # exactly between
    assert held.overlapping(900, 100) is None              # ends where the block starts
    held.remove(1000)
    assert held.overlapping(1000, 100) is None and held.overlapping(2049, 1) == (2000, 50)
