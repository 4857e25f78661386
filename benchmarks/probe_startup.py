"""Start-up cost of the isolated plugin probe (docs/operators/plugins.md "Isolated probing").

    python benchmarks/probe_startup.py [--runs 5] [--json]

Times `python -c "import torch; torch.fl.device_count()"` in fresh interpreters on
the installed plugins, three ways: probing on with an empty verdict cache (cold:
one child per plugin), probing on with the cache filled (warm: the normal start-up),
and probing off (TORCH_FL_PROBE_PLUGINS=0).  The runs interleave the three ways so
that a change in machine load hits each alike; each figure is the median of --runs
wall-clock times, in seconds.  Also reports one probe child alone (`probe_s`) and one warm-cache verdict lookup in
process (`warm_lookup_ms`, what a warm start-up adds per plugin).
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

_CODE = "import torch; torch.fl.device_count()"


def _time(env: dict) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", _CODE], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def _probe_once(env: dict) -> float:
    code = ("import time, fl_runtime.plugins.probe as p, fl_runtime.plugins.loader as l;"
            "from fl_runtime.plugins.pinned import open_pinned;"
            "s=l.discover_sources()[0]; pin=open_pinned(s.path); t=time.perf_counter();"
            "v=p.run_probe(pin, 60); print(time.perf_counter()-t, v.outcome)")
    out = subprocess.run([sys.executable, "-c", code], env={**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
                         check=True, capture_output=True, text=True).stdout.split()
    return float(out[0])


def _lookup_ms(env: dict) -> float:
    """One warm-cache verdict lookup in-process (what a warm start-up adds per plugin)."""
    code = ("import time, fl_runtime.plugins.probe as p, fl_runtime.plugins.loader as l;"
            "from fl_runtime.plugins.pinned import open_pinned;"
            "pin=open_pinned(l.discover_sources()[0].path); p.verdict_for(pin); t=time.perf_counter();"
            "[p.verdict_for(pin) for _ in range(100)]; print((time.perf_counter()-t)*10)")
    return float(subprocess.run([sys.executable, "-c", code], env={**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
                                check=True, capture_output=True, text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"cold": [], "warm": [], "off": []}
    probes = []
    with tempfile.TemporaryDirectory() as warm_cache:
        base = {**os.environ, "TORCH_FL_PROBE_PLUGINS": "1"}
        _time({**base, "XDG_CACHE_HOME": warm_cache})          # fills the warm cache
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as cold_cache:
                times["cold"].append(_time({**base, "XDG_CACHE_HOME": cold_cache}))
            times["warm"].append(_time({**base, "XDG_CACHE_HOME": warm_cache}))
            times["off"].append(_time({**os.environ, "TORCH_FL_PROBE_PLUGINS": "0"}))
            probes.append(_probe_once(base))
        result = {name: round(statistics.median(values), 3) for name, values in times.items()}
        result_lookup = _lookup_ms({**base, "XDG_CACHE_HOME": warm_cache})
    result["probe_s"] = round(statistics.median(probes), 3)
    result["warm_lookup_ms"] = round(result_lookup, 3)
    result["runs"] = args.runs
    result["all"] = {name: [round(v, 3) for v in values] for name, values in times.items()}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"median of {args.runs}: cold cache {result['cold']:.2f} s, warm cache {result['warm']:.2f} s, "
              f"probing off {result['off']:.2f} s; one probe child alone {result['probe_s']:.2f} s, "
              f"one warm-cache lookup {result['warm_lookup_ms']:.2f} ms")


if __name__ == "__main__":
    main()
