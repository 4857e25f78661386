"""torch.compile on fl: dynamo's device interface, Inductor's backend for fl, and the
graph path's backend="fl" (docs/users/compile.md and docs/users/graph-path.md).

Each registers lazily, right after PyTorch imports the module it plugs into
(`torch._dynamo.device_interface`, `torch._inductor.compile_fx`, dynamo's backend
registry and trace rules), because importing dynamo or Inductor costs seconds and most
programs never compile.  The classes live in `dynamo_interface.py`,
`inductor_backend.py` and `graph_backend.py`, which import those PyTorch modules at
their top and are imported only from here.
"""
from __future__ import annotations

import functools

from fl_runtime.integration.lightning.hook import call_after_import
from fl_runtime.logs import logger
from fl_runtime.runtime import Runtime

DYNAMO_MODULE = "torch._dynamo.device_interface"
REGISTRY_MODULE = "torch._dynamo.backends.registry"
TRACE_RULES_MODULE = "torch._dynamo.trace_rules"
# Dynamo compiles every Python frame that starts while a compiled function's code runs
# eagerly (around a graph break, or in nn.Module's hooks under model.compile()), and fl's
# PyTorch kernels are Python frames: left to it, it traced the runtime itself (the
# allocator, the marshaler), broke graphs there and ran them slower.  Its trace rules skip
# these packages as they skip PyTorch's own C-backed code.
RUNTIME_PACKAGES = ("fl_runtime", "torch_fl")
INDUCTOR_MODULE = "torch._inductor.compile_fx"


def install(rt: Runtime) -> None:
    """Register with dynamo and Inductor when (if ever) they are imported in this process
    (backend="fl" runs its graphs on `rt`)."""
    call_after_import(DYNAMO_MODULE, _guarded(_register_dynamo, "dynamo's device interface"))
    call_after_import(INDUCTOR_MODULE, _guarded(_register_inductor, "Inductor"))
    call_after_import(REGISTRY_MODULE, _guarded(functools.partial(_register_graph_backend, rt),
                                                "dynamo's backend registry"))
    call_after_import(TRACE_RULES_MODULE, _guarded(_skip_runtime_frames, "dynamo's trace rules"))


def _register_dynamo() -> None:
    from fl_runtime.integration import dynamo_interface
    dynamo_interface.register()


def _register_inductor() -> None:
    from fl_runtime.integration import inductor_backend
    inductor_backend.register()


def _skip_runtime_frames() -> None:
    from torch._dynamo import trace_rules
    for package in RUNTIME_PACKAGES:
        trace_rules.add(package)


def _register_graph_backend(rt: Runtime) -> None:
    from fl_runtime.integration import graph_backend
    graph_backend.register(rt)


def _guarded(register, what: str):
    """The user's import of PyTorch's module must succeed even if registering fails."""
    def run() -> None:
        try:
            register()
        except Exception as exc:  # noqa: BLE001
            logger.warning("torch_fl: could not register fl with %s (%s: %s); torch.compile on fl "
                           "will fail; backend='aot_eager' still works", what, type(exc).__name__, exc)
    return run
