"""`fl-sdk build DIR`: compile a plugin directory (plugin.yaml) into its shared library."""
from __future__ import annotations

import argparse
import os
import sys


def register(subparsers) -> None:
    cmd = subparsers.add_parser("build", help="compile a plugin directory (with plugin.yaml)")
    cmd.add_argument("directory")
    cmd.add_argument("--force", action="store_true", help="rebuild even if up to date")
    cmd.add_argument("--werror", action="store_true",
                     help="warnings fail the build (CI; also FL_WERROR=1); compiles every source again")
    cmd.add_argument("-v", "--verbose", action="store_true", help="print the compiler command")
    cmd.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..build import WERROR_ENV, BuildError, build
    if args.werror:
        os.environ[WERROR_ENV] = "1"
    try:
        path = build(args.directory, force=args.force or args.werror, verbose=args.verbose)
    except BuildError as exc:
        print(f"fl-sdk build: {exc}", file=sys.stderr)
        return 1
    print(f"built {path}")
    return 0
