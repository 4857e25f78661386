"""What `import torch_fl` and device discovery cost over `import torch` (docs/benchmarks/index.md "Start-up").

    python benchmarks/import_cost.py [--runs 5] [--compare OTHER_CHECKOUT] [--json]

Every figure comes from fresh interpreters, best of --runs, timed inside the child
with perf_counter (the interpreter's own start is the same for every variant and
left out):

  torch           `import torch` with PyTorch's backend autoload off (torch alone)
  torch+fl        `import torch; import torch_fl; torch.fl.device_count()` as a user runs it
                  (autoload on: the entry point starts the runtime inside `import torch`)
  over torch      torch+fl - torch: the target is <= 0.2 s

and the breakdown, each in its own fresh interpreter:

  header in-line  `import cffi` + `ffi.cdef(<fl_abi.h's cdef region>)` (what every import paid before)
  header cold     fl_runtime.abi.outofline.load_ffi with an empty cache (generate, write, load)
  header cached   the same with the cache filled (every later import)
  modules         `import fl_runtime` after torch, autoload off (module imports, nothing started)
  discovery       Runtime(): config, plugin discovery, certificate and probe checks, devices, op table
  registration    integration.backend.install + shutdown.install: the `fl` device and one
                  PyTorch kernel per op
  of which full gc  the part of modules + discovery + registration spent in full (generation-2)
                  garbage collections: `import torch` leaves the collector ~10-20k long-lived
                  objects short of one (~0.08 s), which the start-up's objects trigger (any
                  program keeping that many objects after `import torch` pays it too)

Children run with .pyc files, as a pip install has them (the warm-up run writes a
checkout's __pycache__, whatever PYTHONDONTWRITEBYTECODE says: without them every
fl_runtime module is compiled at each import, ~0.17 s more on a loaded machine).
On a loaded machine `torch+fl` - `torch` is the difference of two noisy figures (torch's
own import varies by more than the start-up costs); `start-up` = modules + discovery +
registration, timed in one child after `import torch`, is the figure to compare.
The header figures need no torch (the modules are loaded by path, as the plugin probe does).
With --compare, every run of torch+fl and of the breakdown alternates between this
checkout and OTHER_CHECKOUT (e.g. `git archive` of an older commit, with the reference
plugin's library copied in), so that a change in machine load hits both alike; the
report says the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CLOCK = "import time; clock = lambda: (time.perf_counter(), time.process_time())\n"
_SINCE = "def since(t): now = clock(); return f'{now[0] - t[0]} {now[1] - t[1]}'\n"
_TORCH = _CLOCK + _SINCE + "t = clock(); import torch; print(since(t))"
_TORCH_FL = (_CLOCK + _SINCE + "t = clock(); import torch; import torch_fl; n = torch.fl.device_count(); "
             "print(since(t)); assert n > 0, 'no fl devices'")
_BY_PATH = _CLOCK + _SINCE + textwrap.dedent("""
    import importlib.util, os, sys
    def load(name):
        path = os.path.join(sys.argv[1], "fl_runtime", "abi", name + ".py")
        spec = importlib.util.spec_from_file_location("_bench_" + name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    header = load("header")
    region = header.read_cdef(os.path.join(sys.argv[1], "fl_sdk", "include", "fl_abi.h"))
""")
_HEADER_INLINE = _BY_PATH + textwrap.dedent("""
    t = clock()
    import cffi
    ffi = cffi.FFI(); ffi.cdef(region); ffi.sizeof("fl_api")
    print(since(t))
""")
_HEADER_OUTOFLINE = _BY_PATH + textwrap.dedent("""
    t = clock()
    ffi = load("outofline").load_ffi(region); ffi.sizeof("fl_api")
    print(since(t))
""")
_PHASES = _CLOCK + _SINCE + textwrap.dedent("""
    import gc
    import torch
    full = [0.0, 0.0]       # wall, CPU spent in full (generation 2) collections from here on
    def on_gc(phase, info, started=[None]):
        if info["generation"] == 2:
            if phase == "start":
                started[0] = clock()
            else:
                now = clock()
                full[0] += now[0] - started[0][0]
                full[1] += now[1] - started[0][1]
    gc.callbacks.append(on_gc)
    t = clock()
    import fl_runtime
    from fl_runtime.integration import backend, shutdown
    from fl_runtime.runtime import Runtime
    from fl_runtime.torch_compat import check_torch_version
    modules, t = since(t), clock()
    check_torch_version()
    rt = Runtime()
    discovery, t = since(t), clock()
    backend.install(rt)
    shutdown.install(rt)
    print(modules, discovery, since(t), full[0], full[1])
    assert rt.devices, rt.empty_reason()
""")


def _child(code: str, root: Path, env: dict | None = None, args: tuple = ()) -> list[tuple[float, float]]:
    """The (wall, process CPU) pairs the child's last line prints."""
    full_env = {**os.environ, "PYTHONPATH": str(root), **(env or {})}
    # As installed (pip writes .pyc files): the first, warm-up run writes a checkout's __pycache__.
    full_env.pop("PYTHONDONTWRITEBYTECODE", None)
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=full_env,
                            cwd=root, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"benchmark child failed under {root}:\n{result.stderr[-3000:]}")
    numbers = [float(x) for x in result.stdout.strip().splitlines()[-1].split()]
    return list(zip(numbers[::2], numbers[1::2]))


