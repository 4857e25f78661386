"""`fl-sdk test --coverage` (conformance/branch_coverage.py): gcov's JSON to the report's
per-source branch coverage, and where the result goes.  The instrumented run itself is
measured on the reference vendor in docs/benchmarks/index.md (a full build is too slow for CI)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance import branch_coverage

ROOT = Path(__file__).resolve().parents[2]


def _gcov(file: str, lines: list[tuple[int, list[int]]]) -> dict:
    """One document of `gcov -j -t`: per line, the counts of its branches."""
    return {"files": [{"file": file, "lines": [{"line_number": n, "branches": [{"count": c} for c in counts]}
                                               for n, counts in lines]}]}


def test_untaken_branches_are_listed_per_source_and_foreign_sources_dropped(tmp_path):
    files: dict = {}
    branch_coverage._add(files, _gcov("src/kernels/mm.c", [(10, [3, 0]), (12, [1, 1]), (20, [0, 0])]), tmp_path)
    branch_coverage._add(files, _gcov(str(tmp_path / "src/driver/queue.c"), [(5, [2, 2])]), tmp_path)
    branch_coverage._add(files, _gcov("/elsewhere/fl_sdk/kernel_lib/args.c", [(1, [0, 0])]), tmp_path)
    coverage = branch_coverage.summarize(files)
    assert set(coverage["files"]) == {"src/kernels/mm.c", "src/driver/queue.c"}
    mm = coverage["files"]["src/kernels/mm.c"]
    assert (mm["branches"], mm["taken"], mm["percent"]) == (6, 3, 50.0)
    assert mm["lines_with_untaken_branches"] == [{"line": 10, "untaken": 1}, {"line": 20, "untaken": 2}]
    assert (coverage["branches"], coverage["taken"]) == (8, 5)
    assert coverage["kernel_sources"] == {"branches": 6, "taken": 3, "percent": 50.0}
    table = branch_coverage.markdown(coverage)
    assert "| src/kernels/mm.c | 6 | 3 | 50.0 | 10, 20 |" in table


def test_coverage_goes_into_the_json_and_html_reports(tmp_path):
    coverage = branch_coverage.summarize({"src/kernels/a.c": {"branches": 4, "taken": 1, "never": {7: 3}}})
    report, page = tmp_path / "r.json", tmp_path / "r.html"
    report.write_text(json.dumps({"tests": []}))
    page.write_text("<html><body><table></table></body></html>")
    branch_coverage.add_to_reports(coverage, str(report), str(page))
    assert json.loads(report.read_text())["branch_coverage"]["files"]["src/kernels/a.c"]["taken"] == 1
    assert "lines with a branch never taken" in page.read_text() and page.read_text().endswith("</body></html>")


def test_coverage_needs_the_plugin_sources(tmp_path):
    library = tmp_path / "libfl_acme.so"
    library.write_bytes(b"")
    with pytest.raises(branch_coverage.CoverageError, match="plugin.yaml"):
        branch_coverage.plugin_directory(str(library))
    assert branch_coverage.plugin_directory(str(ROOT / "reference_vendor" / "libfl_reference.so")) == \
        ROOT / "reference_vendor"


def test_flush_is_a_no_op_without_an_instrumented_build(monkeypatch):
    monkeypatch.delenv(branch_coverage.ENV, raising=False)
    branch_coverage.flush()   # a worker of a plain run: nothing to write, nothing loaded
