"""Deciding a recorded graph's run: which values are tensors, where the others live (docs/users/graph-path.md).

From a Record (graph_record.py), a `Plan` decides:
- which values a run needs as tensors: the graph's outputs, what Python steps read, and
  the sources of the views those need (made real by a Python step of their own);
- the slots a run keeps its tensors in, and after which step each is let go;
- the roots whose (storage base, byte offset) a run computes: inputs, Python results and
  launch outputs that must be tensors (they "escape");
- workspace offsets for the other launch outputs, intermediates only launches touch: one
  block per run, two sharing bytes only when their lives do not overlap (`_assign_offsets`);
- the launch segments: consecutive launches as one program of words for
  _launch_list.c's run_launches (layout there).
It refuses (`NotPlannable`) a record a run could not follow; launch_list.py then runs the
graph eagerly.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import torch

from fl_runtime.abi import ffi
from fl_runtime.ops.graph.graph_record import LaunchStep, NotPlannable, PythonStep, Record, Val, flat, layout_key

_ALIGN = 256                 # workspace offsets: the alignment vendors get from allocate (fl_abi.h)
WORKSPACE = (1 << 64) - 1    # a patch's index for the workspace (_launch_list.c)
MASK = (1 << 64) - 1         # words are uint64: a negative byte offset wraps, as in C


class Plan:
    """A recorded graph, decided: which values are tensors, where the others live, what each step does."""

    def __init__(self, record: Record, output_node) -> None:
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
        self.written_slots: list = []
        self.runs = 0                             # replays (a plan belongs to one thread: no lock)
        result = output_node.args[0]     # a tuple or list of values, or one value
        self.output_type = type(result) if isinstance(result, (tuple, list)) else None
        self._plan(record, output_node)

    # ---- deciding ------------------------------------------------------------------------
    def _plan(self, record: Record, output_node) -> None:
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
        written = {val.root for step in self.launches for val in step.writes}
        # inputs (and constants) launches write: marked as written by the run's stream when
        # other streams are in use (launch_list.run_plan; docs/users/devices.md)
        self.written_slots = [record.vals[n].slot for n in record.inputs
                              if isinstance(record.vals[n], Val) and record.vals[n].root in written]
        self.order = steps                        # launches and Python steps, in graph order
        self.steps = segments(steps)             # what a run executes
        self._check(record, output_node)

    def _check(self, record: Record, output_node) -> None:
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
        for value in flat(handed):
            if isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() in workspace:
                raise NotPlannable("a tensor the graph hands out shares storage with an intermediate")

    def _slot(self, value=None) -> int:
        self.prefill.append(value)
        return len(self.prefill) - 1

    def _give_slots(self, record: Record, steps: list, need: set, output_node) -> None:
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
                    if step.makes_root:      # its tensor holds the storage launches address
                        step.val.root.slot = step.slot
            else:
                for root, val, _ in step.fresh:
                    if val in need:
                        root.escapes = True
                        val.slot = root.slot = self._slot()
        for node, val in record.vals.items():
            if isinstance(val, Val) and val.slot is not None:
                self.slot_of.setdefault(node, val.slot)
        for item in flat(output_node.args[0]):
            self.output_slots.append(self.slot_of[item] if isinstance(item, torch.fx.Node) else self._slot(item))

    def _give_addresses(self, record: Record, steps: list) -> None:
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

    def valid(self) -> bool:
        """Whether every launch's kernel is still the device's (tests hide kernels to force
        fallbacks): one list comparison, by identity, of the table's entries now and then."""
        return not self.launches or list(map(self._device.kernels.get, self._names)) == self._choices


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
                words.extend((step.arena.address + at, WORKSPACE if index < 0 else index, offset & MASK))
        self.program = words.tobytes()
        self.allocations = tuple(a for step in self.launches for a in step.allocations)
        self.drop = [slot for step in self.launches for slot in step.drop]


def segments(steps: list) -> list:
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


def _needed(record: Record, output_node) -> set:
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


def _realize_views(record: Record, need: set) -> list:
    """The steps of a run: launches, Python steps, and the views a tensor is needed for."""
    steps = []
    for step in record.steps:
        if isinstance(step, tuple):
            val = record.vals[step[1]]
            if val in need:
                val.shape_key = layout_key(record.env[step[1]])
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
