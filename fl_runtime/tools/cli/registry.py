"""Command lines made of one module per subcommand (`fl-sdk`, `torch-fl`).

Each subcommand module exposes `register(subparsers)`, which adds its parser and
sets `handler(args) -> int` as the parser default.  Modules are imported by
name when the parser is built, so a package lists its commands in one tuple.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys


def make_parser(prog: str, description: str, package: str, commands: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in commands:     # the order `--help` lists them in
        importlib.import_module(f"{package}.{name.replace('-', '_')}").register(subparsers)
    return parser


def run(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse argv and run the chosen subcommand's handler; returns its exit status."""
    args = parser.parse_args(argv)
    try:
        status = args.handler(args)
        sys.stdout.flush()          # inside the try: a reader gone (`| head`) is seen here
    except BrokenPipeError:
        # The reader stopped reading (`torch-fl devices --json | head`): as any Unix tool, end
        # quietly; stdout goes to /dev/null so that the exit's own flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return status
