"""`fl-sdk update [DIR]`: re-render a plugin project on this SDK's template, keeping the vendor's edits."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers) -> None:
    cmd = subparsers.add_parser("update", help="update a plugin project to this SDK's template version")
    cmd.add_argument("directory", nargs="?", default=".", help="the plugin project (default: .)")
    cmd.add_argument("--template", metavar="DIR", help="a vendor template directory to update to "
                     "(default: the one shipped with this torch-fl)")
    cmd.add_argument("--conflict", choices=("inline", "rej"), default="inline",
                     help="how to leave conflicts: markers in the file (default) or .rej files")
    cmd.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..scaffold import TEMPLATE_DIR, ScaffoldError, update_project
    try:
        tag = update_project(Path(args.directory), Path(args.template or TEMPLATE_DIR), args.conflict)
    except ScaffoldError as exc:
        print(f"fl-sdk update: {exc}", file=sys.stderr)
        return 2
    print(f"updated {args.directory} to vendor template {tag}; review with `git diff` and commit")
    return 0
