"""All-reduce in a group that spans hosts when the vendor's communicators reach one host (docs/users/multi-host.md).

A plugin declaring FL_COMM_REACH_HOST (fl_abi.h, fl_comm_reach) never gets a
communicator across hosts.  Its collectives still do the work inside each
host, and host-staged Gloo carries the rest, in three steps (the shape of
Horovod's hierarchical all-reduce; every host must have the same number M of
ranks, M >= 2, else the group stays flat, process_group.py):

1. reduce-scatter within the host (vendor, device to device): local rank i
   holds block i of the host's partial result;
2. all-reduce of block i between hosts, host-staged Gloo among the ranks of
   local index i on every host (one Gloo group per local index: the M blocks
   cross the network side by side, and each byte once per host);
3. all-gather within the host (vendor): every rank holds the whole result.

All-reduces smaller than TORCH_FL_HIERARCHICAL_MIN_BYTES (rank 0's, default
4 MiB) stay flat: below it the steps' waits cost more than the hierarchy saves
(docs/benchmarks/index.md "Across hosts").  A tensor whose size M does not divide is
reduced in a padded copy.  AVG is
SUM all the way with the division by the group size done on the host copy,
so it rounds as one division of the full sum, as the vendor's AVG does.

Ordering: the steps of one all-reduce depend on each other on the host (step
2 needs step 1's result on the host), and every rank must enqueue its host's
vendor collectives in the same order.  So a group's hierarchical all-reduces
run one after the other on one thread of the group, each step waited for
before the next; the caller gets a Work at once.  At submission the
collective stream is ordered after the caller's current stream, so the
all-reduce reads what the caller wrote before it.  After a failure every
later hierarchical all-reduce of the group fails with the first error: the
ranks of a host may be out of step, and none may report success over a
buffer it did not reduce.
"""
from __future__ import annotations

import concurrent.futures
import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from fl_runtime.integration.distributed.elastic import attempt_scope
from fl_runtime.integration.distributed.hosts import HostLayout
from fl_runtime.integration.distributed.reachability import Reachability
from fl_runtime.integration.distributed.transport import HostGlooTransport
from fl_runtime.integration.distributed.vendor import CommunicatorSetupError, VendorCollectives
from fl_runtime.integration.distributed.work import CallSite, CollectiveError, FLWork, completable_future
from fl_runtime.runtime import Runtime

ENABLE_ENV = "TORCH_FL_HIERARCHICAL"
MIN_BYTES_ENV = "TORCH_FL_HIERARCHICAL_MIN_BYTES"
#: Smaller all-reduces stay flat: below it the three steps' waits cost more than the bytes
#: they keep off the network (docs/benchmarks/index.md "Across hosts").
DEFAULT_MIN_BYTES = 4 << 20
_PREFIX = "fl-hier/"
_R = dist.ReduceOp.RedOpType
#: The ops every step can run (AVG as SUM, then a division).
_OPS = {_R.SUM: dist.ReduceOp.SUM, _R.PRODUCT: dist.ReduceOp.PRODUCT, _R.MIN: dist.ReduceOp.MIN,
        _R.MAX: dist.ReduceOp.MAX, _R.AVG: dist.ReduceOp.SUM}


@dataclass(frozen=True)
class _Plan:
    op: dist.ReduceOp          # of steps 1 (vendor) and 2 (Gloo): AVG runs as SUM
    average: bool              # then divide by the group's size


