"""The vendor path of the fl process group: collectives the plugin runs on its own fabric (ABI 1.1).

When every rank of a group has a plugin offering the collectives extension
(fl_abi.h, "collectives"), a collective on fl tensors of such a plugin is
enqueued by the plugin itself, device to device, instead of being staged
through the host and Gloo (docs/users/distributed.md).  Every other
call (CPU tensors, a dtype or op the plugin does not declare, non-contiguous
tensors, uneven all_to_all splits, PREMUL_SUM and the bitwise ops, and
point to point, see process_group.py) takes the
host-staged path, so mixed jobs keep working: the choice depends only on what
every rank of a correct SPMD program passes alike (device type, dtype, op,
shapes), never on timing.  TORCH_FL_VENDOR_COLLECTIVES=0 turns the vendor
path off for a process (then for its groups, since all ranks must agree).

Rendezvous: when the group is made, every rank publishes on the c10d store
the plugins whose collectives it can use and their reach (ABI 1.2,
fl_comm_reach); the group's vendor plugins are those every rank offers, and,
when the group spans hosts (hosts.py), only those whose communicators may:
a plugin that reaches one host serves such a group within each host
(hierarchy.py) and never gets a communicator across hosts.  A communicator
per (rank, device) is made on the
first vendor collective on that device: rank 0 asks its plugin for a unique
id and puts it on the store, the other ranks read it, all call comm_create
(fl_abi.h explains why a unique id and not key-value callbacks).

Ordering: collectives of a device run on a stream of their own (as NCCL's
do), which first waits for the work already queued on the caller's current
stream (a collective queued behind busy work waits for it), and which the
current stream then waits for (later work reads the result).  Buffers are
ordered against other streams and kept alive by the runtime's writer
tracking, as kernel arguments are.  `Work.wait()` returns once the
collective stream has run it; a failure there (a timeout, a mismatched call)
is raised by the Work as a CollectiveError.
"""
from __future__ import annotations

import concurrent.futures
import datetime
import json
import os
import threading
from collections.abc import Callable

import torch
import torch.distributed as dist

from fl_runtime import abi
from fl_runtime.devices.communicator import Communicator, unique_id
from fl_runtime.errors import FLError, VendorError
from fl_runtime.integration.distributed import interrupt
from fl_runtime.integration.distributed.elastic import attempt_scope
from fl_runtime.integration.distributed.work import CallSite, CollectiveError, FLWork, completable_future
from fl_runtime.logs import logger
from fl_runtime.plugins.extensions import collectives_of
from fl_runtime.runtime import Runtime

ENABLE_ENV = "TORCH_FL_VENDOR_COLLECTIVES"
_PREFIX = "fl-vendor/"
_R = dist.ReduceOp.RedOpType
_REDUCE_OPS = {_R.SUM: "sum", _R.PRODUCT: "prod", _R.MIN: "min", _R.MAX: "max", _R.AVG: "avg"}


def enabled_by_environment() -> bool:
    return os.environ.get(ENABLE_ENV, "1") not in ("0", "false", "no", "off")


def _offered_plugins(rt: Runtime) -> dict[str, bool]:
    """The runtime's plugins whose collectives extension is usable: name -> whether one
    communicator may span hosts (fl_abi.h, fl_comm_reach)."""
    if not enabled_by_environment():
        return {}
    offered: dict[str, bool] = {}
    for device in rt.devices:
        if device.plugin.name not in offered and _usable(device):
            offered[device.plugin.name] = collectives_of(device.plugin).crosses_hosts
    return offered


def agree_on_plugins(rt: Runtime, store: dist.Store, rank: int, size: int, group_name: str) -> dict[str, bool]:
    """The plugins every rank of the group offers collectives of (a collective, through `store`):
    name -> whether every rank's copy declares FL_COMM_REACH_ANY."""
    # Per torchrun attempt (elastic.py): a restarted rank must not read a dead attempt's offers.
    store = dist.PrefixStore(f"{_PREFIX}{attempt_scope()}/{group_name}/", store)
    store.set(f"offer/{rank}", json.dumps(_offered_plugins(rt)))
    common: dict[str, bool] | None = None
    for r in range(size):
        theirs = json.loads(store.get(f"offer/{r}").decode())
        common = theirs if common is None else {name: crosses and theirs[name]
                                                for name, crosses in common.items() if name in theirs}
    return common or {}


