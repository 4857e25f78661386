"""A captured graph's launches, decided once and replayed: the graph path (docs/users/graph-path.md).

torch.compile(model, backend="fl") hands each graph of ATen ops (AOTAutograd's, through
integration/graph_backend.py) to a `LaunchList`.  Its first call on a thread runs the
graph eagerly, through PyTorch, while recording what each node did:
- a **launch**: the op ran a per-signature program (fast_path.py) on a vendor kernel.
  The step keeps its own fl_arg arena, filled once; a replay writes the tensor addresses
  into it and calls launch_kernel.  No dispatcher entry, no call key, no meta lookup and,
  for an intermediate only launches touch, no tensor at all;
- a **view** whose result shares its input's storage: nothing at replay.  Its consumers'
  arenas already hold its shape and strides; its address is its root's plus a constant;
- a **Python step**: everything else (fallbacks, runtime-owned ops such as copy_, views
  a Python step or the caller needs as tensors): run through PyTorch, as eager does.

Intermediates that only launches (and views) touch live in one workspace block per run,
at offsets a liveness plan gives them (graph_plan.py); outputs of the graph and values
a Python step reads get their own blocks and tensors, as eager ones.  Recording is
graph_record.py's, deciding graph_plan.py's; this module runs plans.

Why a replay computes what eager would: a launch replays the very program the eager call
ran (its kernel entry, arena bytes, output layouts), and every layout it bakes in follows
from the layouts of the graph's inputs, which are checked per call against the record
(`LaunchList.__call__`: another input signature records a plan of its own).  What cannot
be known in advance is checked per run, and a mismatch runs the graph eagerly instead:
a profile or phase timing (they report per op), autocast, a kernel table that changed.
With a second stream in use, a run orders itself once: its stream waits for the other
streams' pending writes to its inputs, and the inputs its launches write are marked as
written by it (the eager path does the same per op; docs/users/devices.md).  A layout a Python step
returns is compared with the record before a launch reads it (GraphReplayError otherwise,
never a launch over the wrong layout).

Threads: a plan's arenas are written per launch, so each thread records and keeps its
own plans (`threading.local`); nothing else is shared.
"""
from __future__ import annotations

import threading
from array import array

import torch
from torch.fx.node import map_arg

from fl_runtime import abi, compiled
from fl_runtime.abi import ffi
from fl_runtime.abi.convention import BASE_AND_OFFSET
from fl_runtime.devices.storage import wrap_block
from fl_runtime.errors import GraphReplayError
from fl_runtime.logs import logger
from fl_runtime.ops import accounting
from fl_runtime.ops.eager import fast_path
from fl_runtime.ops.graph.graph_plan import MASK, WORKSPACE, LaunchSegment, Plan
from fl_runtime.ops.graph.graph_record import LaunchStep, NotPlannable, PythonStep, Record, Val, layout_key
from fl_runtime.ops.eager.marshal import base_and_offset
from fl_runtime.ops.eager.launcher import _declined_reason, _raise_launch_failure

MAX_PLANS = 8                # input signatures one graph keeps plans for, per thread
_is_autocast_enabled = torch.is_autocast_enabled
LAUNCH_TYPE = dict(ffi.typeof("fl_api").fields)["launch_kernel"].type     # the header's, via cffi


class _ThreadRecord:
    """One thread's plans of a graph (input signature -> Plan or None) and its eager runs."""
    __slots__ = ("plans", "eager_runs")

    def __init__(self) -> None:
        self.plans: dict = {}
        self.eager_runs = 0


