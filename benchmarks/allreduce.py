"""All-reduce latency and bandwidth on fl tensors: vendor collectives (ABI 1.1) vs host-staged Gloo.

    python benchmarks/allreduce.py [--ranks 2] [--repeats 10] [--json out.json]

Starts `--ranks` processes on loopback (rank r on fl:r % devices of the
installed plugins), each with two fl process groups: the default one (the
vendor path, when every rank's plugin offers collectives) and one made with
TORCH_FL_VENDOR_COLLECTIVES=0 (host-staged: device -> host, Gloo over TCP,
host -> device).  For every size from 4 KiB to 64 MiB of float32 it times
`dist.all_reduce` (SUM, synchronous: it returns once the result is on the
device), best and median of `--repeats` after warm-up, and reports the
algorithm bandwidth size / time.  Rank 0 prints the table (and writes JSON).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
ROOT = Path(__file__).resolve().parent.parent


def rank_main(repeats: int, json_path: str | None) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    import torch_fl  # noqa: F401 (registers fl and its process-group backend)

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    vendor = dist.group.WORLD
    os.environ["TORCH_FL_VENDOR_COLLECTIVES"] = "0"
    staged = dist.new_group(list(range(world)))
    del os.environ["TORCH_FL_VENDOR_COLLECTIVES"]
    if not vendor.vendor_plugins:
        raise SystemExit("the plugins on these ranks offer no collectives: nothing to compare")
    device = torch.device("fl", rank % torch.fl.device_count())
    rows = []
    for size in SIZES:
        t = torch.ones(size // 4, device=device)
        row = {"bytes": size}
        for name, group in (("vendor", vendor), ("host_staged", staged)):
            for _ in range(2):
                dist.all_reduce(t, group=group)
            times = []
            for _ in range(repeats):
                dist.barrier(group=staged)
                start = time.perf_counter()
                dist.all_reduce(t, group=group)
                times.append(time.perf_counter() - start)
            row[name] = {"best_us": min(times) * 1e6, "median_us": statistics.median(times) * 1e6,
                         "GBps": size / min(times) / 1e9}
        rows.append(row)
    if rank == 0:
        print(f"{'size':>8} | {'vendor best/median us':>22} {'GB/s':>6} | {'host-staged best/median us':>26} "
              f"{'GB/s':>6} | speed-up")
        for row in rows:
            v, h = row["vendor"], row["host_staged"]
            print(f"{_size(row['bytes']):>8} | {v['best_us']:>10.0f} / {v['median_us']:>9.0f} {v['GBps']:>6.2f} | "
                  f"{h['best_us']:>13.0f} / {h['median_us']:>10.0f} {h['GBps']:>6.2f} | "
                  f"{h['best_us'] / v['best_us']:>6.1f}x")
        if json_path:
            Path(json_path).write_text(json.dumps({"ranks": world, "repeats": repeats, "rows": rows}, indent=2))
    dist.destroy_process_group()


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()
    if "RANK" in os.environ:
        rank_main(args.repeats, args.json)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, "--repeats", str(args.repeats),
                               *(["--json", args.json] if args.json else [])],
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": str(args.ranks),
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                   "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                               os.environ.get("PYTHONPATH")]))})
             for r in range(args.ranks)]
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
