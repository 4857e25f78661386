"""`fl-sdk new NAME`: scaffold a vendor plugin project from the template."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Options -> copier answers (the questions in vendor_template/copier.yml).
_ANSWER_OPTIONS = {"vendor": "vendor_name", "device_type": "device_type", "alignment": "alignment",
                   "devices": "device_count", "cflags": "extra_cflags"}


def register(subparsers) -> None:
    cmd = subparsers.add_parser("new", help="create a vendor plugin project from the template")
    cmd.add_argument("name", help="plugin name: lowercase letters, digits and '_' (a C and Python identifier)")
    cmd.add_argument("--output", metavar="DIR", help="where to create it (default ./NAME)")
    cmd.add_argument("--vendor", help="vendor name")
    cmd.add_argument("--device-type", help="device type string (default: NAME)")
    cmd.add_argument("--alignment", type=int, help="device allocation alignment in bytes (a power of two)")
    cmd.add_argument("--devices", type=int, help="device count of the host stand-in driver")
    cmd.add_argument("--cflags", help="extra C compiler flags, e.g. --cflags='-O3 -march=native'")
    cmd.add_argument("--ops", help="comma-separated starting kernels, e.g. neg,add.Tensor (see copier.yml)")
    cmd.add_argument("--defaults", action="store_true", help="take the template's default for every answer not "
                     "given as an option instead of asking")
    cmd.add_argument("--no-git", action="store_true", help="do not make the project a git repository")
    cmd.set_defaults(handler=run)


def answers_from(args: argparse.Namespace) -> dict:
    answers = {key: getattr(args, option) for option, key in _ANSWER_OPTIONS.items()
               if getattr(args, option) is not None}
    if args.ops is not None:
        answers["ops"] = [op.strip() for op in args.ops.split(",") if op.strip()]
    return answers


def run(args: argparse.Namespace) -> int:
    from ..scaffold import ScaffoldError, new_project
    destination = Path(args.output or args.name)
    # Without a terminal there is nobody to answer copier's questions.
    defaults = args.defaults or not sys.stdin.isatty()
    try:
        path = new_project(args.name, destination, answers_from(args), defaults=defaults, git_init=not args.no_git)
    except ScaffoldError as exc:
        print(f"fl-sdk new: {exc}", file=sys.stderr)
        return 2
    print(f"created {path}\nnext: fl-sdk build {path} && fl-sdk test {path}/{args.name}/libfl_{args.name}.so")
    return 0
