"""Data-parallel training over devices of different speeds: split each batch by measured throughput.

With plain DDP every rank takes the same share of the batch, so a job runs at
the pace of its slowest device.  `ThroughputSplit` gives rank i a share b_i of
the global batch B in proportion to the samples per second it has shown, and
a loss scale that keeps the gradient exact: DDP averages the ranks'
gradients, (1/W) * sum_i grad(s_i * L_i) with L_i the mean loss over rank i's
b_i samples, and with s_i = W * b_i / B that is sum_i (b_i / B) * grad(L_i),
the gradient of the mean loss over all B samples (docs/users/distributed.md).

    split = ThroughputSplit(global_batch=256)
    for step, (x, y) in enumerate(loader):            # x, y: the whole global batch on every rank
        if step % 50 == 0:                            # measure this rank's own speed, then re-split
            rows = split.rows()
            with ddp.no_sync(), split.timed(dev):
                loss_fn(ddp(x[rows].to(dev)), y[rows].to(dev)).backward()
            opt.zero_grad()
            split.rebalance()                         # a collective: every rank calls it
        rows = split.rows()
        loss = loss_fn(ddp(x[rows].to(dev)), y[rows].to(dev)) * split.loss_scale()
        loss.backward(); opt.step(); opt.zero_grad()

Time only a rank's own work (`no_sync`: no all-reduce).  A whole DDP step takes
the slowest rank's time on every rank (the fast one waits in the all-reduce),
so timing it would report equal speeds and never move the split.
"""
from __future__ import annotations

import contextlib
import time

import torch
import torch.distributed as dist


def split_by_throughput(global_batch: int, throughputs: list[float]) -> list[int]:
    """Shares of `global_batch` proportional to `throughputs`, each at least 1 (largest remainder)."""
    ranks = len(throughputs)
    if global_batch < ranks:
        raise ValueError(f"split_by_throughput: a global batch of {global_batch} cannot give each of "
                         f"{ranks} ranks a sample; raise the batch size")
    if any(not t > 0 for t in throughputs):
        raise ValueError(f"split_by_throughput: throughputs must be positive samples/s, got {throughputs}")
    spare = global_batch - ranks                       # one sample each first, the rest by speed
    total = sum(throughputs)
    exact = [spare * t / total for t in throughputs]
    shares = [1 + int(e) for e in exact]
    by_remainder = sorted(range(ranks), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in by_remainder[:global_batch - sum(shares)]:
        shares[i] += 1
    return shares


class ThroughputSplit:
    """One rank's view of a throughput-proportional batch split (see the module docstring)."""

    def __init__(self, global_batch: int, group: dist.ProcessGroup | None = None) -> None:
        self.global_batch = global_batch
        self._group = group
        self._world = dist.get_world_size(group)
        self._rank = dist.get_rank(group)
        self.sizes = split_by_throughput(global_batch, [1.0] * self._world)   # equal until measured
        self._samples = 0
        self._seconds = 0.0

    def rows(self) -> slice:
        """This rank's rows of the global batch."""
        start = sum(self.sizes[:self._rank])
        return slice(start, start + self.sizes[self._rank])

    def loss_scale(self) -> float:
        """Multiply this rank's mean loss by this before backward (W * b_i / B)."""
        return self._world * self.sizes[self._rank] / self.global_batch

    def record(self, seconds: float, samples: int) -> None:
        """Add one measured step of this rank: `samples` processed in `seconds`."""
        self._seconds += seconds
        self._samples += samples

    @contextlib.contextmanager
    def timed(self, device: torch.device | None = None):
        """Time the block as one pass over this rank's share (waits for the device at the end).

        Put only this rank's own work in it (under DDP, inside `no_sync()`): a block that
        contains an all-reduce also times the wait for the slowest rank."""
        start = time.perf_counter()
        yield
        if device is not None and device.type == "fl":
            torch.fl.synchronize(device.index)
        self.record(time.perf_counter() - start, self.sizes[self._rank])

    def state_dict(self) -> dict:
        """This rank's split and its measurements since the last rebalance (checkpointed per rank)."""
        return {"global_batch": self.global_batch, "world": self._world, "sizes": list(self.sizes),
                "samples": self._samples, "seconds": self._seconds}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state_dict()`; the global batch and the number of ranks must be the same."""
        if (state["global_batch"], state["world"]) != (self.global_batch, self._world):
            raise ValueError(f"ThroughputSplit.load_state_dict: the saved split is for a global batch of "
                             f"{state['global_batch']} over {state['world']} ranks, this one for "
                             f"{self.global_batch} over {self._world}; resume with the same batch and ranks")
        self.sizes = list(state["sizes"])
        self._samples, self._seconds = state["samples"], state["seconds"]

    def rebalance(self) -> list[int]:
        """Share measured throughputs between ranks (a collective) and re-split; returns the sizes."""
        mine = self._samples / self._seconds if self._seconds > 0 else 0.0
        speeds = torch.tensor([mine], dtype=torch.float64)
        gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(self._world)]
        dist.all_gather(gathered, speeds, group=self._group)
        measured = [float(t) for t in gathered]
        if all(s > 0 for s in measured):
            self.sizes = split_by_throughput(self.global_batch, measured)
        self._samples, self._seconds = 0, 0.0
        return self.sizes
