"""Command lines made of one module per subcommand (`fl-sdk`, `torch-fl`).

Each subcommand module exposes `register(subparsers)`, which adds its parser and
sets `handler(args) -> int` as the parser default.  Modules are imported by
name when the parser is built, so a package lists its commands in one tuple.
"""
from __future__ import annotations

import argparse
import importlib


def make_parser(prog: str, description: str, package: str, commands: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in commands:     # the order `--help` lists them in
        importlib.import_module(f"{package}.{name.replace('-', '_')}").register(subparsers)
    return parser


def run(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse argv and run the chosen subcommand's handler; returns its exit status."""
    args = parser.parse_args(argv)
    return args.handler(args)
