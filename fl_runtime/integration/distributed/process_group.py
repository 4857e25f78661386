"""`FLProcessGroup`: torch.distributed's collectives on fl tensors (and CPU ones).

PyTorch 2.13 lets a Python backend exist only as a `dist.ProcessGroup`
subclass (its C++ `Backend` class has no Python constructor), and
init_process_group then uses that object as the *whole* group: so this class
serves every device type, CPU tensors going to the wire as they are.  C++
callers (DDP's reducer, `_broadcast_coalesced`, parameter verification) reach
the methods PyTorch's trampoline forwards (allreduce, broadcast, allgather,
reduce_scatter, alltoall_base, barrier, send, recv and the coalesced forms);
Python's `dist.*` functions call the methods by name, which covers reduce,
gather, scatter and the `*_single` forms too.

Each call: stage fl tensors to the host (staging.py), queue the collective on
the wire (transport.py), and return a `Work` whose future copies the results
back and then completes.  Nothing else is synchronised: the caller's thread
waits only for the device -> host copies of its own tensors.

When every rank's plugin offers collectives (ABI 1.1), the calls the plugin can
serve skip the staging and go to the plugin instead (vendor.py says which and
how); `vendor_plugins` names them, empty when the group is host-staged only.

A group whose ranks sit on several hosts (hosts.py) uses a plugin's
communicators across hosts only when the plugin declares it can (ABI 1.2,
FL_COMM_REACH_ANY).  Otherwise its all-reduce is hierarchical (hierarchy.py:
vendor within each host, host-staged Gloo between hosts) and every other
collective host-staged Gloo across all ranks; `cross_host` says which.  Its
failures name the peers that do not answer (reachability.py).
"""
from __future__ import annotations

import concurrent.futures
import datetime
import threading

import torch
import torch.distributed as dist

from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.integration.distributed.hierarchy import HierarchicalAllReduce
from fl_runtime.integration.distributed.hosts import HostLayout
from fl_runtime.integration.distributed.reachability import Reachability
from fl_runtime.integration.distributed.staging import IN, INOUT, OUT, Staging
from fl_runtime.integration.distributed.transport import Transport
from fl_runtime.integration.distributed.vendor import VendorCollectives, agree_on_plugins
from fl_runtime.integration.distributed.work import CallSite, CollectiveError, FLWork
from fl_runtime.runtime import Runtime


