"""`fl-sdk`: the vendor's command line (build today; scaffold/test/certify follow)."""
from __future__ import annotations

import argparse
import sys

from .build import BuildError, build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fl-sdk", description="Torch-FL vendor SDK")
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="compile a plugin directory (with plugin.yaml)")
    build_cmd.add_argument("directory")
    build_cmd.add_argument("--force", action="store_true", help="rebuild even if up to date")
    build_cmd.add_argument("-v", "--verbose", action="store_true", help="print the compiler command")
    args = parser.parse_args(argv)
    try:
        path = build(args.directory, force=args.force, verbose=args.verbose)
    except BuildError as exc:
        print(f"fl-sdk build: {exc}", file=sys.stderr)
        return 1
    print(f"built {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
