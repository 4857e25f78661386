"""`torch-fl`: the user's command line (devices, doctor, coverage, profile).

Each subcommand lives in its own module here and exposes `register(subparsers)`,
which adds its parser and sets `handler(args) -> int` as the parser default.
Every command takes --json where its output is a report.
"""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("devices", "doctor", "coverage", "profile")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torch-fl", description="Torch-FL: PyTorch on any chip")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"fl_runtime.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"fl_runtime.cli.{name}":
                raise
            continue     # a command still being written is simply not offered
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