class HierarchicalAllReduce:
    """One group's all-reduce over hosts: vendor within each host, host-staged Gloo between them."""

    name = "vendor collectives within hosts, gloo (host-staged) between hosts"

    def __init__(self, local: VendorCollectives, cross, reach: Reachability, local_ranks: tuple[int, ...],
                 cross_ranks: tuple[int, ...], rank: int, size: int, timeout: datetime.timedelta,
                 min_bytes: int = 0) -> None:
        self._local, self._cross, self._reach = local, cross, reach
        self._local_ranks, self._local_size = local_ranks, len(local_ranks)
        self._local_peers = [r for r in local_ranks if r != rank]
        self._cross_peers = [r for r in cross_ranks if r != rank]
        self._rank, self._size, self._timeout = rank, size, timeout
        self._min_bytes = min_bytes
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="torch-fl-hierarchy")
        self._failed: CollectiveError | None = None

    @classmethod
    def connect(cls, rt: Runtime, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta,
                wire_timeout: datetime.timedelta, group_name: str, layout: HostLayout, plugins: frozenset[str],
                reach: Reachability) -> HierarchicalAllReduce | None:
        """The hierarchy for this rank, None where the group cannot have one (see the module docstring)."""
        if not plugins or not layout.spans_hosts or not layout.uniform or len(layout.hosts[0]) < 2:
            return None
        prefix = f"{_PREFIX}{attempt_scope()}/{group_name}/"
        min_bytes = _agreed_min_bytes(dist.PrefixStore(prefix, store), rank, size)
        if min_bytes is None:
            return None
        host = layout.host_of(rank)
        local_ranks = layout.hosts[host]
        index = local_ranks.index(rank)
        local = VendorCollectives(rt, dist.PrefixStore(f"{prefix}host-{host}/", store), index, len(local_ranks),
                                  timeout, plugins, setup_timeout=wire_timeout)
        cross = HostGlooTransport().connect(dist.PrefixStore(f"{prefix}index-{index}/", store), host,
                                            len(layout.hosts), wire_timeout, f"{group_name}/index-{index}")
        return cls(local, cross, reach, local_ranks, tuple(ranks[index] for ranks in layout.hosts), rank, size,
                   timeout, min_bytes)

    def allreduce(self, tensors: list[torch.Tensor], reduce_op) -> FLWork | None:
        """The hierarchical all-reduce's Work, or None when the call is not its (the flat path's)."""
        if len(tensors) != 1:
            return None
        t = tensors[0]
        plan = self._plan(t, reduce_op)
        if plan is None:
            return None
        site = CallSite(self._rank, self._size, "all_reduce", self._timeout, self.name)
        self._local.after_current_stream(t.device.index)
        source, future = completable_future()
        failures: list[CollectiveError] = []
        self._executor.submit(self._settle, t, plan, site, source, failures, tensors)
        return FLWork(future, site, failures)

    def _plan(self, t: torch.Tensor, reduce_op) -> _Plan | None:
        """How to run this all-reduce, None when a step cannot take it (then the group's flat path does)."""
        kind = getattr(reduce_op, "op", reduce_op)
        if kind not in _OPS or t.numel() * t.element_size() < max(self._min_bytes, 1) or not t.is_contiguous():
            return None
        average = kind == _R.AVG
        op = _OPS[kind]
        fl_op = self._local.fl_op(op, t.dtype)
        if average and not t.dtype.is_floating_point or fl_op is None:
            return None
        if not (self._local.serves("reduce_scatter", [t], fl_op) and self._local.serves("all_gather", [t])):
            return None
        return _Plan(op, average)

    def _settle(self, t, plan: _Plan, site: CallSite, future, failures: list, result) -> None:
        """On the group's hierarchy thread: run the steps, then complete the Work."""
        error = self._failed
        if error is None:
            try:
                self._steps(t, plan, site)
            except CollectiveError as exc:
                error = self._failed = exc
            except Exception as exc:  # noqa: BLE001 (a vendor step's failure is the collective's)
                error = self._failed = CollectiveError(site, exc)
        if error is not None:
            failures.append(error)
            future.set_exception(error)
            return
        future.set_result(result)

    def _steps(self, t: torch.Tensor, plan: _Plan, site: CallSite) -> None:
        flat = t.view(-1)
        n, m = flat.numel(), self._local_size
        block = -(-n // m)
        whole = flat if block * m == n else torch.zeros(block * m, dtype=t.dtype, device=t.device)
        if whole is not flat:
            whole[:n].copy_(flat)
        mine = torch.empty(block, dtype=t.dtype, device=t.device)
        self._within_host(site, "reduce_scatter", lambda: self._local.reduce_scatter_into(mine, whole, plan.op))
        host = mine.cpu()
        try:
            self._cross.allreduce([host], _allreduce_options(plan.op)).wait()
        except Exception as exc:  # noqa: BLE001 (Gloo's error, whatever its type, names no peer)
            raise CollectiveError(site, f"between hosts: {exc}", self._reach.diagnose(self._cross_peers)) from exc
        if plan.average:
            host.div_(self._size)
        mine.copy_(host)
        self._within_host(site, "all_gather", lambda: self._local.all_gather_into(whole, mine))
        if whole is not flat:
            flat.copy_(whole[:n])
            torch.fl.current_stream(t.device).synchronize()

    def _within_host(self, site: CallSite, step: str, run: Callable[[], FLWork]) -> None:
        """Run a step within the host and wait for it; its failure is the all-reduce's, peers named by
        global rank (the vendor's message counts ranks within the host: local rank i is the host's
        i-th rank).  A communicator whose id never came from the store (on another host, perhaps
        cut off) names every peer that does not answer, not only this host's."""
        try:
            run().wait()
        except CollectiveError as exc:
            peers = None if isinstance(exc.__cause__, CommunicatorSetupError) else self._local_peers
            raise CollectiveError(site, f"within the host ({step}, ranks {', '.join(map(str, self._local_ranks))} "
                                  f"as local ranks 0..{len(self._local_ranks) - 1}): {exc.cause}",
                                  self._reach.diagnose(peers)) from exc

    def close(self) -> None:
        self._executor.shutdown(wait=False)
        self._local.close()


def _agreed_min_bytes(store: dist.Store, rank: int, size: int) -> int | None:
    """The smallest all-reduce the hierarchy takes, the same on every rank (rank 0's
    TORCH_FL_HIERARCHICAL_MIN_BYTES); None when any rank sets TORCH_FL_HIERARCHICAL=0."""
    enabled = os.environ.get(ENABLE_ENV, "1") not in ("0", "false", "no", "off")
    store.set(f"enabled/{rank}", "1" if enabled else "0")
    if rank == 0:
        store.set("min_bytes", os.environ.get(MIN_BYTES_ENV, str(DEFAULT_MIN_BYTES)))
    if not all(store.get(f"enabled/{r}") == b"1" for r in range(size)):
        return None
    return int(store.get("min_bytes"))




def _allreduce_options(op: dist.ReduceOp) -> dist.AllreduceOptions:
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    return opts
