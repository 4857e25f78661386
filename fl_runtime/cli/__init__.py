"""`torch-fl`: the user's command line (devices, doctor, coverage, profile).

One module per subcommand here (see fl_sdk/subcommands.py for the pattern);
every command that prints a report also takes --json.
"""
from __future__ import annotations

import sys

from fl_sdk.subcommands import make_parser, run

COMMANDS = ("devices", "doctor", "coverage", "profile")


def main(argv: list[str] | None = None) -> int:
    return run(make_parser("torch-fl", "Torch-FL: PyTorch on any chip", "fl_runtime.cli", COMMANDS), argv)


if __name__ == "__main__":
    sys.exit(main())
