"""A captured graph's launches, decided once and replayed: the graph path (README "Graph path").

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
at offsets a liveness plan gives them (`_assign_offsets`); outputs of the graph and values
a Python step reads get their own blocks and tensors, as eager ones.

Why a replay computes what eager would: a launch replays the very program the eager call
ran (its kernel entry, arena bytes, output layouts), and every layout it bakes in follows
from the layouts of the graph's inputs, which are checked per call against the record
(`LaunchList.__call__`: another input signature records a plan of its own).  What cannot
be known in advance is checked per run, and a mismatch runs the graph eagerly instead:
a profile or phase timing (they report per op), a second stream in use (cross-stream
ordering tracks tensors), autocast, a kernel table that changed.  A layout a Python step
returns is compared with the record before a launch reads it (GraphReplayError otherwise,
never a launch over the wrong layout).

Threads: a plan's arenas are written per launch, so each thread records and keeps its
own plans (`threading.local`); nothing else is shared.
"""
from __future__ import annotations

import operator
import threading
from array import array
from dataclasses import dataclass, field

import torch
from torch.fx.node import map_arg
from torch.utils._python_dispatch import TorchDispatchMode

from fl_runtime import abi, compiled
from fl_runtime.abi import ffi
from fl_runtime.abi.convention import BASE_AND_OFFSET, Arena, ArenaFull
from fl_runtime.devices.storage import wrap_block
from fl_runtime.errors import GraphReplayError
from fl_runtime.ops import accounting, fast_path
from fl_runtime.ops import marshal as _marshal
from fl_runtime.ops.launcher import _declined_reason, _raise_launch_failure

_ALIGN = 256                 # workspace offsets: the alignment vendors get from allocate (fl_abi.h)
MAX_PLANS = 8                # input signatures one graph keeps plans for, per thread
_is_autocast_enabled = torch.is_autocast_enabled
# Ops that return a view without saying so in their schema (no alias annotation): their
# results share storage with the input, so a plan treats them as the views they are.
_UNANNOTATED_VIEWS = frozenset({torch.ops.aten._unsafe_view.default})
_WORKSPACE = (1 << 64) - 1       # a patch's index for the workspace (_launch_list.c)
_MASK = (1 << 64) - 1
_LAUNCH_TYPE = "fl_status (*)(fl_stream, const fl_kernel_entry *, const fl_arg *, uint32_t)"


@dataclass(eq=False)
class Root:
    """Storage a plan addresses: a graph input, a Python step's result, or a launch's fresh output."""
    record: torch.Tensor | None          # the recorded tensor (None once planned: memory)
    fresh: bool = False                   # made by a launch (else its tensor is real every run)
    nbytes: int = 0
    escapes: bool = False                 # a fresh output that must be a tensor (read by Python or returned)
    in_workspace: bool = False            # a fresh output only launches touch: lives in the workspace
    offset: int = 0                       # its workspace offset
    address: int | None = None            # index of its (base, offset) in a run's address list
    slot: int | None = None               # the slot of the tensor that holds its storage
    first: int = 0                        # step index of its launch
    last: int = 0                         # last step index whose launch reads or writes it


@dataclass(eq=False)
class Val:
    """One tensor value of the graph: its root and byte distance from the root's start;
    `slot` is where its tensor lives during a run, None for a value no tensor represents."""
    root: Root
    delta: int = 0
    slot: int | None = None
    shape_key: tuple | None = None        # the recorded layout, checked when Python made it


@dataclass(eq=False)
class LaunchStep:
    """One launch_kernel call with its own arena: `sites` are (arena offset, Val) per
    tensor address, `fresh` (Root, Val, fast_path.Output) per fresh output."""
    name: str
    program: object                       # fast_path.Program
    arena: Arena
    count: int
    sites: list = field(default_factory=list)
    fresh: list = field(default_factory=list)
    index: int = 0
    drop: list = field(default_factory=list)     # slots to clear after it
    # set by compile(): what a run reads
    patches: tuple = ()                   # (arena offset, address index or -1 for the workspace, byte offset)
    allocations: tuple = ()               # (Output, slot, address index) per escaping output

    def compile(self) -> None:
        self.patches = tuple((at, -1, val.root.offset + val.delta) if val.root.in_workspace
                             else (at, val.root.address, val.delta) for at, val in self.sites)
        self.allocations = tuple((spec, val.slot, root.address) for root, val, spec in self.fresh
                                 if root.escapes)


