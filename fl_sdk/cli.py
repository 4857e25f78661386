"""`fl-sdk`: the vendor's command line: build a plugin, test it with the conformance suite."""
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
    test_cmd = commands.add_parser("test", help="run the conformance suite on a plugin")
    test_cmd.add_argument("plugin", help="plugin library path, or the name of an installed plugin")
    test_cmd.add_argument("--profile", default="ci", help="ci (default) or cert")
    test_cmd.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    test_cmd.add_argument("--json", metavar="FILE", help="write the JSON report")
    test_cmd.add_argument("--seed", type=int, help="hypothesis seed (default 0; not with --profile cert)")
    test_cmd.add_argument("-k", dest="keyword", metavar="EXPR", help="only tests matching this pytest -k expression")
    test_cmd.add_argument("--run-known-failures", action="store_true",
                          help="run the tests known_failures.yaml waives (they still count as known failures)")
    args = parser.parse_args(argv)
    if args.command == "test":
        from conformance.runner import run   # imports torch: only for this command
        return run(args.plugin, args.profile, args.junit, args.json, args.seed, args.keyword,
                   args.run_known_failures)
    try:
        path = build(args.directory, force=args.force, verbose=args.verbose)
    except BuildError as exc:
        print(f"fl-sdk build: {exc}", file=sys.stderr)
        return 1
    print(f"built {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
