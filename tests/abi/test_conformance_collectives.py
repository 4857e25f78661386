"""The conformance `collectives` category judges plugins: a wrong all_reduce fails, the rest pass,
and the certificate's coverage lists the collective checks that passed.

The reference plugin passing the whole category is test_conformance_reference's
job (the CI profile runs every category); here a mutant of it
(tests/fixtures/plugin_bad_allreduce.c: SUM computed as MAX) must fail exactly
the families that sum, on 2 ranks (4 ranks are left to the reference run).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT

from fl_sdk.certify import coverage

REFERENCE_LIB = ROOT / "reference_vendor" / "libfl_reference.so"


def test_a_wrong_all_reduce_fails_its_families_and_nothing_else(tmp_path, build_plugin):
    lib = build_plugin(ROOT / "tests" / "fixtures" / "plugin_bad_allreduce.c")
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FL_BAD_INNER": str(REFERENCE_LIB)}
    result = subprocess.run([sys.executable, "-m", "fl_sdk", "test", str(lib), "--profile", "ci", "--json",
                             str(report), "-k", "test_collective and 2ranks or error_statuses"],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    tests = json.loads(report.read_text())["tests"]
    verdicts = {t["test"]: t["status"] for t in tests}
    assert verdicts == {
        "test_collective[all_reduce-2ranks]": "fail", "test_collective[stream_order-2ranks]": "fail",
        "test_collective[broadcast-2ranks]": "pass", "test_collective[all_gather-2ranks]": "pass",
        "test_collective[reduce_scatter-2ranks]": "pass", "test_collective[all_to_all-2ranks]": "pass",
        "test_collective[send_recv-2ranks]": "pass", "test_error_statuses": "pass"}, verdicts
    failed = next(t for t in tests if t["test"] == "test_collective[all_reduce-2ranks]")
    assert "all_reduce sum" in failed["message"] and failed["category"] == "collectives"
    assert coverage(tests)["collectives"] == ["all_gather-2ranks", "all_to_all-2ranks", "broadcast-2ranks",
                                              "error_statuses", "reduce_scatter-2ranks", "send_recv-2ranks"]


def test_coverage_without_a_collectives_category_is_unchanged():
    tests = [{"category": "kernels", "op": "add", "dtype": "float32", "variant": "precise", "status": "pass",
              "test": "test_numerics[add-float32-precise]"}]
    assert coverage(tests) == {"ops": {"add": ["float32/precise"]}, "untested_ops": []}