@dataclass(eq=False)
class PythonStep:
    """A node run through PyTorch; `val` is its tensor result's value (None otherwise)."""
    node: torch.fx.Node
    val: Val | None
    makes_root: bool = True               # False for a view made real: its root is its source's
    slot: int = 0
    index: int = 0
    drop: list = field(default_factory=list)
    address: int | None = None            # where a run puts its result's (base, offset) for launches


class NotPlannable(Exception):
    """A recorded graph whose plan a run could not follow: it runs eagerly (the reason is logged)."""


class _Calls(TorchDispatchMode):
    """The ATen calls a node makes, as its PrivateUse1 kernel receives them."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.seen.append((func, args, kwargs))
        return func(*args, **kwargs)


def _address(t: torch.Tensor) -> tuple[int, int]:
    """(storage base, byte offset) of a tensor, as marshal._tensor writes them."""
    offset = t.storage_offset() * t.element_size()
    base = t.data_ptr() - offset
    return (0, 0) if base < 0 else (base, offset)


def _layout_key(t) -> tuple | None:
    return fast_path.value_key(t) if isinstance(t, torch.Tensor) else None


def kernel_name(op) -> str | None:
    """The kernel-table name of an OpOverload ('add.Tensor', 'mm'), None for anything else."""
    schema = getattr(op, "_schema", None)
    if schema is None or not schema.name.startswith("aten::"):
        return None
    base = schema.name[len("aten::"):]
    return f"{base}.{schema.overload_name}" if schema.overload_name else base


class _Record:
    """One eager run of a graph, node by node, and what each node turned out to be."""

    def __init__(self, gm: torch.fx.GraphModule, launcher) -> None:
        self.gm = gm
        self.launcher = launcher
        self.env: dict = {}             # node -> its recorded result
        self.vals: dict = {}            # node -> Val, tuple of Val (a launch's outputs) or None
        self.steps: list = []           # LaunchStep, PythonStep or ("view", node, source), in graph order
        self.inputs: list = []          # placeholder and get_attr nodes, in graph order
        self.device_index: int | None = None
        self.mixed_devices = False
        self.changes_metadata: str | None = None      # a node that changes a tensor's layout in place

    def run(self, inputs: list):
        placeholders = iter(inputs)
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self._input(node, next(placeholders))
            elif node.op == "get_attr":
                self._input(node, operator.attrgetter(node.target)(self.gm))
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                outputs = map_arg(node.args[0], self.env.__getitem__)
                return _shaped(node.args[0], outputs)
            else:                        # call_module, call_method: not in AOTAutograd's graphs
                raise NotImplementedError(f"graph node {node.format_node()}")
        return None

    def _input(self, node, value) -> None:
        self.env[node] = value
        self.vals[node] = Val(Root(value)) if isinstance(value, torch.Tensor) else None
        self.inputs.append(node)

    def _call(self, node) -> None:
        if torch.Tag.inplace_view in getattr(node.target, "tags", ()):
            self.changes_metadata = node.format_node()   # resize_, as_strided_ ...: addresses would move
        args, kwargs = map_arg((node.args, node.kwargs), self.env.__getitem__)
        if node.target is operator.getitem and isinstance(self.vals.get(node.args[0]), tuple):
            self.env[node] = out = args[0][args[1]]
            self.vals[node] = self.vals[node.args[0]][args[1]]      # a launch's output: no step
            return
        calls = _Calls()
        with calls:
            out = node.target(*args, **kwargs)
        self.env[node] = out
        step = self._launch(node, calls.seen, out)
        if step is not None:
            self.steps.append(step)
        elif not self._view(node, out):
            val = Val(Root(out)) if isinstance(out, torch.Tensor) else None
            if val is not None:
                val.shape_key = _layout_key(out)
            self.vals[node] = val
            self.steps.append(PythonStep(node, val))

    def _view(self, node, out) -> bool:
        """A view op whose result shares its source's storage: a Val, no step."""
        is_view = getattr(node.target, "is_view", False) or node.target in _UNANNOTATED_VIEWS
        if not is_view or not isinstance(out, torch.Tensor) or not node.args:
            return False
        source = node.args[0]
        val = self.vals.get(source) if isinstance(source, torch.fx.Node) else None
        if not isinstance(val, Val):
            return False
        record = val.root.record
        storage = out.untyped_storage().data_ptr()
        if storage == 0 or storage != record.untyped_storage().data_ptr():
            return False
        delta = out.storage_offset() * out.element_size() - record.storage_offset() * record.element_size()
        self.vals[node] = Val(val.root, delta)
        self.steps.append(("view", node, source))
        return True

    def _launch(self, node, seen: list, out) -> LaunchStep | None:
        """The launch a node made, when it made exactly one through a per-signature program."""
        name = kernel_name(node.target)
        if name is None or len(seen) != 1 or seen[0][0] is not node.target:
            return None
        if any(not isinstance(self.env[n], torch.Tensor) for n in node.all_input_nodes):
            return None      # an int or float another node computes: the arena would bake this run's
        _, args, kwargs = seen[0]
        program = self.launcher.program_for(name, args, kwargs)
        if program is None or not self._one_device(program.device_index):
            return None
        plan = self.launcher.plan(name)
        values = plan.normalize(args, kwargs) if kwargs else [*args, *program.tail]
        outputs = [out] if len(program.outputs) == 1 else list(out or ())
        if len(outputs) != len(program.outputs) or len(values) + len(outputs) > Arena.ARGS:
            return None
        sites = _fill(plan, values, outputs)
        if sites is None:
            return None
        arena, raw_sites = sites
        step = LaunchStep(name, program, arena, len(values) + len(outputs))
        out_vals = self._output_vals(node, program, values, outputs, step)
        by_id = self._input_vals(node)
        if by_id is None:
            return None
        for kind, at, i, j in raw_sites:
            if kind == _marshal._SITE_TENSOR:
                val = by_id.get(id(values[i]))
            elif kind == _marshal._SITE_LIST_TENSOR:
                val = by_id.get(id(values[i][j]))
            elif kind == _marshal._SITE_OUTPUT:
                val = out_vals[i]
            elif kind == _marshal._SITE_FLOAT:
                continue                 # a graph literal: the arena holds it for good
            else:
                return None              # a wrapped CPU number or a list of scalars: per-call data
            if val is None:
                return None
            step.sites.append((at, val))
        self.vals[node] = out_vals[0] if len(out_vals) == 1 else tuple(out_vals)
        return step

    def _one_device(self, index: int) -> bool:
        if self.device_index is None:
            self.device_index = index
        self.mixed_devices = self.mixed_devices or index != self.device_index
        return not self.mixed_devices

    def _input_vals(self, node) -> dict | None:
        """id(recorded tensor) -> Val for the node's inputs; None when two values share a
        tensor object (their sites could not tell which value each is)."""
        by_id: dict = {}
        for source in node.all_input_nodes:
            value, val = self.env[source], self.vals.get(source)
            if isinstance(value, torch.Tensor) and isinstance(val, Val):
                if by_id.setdefault(id(value), val) is not val:
                    return None
        return by_id

    def _output_vals(self, node, program, values: list, outputs: list, step: LaunchStep) -> list:
        made = []
        for j, (spec, out) in enumerate(zip(program.outputs, outputs)):
            if spec.alias is not None:
                source = self._input_vals(node) or {}
                made.append(source.get(id(values[spec.alias])))
            elif spec.shape is None:
                made.append(None)
            else:
                root = Root(out, fresh=True, nbytes=spec.size)
                val = Val(root)
                step.fresh.append((root, val, spec))
                made.append(val)
        return made


