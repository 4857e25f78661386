"""`fl-sdk todo PLUGIN`: the ATen ops reference workloads call that the plugin has no
kernel for, ranked by how often they are called (docs/vendors/kernel-library.md
"What to implement next").

Each workload of conformance.workloads is traced with the runtime's coverage tool
(fl_runtime/tools/coverage.py: make_fx on fake tensors, nothing computed) in a child
process whose runtime sees this plugin alone, and each op is classified by the fallback
chain that runs ops: native (a kernel of the plugin, a view, an op the runtime owns),
generic (decomposed into ops the plugin has), cpu (a round trip through the host) or
unsupported.  The to-do is every op that is not native: the ones that fall back to the
CPU first, then the decomposed ones, each by calls across the workloads.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

FORMAT = "torch-fl-todo/1"
# Most urgent first: a host round trip per call, then no way at all, then a decomposition.
URGENCY = {"cpu": 0, "unsupported": 1, "generic": 2}


class TodoError(RuntimeError):
    """The workloads could not be traced on the plugin (the message says why)."""


def run(library: str, timeout_s: float = 900) -> dict[str, Any]:
    """Trace every workload in a child process whose runtime loads `library` alone."""
    with tempfile.TemporaryDirectory(prefix="fl-todo-") as scratch:
        config, out = Path(scratch) / "config.yaml", Path(scratch) / "todo.json"
        config.write_text("fallback:\n  enable_cpu_fallback: true\n  enable_generic_kernel: true\n")
        env = {**os.environ, "TORCH_FL_PLUGINS": library, "TORCH_FL_DISABLE_ENTRY_POINTS": "1",
               "TORCH_FL_CONFIG": str(config), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
        result = subprocess.run([sys.executable, "-m", "conformance.todo", library, "--out", str(out)], env=env,
                                capture_output=True, text=True, timeout=timeout_s)
        if result.returncode != 0 or not out.is_file():
            raise TodoError(f"tracing the workloads on {library} failed (exit status {result.returncode}):\n"
                            + result.stderr.strip()[-3000:])
        return json.loads(out.read_text())


def trace_all(library: str) -> dict[str, Any]:
    """In the child: trace each workload on fl:0 (the plugin's first device)."""
    import torch_fl
    from fl_runtime.tools.coverage import coverage

    from .workloads import WORKLOADS, available
    devices = torch_fl.list_devices()
    if not devices:
        raise TodoError(f"the runtime found no device of {library}: {torch_fl.why_no_devices()}")
    calls: dict[str, Counter] = {}
    status: dict[str, str] = {}
    traced, skipped = [], {}
    for workload in WORKLOADS:
        if not available(workload):
            skipped[workload.name] = f"needs {workload.needs} (pip install {workload.needs})"
            continue
        try:
            model, inputs = workload.build()
            report = coverage(model, inputs, devices=[0], backward=workload.backward)
        except Exception as exc:      # one workload the tracer cannot follow must not hide the others
            skipped[workload.name] = f"could not be traced: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            continue
        traced.append(workload.name)
        for op in report.ops:
            calls.setdefault(op.op, Counter())[workload.name] += op.calls
            status[op.op] = op.status["fl:0"]
    ops = [{"op": name, "status": status[name], "calls": sum(by.values()), "workloads": dict(by)}
           for name, by in calls.items()]
    return {"format": FORMAT, "plugin": library, "device": devices[0]["device"],
            "traced": traced, "skipped": skipped, "ops": ops, "todo": ranked(ops)}


def ranked(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ops without a native path: CPU fallbacks first, then by calls, most first."""
    missing = [op for op in ops if op["status"] in URGENCY]
    return sorted(missing, key=lambda op: (URGENCY[op["status"]], -op["calls"], op["op"]))


def to_text(document: dict[str, Any], top: int | None = None) -> str:
    todo = document["todo"][:top] if top else document["todo"]
    native = sum(op["status"] == "native" for op in document["ops"])
    lines = [f"{document['plugin']}: {len(document['ops'])} distinct ATen ops in {', '.join(document['traced'])}; "
             f"{native} run natively, {len(document['todo'])} do not"]
    if todo:
        width = max(len(op["op"]) for op in todo)
        lines.append(f"{'rank':>4}  {'op':<{width}}  {'calls':>5}  {'now runs as':<11}  called by")
        for rank, op in enumerate(todo, 1):
            users = ", ".join(f"{name} {count}" for name, count in op["workloads"].items())
            lines.append(f"{rank:>4}  {op['op']:<{width}}  {op['calls']:>5}  {op['status']:<11}  {users}")
    for name, why in document["skipped"].items():
        lines.append(f"not traced: {name} ({why})")
    lines.append("cpu: each call copies its tensors to the host and back; generic: decomposed into ops the plugin "
                 "has. An op's argument order is its ATen schema (docs/vendors/kernel-library.md).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("library")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    Path(args.out).write_text(json.dumps(trace_all(args.library), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