def _usable(device) -> bool:
    """Whether the device's plugin offers collectives that work: its extension is well formed and
    comm_get_unique_id succeeds (a plugin chaining skeletons that decline with
    FL_ERROR_NOT_SUPPORTED stays host-staged instead of failing every collective)."""
    try:
        if collectives_of(device.plugin) is None:
            return False
        unique_id(device)
        return True
    except FLError as exc:
        logger.warning("fl process group: fl:%d (%s): %s; its collectives stay host-staged",
                       device.index, device.plugin.name, exc)
        return False


class CommunicatorSetupError(RuntimeError):
    """A communicator's id did not come from the job's store in time (its host out of reach)."""


class VendorCollectives:
    """One process group's vendor path on `rt`'s devices; `connect` returns None when the group has none.

    `setup_timeout`: how long a rank waits on the store for a communicator's id (default the
    group's timeout).  Communicators are made on a device's first collective, possibly long
    after the group, when the store's host may be gone: an unbounded store wait would hang
    the collective instead of failing it within the group's timeout."""

    name = "vendor collectives"

    def __init__(self, rt: Runtime, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta,
                 plugins: frozenset[str], setup_timeout: datetime.timedelta | None = None) -> None:
        self._rt = rt
        self._store, self._rank, self._size, self._timeout = store, rank, size, timeout
        self._setup_timeout = setup_timeout or timeout
        self.plugins = plugins
        self._lock = threading.Lock()
        self._comms: dict[int, Communicator] = {}
        self._streams: dict[int, torch.Stream] = {}
        self._waiter = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="torch-fl-vendor")
        self._failed: dict[int, BaseException] = {}     # collective stream key -> its first failure
        interrupt.install()                             # SIGTERM ends a rank waiting here (interrupt.py)

    @classmethod
    def connect(cls, rt: Runtime, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta,
                group_name: str, plugins: frozenset[str]) -> VendorCollectives | None:
        """The vendor path of `plugins` (every rank agreed on them) for this group, None when empty.
        Communicator ids go on `store` under the group's own prefix, per torchrun attempt."""
        if not plugins:
            logger.debug("fl process group %r: no vendor collectives; host-staged", group_name)
            return None
        logger.debug("fl process group %r: vendor collectives of %s", group_name, sorted(plugins))
        return cls(rt, dist.PrefixStore(f"{_PREFIX}{attempt_scope()}/{group_name}/", store), rank, size, timeout,
                   frozenset(plugins))

    # ---- choosing the path -------------------------------------------------------------------
    def _device(self, call: str, tensors: list[torch.Tensor], op: int | None = None):
        """The DeviceInfo the vendor path runs `call` on, or None for the host-staged path."""
        if not tensors or any(not isinstance(t, torch.Tensor) or t.device.type != "fl" or not t.is_contiguous()
                              for t in tensors):
            return None
        first = tensors[0]
        if any(t.device != first.device or t.dtype != first.dtype for t in tensors):
            return None
        device = self._rt.device(first.device.index)
        if device.plugin.name not in self.plugins or first.dtype not in abi.DTYPE_TO_FL:
            return None
        ext = collectives_of(device.plugin)
        return device if ext.takes(call, abi.DTYPE_TO_FL[first.dtype], op) else None

    @staticmethod
    def _op(reduce_op, dtype: torch.dtype) -> int | None:
        """The fl_reduce_op for a ReduceOp, or None where the vendor path does not take it."""
        name = _REDUCE_OPS.get(getattr(reduce_op, "op", reduce_op))
        if name is None or (name == "avg" and not dtype.is_floating_point):
            return None
        return abi.REDUCE_OPS[name]

    def serves(self, call: str, tensors: list[torch.Tensor], op: int | None = None) -> bool:
        """Whether `call` on these tensors (and fl_reduce_op) takes the vendor path."""
        return self._device(call, tensors, op) is not None

    def fl_op(self, reduce_op, dtype: torch.dtype) -> int | None:
        """The fl_reduce_op for a torch.distributed ReduceOp, or None where the vendor path does not take it."""
        return self._op(reduce_op, dtype)

    def after_current_stream(self, index: int) -> None:
        """Order the device's collective stream after the work queued so far on the calling thread's
        current stream (for collectives enqueued later, from another thread)."""
        self._stream(index).wait_stream(self._rt.streams.current(index))

    # ---- communicators and streams -------------------------------------------------------------
    def _comm(self, device) -> Communicator:
        with self._lock:
            comm = self._comms.get(device.index)
            if comm is None:
                key = f"uid/{device.plugin.name}/{len(self._comms)}"     # the k-th communicator of every rank
                if self._rank == 0:
                    self._store.set(key, unique_id(device))
                uid = self._communicator_id(key)
                timeout_ms = int(self._timeout.total_seconds() * 1000)
                comm = self._comms[device.index] = Communicator(device, uid, self._rank, self._size, timeout_ms)
            return comm

    def _communicator_id(self, key: str) -> bytes:
        """The id rank 0 put under `key`, or CommunicatorSetupError after the setup timeout.  The
        store is read on a thread of its own: a TCPStore whose host is cut off does not honour
        its own wait timeout (it keeps reconnecting), so only the caller can give up in time.
        The thread stays blocked until the store answers or the process ends (daemon)."""
        fetched: dict[str, object] = {}
        done = threading.Event()

        def fetch() -> None:
            try:
                fetched["id"] = self._store.get(key)
            except Exception as exc:  # noqa: BLE001 (the store's error, whatever its type, is the setup's)
                fetched["error"] = exc
            finally:
                done.set()

        threading.Thread(target=fetch, name="torch-fl-communicator-id", daemon=True).start()
        seconds = self._setup_timeout.total_seconds()
        if not done.wait(seconds):
            raise CommunicatorSetupError(f"rank 0 of the communicator did not hand out its id through the job's "
                                         f"store within {seconds:g} s (is the store's host out of reach?)")
        if "error" in fetched:
            raise CommunicatorSetupError(f"reading the communicator's id from the job's store failed: "
                                         f"{fetched['error']}") from fetched["error"]
        return fetched["id"]

    def _stream(self, index: int):
        with self._lock:
            stream = self._streams.get(index)
            if stream is None:
                stream = self._streams[index] = torch.fl.Stream(device=torch.device("fl", index))
            return stream

    # ---- the one path every vendor collective takes ------------------------------------------------
    def _run(self, site: CallSite, device, inputs: list, outputs: list,
             enqueue: Callable, result, scratch: Callable | None = None, after: Callable | None = None) -> FLWork:
        rt = self._rt
        index = device.index
        try:
            comm = self._comm(device)
        except (VendorError, CommunicatorSetupError) as exc:
            raise CollectiveError(site, exc) from exc
        coll = self._stream(index)
        current = rt.streams.current(index)
        coll.wait_stream(current)
        with torch.fl.stream(coll):
            extra = scratch() if scratch is not None else []
        rt.order_after_writers(index, coll, inputs, [*outputs, *extra])
        try:
            enqueue(comm, coll, *extra)
        except (VendorError, FLError) as exc:      # refused before anything was queued
            raise CollectiveError(site, exc) from exc
        if after is not None:
            with torch.fl.stream(coll):
                after(*extra)
        current.wait_stream(coll)
        source, future = completable_future()
        failures: list[CollectiveError] = []
        keep = (inputs, outputs, extra)           # alive until the stream has run the collective
        token = interrupt.waiting(source, site, failures)
        self._waiter.submit(self._settle, coll, source, site, failures, result, keep, token)
        return FLWork(future, site, failures)

    def _settle(self, stream, future: torch.futures.Future, site: CallSite, failures: list, result, keep,
                token: int) -> None:
        """On the group's waiter thread (one, so Works settle in enqueue order): wait for the
        collective stream, then complete the Work.  The stream hands out its sticky error once,
        and a synchronize covers every collective queued so far, so after a failure every later
        Work of that stream fails too: none may report success over an untouched buffer."""
        failed = self._failed.get(stream.key)
        if failed is None:
            try:
                stream.synchronize()
            except Exception as exc:  # noqa: BLE001 (the stream's sticky error is the collective's failure)
                failed = self._failed[stream.key] = exc
        if not interrupt.settled(token):          # a signal failed the Work meanwhile
            return
        if failed is not None:
            failures.append(CollectiveError(site, failed))
            future.set_exception(failures[-1])
            return
        future.set_result(result)

    def _site(self, op: str) -> CallSite:
        return CallSite(self._rank, self._size, op, self._timeout, self.name)

    # ---- collectives: each returns None when the call is not the vendor path's -------------------
    def allreduce(self, tensors: list[torch.Tensor], reduce_op) -> FLWork | None:
        if len(tensors) != 1:
            return None
        t = tensors[0]
        op = self._op(reduce_op, t.dtype)
        device = None if op is None else self._device("all_reduce", [t], op)
        if device is None:
            return None
        return self._run(self._site("all_reduce"), device, [t], [t],
                         lambda comm, s: comm.all_reduce(s, t, t, op), tensors)

    def broadcast(self, tensors: list[torch.Tensor], root: int) -> FLWork | None:
        device = self._device("broadcast", tensors) if len(tensors) == 1 else None
        if device is None:
            return None
        t = tensors[0]
        return self._run(self._site("broadcast"), device, [t], [t],
                         lambda comm, s: comm.broadcast(s, t, t, root), tensors)

    def all_gather_into(self, output: torch.Tensor, input: torch.Tensor) -> FLWork | None:
        if output.numel() != input.numel() * self._size:
            return None
        device = self._device("all_gather", [output, input])
        if device is None:
            return None
        return self._run(self._site("all_gather_into_tensor"), device, [input], [output],
                         lambda comm, s: comm.all_gather(s, input, output), output)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor]) -> FLWork | None:
        if len(inputs) != 1 or len(outputs) != 1 or len(outputs[0]) != self._size:
            return None
        src, outs = inputs[0], outputs[0]
        if any(o.shape != src.shape for o in outs):
            return None
        device = self._device("all_gather", [src, *outs])
        if device is None:
            return None

        def copy_out(flat):
            for r, o in enumerate(outs):
                o.copy_(flat[r].view_as(o))
        return self._run(self._site("all_gather"), device, [src], list(outs),
                         lambda comm, s, flat: comm.all_gather(s, src, flat), outputs,
                         scratch=lambda: [torch.empty((self._size, src.numel()), dtype=src.dtype,
                                                      device=src.device)],
                         after=copy_out)

    def reduce_scatter_into(self, output: torch.Tensor, input: torch.Tensor, reduce_op) -> FLWork | None:
        op = self._op(reduce_op, input.dtype)
        if op is None or input.numel() != output.numel() * self._size:
            return None
        device = self._device("reduce_scatter", [output, input], op)
        if device is None:
            return None
        return self._run(self._site("reduce_scatter_tensor"), device, [input], [output],
                         lambda comm, s: comm.reduce_scatter(s, input, output, op), output)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int],
                          input_splits: list[int]) -> FLWork | None:
        if output.numel() != input.numel() or input.numel() % self._size:
            return None
        for splits, t in ((output_splits, output), (input_splits, input)):
            if splits and (len(set(splits)) != 1 or sum(splits) != t.shape[0]):
                return None              # uneven splits: the host path's alltoall_base
        device = self._device("all_to_all", [output, input])
        if device is None:
            return None
        return self._run(self._site("all_to_all_single"), device, [input], [output],
                         lambda comm, s: comm.all_to_all(s, input, output), output)

    def close(self) -> None:
        """Destroy the communicators (work already queued on them completes first)."""
        with self._lock:
            comms, self._comms = list(self._comms.values()), {}
        for comm in comms:
            comm.destroy()
        self._waiter.shutdown(wait=False)