def _fill(plan, values: list, outputs: list) -> tuple[Arena, list] | None:
    """A launch's own arena, filled as marshal() fills the thread's, and its sites."""
    size = 4096
    while True:
        arena = Arena(size)
        sites: list = []
        try:
            _marshal._fill(arena, plan, values, outputs, None, sites)
            return arena, sites
        except ArenaFull:
            size *= 4
        except _marshal.MarshalError:
            return None


class _Plan:
    """A recorded graph, decided: which values are tensors, where the others live, what each step does."""

    def __init__(self, record: _Record, output_node) -> None:
        self.device_index = record.device_index
        self.slot_of: dict = {}                   # node -> slot of its result during a run
        self.prefill: list = []                   # a run's slots before it starts (constants)
        self.input_count = 0
        self.input_addresses: list = []           # (input position, address index)
        self.addresses = 0                        # roots whose address a run computes
        self.order: list = []
        self.steps: list = []
        self.count_keys: list = []
        self.workspace = 0
        self.output_slots: list = []
        self.runs = 0                             # replays (a plan belongs to one thread: no lock)
        result = output_node.args[0]     # a tuple or list of values, or one value
        self.output_type = type(result) if isinstance(result, (tuple, list)) else None
        self._plan(record, output_node)

    # ---- deciding ------------------------------------------------------------------------
    def _plan(self, record: _Record, output_node) -> None:
        need = _needed(record, output_node)
        steps = _realize_views(record, need)
        for index, step in enumerate(steps):
            step.index = index
        self._give_slots(record, steps, need, output_node)
        self._give_addresses(record, steps)
        self._drop_after_last_use(steps)
        self.launches = [step for step in steps if isinstance(step, LaunchStep)]
        self.count_keys = [step.program.count_key for step in self.launches]
        self._device = self.launches[0].program.device if self.launches else None
        self._names = [step.name for step in self.launches]
        self._choices = [step.program.choice for step in self.launches]
        self.no_addresses = bytes(16 * self.addresses)
        self.order = steps                        # launches and Python steps, in graph order
        self.steps = _segments(steps)             # what a run executes
        self._check(record, output_node)

    def _check(self, record: _Record, output_node) -> None:
        """Refuse (NotPlannable) a plan a run could not follow: a Python step or output
        reading a value that has no tensor, or a recorded tensor a run would hand out that
        shares storage with the workspace (it would be overwritten by later runs)."""
        for step in self.order:
            if isinstance(step, PythonStep) and any(n not in self.slot_of for n in step.node.all_input_nodes):
                raise NotPlannable(f"{step.node.format_node()} reads a value no tensor holds")
        if any(n not in self.slot_of for n in output_node.all_input_nodes):
            raise NotPlannable("an output of the graph is a value no tensor holds")
        workspace = {step_root.record.untyped_storage().data_ptr()
                     for step in self.order if isinstance(step, LaunchStep)
                     for step_root, _, _ in step.fresh if step_root.in_workspace}
        handed = [record.env[step.node] for step in self.order if isinstance(step, PythonStep)]
        handed += [record.env[n] for n in output_node.all_input_nodes]
        for value in _flat(handed):
            if isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() in workspace:
                raise NotPlannable("a tensor the graph hands out shares storage with an intermediate")

    def _slot(self, value=None) -> int:
        self.prefill.append(value)
        return len(self.prefill) - 1

    def _give_slots(self, record: _Record, steps: list, need: set, output_node) -> None:
        for node in record.inputs:
            slot = self.slot_of[node] = self._slot(None if node.op == "placeholder" else record.env[node])
            self.input_count += node.op == "placeholder"
            if isinstance(record.vals[node], Val):
                record.vals[node].slot = slot
                record.vals[node].root.slot = slot
        for step in steps:
            if isinstance(step, PythonStep):
                step.slot = self.slot_of[step.node] = self._slot()
                if step.val is not None:
                    step.val.slot = step.slot
            else:
                for root, val, _ in step.fresh:
                    if val in need:
                        root.escapes = True
                        val.slot = root.slot = self._slot()
        for node, val in record.vals.items():
            if isinstance(val, Val) and val.slot is not None:
                self.slot_of.setdefault(node, val.slot)
        for item in _flat(output_node.args[0]):
            self.output_slots.append(self.slot_of[item] if isinstance(item, torch.fx.Node) else self._slot(item))

    def _give_addresses(self, record: _Record, steps: list) -> None:
        """Index the roots launches read through a tensor (inputs, Python results, escaping
        outputs); give the others workspace offsets; write each launch's sites."""
        workspace_roots = []
        for step in steps:
            if not isinstance(step, LaunchStep):
                continue
            for root, _, _ in step.fresh:
                root.first = step.index
            for _, val in step.sites:
                root = val.root
                root.last = max(root.last, step.index)
                if root.fresh and not root.escapes:
                    if not root.in_workspace:
                        root.in_workspace = True
                        workspace_roots.append(root)
                elif root.address is None:
                    root.address = self.addresses
                    self.addresses += 1
            for root, _, _ in step.fresh:       # an escaping output no launch reads still has one
                if root.escapes and root.address is None:
                    root.address = self.addresses
                    self.addresses += 1
        self.workspace = _assign_offsets(workspace_roots)
        positions = {node: i for i, node in enumerate(n for n in record.inputs if n.op == "placeholder")}
        for node in record.inputs:
            val = record.vals[node]
            if isinstance(val, Val) and val.root.address is not None:
                if node.op == "placeholder":
                    self.input_addresses.append((positions[node], val.root.address))
                else:
                    self.input_addresses.append((-1 - self.slot_of[node], val.root.address))
        for step in steps:
            if isinstance(step, LaunchStep):
                step.compile()
            elif step.makes_root and step.val is not None and step.val.root.address is not None:
                step.address = step.val.root.address

    def _drop_after_last_use(self, steps: list) -> None:
        """Let each tensor go after the last step that reads it (as eager frees intermediates);
        a tensor a later launch reads through its address stays until that launch."""
        keep = set(self.output_slots) | {self.slot_of[n] for n in self.slot_of if n.op in ("placeholder", "get_attr")}
        last: dict = {}
        for step in steps:
            if isinstance(step, PythonStep):
                for node in step.node.all_input_nodes:
                    last[self.slot_of[node]] = step.index
            else:
                for _, val in step.sites:
                    if val.root.slot is not None:
                        last[val.root.slot] = max(last.get(val.root.slot, -1), step.index)
                    if val.slot is not None:
                        last[val.slot] = max(last.get(val.slot, -1), step.index)
        for step in steps:
            if isinstance(step, PythonStep):
                last.setdefault(step.slot, step.index)      # a result nothing reads goes at once
        for slot, index in last.items():
            if slot not in keep:
                steps[index].drop.append(slot)

    # ---- running ---------------------------------------------------------------------------
    def valid(self) -> bool:
        """Whether every launch's kernel is still the device's (tests hide kernels to force
        fallbacks): one list comparison, by identity, of the table's entries now and then."""
        return not self.launches or list(map(self._device.kernels.get, self._names)) == self._choices

    def run(self, inputs: tuple, rt):
        self.runs += 1
        real = self.prefill.copy()
        real[:self.input_count] = inputs
        addresses = array("Q", self.no_addresses)      # (base, byte offset) per addressed root
        for position, index in self.input_addresses:
            _set_address(addresses, index, inputs[position] if position >= 0 else real[-1 - position])
        device_index = self.device_index
        streams = rt.streams
        stream = streams.current(device_index) if streams.any_current else streams.default[device_index]
        allocator = rt.allocators[device_index]
        workspace = allocator.allocate_rounded(self.workspace, stream) if self.workspace else None
        try:
            self._steps(real, addresses, workspace.ptr if workspace is not None else 0, stream, allocator)
        finally:
            if workspace is not None:
                allocator.release(workspace)
        pending = accounting.pending
        pending.extend(self.count_keys)
        if len(pending) > accounting.FOLD_AT:
            accounting.fold()
        if self.output_type is None:
            return real[self.output_slots[0]]
        outputs = [real[slot] for slot in self.output_slots]
        return tuple(outputs) if self.output_type is tuple else outputs

    def _steps(self, real: list, addresses: array, workspace: int, stream, allocator) -> None:
        handle = int(ffi.cast("uintptr_t", stream.handle))
        device_index = self.device_index
        slot_of = self.slot_of
        for step in self.steps:
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
                    if _layout_key(out) != step.val.shape_key:
                        raise GraphReplayError(f"graph node {node.format_node()} returned a tensor of layout "
                                               f"{_layout_key(out)}, recorded as {step.val.shape_key}; the "
                                               "graph runs eagerly from its next call")
                    _set_address(addresses, step.address, out)
            for slot in step.drop:
                real[slot] = None


