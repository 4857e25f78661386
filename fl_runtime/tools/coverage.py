"""Op coverage check (docs/users/profiling.md): which ATen ops a model uses and where each would run.

`torch_fl.coverage(model, example_inputs)` traces one training step (forward,
a scalar loss, backward) with PyTorch's own tracer, `make_fx`, on fake
tensors: nothing is computed and nothing is copied to a device, so it answers
"will my model run on this chip, and how?" before any data moves.  make_fx
records the ops at the level the fl backend sees them (after autograd and
PyTorch's implicit decompositions), and each is classified per device by the
same fallback chain that runs ops: native (vendor kernel, a view, or an op the
runtime implements), generic (decomposed into native ops), cpu, or
unsupported.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten, tree_map

from fl_runtime.errors import DeviceNotFoundError
from fl_runtime.integration import process
from fl_runtime.ops import accounting
from fl_runtime.ops.fallback.chain import UNSUPPORTED

STATUSES = (accounting.NATIVE, accounting.GENERIC, accounting.CPU, UNSUPPORTED)
_META = torch.device("meta")


@dataclass
class OpCoverage:
    op: str                                   # 'aten::mm'
    calls: int                                # times the traced step calls it
    status: dict[str, str] = field(default_factory=dict)   # 'fl:0' -> native / generic / cpu / unsupported


@dataclass
class CoverageReport:
    devices: list[str]
    ops: list[OpCoverage]
    backward: bool

    def totals(self) -> dict[str, dict[str, int]]:
        """{device: {status: number of distinct ops}}."""
        return {dev: dict(Counter(op.status[dev] for op in self.ops)) for dev in self.devices}

    def as_dict(self) -> dict[str, Any]:
        return {"devices": self.devices, "backward": self.backward,
                "ops": [{"op": o.op, "calls": o.calls, "status": o.status} for o in self.ops],
                "totals": self.totals()}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def to_text(self) -> str:
        width = max([len(o.op) for o in self.ops] + [10])
        lines = [f"{'op':<{width}} {'calls':>5}  " + "  ".join(f"{d:<11}" for d in self.devices)]
        for o in self.ops:
            lines.append(f"{o.op:<{width}} {o.calls:>5}  " + "  ".join(f"{o.status[d]:<11}" for d in self.devices))
        scope = "forward + backward" if self.backward else "forward"
        lines.append(f"{len(self.ops)} distinct ATen ops ({scope})")
        for dev, counts in self.totals().items():
            lines.append(f"{dev}: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUSES))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def _as_tuple(example_inputs) -> tuple:
    return tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)


def trace_step(model: torch.nn.Module, example_inputs, backward: bool = True) -> torch.fx.GraphModule:
    """make_fx graph of forward (+ sum-of-outputs loss and backward) on fake tensors."""
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    inputs = _as_tuple(example_inputs)

    def step(params, buffers, inputs):
        out = torch.func.functional_call(model, {**params, **buffers}, inputs)
        if not backward:
            return out
        leaves = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if not leaves:
            raise ValueError("coverage: the model's outputs hold no floating-point tensor to differentiate; "
                             "pass backward=False to trace the forward pass only")
        loss = sum(t.sum() for t in leaves)
        wanted = [p for p in params.values() if p.requires_grad]
        return torch.autograd.grad(loss, wanted, allow_unused=True) if wanted else loss
    return make_fx(step, tracing_mode="fake")(params, buffers, inputs)


def _meta_value(value):
    """A traced node's value (a fake tensor) as a meta tensor of the same layout."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=_META)
    return value


def _call_args(node: torch.fx.Node) -> tuple[tuple, dict]:
    def resolve(arg):
        return _meta_value(arg.meta.get("val")) if isinstance(arg, torch.fx.Node) else arg
    return tree_map(resolve, (node.args, node.kwargs), is_leaf=lambda a: isinstance(a, torch.fx.Node))


def coverage(model: torch.nn.Module, example_inputs, devices: Sequence[int] | None = None,
             backward: bool = True) -> CoverageReport:
    """Trace `model(*example_inputs)` (and its backward) on fake tensors and say, for
    each ATen op and each fl device, native / generic / cpu / unsupported."""
    rt = process.start()
    indices = list(range(len(rt.devices))) if devices is None else [rt.device(i).index for i in devices]
    if not indices:
        raise DeviceNotFoundError(f"coverage: no fl device to check against ({rt.empty_reason()})")
    graph = trace_step(model, example_inputs, backward)
    calls: Counter = Counter()
    example: dict[str, tuple] = {}
    for node in graph.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            name = node.target.name()
            calls[name] += 1
            example.setdefault(name, (node.target, *_call_args(node)))
    chain = rt.launcher.chain
    ops = []
    for name in sorted(calls):
        op, args, kwargs = example[name]
        status = {f"fl:{i}": chain.classify(op, args, kwargs, i) for i in indices}
        ops.append(OpCoverage(name, calls[name], status))
    return CoverageReport([f"fl:{i}" for i in indices], ops, backward)
