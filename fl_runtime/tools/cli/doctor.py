"""`torch-fl doctor [--json]`: walk the troubleshooting order, a verdict and next step per check.

Exit status 0 when no check failed, 1 otherwise.  The --json schema
("torch-fl.doctor/1"):
    {"schema": "torch-fl.doctor/1", "verdict": "healthy" | "problems",
     "checks": [{"name": str, "status": "ok" | "warn" | "fail" | "not applicable",
                 "detail": str, "next_step": str}, ...]}
"""
from __future__ import annotations

import argparse
import json

_MARKS = {"ok": "OK  ", "warn": "WARN", "fail": "FAIL", "not applicable": "N/A "}


def register(subparsers) -> None:
    parser = subparsers.add_parser("doctor", help="check the installation and say what to fix")
    parser.add_argument("--json", action="store_true", help="machine-readable report (schema torch-fl.doctor/1)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fl_runtime.tools.diagnostics import run_checks
    report = run_checks()
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(render(report))
    return 0 if report.healthy else 1


def render(report) -> str:
    lines = []
    for check in report.checks:
        lines.append(f"[{_MARKS[check.status]}] {check.name}: {check.detail}")
        if check.next_step and check.status in ("fail", "warn"):
            lines.append(f"       next step: {check.next_step}")
    failed = [c.name for c in report.checks if c.status == "fail"]
    lines.append("verdict: healthy" if report.healthy else f"verdict: problems ({', '.join(failed)})")
    return "\n".join(lines)
