"""`torch-fl build-bridge [--json]`: build the native bridge for the installed PyTorch now.

`pip install` builds it when torch is already installed; this builds it after a torch
upgrade, in images and in CI (docs/users/native-bridge.md).  A start never compiles: without a
build for its PyTorch it takes the Python route and names this command.
Prints the library's path (cached or just built) and exits 0; exits 1 with the reason when it
cannot be built here (no compiler, no PyTorch headers, a compiler error).
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def register(subparsers) -> None:
    parser = subparsers.add_parser("build-bridge", help="build the native bridge for the installed PyTorch")
    parser.add_argument("--json", action="store_true", help="machine-readable result")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fl_runtime.bridge import build
    started = time.monotonic()
    try:
        chain = build.target()
        cached = build.find_built(chain)
        path = cached or build.ensure_built(chain)
    except build.BridgeBuildError as exc:
        _report(args, {"built": False, "reason": str(exc)}, f"torch-fl: the native bridge cannot be built: {exc}")
        return 1
    result = {"built": True, "path": str(path), "cached": cached is not None, "torch": chain.torch_version,
              "seconds": round(time.monotonic() - started, 1)}
    how = "already cached" if cached else f"built in {result['seconds']} s"
    _report(args, result, f"native bridge for torch {chain.torch_version}: {path} ({how})")
    return 0


def _report(args: argparse.Namespace, document: dict, text: str) -> None:
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(text, file=sys.stdout if document.get("built") else sys.stderr)
