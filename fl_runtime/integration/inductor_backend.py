"""Inductor's backend for fl: every op of an fl graph an ATen call (docs/users/compile.md).

Inductor generates kernels in Triton (GPUs) or C++ (CPUs); a vendor chip would
need code generation in its own language, and the ABI (fl_abi.h) has no entry
to compile and load a kernel.  What Inductor can do for any device is lower each
node of its graph to an "extern" call of the ATen op: PyTorch's own
`fallback_by_default` mode (the one Inductor's lite mode uses, for "guaranteed
numeric correctness").  Those calls dispatch like eager ops, so on fl they run
the vendor kernels (or the fallback chain).  torch.compile on fl then keeps
dynamo's graph capture, AOTAutograd's joint graph and Inductor's graph passes and
memory planning, and runs the ops of the graph Inductor's decompositions leave
(eager's, up to summation order); it fuses nothing.

`fallback_by_default` is a global Inductor setting read while Inductor lowers a
graph, and Inductor offers no per-device switch.  So the custom pass Inductor
runs on graphs holding fl tensors (right before lowering them) turns it on, and
fl's wrapper code generator (created right after lowering) turns it back off:
CPU and CUDA graphs compiled in the same process keep fusing.  Inductor's
settings are context variables, so this holds per thread.  If lowering an fl graph
raises, the setting stays on in that thread (later CPU graphs there are then
correct but unfused) until the next fl graph's wrapper or `restore_fusion()`
turns it off.

Imported only once `torch._inductor.compile_fx` has been (torch_compile.py).
"""
from __future__ import annotations

import uuid
from contextvars import ContextVar

from torch._inductor import config
from torch._inductor.codegen.common import (DeviceOpOverrides, register_backend_for_device,
                                            register_device_op_overrides)
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.custom_graph_pass import CustomGraphModulePass
from torch._inductor.scheduler import BaseScheduling

from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.errors import FLCompileError

# Did our pass turn fallback_by_default on (and must turn it off)?  A context variable,
# like Inductor's settings, so that each thread restores only what it changed.
_turned_on: ContextVar[bool] = ContextVar("torch_fl_inductor_turned_on", default=False)


def _every_op_as_aten_call() -> None:
    if not config.fallback_by_default:
        config.fallback_by_default = True
        _turned_on.set(True)


def restore_fusion() -> None:
    """Give Inductor back (in this thread) the fallback_by_default value it had before an fl graph."""
    if _turned_on.get():
        config.fallback_by_default = False
        _turned_on.set(False)


# Did our pass set Inductor's cudagraph_policy (reduce-overhead: reduce_overhead.py)?
_policy_set: ContextVar[bool] = ContextVar("torch_fl_inductor_policy_set", default=False)


def _replay_graphs_if_asked() -> None:
    """mode="reduce-overhead" on an fl graph: fl's graph policy replaces cudagraph trees
    (reduce_overhead.py) for this compile; its wrap_output gives the setting back."""
    if config.triton.cudagraphs and config.cudagraph_policy is None:
        from fl_runtime.integration.reduce_overhead import FLGraphPolicy
        config.cudagraph_policy = FLGraphPolicy(restore_graph_policy)
        _policy_set.set(True)


def restore_graph_policy() -> None:
    if _policy_set.get():
        config.cudagraph_policy = None
        _policy_set.set(False)


class EveryOpAsATenCall(CustomGraphModulePass):
    """Inductor's custom post-grad pass for fl graphs: the graph is left as it is;
    its lowering makes every node an ATen call (module docstring), and under
    reduce-overhead the compiled graph is replayed (reduce_overhead.py)."""

    def __call__(self, gm) -> None:
        _every_op_as_aten_call()
        _replay_graphs_if_asked()

    def uuid(self) -> str:
        if config.triton.cudagraphs:
            # reduce-overhead: a graph loaded from Inductor's caches would skip this pass and
            # with it the policy that replays it, so these compiles never hit the caches
            return f"torch_fl.inductor.every_op_as_aten_call.v1.uncached.{uuid.uuid4().hex}"
        return "torch_fl.inductor.every_op_as_aten_call.v1"


class FLWrapperCodegen(PythonWrapperCodegen):
    """Inductor's Python wrapper code, unchanged; creating it ends an fl graph's lowering."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        restore_fusion()
        if is_subgraph:
            return PythonWrapperCodegen.create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures)
        return FLWrapperCodegen()


class FLScheduling(BaseScheduling):
    """A scheduling with nothing to generate: an fl graph holds extern ATen calls only,
    which Inductor's wrapper emits itself.  A node reaching codegen here means Inductor
    produced a kernel of its own for fl, which nothing can run."""

    def get_backend_features(self, device):
        return set()

    def can_fuse_vertical(self, node1, node2) -> bool:
        return False

    def can_fuse_horizontal(self, node1, node2) -> bool:
        return False

    def group_fn(self, sizes):
        return tuple(tuple(s) for s in sizes)

    def codegen_node(self, node) -> None:
        restore_fusion()
        raise FLCompileError(
            f"Inductor generated a kernel for fl ({node.get_name()}: {node.node}), but fl runs every op "
            "of a compiled graph as an ATen call (docs/users/compile.md); please report it, and use "
            "torch.compile(backend='aot_eager') meanwhile")

    def codegen_template(self, template_node, epilogue_nodes, prologue_nodes=None, *args, **kwargs) -> None:
        self.codegen_node(template_node)

    def codegen_sync(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def ready_to_flush(self) -> bool:
        return False

    def benchmark_fused_nodes(self, nodes, *args, **kwargs):
        raise FLCompileError("Inductor benchmarks no fused fl kernels: fl graphs hold ATen calls only")


class FLDeviceOpOverrides(DeviceOpOverrides):
    """The device calls Inductor writes into wrapper code for fl."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"def {name}(_):\n    return 0\n"

    def set_device(self, device_idx: int) -> str:
        return f"torch.fl.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.fl.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.fl.device({device_idx})"


def register() -> None:
    register_device_op_overrides(DEVICE_TYPE, FLDeviceOpOverrides())
    register_backend_for_device(DEVICE_TYPE, FLScheduling, FLWrapperCodegen,
                                device_custom_pass=EveryOpAsATenCall())