class FLProcessGroup(dist.ProcessGroup):
    """A process group whose collectives accept fl tensors; see the module docstring."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta,
                 transport: Transport, group_name: str = "", *, runtime: Runtime) -> None:
        super().__init__(rank, size)
        self._timeout = timeout
        self._transport = transport
        self._layout = HostLayout.exchange(store, rank, size, group_name)
        spans = self._layout.spans_hosts
        self._reach = Reachability.exchange(store, rank, size, group_name, timeout) if spans else None
        # Across hosts the wires give up a knock's time early, so that the error naming the
        # peers that do not answer still arrives within the group's timeout.
        wire_timeout = self._reach.wire_timeout if spans else timeout
        self._wire = transport.connect(store, rank, size, wire_timeout, group_name)
        plugins = agree_on_plugins(runtime, store, rank, size, group_name)
        spanning = frozenset(name for name, crosses in plugins.items() if crosses or not spans)
        self._vendor = VendorCollectives.connect(runtime, store, rank, size, timeout, group_name, spanning)
        self._hierarchy = None if spanning else HierarchicalAllReduce.connect(
            runtime, store, rank, size, timeout, wire_timeout, group_name, self._layout, frozenset(plugins),
            self._reach)
        self._group_name, self._group_desc = group_name, ""
        self._waiter_lock = threading.Lock()
        self._waiter_pool: concurrent.futures.ThreadPoolExecutor | None = None

    # ---- identity -------------------------------------------------------------------------
    # The fl backend is named as its device type (registration.py registers it under that name).
    def getBackendName(self) -> str:     # PyTorch's C++ name: its trampoline calls it
        return DEVICE_TYPE

    def name(self) -> str:
        return DEVICE_TYPE

    # PyTorch's ProcessGroup keeps its name in its C++ backends, and a Python group has none:
    # functional collectives (group_name) and DeviceMesh need these four.
    def getGroupName(self) -> str:
        return self._group_name

    def setGroupName(self, name: str) -> None:
        self._group_name = name

    def getGroupDesc(self) -> str:
        return self._group_desc

    def setGroupDesc(self, desc: str) -> None:
        self._group_desc = desc

    # init_process_group(device_id=...) (Lightning passes it) asks the group for its backend
    # of that device and whether it can split; the group stands for its own fl backend.
    supports_splitting = False
    supports_coalescing = False

    def _get_backend(self, device: torch.device):
        """The wire for its own device type (monitored_barrier uses CPU's), else this group."""
        return self._wire if torch.device(device).type == self._transport.device_type else self

    def eager_connect_single_device(self, device) -> None:
        """Nothing to connect ahead of time: the transport connected when the group was made."""

    @property
    def transport_name(self) -> str:
        return self._transport.name

    @property
    def vendor_plugins(self) -> frozenset[str]:
        """Plugins whose own collectives this group uses (every rank offers them); empty: host-staged."""
        return self._vendor.plugins if self._vendor is not None else frozenset()

    @property
    def hosts(self) -> HostLayout:
        """The group's ranks by host (hosts.py)."""
        return self._layout

    @property
    def cross_host(self) -> str:
        """How collectives cross hosts: "" (one host), "vendor" (the plugin's communicators span
        hosts), "hierarchical" (all-reduce vendor within hosts and Gloo between them, the rest
        flat) or "flat" (host-staged Gloo across every rank)."""
        if not self._layout.spans_hosts:
            return ""
        if self._vendor is not None:
            return "vendor"
        return "hierarchical" if self._hierarchy is not None else "flat"

    def _vendor_call(self, method: str, *args) -> FLWork | None:
        """The vendor path's Work for this call, or None for the host-staged path."""
        return None if self._vendor is None else getattr(self._vendor, method)(*args)

    # ---- the one path every collective takes --------------------------------------------------
    def _run(self, op: str, staged_call, args: list[tuple[object, str]], result) -> FLWork:
        """Stage `args` (value, role) pairs, call `staged_call(*staged)`, return Work(result)."""
        site = CallSite(self.rank(), self.size(), op, self._timeout, self._transport.name)
        staging = Staging(self._transport.device_type)
        staged = [staging.stage(value, role) for value, role in args]
        try:
            futures = staged_call(*staged)
        except Exception as exc:         # refused before it started: name the rank and op too
            raise CollectiveError(site, exc) from exc
        return _work(site, futures, staging, result, self._reach.diagnose if self._reach is not None else None)

    def _future(self, work: dist.Work) -> torch.futures.Future:
        """The wire's Work as a future; Works without one (Gloo's list-form reduce_scatter,
        for instance) are waited for on this group's waiter thread."""
        try:
            return work.get_future()
        except RuntimeError:
            pass
        future = torch.futures.Future()
        self._waiter().submit(_settle, work, future)
        return future

    def _waiter(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._waiter_lock:
            if self._waiter_pool is None:
                self._waiter_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="torch-fl-dist")
            return self._waiter_pool

    # ---- all-reduce ---------------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.AllreduceOptions()
        vendor = self._vendor_call("allreduce", tensors, opts.reduceOp)
        if vendor is None and self._hierarchy is not None:
            vendor = self._hierarchy.allreduce(tensors, opts.reduceOp)
        if vendor is not None:
            return vendor
        scale, opts.reduceOp = _premul(opts.reduceOp)

        def call(host):
            _scale_in_place(host, scale)
            return self._future(self._wire.allreduce(host, opts))
        return self._run("all_reduce", call, [(tensors, INOUT)], tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        scale, opts.reduceOp = _premul(opts.reduceOp)

        def call(host):
            _scale_in_place(host, scale)
            return self._future(self._wire.allreduce_coalesced(host, opts))
        return self._run("all_reduce_coalesced", call, [(tensors, INOUT)], tensors)

    def reduce(self, tensors: list[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.ReduceOptions()
        scale, opts.reduceOp = _premul(opts.reduceOp)

        def call(host):
            _scale_in_place(host, scale)
            return self._future(self._wire.reduce(host, opts))
        return self._run("reduce", call, [(tensors, INOUT)], tensors)

    # ---- broadcast / scatter / gather -----------------------------------------------------------
    def broadcast(self, tensors: list[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.BroadcastOptions()
        vendor = self._vendor_call("broadcast", tensors, opts.rootRank)
        if vendor is not None:
            return vendor
        return self._run("broadcast", lambda host: self._future(self._wire.broadcast(host, opts)),
                         [(tensors, INOUT)], tensors)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.ScatterOptions()
        return self._run("scatter", lambda o, i: self._future(self._wire.scatter(o, i, opts)),
                         [(outputs, OUT), (inputs, IN)], outputs)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.GatherOptions()
        return self._run("gather", lambda o, i: self._future(self._wire.gather(o, i, opts)),
                         [(outputs, OUT), (inputs, IN)], outputs)

    # ---- all-gather -----------------------------------------------------------------------------
    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.AllgatherOptions()
        vendor = self._vendor_call("allgather", outputs, inputs)
        if vendor is not None:
            return vendor
        return self._run("all_gather", lambda o, i: self._future(self._wire.allgather(o, i, opts)),
                         [(outputs, OUT), (inputs, IN)], outputs)

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.AllgatherOptions()
        return self._run("all_gather_coalesced",
                         lambda o, i: self._future(self._wire.allgather_coalesced(o, i, opts)),
                         [(outputs, OUT), (inputs, IN)], outputs)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.AllgatherOptions()
        vendor = self._vendor_call("all_gather_into", output, input)
        if vendor is not None:
            return vendor
        return self._run("all_gather_into_tensor",
                         lambda o, i: self._future(self._wire._allgather_base(o, i, opts)),
                         [(output, OUT), (input, IN)], output)

    _allgather_base = all_gather_single

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.AllgatherOptions()

        def call(outs, ins):     # Gloo has no coalesced form: one collective per pair, one Work
            return [self._future(self._wire._allgather_base(o, i, opts)) for o, i in zip(outs, ins)]
        return self._run("all_gather_into_tensor_coalesced", call, [(outputs, OUT), (inputs, IN)], outputs)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    # ---- reduce-scatter ---------------------------------------------------------------------------
    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        scale, opts.reduceOp = _premul(opts.reduceOp)

        def call(o, i):
            return self._future(self._wire.reduce_scatter(o, _scaled_copies(i, scale), opts))
        return self._run("reduce_scatter", call, [(outputs, OUT), (inputs, IN)], outputs)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        vendor = self._vendor_call("reduce_scatter_into", output, input, opts.reduceOp)
        if vendor is not None:
            return vendor
        scale, opts.reduceOp = _premul(opts.reduceOp)

        def call(o, i):
            return self._future(self._wire._reduce_scatter_base(o, _scaled_copies(i, scale), opts))
        return self._run("reduce_scatter_tensor", call, [(output, OUT), (input, IN)], output)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        scale, opts.reduceOp = _premul(opts.reduceOp)

        def call(outs, ins):
            return [self._future(self._wire._reduce_scatter_base(o, _scaled_copies(i, scale), opts))
                    for o, i in zip(outs, ins)]
        return self._run("reduce_scatter_tensor_coalesced", call, [(outputs, OUT), (inputs, IN)], outputs)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # ---- all-to-all -------------------------------------------------------------------------------
    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.AllToAllOptions()
        return self._run("all_to_all", lambda o, i: self._future(self._wire.alltoall(o, i, opts)),
                         [(outputs, OUT), (inputs, IN)], outputs)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: list[int],
                          input_split_sizes: list[int], opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.AllToAllOptions()
        vendor = self._vendor_call("all_to_all_single", output, input, output_split_sizes, input_split_sizes)
        if vendor is not None:
            return vendor

        def call(o, i):
            return self._future(self._wire.alltoall_base(o, i, output_split_sizes, input_split_sizes, opts))
        return self._run("all_to_all_single", call, [(output, OUT), (input, IN)], output)

    alltoall_base = all_to_all_single

    # ---- point to point and barrier -----------------------------------------------------------------
    # Point to point stays host-staged even in a vendor group: a sender cannot know whether its
    # peer receives with recv(src=None), which only Gloo serves (NCCL refuses it for the same
    # reason), and both ends must take the same path.
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> dist.Work:
        return self._run(f"send to rank {dst}", lambda t: self._future(self._wire.send(t, dst, tag)),
                         [(tensors, IN)], tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> dist.Work:
        return self._run(f"recv from rank {src}", lambda t: self._future(self._wire.recv(t, src, tag)),
                         [(tensors, OUT)], tensors)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> FLWork:
        works = []

        def call(t):
            works.append(self._wire.recv_anysource(t, tag))
            return self._future(works[0])
        work = self._run("recv from any rank", call, [(tensors, OUT)], tensors)
        work.source_from(works[0])
        return work

    def barrier(self, opts=None) -> dist.Work:
        opts = opts if opts is not None else dist.BarrierOptions()
        return self._run("barrier", lambda: self._future(self._wire.barrier(opts)), [], [])

    def monitored_barrier(self, timeout: datetime.timedelta | None = None, wait_all_ranks: bool = False) -> None:
        """The wire's own monitored barrier (Gloo's names the ranks that did not arrive)."""
        monitored = getattr(self._wire, "monitored_barrier", None)
        if monitored is None:
            raise NotImplementedError(f"torch_fl process group: {self._transport.name} has no monitored_barrier; "
                                      "use dist.barrier()")
        monitored(timeout if timeout is not None else self._timeout, wait_all_ranks=wait_all_ranks)

    # ---- lifetime -------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        if self._vendor is not None:
            self._vendor.close()
        if self._hierarchy is not None:
            self._hierarchy.close()
        shutdown = getattr(self._wire, "shutdown", None)
        if shutdown is not None:
            shutdown()

    def abort(self) -> None:
        abort = getattr(self._wire, "abort", None)
        if abort is not None:
            abort()


def _work(site: CallSite, futures, staging: Staging, result, diagnose=None) -> FLWork:
    """One Work over the wire's futures; when they are done, copy results back and complete.
    `diagnose` (a group across hosts) names the peers that do not answer when it failed.

    The callback holds no reference to the process group: were it the last one, the
    group (and its Gloo context) would be destroyed on Gloo's own thread, which
    cannot join itself."""
    futures = futures if isinstance(futures, list) else [futures]
    joined = futures[0] if len(futures) == 1 else torch.futures.collect_all(futures)
    failures: list[CollectiveError] = []      # the typed error; a future keeps only its text

    def complete(fut):
        try:
            fut.value()
            for inner in futures:     # collect_all keeps inner errors inside its value
                inner.value()
        except Exception as exc:
            failures.append(CollectiveError(site, exc, diagnose() if diagnose is not None else ""))
            raise failures[-1] from exc
        staging.finish()
        return result
    return FLWork(joined.then(complete), site, failures)


def _settle(work: dist.Work, future: torch.futures.Future) -> None:
    try:
        work.wait()
    except Exception as exc:  # noqa: BLE001 (whatever the wire raised goes to the future's waiter)
        future.set_exception(exc)
        return
    future.set_result(None)


def _premul(op: dist.ReduceOp) -> tuple[float | None, dist.ReduceOp]:
    """PREMUL_SUM (Gloo refuses it) as SUM of inputs scaled by its factor; other ops unchanged."""
    if op.op != dist.ReduceOp.RedOpType.PREMUL_SUM:
        return None, op
    factor = op.factor
    if factor is None:
        raise ValueError("torch_fl process group: ReduceOp.PREMUL_SUM without a factor; "
                         "build it with torch.distributed._make_nccl_premul_sum(factor)")
    return float(factor), dist.ReduceOp.SUM


def _scale_in_place(tensors: list[torch.Tensor], scale: float | None) -> None:
    """Pre-multiply in-out buffers (their values are replaced by the result anyway)."""
    if scale is not None:
        for t in tensors:
            t.mul_(scale)


def _scaled_copies(value, scale: float | None):
    """Pre-multiplied copies of input-only buffers, never the caller's tensors."""
    if scale is None:
        return value
    if isinstance(value, torch.Tensor):
        return value * scale
    return [_scaled_copies(v, scale) for v in value]
