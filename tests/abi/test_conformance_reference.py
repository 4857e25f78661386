"""The conformance suite end to end: `fl-sdk test` on the reference vendor, in a subprocess.

The reference vendor must pass every category of the CI profile, and the run
must leave a JSON report and a JUnit XML file that CI tools can read.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import xmlschema

from conformance import CATEGORIES
from fl_runtime import abi

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_LIBRARY = ROOT / "reference_vendor" / "libfl_reference.so"


REPORT_SCHEMA = ROOT / "conformance" / "report.schema.json"
JUNIT_XSD = ROOT / "tests" / "fixtures" / "junit.xsd"


def fl_sdk_test(plugin: str, tmp_path: Path, *options: str, timeout: float = 600):
    """Run `python -m fl_sdk test`; returns (completed process, JSON report or None, JUnit path).
    Every report it leaves is validated the way CI tools read it."""
    result = run_fl_sdk_test(plugin, tmp_path, *options, timeout=timeout)
    return (result, *read_reports(tmp_path))


def run_fl_sdk_test(plugin: str, tmp_path: Path, *options: str, timeout: float = 600):
    """Only the run (safe in a worker thread): the reports are left in `tmp_path`."""
    report, junit, page = tmp_path / "report.json", tmp_path / "junit.xml", tmp_path / "report.html"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "fl_sdk", "test", plugin, "--json", str(report),
                           "--junit", str(junit), "--html", str(page), *options], capture_output=True,
                          text=True, timeout=timeout, cwd=tmp_path, env=env)


def read_reports(tmp_path: Path) -> tuple:
    """(JSON report or None, JUnit path) of a run in `tmp_path`, validated (schema libraries
    build their schemas lazily: call this from the test's thread)."""
    report, junit, page = tmp_path / "report.json", tmp_path / "junit.xml", tmp_path / "report.html"
    document = json.loads(report.read_text()) if report.exists() else None
    if document is not None:
        validate_reports(document, junit, page)
    return document, junit


def validate_reports(document: dict, junit: Path, page: Path) -> None:
    """JSON against conformance/report.schema.json (draft 2020-12), JUnit XML against
    tests/fixtures/junit.xsd plus the counts tools trust, the HTML table against the JSON."""
    jsonschema.Draft202012Validator(json.loads(REPORT_SCHEMA.read_text()),
                                    format_checker=jsonschema.FormatChecker()).validate(document)
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(junit))
    for suite in ET.parse(junit).getroot().iter("testsuite"):
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        for attribute, child in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
            assert int(suite.get(attribute)) == sum(1 for c in cases if c.find(child) is not None), attribute
    failed_in_junit = sum(int(s.get("failures")) + int(s.get("errors")) for s in ET.parse(junit).getroot().iter("testsuite"))
    assert failed_in_junit == document["summary"]["fail"]
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.count("<tr>") >= len(
        {(t["op"], t["variant"]) for t in document["tests"] if t["category"] == "kernels"})


# Kernel-table ops the suite had no case generator for, before OpInfo samples and RNG checks.
FORMERLY_UNTESTED = ("convolution", "convolution_backward", "max_pool2d_with_indices",
                     "max_pool2d_with_indices_backward", "nll_loss_forward", "nll_loss_backward",
                     "_softmax_backward_data", "_log_softmax_backward_data", "normal_", "uniform_",
                     "bernoulli_.float")


def failures(report: dict) -> list[dict]:
    return [t for t in report["tests"] if t["status"] == "fail"]


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    if not REFERENCE_LIBRARY.exists():
        pytest.skip("the reference vendor is not built (python -m fl_sdk build reference_vendor)")
    return fl_sdk_test("reference", tmp_path_factory.mktemp("ci"), "--profile", "ci")


