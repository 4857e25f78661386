"""torch.compile(model, backend="fl"): the graph path (docs/users/graph-path.md).

Dynamo captures the user's code as an FX graph; AOTAutograd (PyTorch's own,
`aot_autograd`) traces it into ATen graphs, a forward and a backward for training or
one for inference, with PyTorch's composite ops already decomposed; each graph is
handed to a `LaunchList` (ops/graph/launch_list.py), which records one eager run and then
replays its vendor launches.  No Inductor, no code generation, no C++: a graph runs
exactly the vendor kernels eager would, with the per-op host work done once.

Graphs with symbolic shapes (dynamic=True, or dynamo's automatic dynamic shapes after a
shape changed) run as eager FX code: a plan is fixed to the layouts it recorded.

Registered with dynamo's backend registry right after PyTorch imports it (never
importing it: dynamo costs seconds), as torch_compile.py does for Inductor.
"""
from __future__ import annotations

import weakref

import torch

from fl_runtime.logs import logger
from fl_runtime.ops.boundary import leaves_runtime
from fl_runtime.ops.graph.launch_list import LaunchList
from fl_runtime.runtime import Runtime

BACKEND_NAME = "fl"
_graphs: weakref.WeakSet = weakref.WeakSet()      # the LaunchLists made so far, for graph_summary()


def backend_of(rt: Runtime):
    """The dynamo backend of `rt`: AOTAutograd's graphs, each run by a LaunchList on its launcher.
    A function named fl_backend (dynamo names a backend by its __name__ in its logs)."""
    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list):
        return _compile_graph(rt, gm, example_inputs)

    def fl_backend(gm: torch.fx.GraphModule, example_inputs: list, **options):
        from torch._dynamo.backends.common import aot_autograd
        if options:
            raise TypeError(f"torch.compile(backend='fl') takes no options (got {sorted(options)})")
        return aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph,
                            inference_compiler=compile_graph)(gm, example_inputs)
    return fl_backend


def _compile_graph(rt: Runtime, gm: torch.fx.GraphModule, example_inputs: list):
    """AOTAutograd's compiler: a boxed callable (it takes the list of inputs and empties
    it, so AOTAutograd's references do not keep inputs alive) running `gm`."""
    if _symbolic(example_inputs):
        logger.info("torch_fl: a graph with symbolic shapes runs as eager FX code (the graph path replays "
                    "fixed layouts; docs/users/graph-path.md)")
        runner = gm
    else:
        runner = LaunchList(gm, rt.launcher)
        _graphs.add(runner)

    def run(args: list):
        inputs = tuple(args)
        args.clear()
        return runner(*inputs)
    entry = leaves_runtime(run)     # a replay's error leaves no tensor in the runtime's frames
    entry._boxed_call = True
    return entry


def graph_summary() -> list[dict]:
    """Per graph compiled with backend="fl" and still alive: its nodes, its plans (launches,
    Python steps, workspace bytes, replays on the calling thread), the calls it ran
    eagerly and why (LaunchList.summary)."""
    return [graph.summary() for graph in list(_graphs)]


def _symbolic(example_inputs: list) -> bool:
    for value in example_inputs:
        if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
            return True
        if isinstance(value, torch.Tensor) and any(
                isinstance(n, torch.SymInt) for n in (*value.shape, *value.stride(), value.storage_offset())):
            return True
    return False


def register(rt: Runtime) -> None:
    """Make backend="fl" known to dynamo, running on `rt` (called once, right after its registry
    is imported; a name another package took already is reported by torch_compile.py's guard)."""
    from torch._dynamo.backends.registry import register_backend
    register_backend(backend_of(rt), name=BACKEND_NAME)
