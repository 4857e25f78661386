"""A progress bar while the suite runs: one redrawn line on a terminal.

On a terminal, pytest's row of dots gives way to a bar with the count, the
failures so far and the test running now (a cert run takes minutes; dots do not
say how many remain).  Without a terminal (CI logs) nothing changes: pytest's
own `[ 42%]` lines are the progress there, and no carriage returns end up in logs.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

import pytest

REDRAW_S = 0.1


class ProgressBar:
    """A pytest plugin object; inert unless `stream` is a terminal."""

    def __init__(self, stream: TextIO = sys.stderr, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self.enabled = stream.isatty()
        self.total = 0
        self.done = 0
        self.failed = 0
        self._drawn = 0.0

    def line(self, current: str) -> str:
        filled = self.width * self.done // max(self.total, 1)
        bar = "#" * filled + "-" * (self.width - filled)
        return f"[{bar}] {self.done}/{self.total}, {self.failed} failed  {current}"

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_report_teststatus(self, report, config):
        outcome = yield
        result = outcome.get_result()
        if self.enabled and result and config.get_verbosity() <= 0:
            outcome.force_result((result[0], "", result[2]))   # the bar replaces the dots

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self._draw(nodeid.split("::")[-1])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and report.when in ("setup", "call"):
            self.failed += 1

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        self.done += 1

    def pytest_sessionfinish(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def _draw(self, current: str) -> None:
        now = time.monotonic()
        if not self.enabled or now - self._drawn < REDRAW_S:
            return
        self._drawn = now
        self.stream.write("\r\033[K" + self.line(current)[:200])
        self.stream.flush()
