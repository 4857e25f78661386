"""DDP on fl: 1 -> 2 processes, a mixed-speed split against an equal one, and the staged all-reduce.

    python benchmarks/ddp_scaling.py [--steps 10] [--batch 256] [--hidden 1024] [--slowdown 4] [--rounds 1] [--json]

Every configuration runs in fresh processes (one per rank, on loopback, as
torchrun would start them), one after the other, so the ratios compare runs
of one session:

- ddp1 / ddp2: the same MLP and global batch on fl:0 alone, then as 2 DDP ranks
  on fl:0/fl:1 (half the batch each): samples/s and the 2-process speed-up.
  nocomm: the 2 processes without DDP (no all-reduce), to tell the cost of the
  collectives from that of two processes sharing the host.  Every process gets
  one intra-op thread (OMP_NUM_THREADS=1, as torchrun sets), so each reference
  device has one host core.
- equal / mixed: 2 ranks with fl:1 made `--slowdown` times slower by the
  reference vendor (FL_REFERENCE_SLOWDOWN, docs/users/distributed.md): an
  equal split of each global batch, then `ThroughputSplit` (measured over the
  warm-up steps, rebalanced, with b_i/B-weighted losses): time per step.
- allreduce: `dist.all_reduce` (float32, SUM) of 4 KB .. 16 MB on fl tensors
  (the fl group's default path: the plugin's collectives where every rank's plugin
  offers them, else host-staged Gloo) and on CPU tensors (Gloo alone): time and bus
  bandwidth.

Progress goes to stderr; the results table (or one JSON object) to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

SIZES = [4 << 10, 256 << 10, 4 << 20, 16 << 20]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(mode: str, world: int, args, env: dict | None = None) -> dict:
    """Run this file's worker `mode` as `world` ranks; return rank 0's JSON result."""
    port = _free_port()
    procs = []
    for rank in range(world):
        # One intra-op thread per process (torchrun's default for several processes per node), for one
        # process too: each reference "device" then gets one host core, and 1 vs 2 processes compare
        # 1 vs 2 devices.  (A 2-thread OpenBLAS on a loaded 2-core host spins and runs several times
        # slower, which would flatter the 2-process figures.)  A value the user set wins.
        threads = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        rank_env = {**threads, **os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **(env or {})}
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", mode, "--steps", str(args.steps),
                                       "--batch", str(args.batch), "--hidden", str(args.hidden)], env=rank_env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outputs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise SystemExit(f"ddp_scaling: {mode} did not finish in {args.timeout} s (--timeout)")
        if proc.returncode != 0:
            raise SystemExit(f"ddp_scaling: {mode} failed:\n{err[-3000:]}")
        outputs.append(out)
    lines = [line for line in outputs[0].splitlines() if line.startswith("{")]
    return json.loads(lines[-1])


# ---- the workers (one process per rank) ---------------------------------------------------------

def _worker(mode: str, steps: int, batch: int, hidden: int) -> dict:
    import datetime

    import torch
    import torch.distributed as dist

    import torch_fl  # noqa: F401 (starts the runtime)

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.fl.set_device(rank)
    dev = torch.device("fl", rank)
    result = _allreduce(dev) if mode == "allreduce" else _train(mode, dev, rank, world, steps, batch, hidden)
    dist.destroy_process_group()
    return result


def _train(mode: str, dev, rank: int, world: int, steps: int, batch: int, hidden: int) -> dict:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from fl_runtime.integration.distributed import ThroughputSplit

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                                torch.nn.ReLU(), torch.nn.Linear(hidden, 10)).to(dev)
    ddp = DDP(model, device_ids=[rank]) if world > 1 and mode != "nocomm" else model
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(batch, 256), torch.randint(0, 10, (batch,))
    split = ThroughputSplit(global_batch=batch) if world > 1 else None

    def step() -> None:
        rows = split.rows() if split else slice(0, batch)
        scale = split.loss_scale() if split else 1.0
        loss = F.cross_entropy(ddp(x[rows].to(dev)), y[rows].to(dev)) * scale
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.fl.synchronize(dev.index)

    def probe() -> None:
        # A rank's own speed: forward and backward of its share without DDP's all-reduce (no_sync),
        # gradients thrown away.  Timing a whole synchronous step would measure the slowest rank's
        # pace on every rank (the fast one waits in the all-reduce) and never move the split.
        rows = split.rows()
        with ddp.no_sync(), split.timed(dev):
            F.cross_entropy(ddp(x[rows].to(dev)), y[rows].to(dev)).backward()
        opt.zero_grad()

    for _ in range(3):                                     # warm-up: kernels, caches, DDP's bucket rebuild
        step()
    if mode == "mixed":
        for _ in range(2):                                 # measure, rebalance, measure again at the new split
            for _ in range(2):
                probe()
            split.rebalance()
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if world > 1:
        dist.barrier()
    seconds = time.perf_counter() - start
    return {"mode": mode, "world": world, "steps": steps, "batch": batch, "seconds": seconds,
            "ms_per_step": 1000 * seconds / steps, "samples_per_s": batch * steps / seconds,
            "split": split.sizes if split else [batch]}


def _allreduce(dev) -> dict:
    import torch
    import torch.distributed as dist

    rows = []
    for size in SIZES:
        n = size // 4
        row = {"bytes": size}
        for where in ("fl", "cpu"):
            t = torch.ones(n, device=dev if where == "fl" else "cpu")
            reps = 20 if size <= (256 << 10) else 5
            dist.all_reduce(t)                             # warm-up (and Gloo's buffers)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(reps):
                dist.all_reduce(t)
            if where == "fl":
                torch.fl.synchronize(dev.index)
            seconds = (time.perf_counter() - start) / reps
            row[f"{where}_ms"] = 1000 * seconds
            row[f"{where}_busbw_MBps"] = size / seconds / 1e6      # 2 ranks: bus bandwidth = algorithm bandwidth
        rows.append(row)
    return {"mode": "allreduce", "rows": rows}


# ---- the driver ---------------------------------------------------------------------------------

def _best(old: dict | None, new: dict) -> dict:
    """The faster of two runs of one configuration (per message size for the all-reduce)."""
    if old is None:
        return new
    if new["mode"] != "allreduce":
        return new if new["ms_per_step"] < old["ms_per_step"] else old
    rows = []
    for a, b in zip(old["rows"], new["rows"]):
        row = {"bytes": a["bytes"]}
        for where in ("fl", "cpu"):
            best = a if a[f"{where}_ms"] <= b[f"{where}_ms"] else b
            row[f"{where}_ms"], row[f"{where}_busbw_MBps"] = best[f"{where}_ms"], best[f"{where}_busbw_MBps"]
        rows.append(row)
    return {"mode": "allreduce", "rows": rows}


def _table(results: dict, slowdown: float) -> str:
    d1, d2, nc, eq, mx, ar = (results[k] for k in ("ddp1", "ddp2", "nocomm", "equal", "mixed", "allreduce"))
    lines = ["| configuration | split | ms/step | samples/s |", "|---|---|---|---|"]
    for name, r in (("1 process, fl:0", d1), ("2 DDP ranks, fl:0 + fl:1", d2),
                    ("2 processes, fl:0 + fl:1, no DDP (no all-reduce)", nc),
                    (f"2 ranks, fl:1 {slowdown:g}x slower, equal split", eq),
                    (f"2 ranks, fl:1 {slowdown:g}x slower, ThroughputSplit", mx)):
        lines.append(f"| {name} | {r['split']} | {r['ms_per_step']:.1f} | {r['samples_per_s']:.0f} |")
    lines += ["", f"2-process speed-up (samples/s, ddp2 / ddp1): {d2['samples_per_s'] / d1['samples_per_s']:.2f}x",
              (f"mixed split vs equal split (time per step, equal / mixed): "
               f"{eq['ms_per_step'] / mx['ms_per_step']:.2f}x"), "",
              "| all_reduce float32 | fl (staged) ms | CPU ms | fl / CPU | fl MB/s | CPU MB/s |",
              "|---|---|---|---|---|---|"]
    for row in ar["rows"]:
        size = f"{row['bytes'] >> 20} MB" if row["bytes"] >= 1 << 20 else f"{row['bytes'] >> 10} KB"
        lines.append(f"| {size} | {row['fl_ms']:.2f} | {row['cpu_ms']:.2f} | {row['fl_ms'] / row['cpu_ms']:.1f} | "
                     f"{row['fl_busbw_MBps']:.0f} | {row['cpu_busbw_MBps']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per configuration")
    parser.add_argument("--batch", type=int, default=256, help="global batch (split between the ranks)")
    parser.add_argument("--hidden", type=int, default=1024,
                        help="the MLP's width (large enough that kernels, which the slowdown stretches, dominate)")
    parser.add_argument("--slowdown", type=float, default=4.0, help="how many times slower fl:1 runs in equal/mixed")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every configuration this many times, interleaved, and keep each one's best "
                             "(a shared host slows single runs several-fold)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one configuration may take")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker, args.steps, args.batch, args.hidden)))
        return 0
    slow = {"FL_REFERENCE_SLOWDOWN": f"1,{args.slowdown:g}"}
    plan = [("ddp1", 1, None), ("ddp2", 2, None), ("nocomm", 2, None), ("equal", 2, slow), ("mixed", 2, slow), ("allreduce", 2, None)]
    results: dict = {}
    total = len(plan) * args.rounds
    for round_ in range(args.rounds):                   # rounds interleave the configurations; keep each one's best
        for i, (mode, world, env) in enumerate(plan, 1):
            done = round_ * len(plan) + i
            print(f"[{done}/{total}] round {round_ + 1}: {mode}, {world} process(es) ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            results[mode] = _best(results.get(mode), _launch(mode, world, args, env))
            print(f"[{done}/{total}] {mode}: done in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    print(json.dumps(results) if args.json else _table(results, args.slowdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
