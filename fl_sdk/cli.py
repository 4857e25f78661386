"""`fl-sdk`: the vendor's command line; one module per subcommand in fl_sdk/commands/."""
from __future__ import annotations

import sys

from . import runtime_not_started

with runtime_not_started():     # a vendor's tools never start a runtime on the installed plugins
    from fl_runtime.tools.cli.registry import make_parser, run  # one helper for both CLIs

COMMANDS = ("new", "update", "build", "test", "todo", "keygen", "certify", "verify")


def main(argv: list[str] | None = None) -> int:
    return run(make_parser("fl-sdk", "Torch-FL vendor SDK", "fl_sdk.commands", COMMANDS), argv)


if __name__ == "__main__":
    sys.exit(main())
