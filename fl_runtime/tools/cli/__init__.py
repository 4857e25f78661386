"""`torch-fl`: the user's command line (devices, doctor, coverage, profile, lock, check).

One module per subcommand here (the pattern: registry.py, shared with `fl-sdk`);
every command that prints a report also takes --json.
"""
from __future__ import annotations

import sys

from fl_runtime.tools.cli.registry import make_parser, run

COMMANDS = ("devices", "doctor", "coverage", "profile", "lock", "check", "build-bridge")


def main(argv: list[str] | None = None) -> int:
    return run(make_parser("torch-fl", "Torch-FL: PyTorch on any chip", "fl_runtime.tools.cli", COMMANDS), argv)


if __name__ == "__main__":
    sys.exit(main())