def test_reference_vendor_passes_the_ci_profile(ci_run):
    result, report, _ = ci_run
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-4000:]
    assert not failures(report)
    # every kernel of the reference table has a hand recipe or an OpInfo sample
    assert report["summary"]["untested_ops"] == [], report["summary"]["untested_ops"]
    for category in CATEGORIES:
        counts = report["summary"]["categories"].get(category, {})
        assert counts.get("pass", 0) > 0, f"category {category} has no passing test: {counts}"
        assert counts.get("fail", 0) == 0


def test_json_report_header_and_records(ci_run):
    _, report, _ = ci_run
    assert report["suite_version"] and report["profile"]["name"] == "ci" and report["seed"] == 0
    plugin = report["plugin"]
    assert plugin["name"] == "reference" and plugin["abi_version"] == f"1.{abi.ABI_MINOR}"
    assert plugin["path"] == str(REFERENCE_LIBRARY.resolve()) and plugin["devices"][0]["alignment"] > 0
    kernels = [t for t in report["tests"] if t["category"] == "kernels"]
    for record in kernels:
        assert record["op"] and record["dtype"] and record["variant"]
        if record["status"] == "pass":
            assert record["tolerance"] and record["max_error"] is not None and record["examples"]
    # Kernels without a hand recipe are checked through OpInfo samples, random ones
    # statistically, backward ones against CPU's backward kernels.
    passing = {t["op"] for t in kernels if t["status"] == "pass"}
    assert set(FORMERLY_UNTESTED) & {t["op"] for t in kernels} <= passing
    # Ops the suite cannot check are listed, and never counted as passing.
    untested = set(report["summary"]["untested_ops"])
    assert untested == {t["op"] for t in kernels if t["status"] == "untested"}
    assert any(t["status"] == "not_supported" for t in kernels)   # e.g. mm on float16


def test_junit_xml_parses_without_failures(ci_run):
    result, report, junit = ci_run
    assert "per-kernel results" in result.stdout and "| add.Tensor | precise |" in result.stdout
    suites = [s for s in ET.parse(junit).getroot().iter("testsuite")]
    assert suites and all(s.get("failures") == "0" and s.get("errors") == "0" for s in suites)
    assert sum(int(s.get("tests")) for s in suites) == report["summary"]["total"]


def test_known_failures_file_waives_and_reports_stale_entries(tmp_path):
    """A vendor's known_failures.yaml next to its library: matching tests are known
    failures (not run), entries that match nothing are reported, and
    --run-known-failures runs them (a pass then counts as a pass)."""
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    shutil.copy(REFERENCE_LIBRARY, vendor / "libfl_copy.so")
    (vendor / "known_failures.yaml").write_text(
        "known_failures:\n"
        "  - op: add.Tensor\n    dtype: float32\n    reason: demo waiver\n"
        "  - op: no_such_op\n    reason: stale entry\n")
    library = str(vendor / "libfl_copy.so")
    result, report, _ = fl_sdk_test(library, tmp_path, "-k", "add.Tensor and not add_")
    assert result.returncode == 0, result.stdout[-4000:]
    status = {(t["op"], t["dtype"]): t["status"] for t in report["tests"]}
    assert status[("add.Tensor", "float32")] == "known_failure"
    assert status[("add.Tensor", "float64")] == "pass"
    assert [w["match"] for w in report["unused_waivers"]] == ["op=no_such_op"]
    result, report, _ = fl_sdk_test(library, tmp_path, "-k", "add.Tensor and float32 and not add_",
                                    "--run-known-failures")
    assert result.returncode == 0
    assert {t["status"] for t in report["tests"] if t["category"] == "kernels"} == {"pass"}


def test_cert_profile_refuses_other_options(tmp_path):
    result, report, _ = fl_sdk_test("reference", tmp_path, "--profile", "cert", "--seed", "3")
    assert result.returncode == 2 and "fixed settings" in result.stderr and report is None


def test_unknown_plugin_name_is_a_usage_error(tmp_path):
    result, _, _ = fl_sdk_test("no-such-plugin", tmp_path)
    assert result.returncode == 2 and "no installed plugin named 'no-such-plugin'" in result.stderr
