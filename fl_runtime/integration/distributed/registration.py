"""Register the `fl` process-group backend with torch.distributed, and route fl tensors to it.

What PyTorch 2.13 offers a Python backend (torch/distributed/distributed_c10d.py):
`Backend.register_backend(name, creator, extended_api, devices)`.  With
`devices=["fl"]` it also sets `Backend.default_device_backend_map["fl"] = "fl"`,
so `init_process_group()` with no backend (which asks for the current
accelerator, fl) and `"cpu:gloo,fl:fl"` reach us without more.

`init_process_group("gloo")` does not read that map: a bare backend name is
mapped to every device in `Backend.backend_capability[name]`, all to Gloo,
which then refuses fl tensors.  And since a Python backend must be a whole
`ProcessGroup` (see process_group.py), a Gloo backend for CPU and ours for fl
cannot both sit in one group.  So `BackendConfig` is wrapped: for a bare
"gloo" it maps fl to us and puts that entry first, and our group (which
serves CPU tensors through Gloo itself) becomes the group.  A
"device:backend" string that names Gloo for fl ("cpu:gloo,fl:gloo", as
PyTorch's docs write "cpu:gloo,cuda:nccl") asks for Gloo to carry fl
tensors, which is what our group's host-staged Gloo does: fl goes to us the
same way.  Other strings are left as written, so "cpu:gloo" (no fl entry)
still builds PyTorch's own Gloo group.
"""
from __future__ import annotations

import functools
import threading

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.logs import logger
from fl_runtime.runtime import Runtime

BACKEND_NAME = DEVICE_TYPE       # the backend for fl tensors is named as their device type

_lock = threading.Lock()
_registered = False
#: Bare backend names whose groups get fl tensors routed to the fl backend.
ROUTED_BACKENDS = ("gloo",)


def register(rt: Runtime) -> None:
    """Make "fl" a torch.distributed backend whose groups run on `rt` (idempotent, thread-safe)."""
    global _registered
    with _lock:
        if _registered or not dist.is_available():
            return
        dist.Backend.register_backend(BACKEND_NAME, functools.partial(create_process_group, rt), extended_api=True,
                                      devices=[BACKEND_NAME, "cpu"])
        _route_bare_backends()
        _registered = True


def create_process_group(rt: Runtime, options, backend_options=None):
    """The creator PyTorch calls with its `_DistributedBackendOptions` (extended_api=True), `rt`
    bound at registration.  The group's modules are imported here, at the first group: most
    processes build none."""
    from fl_runtime.integration.distributed.process_group import FLProcessGroup
    from fl_runtime.integration.distributed.transport import default_transport
    return FLProcessGroup(options.store, options.group_rank, options.group_size, options.timeout,
                          default_transport(), group_name=str(options.group_id), runtime=rt)


def _route_bare_backends() -> None:
    original = c10d.BackendConfig.__init__
    if getattr(original, "_torch_fl_routed", False):
        return

    @functools.wraps(original)
    def __init__(self, backend) -> None:
        original(self, backend)
        if _routes_fl(str(backend), self.device_backend_map.get(BACKEND_NAME)):
            # First, so that our group is built before any other (PyTorch keeps the first
            # ProcessGroup-subclass backend as the whole group and stops there).
            rest = {device: b for device, b in self.device_backend_map.items() if device != BACKEND_NAME}
            self.device_backend_map = {BACKEND_NAME: dist.Backend(BACKEND_NAME), **rest}
            logger.debug("torch.distributed backend %r: fl tensors go to the fl backend", backend)
    __init__._torch_fl_routed = True
    c10d.BackendConfig.__init__ = __init__


def _routes_fl(backend: str, fl_backend: str | None) -> bool:
    """Whether fl tensors go to the fl backend: a bare routed name ("gloo"), which maps no backend
    to fl, or an explicit "fl:gloo" entry."""
    if fl_backend is None:
        return backend.lower() in ROUTED_BACKENDS
    return str(fl_backend).lower() in ROUTED_BACKENDS
