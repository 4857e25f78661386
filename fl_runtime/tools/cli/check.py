"""`torch-fl check FILE [--json]`: does this machine run the stack a lock file records?

Names every difference as field, locked value, running value (torch, torch_fl,
python, os, arch, abi, and per plugin: version, abi, library, sha256 and the
driver version per device type; a plugin missing on one side is one difference).
Exit status 0 when the stack matches, 1 when it differs, 2 when the lock file or
the config cannot be read.  The --json schema ("torch-fl.check/1"):
    {"schema": "torch-fl.check/1", "file": str, "matches": bool,
     "differences": [{"field": str, "locked": any, "running": any}],
     "notes": [str], "error": str | null}
"""
from __future__ import annotations

import argparse
import json

SCHEMA = "torch-fl.check/1"


def register(subparsers) -> None:
    parser = subparsers.add_parser("check", help="compare the running stack with a lock file (torch-fl lock)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", help="the lock file `torch-fl lock` wrote")
    parser.add_argument("--json", action="store_true", help=f"machine-readable result (schema {SCHEMA})")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fl_runtime.errors import ConfigError, LockFileError
    from fl_runtime.plugins.stack import check_lock
    from fl_runtime.tools.running_stack import collect
    doc = {"schema": SCHEMA, "file": args.file, "matches": False, "differences": [], "notes": [], "error": None}
    try:
        running = collect()
        found = check_lock(args.file, running.stack)
        doc.update(matches=not found, differences=[d.as_dict() for d in found], notes=running.notes)
        lines = [d.describe() for d in found]
    except (ConfigError, LockFileError) as exc:
        doc["error"], lines = f"{type(exc).__name__}: {exc}", []
    print(json.dumps(doc, indent=2) if args.json else render(doc, lines))
    return 2 if doc["error"] else (0 if doc["matches"] else 1)


def render(doc: dict, lines: list[str]) -> str:
    if doc["error"]:
        return f"torch-fl check: {doc['error']}"
    if doc["matches"]:
        text = [f"the running stack matches {doc['file']}"]
    else:
        text = [f"the running stack differs from {doc['file']} in {len(lines)} field(s):"]
        text += [f"  {line}" for line in lines]
        text.append("reinstall the locked versions (docs/operators/locks-and-upgrades.md), or re-lock with "
                    "`torch-fl lock` once this stack is verified")
    return "\n".join(text + [f"note: {note}" for note in doc["notes"]])
