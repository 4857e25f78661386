"""Before/after for the reference vendor's inline launches of small kernels, in the same
loaded conditions: fresh interpreters alternate FL_REFERENCE_INLINE_BYTES=0 (every kernel
goes through the stream's worker, as before) and the default (small kernels on an idle
stream run on the launching thread; reference_vendor/src/driver/queue.c).

    python benchmarks/inline_ab.py [--pairs 3]

Each child runs the tiny GPT-2 training step (host_cost.py's) on fl:0 and on the CPU
(one thread), and the tiny-op set on fl:0; each setting keeps its best.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

_CHILD = """
import json, sys, time
sys.path.insert(0, {here!r})
import torch
torch.set_num_threads(1)
import torch_fl
from host_cost import gpt2_mix, tiny_mix, CLOCKS

def timed(step, n, sync):
    step(); sync()
    start = {{k: c() for k, c in CLOCKS.items()}}
    for _ in range(n):
        step()
    sync()
    return {{k: (c() - start[k]) / n for k, c in CLOCKS.items()}}

sync = lambda: torch_fl.synchronize(0)
out = {{"gpt2_fl": timed(gpt2_mix("fl:0"), 5, sync), "gpt2_cpu": timed(gpt2_mix("cpu"), 5, lambda: None),
        "tiny_fl": timed(tiny_mix("fl:0"), 10, sync)}}
print(json.dumps(out))
"""


def child(inline_bytes: str | None) -> dict:
    env = dict(os.environ)
    env.pop("FL_REFERENCE_INLINE_BYTES", None)
    if inline_bytes is not None:
        env["FL_REFERENCE_INLINE_BYTES"] = inline_bytes
    result = subprocess.run([sys.executable, "-c", _CHILD.format(here=str(HERE))], env=env, capture_output=True,
                            text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    best: dict[str, dict] = {}
    for _ in range(args.pairs):
        for label, setting in (("worker only (INLINE_BYTES=0)", "0"), ("inline small kernels (default)", None)):
            got = child(setting)
            mine = best.setdefault(label, got)
            for case, clocks in got.items():
                mine[case] = {k: min(v, mine[case][k]) for k, v in clocks.items()}
    print(f"load average {os.getloadavg()[0]:.1f}; best of {args.pairs} per setting; ms per iteration, wall / process CPU")
    for label, cases in best.items():
        g, c, t = cases["gpt2_fl"], cases["gpt2_cpu"], cases["tiny_fl"]
        print(f"{label:32s} GPT-2 step fl:0 {g['wall'] * 1e3:7.2f} / {g['process'] * 1e3:7.2f}  "
              f"(CPU {c['wall'] * 1e3:6.2f} / {c['process'] * 1e3:6.2f}; ratio wall {g['wall'] / c['wall']:.2f}x, "
              f"process CPU {g['process'] / c['process']:.2f}x)   tiny ops x300 fl:0 {t['wall'] * 1e3:7.2f} / "
              f"{t['process'] * 1e3:7.2f}")


if __name__ == "__main__":
    main()
