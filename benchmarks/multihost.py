"""All-reduce bandwidth within and across hosts, and DDP step time over hosts x ranks (docs/users/multi-host.md).

    sudo python benchmarks/multihost.py [--repeats 5] [--steps 10] [--json out.json]

Needs root: the hosts are network namespaces on this machine (tests/netns_hosts.py:
each with its own address, hostname and /dev/shm, joined by veth pairs on a
bridge), every job started by `torchrun --nnodes N --nproc-per-node M` with a
c10d rendezvous on host 0.  "Across hosts" therefore crosses a veth pair and
the kernel's TCP stack, not a real network: the figures show the software
path's cost (staging, Gloo, the hierarchy's extra steps), not a NIC's.

- allreduce: `dist.all_reduce` (float32, SUM, synchronous: it returns once the
  result is on the device) of 4 KiB .. 64 MiB on fl tensors, best and median of
  --repeats after warm-up, algorithm bandwidth size / time, for
  1 host x 2 ranks (the reference vendor's shared-memory collectives),
  2 hosts x 2 ranks hierarchical at every size (vendor within each host,
  host-staged Gloo between hosts; TORCH_FL_HIERARCHICAL_MIN_BYTES=0), flat
  (TORCH_FL_HIERARCHICAL=0: host-staged Gloo across all 4 ranks) and as the
  default chooses (hierarchical from 4 MiB).
- ddp: time per DDP step (an MLP, a global batch of --batch rows split over the
  ranks, SGD) at 1x2, 2x1 and 2x2 (hosts x ranks per host), 2x2 also flat,
  median of --steps after 3 warm-up steps.

Every job runs in fresh processes, one after the other; progress goes to
stderr, the tables (or --json) to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
FLAT, HIERARCHICAL = {"TORCH_FL_HIERARCHICAL": "0"}, {"TORCH_FL_HIERARCHICAL_MIN_BYTES": "0"}
ALLREDUCE_JOBS = [("1x2 (within a host)", 1, 2, {}), ("2x2 hierarchical", 2, 2, HIERARCHICAL),
                  ("2x2 flat", 2, 2, FLAT), ("2x2 default", 2, 2, {})]
DDP_JOBS = [("1x2", 1, 2, {}), ("2x1", 2, 1, {}), ("2x2", 2, 2, {}), ("2x2 flat", 2, 2, FLAT)]


# ---- in each rank (under torchrun) --------------------------------------------------------------------

def _rank_setup():
    import datetime

    import torch
    import torch.distributed as dist

    import torch_fl  # noqa: F401 (the fl device and process-group backend)
    local = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    torch.fl.set_device(local)
    return torch, dist, torch.device("fl", local)


def worker_allreduce(args) -> dict:
    torch, dist, dev = _rank_setup()
    rows = []
    for size in SIZES:
        t = torch.ones(size // 4, device=dev)
        for _ in range(2):
            dist.all_reduce(t)
        times = []
        for _ in range(args.repeats):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - start)
        rows.append({"bytes": size, "best_ms": min(times) * 1e3, "median_ms": statistics.median(times) * 1e3,
                     "MBps": size / min(times) / 1e6})
    return {"cross_host": dist.group.WORLD.cross_host, "rows": rows}


def worker_ddp(args) -> dict:
    torch, dist, dev = _rank_setup()
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 10)).to(dev)
    ddp = DDP(model, device_ids=[dev.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    share = args.batch // world
    x = torch.randn(args.batch, 256)[rank * share:(rank + 1) * share].to(dev)
    y = torch.randint(0, 10, (args.batch,))[rank * share:(rank + 1) * share].to(dev)
    times = []
    for step in range(3 + args.steps):
        dist.barrier()
        start = time.perf_counter()
        loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.fl.synchronize(dev)
        if step >= 3:
            times.append(time.perf_counter() - start)
    params = sum(p.numel() for p in model.parameters())
    return {"cross_host": dist.group.WORLD.cross_host, "world": world, "params": params,
            "step_ms": statistics.median(times) * 1e3, "best_ms": min(times) * 1e3}


# ---- the driver ---------------------------------------------------------------------------------------

def _run(hosts, mode: str, nodes: int, per_node: int, args, env: dict, work: Path) -> dict:
    out = work / f"{mode}-{nodes}x{per_node}-{len(list(work.iterdir()))}.json"
    job = hosts.torchrun(__file__, ["--worker", mode, "--result", str(out), "--repeats", str(args.repeats),
                                    "--steps", str(args.steps), "--batch", str(args.batch),
                                    "--hidden", str(args.hidden)],
                         nproc_per_node=per_node, nodes=nodes, env=env, name=out.stem)
    results = job.wait(timeout=900)
    if not out.exists():
        raise SystemExit(f"{mode} {nodes}x{per_node} failed:\n" + "\n".join(r.output[-3000:] for r in results))
    return json.loads(out.read_text())


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def _print_tables(allreduce: dict, ddp: dict) -> None:
    names = list(allreduce)
    print("all_reduce float32 SUM on fl tensors, best / median ms and MB/s (size / best time)")
    print(f"{'size':>8} | " + " | ".join(f"{n:^30}" for n in names))
    for i, size in enumerate(SIZES):
        cells = [allreduce[n]["rows"][i] for n in names]
        print(f"{_size(size):>8} | " + " | ".join(
            f"{c['best_ms']:8.2f} / {c['median_ms']:8.2f} {c['MBps']:8.1f}" for c in cells))
    print("\nDDP step (median / best ms) by hosts x ranks per host")
    for name, row in ddp.items():
        print(f"{name:>8}: {row['step_ms']:8.1f} / {row['best_ms']:8.1f} ms  ({row['world']} ranks, "
              f"{row['params']} parameters, cross_host={row['cross_host'] or 'one host'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--json")
    parser.add_argument("--worker", choices=["allreduce", "ddp"], help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = {"allreduce": worker_allreduce, "ddp": worker_ddp}[args.worker](args)
        if int(os.environ["RANK"]) == 0:
            Path(args.result).write_text(json.dumps(result))
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from netns_hosts import NetnsHosts, why_unavailable
    reason = why_unavailable()
    if reason:
        raise SystemExit(f"benchmarks/multihost.py: {reason}")
    load = os.getloadavg()
    allreduce, ddp = {}, {}
    with tempfile.TemporaryDirectory() as tmp, NetnsHosts(2, Path(tmp) / "hosts") as hosts:
        work = Path(tmp) / "results"
        work.mkdir()
        for name, nodes, per_node, env in ALLREDUCE_JOBS:
            print(f"allreduce {name} ...", file=sys.stderr, flush=True)
            allreduce[name] = _run(hosts, "allreduce", nodes, per_node, args, env, work)
        for name, nodes, per_node, env in DDP_JOBS:
            print(f"ddp {name} ...", file=sys.stderr, flush=True)
            ddp[name] = _run(hosts, "ddp", nodes, per_node, args, env, work)
    load_after = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps({"load_before": load, "load_after": load_after,
                                               "allreduce": allreduce, "ddp": ddp}, indent=2))
    print(f"load average before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; after: {load_after[0]:.1f} "
          f"{load_after[1]:.1f} {load_after[2]:.1f} ({os.cpu_count()} cores)")
    _print_tables(allreduce, ddp)


if __name__ == "__main__":
    main()