@dataclass(eq=False)
class LaunchSegment:
    """Consecutive launches, run by one run_launches call: `program` is their words (the
    layout _launch_list.c documents); the escaping outputs are allocated before it."""
    launches: list
    program: bytes = b""
    allocations: tuple = ()
    drop: list = field(default_factory=list)

    def __post_init__(self) -> None:
        words = array("Q")
        for step in self.launches:
            choice = step.program.choice
            words.extend((int(ffi.cast("uintptr_t", choice.launch_fn)), int(ffi.cast("uintptr_t", choice.entry)),
                          step.arena.address, step.count, len(step.patches)))
            for at, index, offset in step.patches:
                words.extend((step.arena.address + at, _WORKSPACE if index < 0 else index, offset & _MASK))
        self.program = words.tobytes()
        self.allocations = tuple(a for step in self.launches for a in step.allocations)
        self.drop = [slot for step in self.launches for slot in step.drop]


def _set_address(addresses: array, index: int, t: torch.Tensor) -> None:
    addresses[2 * index], addresses[2 * index + 1] = _address(t)


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
            if index == _WORKSPACE:
                pair = (workspace, offset)
            else:
                pair = (addresses[2 * index], (addresses[2 * index + 1] + offset) & _MASK)
            BASE_AND_OFFSET.pack_into(ffi.buffer(ffi.cast("char *", site), 16), 0, *pair)
        launch_kernel = ffi.cast(_LAUNCH_TYPE, launch)
        status = launch_kernel(ffi.cast("fl_stream", stream), ffi.cast("const fl_kernel_entry *", entry),
                               ffi.cast("const fl_arg *", args), count)
        if status != abi.SUCCESS:
            return position, status
        position += 1
    return None


