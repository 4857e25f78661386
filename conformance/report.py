"""The JSON report, built from pytest's own hooks while the suite runs.

One record per test: category, op, dtype, variant, status, max error against
the tolerance, the message and a reproducer; plus a header (suite version,
plugin, ABI version, device properties, profile, seed) and summaries.
Non-finite numbers are written as strings so the file is strict JSON.
"""
from __future__ import annotations

import datetime
import json
import math
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import torch

from . import SUITE_VERSION, human_report, statuses
from .repro import REPRODUCER_HEADING, rerun_command

IDENTITY = pytest.StashKey[dict]()   # category, op, dtype, variant, test (set at collection)
DETAILS = pytest.StashKey[dict]()    # max_error, tolerance, reproducer ... (set by the test)

_RANK = {statuses.FAIL: 4, statuses.KNOWN_FAILURE: 3, statuses.NOT_SUPPORTED: 2, statuses.UNTESTED: 2,
         statuses.PASS: 1}


def _strict(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def _failure_text(report: pytest.TestReport) -> str:
    """The failure message without the reproducer (the record has it apart)."""
    return report.longreprtext.split(REPRODUCER_HEADING)[0].strip()[-6000:]


def _message(report: pytest.TestReport) -> str:
    if report.failed:
        return _failure_text(report)
    if hasattr(report, "wasxfail"):   # run with --run-known-failures
        return (f"{report.wasxfail}\n{_failure_text(report)}" if report.skipped
                else f"{report.wasxfail} (it passed: the waiver is no longer needed)")
    return statuses.skip_reason(report) if report.skipped else ""


LOAD_TEST = "test_plugin_loads_in_an_isolated_worker"
# `fl-sdk test`'s exit status when the loader refuses the plugin or it cannot give its
# kernel table (pytest's own statuses are 0-5; docs/vendors/conformance.md).
LOAD_REFUSED = 6


def load_failure_document(library: str, profile, seed: int, run_known_failures: bool, waiver_path: Path,
                          message: str, signal: str, exit_status: int, started: float) -> dict:
    """The report of a run that stopped before its first test: loading the plugin killed
    the isolated worker (conformance.isolation.check_loading) or the loader refused it.  One abi failure that names
    the crash; the plugin's own facts are unknown (it never answered), so abi_version is null."""
    record = {"nodeid": f"suite_abi.py::{LOAD_TEST}", "category": "abi", "op": None, "dtype": None,
              "variant": None, "test": LOAD_TEST, "status": statuses.FAIL, "duration_s": 0.0,
              "max_error": None, "error_ratio": None, "tolerance": None, "examples": None,
              "message": message, "reproducer": rerun_command(library, profile.name, seed, LOAD_TEST),
              "signal": signal or None}
    return _strict({
        "suite_version": SUITE_VERSION,
        "torch_version": torch.__version__,
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 2),
        "plugin": {"name": Path(library).stem, "vendor": "", "version": "", "path": library,
                   "abi_version": None, "devices": []},
        "profile": {"name": profile.name, **{k: v for k, v in vars(profile).items() if k != "name"}},
        "seed": seed,
        "run_known_failures": run_known_failures,
        "known_failures_file": str(waiver_path) if waiver_path.is_file() else None,
        "unused_waivers": [],
        "exit_status": int(exit_status),
        "summary": {"total": 1, **{s: int(s == statuses.FAIL) for s in statuses.ALL},
                    "categories": {"abi": {statuses.FAIL: 1}}, "untested_ops": []},
        "tests": [record],
    })


def load_failure_junit(path: str, document: dict) -> None:
    """pytest's --junitxml writes nothing when the run stops before its first test: the same
    one-failure record as JUnit XML (xunit2), so CI shows the crash where it shows failures."""
    import xml.etree.ElementTree as ET

    record = document["tests"][0]
    root = ET.Element("testsuites", name="pytest tests")
    suite = ET.SubElement(root, "testsuite", name="torch-fl-conformance", tests="1", failures="1", errors="0",
                          skipped="0", time=str(document["duration_s"]), timestamp=document["generated_at"])
    case = ET.SubElement(suite, "testcase", classname="suite_abi", name=record["test"], time="0")
    failure = ET.SubElement(case, "failure", message=record["message"])
    failure.text = f"{record['message']}\nReproducer: {record['reproducer']}"
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


