"""`fl-sdk test`: run the suite on one plugin with pytest, programmatically.

JUnit XML is pytest's own --junitxml; the JSON report comes from
conformance.report's hooks.  Exit status 0 only when nothing failed.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from . import CATEGORIES, branch_coverage
from .profiles import ProfileError, choose
from .target import TargetError, resolve

SUITE_DIR = Path(__file__).resolve().parent / "suites"
TODO_SHOWN = 15          # ops `--todo` prints (the reports have them all)


def pytest_args(library: str, profile: str, seed: int, junit: str | None, json_path: str | None,
                keyword: str | None, run_known_failures: bool, html_path: str | None = None,
                unit_timeout_s: float | None = None) -> list[str]:
    args = [str(SUITE_DIR / f"suite_{category}.py") for category in CATEGORIES]
    args += ["-p", "conformance.pytest_plugin", "-p", "no:cacheprovider", "-c", os.devnull,
             "--rootdir", str(SUITE_DIR), "-o", "python_files=suite_*.py", "-q", "--tb=short",
             f"--fl-plugin={library}", f"--fl-profile={profile}", f"--fl-seed={seed}",
             f"--hypothesis-seed={seed}"]
    if json_path:
        args.append(f"--fl-json={json_path}")
    if html_path:
        args.append(f"--fl-html={html_path}")
    if junit:
        args += [f"--junitxml={junit}", "-o", "junit_suite_name=torch-fl-conformance", "-o", "junit_family=xunit2"]
    if keyword:
        args += ["-k", keyword]
    if run_known_failures:
        args.append("--fl-run-known-failures")
    if unit_timeout_s is not None:
        args.append(f"--fl-unit-timeout={unit_timeout_s}")
    return args


def run(plugin: str, profile: str = "ci", junit: str | None = None, json_path: str | None = None,
        seed: int | None = None, keyword: str | None = None, run_known_failures: bool = False,
        html_path: str | None = None, unit_timeout_s: float | None = None, coverage: bool = False,
        with_todo: bool = False) -> int:
    """Run the suite; returns the process exit status (pytest's: 0 only when nothing failed).
    `coverage`: on a gcov-instrumented rebuild of the plugin (conformance.branch_coverage);
    `with_todo`: add what to implement next to the reports (add_todo)."""
    try:
        chosen, run_seed = choose(profile, seed, keyword, run_known_failures, unit_timeout_s)
        library = resolve(plugin).path
        if coverage:
            return branch_coverage.run(library, lambda built: run(built, profile, junit, json_path, seed, keyword,
                                                                  run_known_failures, html_path, unit_timeout_s),
                                       json_path, html_path)
    except (ProfileError, TargetError, branch_coverage.CoverageError) as exc:
        print(f"fl-sdk test: {exc}", file=sys.stderr)
        return 2
    status = int(pytest.main(pytest_args(library, chosen.name, run_seed, junit, json_path, keyword,
                                         run_known_failures, html_path, unit_timeout_s)))
    if with_todo:
        add_todo(library, json_path, html_path)
    return status


def add_todo(library: str, json_path: str | None, html_path: str | None) -> None:
    """`--todo`: rank the ops reference workloads call that the plugin lacks (conformance.todo)
    and add them to the reports ("todo" in the JSON, "What to implement next" in the HTML)."""
    from . import human_report, todo
    try:
        found = todo.run(library)
    except todo.TodoError as exc:
        print(f"fl-sdk test --todo: {exc}", file=sys.stderr)
        return
    print(todo.to_text(found, top=TODO_SHOWN))
    if json_path and Path(json_path).is_file():
        document = json.loads(Path(json_path).read_text())
        document["todo"] = {"traced": found["traced"], "skipped": found["skipped"], "ops": found["todo"]}
        Path(json_path).write_text(json.dumps(document, indent=1))
        if html_path:
            Path(html_path).write_text(human_report.html_page(document))