class LaunchList:
    """A graph of ATen ops, run by replaying its recorded launches (see the module doc).
    Called with the graph's inputs, returns its outputs, as `gm(*inputs)` would."""

    def __init__(self, gm: torch.fx.GraphModule, launcher) -> None:
        self.gm = gm
        self.launcher = launcher
        self.rt = launcher.rt
        self.eager_only = False          # set after a GraphReplayError: the graph runs eagerly
        self.why_eager: dict = {}        # input signature -> why it has no plan (diagnostics)
        self._local = threading.local()  # per thread: input signature -> Plan or None
        # every thread's plans and eager-run counts, for summary(): with the native bridge the
        # autograd engine runs backward graphs on its own device threads
        self._threads: list[_ThreadRecord] = []
        self._threads_lock = threading.Lock()

    def __call__(self, *inputs):
        rt = self.rt
        if self.eager_only or accounting.HOOKED or _is_autocast_enabled("fl"):
            return self._eager(inputs)
        plans = self._plans()
        try:
            key = fast_path.positional_key(inputs)
            plan = plans.get(key, _UNSEEN)
        except TypeError:                # an unhashable input
            return self._eager(inputs)
        if plan is _UNSEEN:
            if len(plans) >= MAX_PLANS:
                return self._eager(inputs)
            outputs, plans[key] = self._record(key, inputs)
            return outputs
        if plan is None or not plan.valid():
            return self._eager(inputs)
        try:
            return run_plan(plan, inputs, rt)
        except GraphReplayError:
            self.eager_only = True
            raise

    def _eager(self, inputs: tuple):
        self._thread().eager_runs += 1
        return self.gm(*inputs)

    def plans(self) -> list:
        """This thread's plans (for tests and diagnostics)."""
        return [plan for plan in self._plans().values() if plan is not None]

    def summary(self) -> dict:
        """What this graph did on every thread that ran it: its plans' steps and replays, the
        calls it ran eagerly and why a signature has no plan (docs/users/graph-path.md)."""
        with self._threads_lock:
            threads = list(self._threads)
        plans = [plan for record in threads for plan in list(record.plans.values()) if plan is not None]
        return {"nodes": len(self.gm.graph.nodes),
                "plans": [{"launches": len(plan.launches),
                           "python_steps": sum(isinstance(s, PythonStep) for s in plan.order),
                           "workspace_bytes": plan.workspace, "replays": plan.runs} for plan in plans],
                "eager_runs": sum(record.eager_runs for record in threads), "eager_only": self.eager_only,
                "why_no_plan": sorted(set(self.why_eager.values()))}

    def _thread(self) -> _ThreadRecord:
        record = getattr(self._local, "record", None)
        if record is None:
            record = self._local.record = _ThreadRecord()
            with self._threads_lock:
                self._threads.append(record)
        return record

    def _plans(self) -> dict:
        return self._thread().plans

    def _record(self, key, inputs: tuple):
        record = Record(self.gm, self.launcher)
        outputs = record.run(list(inputs))
        output_node = next(n for n in reversed(self.gm.graph.nodes) if n.op == "output")
        try:
            if record.device_index is None:
                raise NotPlannable("it launches no vendor kernel (nothing to replay)")
            if record.mixed_devices:
                raise NotPlannable("its launches are on more than one device")
            if record.changes_metadata:
                raise NotPlannable(f"{record.changes_metadata} changes a tensor's layout in place")
            plan = Plan(record, output_node)
        except NotPlannable as exc:
            self.why_eager[key] = str(exc)
            logger.info("torch_fl: a compiled graph of %d nodes runs eagerly: %s (docs/users/graph-path.md)",
                        len(self.gm.graph.nodes), exc)
            plan = None
        for val in record.vals.values():
            for item in val if isinstance(val, tuple) else (val,):
                if isinstance(item, Val):
                    item.root.record = None       # the recorded tensors are not kept
        return outputs, plan


_UNSEEN = object()