class JsonReport:
    """A pytest plugin object: collects every test's outcome, writes the file at the end."""

    def __init__(self, context, path: str | None, html_path: str | None = None) -> None:
        self.context = context
        self.path = path
        self.html_path = html_path
        self.exitstatus = 0
        self.records: dict[str, dict] = {}
        self.started = time.time()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        report.fl_identity = item.stash.get(IDENTITY, {})
        report.fl_details = dict(item.stash.get(DETAILS, {}))
        if report.failed and not report.fl_details.get("reproducer"):
            # Hypothesis prints the falsifying example; this says how to run it again alone.
            ctx = self.context
            command = rerun_command(ctx.library, ctx.profile.name, ctx.seed, item.name)
            report.fl_details["reproducer"] = command
            report.sections.append(("Reproducer", command))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        status = statuses.status_of(report)
        if report.when != "call" and status == statuses.PASS:
            return   # a passing setup or teardown says nothing about the test
        identity = getattr(report, "fl_identity", {})
        record = self.records.setdefault(report.nodeid, {
            "nodeid": report.nodeid, **identity, "status": statuses.PASS, "duration_s": 0.0,
            "max_error": None, "error_ratio": None, "tolerance": None, "examples": None,
            "message": "", "reproducer": None})
        record["duration_s"] = round(record["duration_s"] + report.duration, 4)
        record.update({k: v for k, v in getattr(report, "fl_details", {}).items() if v is not None})
        if _RANK[status] >= _RANK[record["status"]]:
            record["status"] = status
            record["message"] = _message(report) or record["message"]

    def summary(self) -> dict:
        by_status = Counter(r["status"] for r in self.records.values())
        by_category: dict[str, Counter] = defaultdict(Counter)
        for record in self.records.values():
            by_category[record.get("category", "?")][record["status"]] += 1
        untested_ops = sorted({r["op"] for r in self.records.values()
                               if r["status"] == statuses.UNTESTED and r.get("op")})
        return {"total": len(self.records), **{s: by_status.get(s, 0) for s in statuses.ALL},
                "categories": {c: dict(n) for c, n in by_category.items()}, "untested_ops": untested_ops}

    def document(self, exitstatus: int) -> dict:
        ctx = self.context
        return _strict({
            "suite_version": SUITE_VERSION,
            "torch_version": torch.__version__,     # numerics are judged against this PyTorch's CPU
            "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - self.started, 2),
            "plugin": ctx.description,
            "profile": {"name": ctx.profile.name, **{k: v for k, v in vars(ctx.profile).items() if k != "name"}},
            "seed": ctx.seed,
            "run_known_failures": ctx.run_known_failures,
            "known_failures_file": str(ctx.waiver_path) if ctx.waiver_path.is_file() else None,
            "unused_waivers": [{"match": w.describe(), "reason": w.reason} for w in ctx.waivers if not w.used],
            "exit_status": int(exitstatus),
            "summary": self.summary(),
            "tests": list(self.records.values()),
        })

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        self.exitstatus = int(exitstatus)
        document = self.document(exitstatus)
        if self.path:
            Path(self.path).write_text(json.dumps(document, indent=1))
        if self.html_path:
            Path(self.html_path).write_text(human_report.html_page(document))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        summary = self.summary()
        write = terminalreporter.write_line
        document = self.document(self.exitstatus)
        if human_report.kernel_rows(document):
            terminalreporter.write_sep("=", "per-kernel results")
            write(human_report.markdown(document))
        write("Torch-FL conformance: " + ", ".join(f"{summary[s]} {s}" for s in statuses.ALL)
              + f" ({self.context.profile.name} profile, seed {self.context.seed})")
        if summary["untested_ops"]:
            write(f"ops without a case generator (untested): {', '.join(summary['untested_ops'])}")
        for waiver in self.context.waivers:
            if not waiver.used:
                write(f"known_failures.yaml entry matches no test: {waiver.describe()} ({waiver.reason})")
        if self.path:
            write(f"JSON report: {self.path}")
        if self.html_path:
            write(f"HTML report: {self.html_path}")
