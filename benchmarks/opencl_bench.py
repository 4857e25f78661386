"""The OpenCL plugin's figures (docs/vendors/opencl-plugin.md "Figures"): the README CNN's and a
tiny GPT-2's training steps on the first OpenCL device against native PyTorch on the CPU, in one
run, alternating rounds so both see the same host load.

    make opencl
    PYTHONPATH=.venv/opencl-site .venv/bin/python benchmarks/opencl_bench.py [--steps 10] [--json out.json]

The steps are host_cost.py's (the CNN at batch 64 with Adam; GPT-2 with 2 layers, 64 wide,
4 x 64 tokens, AdamW), so the figures sit next to docs/benchmarks/index.md's reference-vendor
ones.  Each figure is the median of --rounds rounds of --steps steps, after three warm-up steps (the first
of which builds or loads the OpenCL programs: "first step" reports it), as wall time and as
the CPU time of all of the process's threads (PoCL's workers and PyTorch's OpenMP threads
included), which other jobs on a shared host disturb far less than the wall.  Native rounds run in a
child process (Torch-FL not started), alternating with the OpenCL rounds: PoCL's worker threads
and PyTorch's OpenMP threads then never share the cores within a round.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

import torch_fl  # noqa: E402
from host_cost import cnn_mix, gpt2_mix  # noqa: E402
from opencl_models import opencl_device  # noqa: E402

MIXES = {"CNN train step (batch 64)": cnn_mix, "GPT-2 train step (2 layers, 4 x 64 tokens)": gpt2_mix}


def _sync(device: str) -> None:
    if device != "cpu":
        torch_fl.synchronize(int(device.split(":")[1]))


def _time_steps(step, device: str, steps: int) -> tuple[float, float]:
    """(wall ms, CPU ms of every thread of the process) per step: CPU time, PoCL's worker
    threads included, stays readable when other jobs share the host and the wall does not."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    _sync(device)
    return (time.perf_counter() - start) / steps * 1e3, (time.process_time() - cpu) / steps * 1e3


_NATIVE_ROUND = """
import sys, time
sys.path[:0] = {paths!r}
from host_cost import {mix}
step = {mix}("cpu")
for _ in range(3):
    step()
start, cpu = time.perf_counter(), time.process_time()
for _ in range({steps}):
    step()
print((time.perf_counter() - start) / {steps} * 1e3, (time.process_time() - cpu) / {steps} * 1e3)
"""


def native_round(mix, steps: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per step of `mix` on native PyTorch CPU, in a child without Torch-FL."""
    code = _NATIVE_ROUND.format(paths=[str(HERE), str(HERE.parent / "examples")], mix=mix.__name__, steps=steps)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    wall, cpu = result.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def measure(mix, device: str, steps: int, rounds: int) -> dict:
    started = time.perf_counter()
    opencl_step = mix(device)
    opencl_step()
    _sync(device)
    first = (time.perf_counter() - started) * 1e3
    for _ in range(2):
        opencl_step()
    _sync(device)
    ours, native = [], []
    for _ in range(rounds):
        ours.append(_time_steps(opencl_step, device, steps))
        native.append(native_round(mix, steps))
    row = {"first_step_ms": first}
    for i, clock in enumerate(("wall", "cpu")):
        row[f"opencl_{clock}_ms"] = statistics.median(r[i] for r in ours)
        row[f"native_{clock}_ms"] = statistics.median(r[i] for r in native)
        row[f"{clock}_ratio"] = row[f"opencl_{clock}_ms"] / row[f"native_{clock}_ms"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    device = opencl_device()
    info = next(d for d in torch_fl.list_devices() if d["device"] == device)
    print(f"{device}: {info['name']} ({info['vendor']}, driver {info['driver_version']}); "
          f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads for native PyTorch; "
          f"load average {os.getloadavg()[0]:.1f}")
    rows = {name: measure(mix, device, args.steps, args.rounds) for name, mix in MIXES.items()}
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print("| step | OpenCL wall (ms) | native wall (ms) | wall ratio | OpenCL CPU (ms) | native CPU (ms) | "
          "CPU ratio | first step (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['opencl_wall_ms']:.1f} | {r['native_wall_ms']:.1f} | {r['wall_ratio']:.2f}x | "
              f"{r['opencl_cpu_ms']:.1f} | {r['native_cpu_ms']:.1f} | {r['cpu_ratio']:.2f}x | {r['first_step_ms']:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": info, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
