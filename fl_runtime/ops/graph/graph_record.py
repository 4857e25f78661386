"""Recording a graph's eager run: what each node of an ATen graph did (docs/users/graph-path.md).

The graph path's first call of a graph on a thread runs it eagerly, through PyTorch, node
by node, under a TorchDispatchMode that sees the ATen calls each node makes as its
PrivateUse1 kernel receives them.  `Record` keeps, for each node:
- a **launch** (`LaunchStep`): the node made one call, and that call ran a per-signature
  program (fast_path.py) on a vendor kernel.  The step gets its own fl_arg arena, filled
  once from the recorded values (marshal.fill), and the arena offsets of its tensor
  addresses (`sites`), each tied to the graph value (`Val`) it holds;
- a **view** whose result shares its input's storage: a `Val` only, its root's plus a
  constant byte distance; no step;
- a **Python step** (`PythonStep`): anything else, run through PyTorch at every call.

graph_plan.py decides from a Record where each value lives during a run; launch_list.py runs it.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
from torch.fx.node import map_arg
from torch.utils._python_dispatch import TorchDispatchMode

from fl_runtime.abi.convention import Arena, ArenaFull
from fl_runtime.ops.eager import fast_path
from fl_runtime.ops.eager import marshal as _marshal

# Ops that return a view without saying so in their schema (no alias annotation): their
# results share storage with the input, so a plan treats them as the views they are.
_UNANNOTATED_VIEWS = frozenset({torch.ops.aten._unsafe_view.default})


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
    writes: list = field(default_factory=list)   # the Vals of its in-place and out= outputs
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


class Calls(TorchDispatchMode):
    """The ATen calls a node makes, as its PrivateUse1 kernel receives them."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.seen.append((func, args, kwargs))
        return func(*args, **kwargs)


def layout_key(t) -> tuple | None:
    return fast_path.value_key(t) if isinstance(t, torch.Tensor) else None


def kernel_name(op) -> str | None:
    """The kernel-table name of an OpOverload ('add.Tensor', 'mm'), None for anything else."""
    schema = getattr(op, "_schema", None)
    if schema is None or not schema.name.startswith("aten::"):
        return None
    base = schema.name[len("aten::"):]
    return f"{base}.{schema.overload_name}" if schema.overload_name else base


class Record:
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
                return shaped(node.args[0], outputs)
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
        calls = Calls()
        with calls:
            out = node.target(*args, **kwargs)
        self.env[node] = out
        step = self._launch(node, calls.seen, out)
        if step is not None:
            self.steps.append(step)
        elif not self._view(node, out):
            val = Val(Root(out)) if isinstance(out, torch.Tensor) else None
            if val is not None:
                val.shape_key = layout_key(out)
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
            if kind == _marshal.SITE_TENSOR:
                val = by_id.get(id(values[i]))
            elif kind == _marshal.SITE_LIST_TENSOR:
                val = by_id.get(id(values[i][j]))
            elif kind == _marshal.SITE_OUTPUT:
                val = out_vals[i]
            elif kind == _marshal.SITE_FLOAT:
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
                if made[-1] is not None:
                    step.writes.append(made[-1])
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
            _marshal.fill(arena, plan, values, outputs, None, sites)
            return arena, sites
        except ArenaFull:
            size *= 4
        except _marshal.MarshalError:
            return None


def shaped(like, values):
    """Outputs as the graph returns them: a tuple, a list, or one value."""
    if isinstance(like, tuple):
        return tuple(values)
    return list(values) if isinstance(like, list) else values


def flat(value) -> list:
    return [x for item in value for x in flat(item)] if isinstance(value, (list, tuple)) else [value]
