"""The four verdicts a conformance test can reach, plus "untested".

  pass           the plugin did what the ABI / PyTorch says
  fail           it did not (the message says what, with a reproducer)
  not_supported  the plugin does not declare the capability (dtype not in a
                 kernel's mask or the device's), so there is nothing to check
  known_failure  the vendor's waiver file lists it (not run unless
                 --run-known-failures; then a failure stays known_failure)
  untested       the suite cannot check it yet (no generator for the op):
                 never counted as a pass

not_supported and untested are pytest skips whose reason starts with a tag.
"""
from __future__ import annotations

from typing import NoReturn

import pytest

PASS, FAIL, NOT_SUPPORTED, KNOWN_FAILURE, UNTESTED = "pass", "fail", "not_supported", "known_failure", "untested"
ALL = (PASS, FAIL, NOT_SUPPORTED, KNOWN_FAILURE, UNTESTED)


def not_supported(reason: str) -> NoReturn:
    pytest.skip(f"[{NOT_SUPPORTED}] {reason}")


def untested(reason: str) -> NoReturn:
    pytest.skip(f"[{UNTESTED}] {reason}")


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr or "")
    return text.removeprefix("Skipped: ")


def status_of(report: pytest.TestReport) -> str:
    """The status one phase's report stands for."""
    if report.failed:
        return FAIL
    if hasattr(report, "wasxfail"):
        return PASS if report.passed else KNOWN_FAILURE   # an xpass: the waiver is no longer needed
    if report.skipped:
        reason = skip_reason(report)
        for status in (NOT_SUPPORTED, UNTESTED, KNOWN_FAILURE):
            if reason.startswith(f"[{status}]"):
                return status
        return UNTESTED     # any other skip: nothing was checked
    return PASS
