"""`fl-sdk build DIR`: compile a plugin directory (plugin.yaml) into its shared library."""
from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    cmd = subparsers.add_parser("build", help="compile a plugin directory (with plugin.yaml)")
    cmd.add_argument("directory")
    cmd.add_argument("--force", action="store_true", help="rebuild even if up to date")
    cmd.add_argument("-v", "--verbose", action="store_true", help="print the compiler command")
    cmd.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..build import BuildError, build
    try:
        path = build(args.directory, force=args.force, verbose=args.verbose)
    except BuildError as exc:
        print(f"fl-sdk build: {exc}", file=sys.stderr)
        return 1
    print(f"built {path}")
    return 0