_native = compiled.load("fl_runtime.ops._launch_list")
_run_launches = _native.run_launches if _native is not None else _run_launches_in_python


def _segments(steps: list) -> list:
    """Python steps as they are; each run of consecutive launches as one LaunchSegment."""
    out: list = []
    run: list = []
    for step in steps:
        if isinstance(step, LaunchStep):
            run.append(step)
            continue
        if run:
            out.append(LaunchSegment(run))
            run = []
        out.append(step)
    if run:
        out.append(LaunchSegment(run))
    return out


def _failed_launch(step: LaunchStep, status: int) -> None:
    device = step.program.device
    if status == abi.ERROR_NOT_SUPPORTED:
        raise GraphReplayError(f"{step.name} on fl:{device.index}: the vendor declined a launch it took when the "
                               f"graph was recorded ({_declined_reason(device)}); the graph runs eagerly from its "
                               "next call")
    _raise_launch_failure(device, status, step.name)


def _shaped(like, values):
    """Outputs as the graph returns them: a tuple, a list, or one value."""
    if isinstance(like, tuple):
        return tuple(values)
    return list(values) if isinstance(like, list) else values


def _flat(value) -> list:
    return [x for item in value for x in _flat(item)] if isinstance(value, (list, tuple)) else [value]


def _needed(record: _Record, output_node) -> set:
    """The Vals a run needs as tensors: the graph's outputs and what Python steps read,
    and (through views made real) their sources."""
    need: set = set()

    def want(node) -> None:
        val = record.vals.get(node)
        for item in val if isinstance(val, tuple) else (val,):
            if isinstance(item, Val):
                need.add(item)
    for node in output_node.all_input_nodes:
        want(node)
    for step in record.steps:
        if isinstance(step, PythonStep):
            for node in step.node.all_input_nodes:
                want(node)
    for step in reversed(record.steps):
        if isinstance(step, tuple) and record.vals[step[1]] in need:
            want(step[2])
    return need


