"""torch.distributed on fl tensors: the `fl` process-group backend (README, "Distributed training").

`register()` runs when the runtime is installed into PyTorch (integration.backend),
so `init_process_group("gloo")`, `init_process_group()`, `"cpu:gloo,fl:fl"`,
`new_group` and torchrun-launched scripts all accept fl tensors.
"""
from fl_runtime.integration.distributed.checkpoint import (CheckpointError, Resumed, latest_checkpoint,
                                                            load_checkpoint, save_checkpoint)
from fl_runtime.integration.distributed.mixed_speed import ThroughputSplit, split_by_throughput
from fl_runtime.integration.distributed.process_group import BACKEND_NAME, FLProcessGroup
from fl_runtime.integration.distributed.registration import register
from fl_runtime.integration.distributed.transport import HostGlooTransport, Transport
from fl_runtime.integration.distributed.work import CollectiveError, FLWork

__all__ = ["BACKEND_NAME", "CheckpointError", "CollectiveError", "FLProcessGroup", "FLWork", "HostGlooTransport",
           "Resumed", "ThroughputSplit", "Transport", "latest_checkpoint", "load_checkpoint", "register",
           "save_checkpoint", "split_by_throughput"]