def run_plan(plan: Plan, inputs: tuple, rt):
    """One replay of `plan` with these inputs (their layouts are the plan's: LaunchList checks)."""
    plan.runs += 1
    real = plan.prefill.copy()
    real[:plan.input_count] = inputs
    addresses = array("Q", plan.no_addresses)      # (base, byte offset) per addressed root
    for position, index in plan.input_addresses:
        set_address(addresses, index, inputs[position] if position >= 0 else real[-1 - position])
    device_index = plan.device_index
    streams = rt.streams
    stream = streams.current(device_index) if streams.any_current else streams.default[device_index]
    allocator = rt.allocators[device_index]
    cross_stream = rt._cross_stream
    if cross_stream:         # other streams in use: wait for their writes to the inputs, once
        rt.order_after_writers(device_index, stream, inputs, ())
    workspace = allocator.allocate_rounded(plan.workspace, stream) if plan.workspace else None
    try:
        _run_steps(plan, real, addresses, workspace.ptr if workspace is not None else 0, stream, allocator)
    finally:
        if workspace is not None:
            allocator.release(workspace)
        if cross_stream:     # and later work on other streams waits for the inputs launches wrote
            for slot in plan.written_slots:
                rt.mark_written(real[slot], stream)
    pending = accounting.pending
    pending.extend(plan.count_keys)
    if len(pending) > accounting.FOLD_AT:
        accounting.fold()
    if plan.output_type is None:
        return real[plan.output_slots[0]]
    outputs = [real[slot] for slot in plan.output_slots]
    return tuple(outputs) if plan.output_type is tuple else outputs


def _run_steps(plan: Plan, real: list, addresses: array, workspace: int, stream, allocator) -> None:
    handle = int(ffi.cast("uintptr_t", stream.handle))
    device_index = plan.device_index
    slot_of = plan.slot_of
    for step in plan.steps:
        if step.__class__ is LaunchSegment:
            for spec, slot, index in step.allocations:
                block = allocator.allocate_rounded(spec.size, stream)
                real[slot] = wrap_block(block, allocator.release, device_index, spec.shape, spec.stride,
                                        spec.dtype)
                addresses[2 * index] = block.ptr
                addresses[2 * index + 1] = 0
            failed = _run_launches(step.program, addresses, workspace, handle)
            if failed is not None:
                _failed_launch(step.launches[failed[0]], failed[1])
        else:
            node = step.node
            args, kwargs = map_arg((node.args, node.kwargs), lambda n: real[slot_of[n]])
            out = real[step.slot] = node.target(*args, **kwargs)
            if step.address is not None:
                if layout_key(out) != step.val.shape_key:
                    raise GraphReplayError(f"graph node {node.format_node()} returned a tensor of layout "
                                           f"{layout_key(out)}, recorded as {step.val.shape_key}; the "
                                           "graph runs eagerly from its next call")
                set_address(addresses, step.address, out)
        for slot in step.drop:
            real[slot] = None


def set_address(addresses: array, index: int, t: torch.Tensor) -> None:
    addresses[2 * index], addresses[2 * index + 1] = base_and_offset(t)


def _run_launches_in_python(program: bytes, addresses: array, workspace: int, stream: int):
    """_launch_list.run_launches, in Python (the helper not built, or TORCH_FL_PURE_PYTHON=1)."""
    words = memoryview(program).cast("Q")
    at = position = 0
    while at < len(words):
        launch, entry, args, count, patches = words[at:at + 5]
        at += 5
        for _ in range(patches):
            site, index, offset = words[at:at + 3]
            at += 3
            if index == WORKSPACE:
                pair = (workspace, offset)
            else:
                pair = (addresses[2 * index], (addresses[2 * index + 1] + offset) & MASK)
            BASE_AND_OFFSET.pack_into(ffi.buffer(ffi.cast("char *", site), 16), 0, *pair)
        launch_kernel = ffi.cast(LAUNCH_TYPE, launch)
        status = launch_kernel(ffi.cast("fl_stream", stream), ffi.cast("const fl_kernel_entry *", entry),
                               ffi.cast("const fl_arg *", args), count)
        if status != abi.SUCCESS:
            return position, status
        position += 1
    return None


_native = compiled.load("fl_runtime.ops.graph._launch_list")
_run_launches = _native.run_launches if _native is not None else _run_launches_in_python


def _failed_launch(step: LaunchStep, status: int) -> None:
    device = step.program.device
    if status == abi.ERROR_NOT_SUPPORTED:
        raise GraphReplayError(f"{step.name} on fl:{device.index}: the vendor declined a launch it took when the "
                               f"graph was recorded ({_declined_reason(device)}); the graph runs eagerly from its "
                               "next call")
    _raise_launch_failure(device, status, step.name)


