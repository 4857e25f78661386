"""The native bridge's costs: a cold build, a warm start, and the hot path on both routes.

    python benchmarks/bridge_start.py [--starts 9] [--json out.json] [--skip-cold]

1. Cold build: `torch-fl build-bridge` into an empty cache (TORCH_FL_CACHE_DIR), seconds.
2. Warm start: `import torch_fl` (runtime start included) in fresh processes, median ms, with
   the cached bridge and with TORCH_FL_BRIDGE=0; the difference is what the bridge adds.
3. Hot path: benchmarks/bench.py's tiny-op dispatch figures (us/op and ratio to native CPU)
   on both routes, each measured against native PyTorch in its own run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_START = "import time; t = time.perf_counter(); import torch_fl; print(time.perf_counter() - t)"


def cold_build() -> float:
    with tempfile.TemporaryDirectory() as cache:
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "fl_runtime.tools.cli", "build-bridge"], check=True,
                       env={**os.environ, "TORCH_FL_CACHE_DIR": cache, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
                       capture_output=True)
        return time.monotonic() - started


def warm_start_ms(starts: int, bridge: str) -> float:
    env = {**os.environ, "TORCH_FL_BRIDGE": bridge, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    times = []
    for _ in range(starts):
        out = subprocess.run([sys.executable, "-c", _START], check=True, env=env, capture_output=True, text=True)
        times.append(float(out.stdout.strip().splitlines()[-1]) * 1000)
    return statistics.median(times)


def hot_path(bridge: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--steps", "10", "--rounds", "2",
                        "--json", out.name], check=True, env={**os.environ, "TORCH_FL_BRIDGE": bridge},
                       capture_output=True)
        return json.loads(Path(out.name).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=9)
    parser.add_argument("--skip-cold", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    figures = {"load_average": os.getloadavg()}
    if not args.skip_cold:
        figures["cold_build_s"] = round(cold_build(), 1)
        print(f"cold build: {figures['cold_build_s']} s")
    for name, switch in (("bridge", "1"), ("python_route", "0")):
        figures[f"warm_start_ms_{name}"] = round(warm_start_ms(args.starts, switch), 1)
    figures["bridge_adds_ms"] = round(figures["warm_start_ms_bridge"] - figures["warm_start_ms_python_route"], 1)
    print(f"import torch_fl: {figures['warm_start_ms_bridge']} ms on the bridge, "
          f"{figures['warm_start_ms_python_route']} ms on the Python route ({figures['bridge_adds_ms']:+} ms)")
    for name, switch in (("bridge", "1"), ("python_route", "0")):
        figures[f"hot_path_{name}"] = hot_path(switch)
    print(json.dumps({k: v for k, v in figures.items() if k.startswith("hot_path")}, indent=1))
    figures["load_average_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
