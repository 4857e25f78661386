"""torch.distributed on fl tensors: the `fl` process-group backend (docs/users/distributed.md).

`register()` runs when the runtime is installed into PyTorch (integration.backend),
so `init_process_group("gloo")`, `init_process_group()`, `"cpu:gloo,fl:fl"`,
`"cpu:gloo,fl:gloo"`, `new_group` and torchrun-launched scripts all accept fl tensors.
"""
import importlib

from fl_runtime.integration.distributed.registration import BACKEND_NAME, register

# The rest at first use (PEP 562): every start-up registers the backend, few processes
# build a group or save a checkpoint, and these modules were ~4 ms of start-up.
_LAZY = {"CheckpointError": "checkpoint", "Resumed": "checkpoint", "latest_checkpoint": "checkpoint",
         "load_checkpoint": "checkpoint", "save_checkpoint": "checkpoint", "ThroughputSplit": "mixed_speed",
         "split_by_throughput": "mixed_speed", "FLProcessGroup": "process_group",
         "HostGlooTransport": "transport", "Transport": "transport", "CollectiveError": "work", "FLWork": "work"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


__all__ = ["BACKEND_NAME", "CheckpointError", "CollectiveError", "FLProcessGroup", "FLWork", "HostGlooTransport",
           "Resumed", "ThroughputSplit", "Transport", "latest_checkpoint", "load_checkpoint", "register",
           "save_checkpoint", "split_by_throughput"]
