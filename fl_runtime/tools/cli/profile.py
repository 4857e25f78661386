"""`torch-fl profile SCRIPT [ARGS...]`: run a Python script with every fl op profiled.

Prints the summary table (op, path, variant, calls, host/device time, bytes
copied by fallbacks) when the script ends, and writes a Chrome trace
(chrome://tracing, Perfetto) with --trace.  The same is available without
this command: TORCH_FL_PROFILE=trace.json python script.py.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("profile", help="run a script with fl op profiling",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", metavar="PATH", help="write a Chrome-trace JSON file")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")
    parser.add_argument("--warn-share", type=float, default=None,
                        help="fallback share above which to warn (default: config, 0.10)")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from fl_runtime.integration import process
    from fl_runtime.tools.profiler import profile
    process.start()      # raises what a broken start-up raised, as import torch_fl would
    trace = os.path.abspath(args.trace) if args.trace else None     # before the script may chdir
    sys.argv = [args.script, *args.script_args]
    status = 0
    with profile(warn_fallback_share=args.warn_share) as prof:
        try:
            runpy.run_path(args.script, run_name="__main__")
        except SystemExit as exc:      # the script's own exit status is ours
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if trace:
        prof.export_chrome_trace(trace)
    print(json.dumps(prof.as_dict(), indent=2) if args.json else prof.summary())
    if trace:       # on stderr: --json keeps stdout one JSON document
        print(f"torch-fl profile: Chrome trace written to {trace} (open it in ui.perfetto.dev or "
              "chrome://tracing)", file=sys.stderr)
    return status
