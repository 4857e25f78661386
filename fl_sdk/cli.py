"""`fl-sdk`: the vendor's command line.

Each subcommand lives in its own module under fl_sdk/commands/ and exposes
`register(subparsers)`, which adds its parser and sets `run(args) -> int` as
the parser's default `handler`.  Modules are imported lazily by name so a
command that needs torch does not slow the others down.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# Order here is the order `fl-sdk --help` lists them.
COMMANDS = ("new", "update", "build", "test", "keygen", "certify", "verify")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fl-sdk", description="Torch-FL vendor SDK")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"fl_sdk.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"fl_sdk.commands.{name}":
                raise
            continue     # a command still being written is simply not offered
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
