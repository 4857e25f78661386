"""`torch-fl lock [FILE] [--json]`: write the running stack to a lock file (default torch-fl.lock).

The lock records torch, Torch-FL, Python, OS/arch, the ABI and, per plugin, its
version, library path and SHA-256, and the driver version per device type.
`torch-fl check FILE` compares a machine against it; the config's
`require_lock: FILE` refuses to start on any difference (docs/operators/locks-and-upgrades.md).
Exit status 0 when written, 2 when the config or the file cannot be used.
The --json schema ("torch-fl.lock/1"):
    {"schema": "torch-fl.lock/1", "file": str | null, "stack": {...} | null,
     "notes": [str], "error": str | null}
"""
from __future__ import annotations

import argparse
import json

SCHEMA = "torch-fl.lock/1"


def register(subparsers) -> None:
    parser = subparsers.add_parser("lock", help="write the running stack (versions, plugin hashes, drivers) "
                                   "to a lock file", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", nargs="?", help="the lock file to write (default: torch-fl.lock)")
    parser.add_argument("--json", action="store_true", help=f"machine-readable result (schema {SCHEMA})")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fl_runtime.errors import ConfigError
    from fl_runtime.plugins.stack import DEFAULT_LOCK_FILE, write_lock
    from fl_runtime.tools.running_stack import collect
    doc = {"schema": SCHEMA, "file": None, "stack": None, "notes": [], "error": None}
    try:
        running = collect()
        doc.update(stack=running.stack, notes=running.notes,
                   file=str(write_lock(args.file or DEFAULT_LOCK_FILE, running.stack)))
    except (ConfigError, OSError) as exc:
        doc["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 2 if doc["error"] else 0


def render(doc: dict) -> str:
    if doc["error"]:
        return f"torch-fl lock: nothing written: {doc['error']}"
    stack = doc["stack"]
    versions = (f"  torch {stack['torch']}, torch-fl {stack['torch_fl']}, python {stack['python']}, "
                f"{stack['os']}/{stack['arch']}, ABI {stack['abi']}")
    lines = [f"locked the running stack in {doc['file']}:", versions]
    for name, plugin in stack["plugins"].items():
        drivers = ", ".join(f"{t} driver {v}" for t, v in plugin["drivers"].items()) or "driver unknown"
        lines.append(f"  plugin {name} {plugin['version']} (ABI {plugin['abi']}, sha256 "
                     f"{plugin['sha256'][:16]}…, {drivers}): {plugin['library']}")
    if not stack["plugins"]:
        lines.append("  no plugin loaded: the lock pins no plugin")
    lines += [f"note: {note}" for note in doc["notes"]]
    return "\n".join(lines)
