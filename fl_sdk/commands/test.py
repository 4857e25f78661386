"""`fl-sdk test PLUGIN`: run the conformance suite on a plugin."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    cmd = subparsers.add_parser("test", help="run the conformance suite on a plugin")
    cmd.add_argument("plugin", help="plugin library path, plugin project directory, or an installed plugin's name")
    cmd.add_argument("--profile", default="ci", help="ci (default) or cert")
    cmd.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    cmd.add_argument("--json", metavar="FILE", help="write the JSON report")
    cmd.add_argument("--html", metavar="FILE", help="write the HTML report (a per-kernel table)")
    cmd.add_argument("--seed", type=int, help="hypothesis seed (default 0; not with --profile cert)")
    cmd.add_argument("-k", dest="keyword", metavar="EXPR", help="only tests matching this pytest -k expression")
    cmd.add_argument("--run-known-failures", action="store_true",
                     help="run the tests known_failures.yaml waives (they still count as known failures)")
    cmd.add_argument("--unit-timeout", type=float, metavar="SECONDS",
                     help="a kernel silent this long on one dtype is hung and fails (ci default 60; "
                          "not with --profile cert, which uses 300)")
    cmd.add_argument("--coverage", action="store_true",
                     help="rebuild the plugin from its plugin.yaml with gcov instrumentation, run the profile on "
                          "that build and report the branches of each source the suite never reached")
    cmd.add_argument("--todo", action="store_true",
                     help="also trace reference workloads and rank the ops they call that the plugin lacks "
                          "(as `fl-sdk todo`; in the JSON and HTML reports)")
    cmd.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from conformance.runner import run as run_suite   # imports torch: only for this command
    return run_suite(args.plugin, args.profile, args.junit, args.json, args.seed, args.keyword,
                     args.run_known_failures, html_path=args.html, unit_timeout_s=args.unit_timeout,
                     coverage=args.coverage, with_todo=args.todo)