def _has_outofline(root: Path) -> bool:
    return (root / "fl_runtime" / "abi" / "outofline.py").exists()


def measure(root: Path, warm_cache: str) -> dict[str, tuple[float, float]]:
    """One run of every figure for the checkout at `root`: (wall, process CPU) seconds."""
    off = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    figures = {"torch+fl": _child(_TORCH_FL, root, {"XDG_CACHE_HOME": warm_cache})[0],
               "header in-line": _child(_HEADER_INLINE, root, args=(str(root),))[0]}
    if _has_outofline(root):
        with tempfile.TemporaryDirectory() as cold:
            figures["header cold"] = _child(_HEADER_OUTOFLINE, root, {"XDG_CACHE_HOME": cold}, (str(root),))[0]
        figures["header cached"] = _child(_HEADER_OUTOFLINE, root, {"XDG_CACHE_HOME": warm_cache}, (str(root),))[0]
    modules, discovery, registration, full_gc = _child(_PHASES, root, {**off, "XDG_CACHE_HOME": warm_cache})
    figures.update({"modules": modules, "discovery": discovery, "registration": registration,
                    "of which full gc": full_gc})
    return figures


def _best(samples: list[tuple[float, float]]) -> dict[str, float]:
    """Best wall and best CPU, each over the runs (a loaded machine inflates both, never shrinks them)."""
    return {"wall": min(w for w, _ in samples), "cpu": min(c for _, c in samples)}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


_KEYS = ["torch+fl", "over torch", "start-up", "header in-line", "header cold", "header cached", "modules", "discovery",
         "registration", "of which full gc"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--compare", type=Path, help="another checkout, measured alternately with this one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    roots = {"this": ROOT, **({"other": args.compare.resolve()} if args.compare else {})}
    load_before = _load()
    runs: dict[str, list[dict]] = {name: [] for name in roots}
    torch_alone: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as warm_cache:      # verdicts and ABI module, filled by a first run
        for root in roots.values():
            _child(_TORCH_FL, root, {"XDG_CACHE_HOME": warm_cache})
        for run in range(args.runs):
            torch_alone.append(_child(_TORCH, ROOT, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})[0])
            order = list(roots.items()) if run % 2 == 0 else list(roots.items())[::-1]
            for name, root in order:
                runs[name].append(measure(root, warm_cache))
    report = {"runs": args.runs, "load_before": load_before, "load_after": _load(),
              "torch": _best(torch_alone), "checkouts": {}}
    for name, root in roots.items():
        best = {key: _best([r[key] for r in runs[name]]) for key in runs[name][0]}
        best["over torch"] = {clock: best["torch+fl"][clock] - report["torch"][clock] for clock in ("wall", "cpu")}
        phases = [{key: r[key] for key in ("modules", "discovery", "registration")} for r in runs[name]]
        best["start-up"] = {clock: min(sum(p[key][0 if clock == "wall" else 1] for key in p) for p in phases)
                            for clock in ("wall", "cpu")}
        report["checkouts"][name] = {"root": str(root), **best}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report, list(roots))


def _print(report: dict, names: list[str]) -> None:
    print(f"best of {report['runs']} fresh interpreters (s), with .pyc files; "
          f"load average {report['load_before']} -> {report['load_after']}")
    print(f"{'':<16}" + "".join(f"{name + ' wall':>13}{name + ' cpu':>13}" for name in names))
    rows = [("torch", [report["torch"]] * len(names))]
    rows += [(key, [report["checkouts"][name].get(key) for name in names]) for key in _KEYS]
    for key, cells in rows:
        line = "".join(f"{c['wall']:>13.3f}{c['cpu']:>13.3f}" if c else f"{'-':>13}{'-':>13}" for c in cells)
        print(f"{key:<16}{line}")


if __name__ == "__main__":
    main()
