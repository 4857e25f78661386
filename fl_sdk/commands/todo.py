"""`fl-sdk todo PLUGIN`: the ATen ops reference workloads need that the plugin lacks, ranked."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers) -> None:
    cmd = subparsers.add_parser("todo", help="rank the ops reference workloads (CNN, GPT-2, BERT, Llama, T5, ViT, "
                                "an AdamW step) call that the plugin has no kernel for")
    cmd.add_argument("plugin", help="plugin library path, plugin project directory, or an installed plugin's name")
    cmd.add_argument("--json", metavar="FILE", help="write the whole to-do (every op, its calls per workload) here")
    cmd.add_argument("--top", type=int, metavar="N", help="show the N most urgent ops only")
    cmd.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from conformance import todo
    from conformance.target import TargetError, resolve
    try:
        document = todo.run(resolve(args.plugin).path)
    except (TargetError, todo.TodoError) as exc:
        print(f"fl-sdk todo: {exc}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=1))
    print(todo.to_text(document, args.top))
    return 0