def _realize_views(record: _Record, need: set) -> list:
    """The steps of a run: launches, Python steps, and the views a tensor is needed for."""
    steps = []
    for step in record.steps:
        if isinstance(step, tuple):
            val = record.vals[step[1]]
            if val in need:
                val.shape_key = _layout_key(record.env[step[1]])
                steps.append(PythonStep(step[1], val, makes_root=False))
        else:
            steps.append(step)
    return steps


def _assign_offsets(roots: list) -> int:
    """Workspace offsets for outputs only launches touch: two share bytes only if their
    lives (first launch to last) do not overlap, as a stream runs its launches in order.
    Largest first, each at the lowest offset free over its life.  Returns the size."""
    placed: list = []
    end = 0
    for root in sorted(roots, key=lambda r: -r.nbytes):
        size = (root.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        busy = sorted((start, stop) for start, stop, first, last in placed
                      if not (last < root.first or root.last < first))
        offset = 0
        for start, stop in busy:
            if offset + size <= start:
                break
            offset = max(offset, stop)
        root.offset = offset
        placed.append((offset, offset + size, root.first, root.last))
        end = max(end, offset + size)
    return end


class LaunchList:
    """A graph of ATen ops, run by replaying its recorded launches (see the module doc).
    Called with the graph's inputs, returns its outputs, as `gm(*inputs)` would."""

    def __init__(self, gm: torch.fx.GraphModule, launcher) -> None:
        self.gm = gm
        self.launcher = launcher
        self.rt = launcher.rt
        self.eager_only = False          # set after a GraphReplayError: the graph runs eagerly
        self.why_eager: dict = {}        # input signature -> why it has no plan (diagnostics)
        self._local = threading.local()  # per thread: input signature -> _Plan or None

    def __call__(self, *inputs):
        rt = self.rt
        if self.eager_only or accounting.HOOKED or rt._cross_stream or _is_autocast_enabled("fl"):
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
            return plan.run(inputs, rt)
        except GraphReplayError:
            self.eager_only = True
            raise

    def _eager(self, inputs: tuple):
        self._local.eager_runs = getattr(self._local, "eager_runs", 0) + 1
        return self.gm(*inputs)

    def plans(self) -> list:
        """This thread's plans (for tests and diagnostics)."""
        return [plan for plan in self._plans().values() if plan is not None]

    def summary(self) -> dict:
        """What this graph did on the calling thread: its plans' steps and replays, the calls
        it ran eagerly and why a signature has no plan (README "Graph path")."""
        plans = self.plans()
        return {"nodes": len(self.gm.graph.nodes),
                "plans": [{"launches": len(plan.launches),
                           "python_steps": sum(isinstance(s, PythonStep) for s in plan.order),
                           "workspace_bytes": plan.workspace, "replays": plan.runs} for plan in plans],
                "eager_runs": getattr(self._local, "eager_runs", 0), "eager_only": self.eager_only,
                "why_no_plan": sorted(set(self.why_eager.values()))}

    def _plans(self) -> dict:
        plans = getattr(self._local, "plans", None)
        if plans is None:
            plans = self._local.plans = {}
        return plans

    def _record(self, key, inputs: tuple):
        record = _Record(self.gm, self.launcher)
        outputs = record.run(list(inputs))
        output_node = next(n for n in reversed(self.gm.graph.nodes) if n.op == "output")
        try:
            if record.mixed_devices:
                raise NotPlannable("its launches are on more than one device")
            if record.changes_metadata:
                raise NotPlannable(f"{record.changes_metadata} changes a tensor's layout in place")
            plan = _Plan(record, output_node)
        except NotPlannable as exc:
            self.why_eager[key] = str(exc)
            plan = None
        for val in record.vals.values():
            for item in val if isinstance(val, tuple) else (val,):
                if isinstance(item, Val):
                    item.root.record = None       # the recorded tensors are not kept
        return outputs, plan


_UNSEEN = object()
