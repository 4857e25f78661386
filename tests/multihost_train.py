"""A tiny data-parallel job that tests/e2e/test_multihost.py runs with torchrun on every namespace host.

    torchrun ... multihost_train.py --out DIR [--strategy ddp] [--steps 6] [--every 2] [--ckpt DIR]
                                    [--pause-at STEP] [--timeout S]

Each step takes a global batch of 8 rows made from the step number alone (a
resumed run sees the same data), every rank its share of the rows.  Written to
--out (one JSON file per rank, `rank-<r>.json`): the group's host layout and
cross-host path, this rank's host identity and process id, and for rank 0 the
final weights with, when asked (--reference), those of one process on the
full batch.  With --ckpt it checkpoints every --every steps and resumes from
the newest complete checkpoint.

--pause-at STEP: in the first attempt, before that step's all-reduces (the
loss for the log, then backward's), every rank writes `ready-<r>` under --out
and waits for a file `go` (the test takes a host's network down in between);
the error raised is written to `error-<r>.json` with the seconds it took.

Strategies: `STRATEGIES` maps a name to the function that wraps the model: DDP, and
FSDP2 (`fully_shard` per layer and on the whole model, over a 1-d mesh of every rank).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_fl  # noqa: F401 (the fl device and process-group backend)
from fl_runtime.integration.distributed import load_checkpoint, save_checkpoint
from fl_runtime.integration.distributed.hosts import host_identity

GLOBAL_BATCH = 8


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 33), torch.nn.Tanh(),
                               torch.nn.Linear(33, 3))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(GLOBAL_BATCH, 6, generator=g), torch.randn(GLOBAL_BATCH, 3, generator=g)


def wrap_ddp(model: torch.nn.Module, local_rank: int) -> torch.nn.Module:
    # A tiny bucket cap: several all-reduces per step, some of sizes the local ranks do not divide.
    return DDP(model, device_ids=[local_rank], bucket_cap_mb=0.002)


def wrap_fsdp2(model: torch.nn.Module, local_rank: int) -> torch.nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("fl", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


STRATEGIES = {"ddp": wrap_ddp, "fsdp2": wrap_fsdp2}


def flat(model: torch.nn.Module) -> list[float]:
    """The weights as one list; sharded ones gathered first (a collective: every rank calls it)."""
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
    return torch.cat([p.detach().reshape(-1).cpu() for p in full]).tolist()


def reference(steps: int, device: torch.device) -> list[float]:
    """One process, the full batch: what data-parallel training must reproduce."""
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    for step in range(steps):
        x, y = batch(step)
        F.mse_loss(model(x.to(device)), y.to(device)).backward()
        opt.step()
        opt.zero_grad()
    return flat(model)


def wait_for(path: Path, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--strategy", default="ddp", choices=sorted(STRATEGIES))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--ckpt", default=None)
    parser.add_argument("--pause-at", type=int, default=-1)
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--reference", action="store_true")
    args = parser.parse_args()

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    torch.fl.set_device(local)
    dev = torch.device("fl", local)
    group = dist.group.WORLD
    report = {"rank": rank, "pid": os.getpid(), "host_identity": host_identity(), "attempt": attempt,
              "hosts": [list(r) for r in group.hosts.hosts], "cross_host": group.cross_host}

    model = make_model().to(dev)
    wrapped = STRATEGIES[args.strategy](model, local)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.2, momentum=0.9)
    resumed = load_checkpoint(args.ckpt, model=wrapped, optimizer=opt) if args.ckpt else None
    start = resumed.step if resumed else 0
    report["start"] = start
    share = GLOBAL_BATCH // world
    rows = slice(rank * share, (rank + 1) * share)
    for step in range(start, args.steps):
        x, y = batch(step)
        loss = F.mse_loss(wrapped(x[rows].to(dev)), y[rows].to(dev))
        opt.zero_grad()
        if step == args.pause_at and attempt == 0:
            (args.out / f"ready-{rank}").write_text(str(step))
            wait_for(args.out / "go")
            began = time.monotonic()
            try:
                logged = loss.detach().clone()
                dist.all_reduce(logged, op=dist.ReduceOp.AVG)      # the loss for the log: a direct collective
                loss.backward()
            except Exception as exc:
                (args.out / f"error-{rank}.json").write_text(json.dumps(
                    {"type": type(exc).__name__, "message": str(exc), "seconds": time.monotonic() - began}))
                raise
            (args.out / f"error-{rank}.json").write_text(json.dumps({"type": None, "message": "no error"}))
        else:
            loss.backward()
        opt.step()
        if args.ckpt and (step + 1) % args.every == 0:
            save_checkpoint(args.ckpt, step + 1, model=wrapped, optimizer=opt)
    weights = flat(model)
    if rank == 0:
        report["weights"] = weights
        if args.reference:
            report["reference"] = reference(args.steps, dev)
    (args.out / f"rank-{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
