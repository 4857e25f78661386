"""Plug the runtime into PyTorch: PrivateUse1 renamed `fl`, from Python only.

Registers the device module (`torch.fl`), hooks and device guard through
PyTorch's Python-backend route, the runtime-owned kernels (allocation, copies,
storage metadata), one kernel per vendor op, a fast path for common views,
and the boxed fallback for everything else.
"""
from __future__ import annotations

import functools

import torch

from fl_runtime import bridge
from fl_runtime.bridge import off as bridge_off
from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.devices.streams import register_record_stream
from fl_runtime.integration import (accelerator, autocast, distributed, fork, hf_trainer, ipc, lightning,
                                    parameters, serialization, storages, torch_compile)
from fl_runtime.integration.device_module import make_device_module
from fl_runtime.logs import logger
from fl_runtime.ops.owned import attention, copies, foreach, rnn
from fl_runtime.ops.owned import factories as tensors
from fl_runtime.ops.boundary import GuardedLibrary
from fl_runtime.ops.fallback import cpp_generic
from fl_runtime.ops.fallback.cpu import make_boxed_fallback
from fl_runtime.ops.owned.rng import register_seeded_dropout

BACKEND_NAME = DEVICE_TYPE
# Ops the runtime implements itself (they call vendor kernels for their device part).
RUNTIME_OWNED = {"copy_", "empty.memory_format", "empty_strided", "_local_scalar_dense", "resize_",
                 "record_stream", "native_dropout", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell",
                 *attention.RUNTIME_OWNED, *foreach.RUNTIME_OWNED}
_FAST_VIEWS = ("view", "as_strided", "_reshape_alias", "unfold", "alias")
_CPU_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_libraries: list = []     # registrations live as long as these objects


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def __init__(self, rt) -> None:
        super().__init__()
        self._rt = rt

    def is_available(self) -> bool:
        return bool(self._rt.devices)

    def has_primary_context(self, dev_id) -> bool:
        return 0 <= dev_id < len(self._rt.devices)

    def is_built(self) -> bool:
        return True


class _DeviceGuard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


def install(rt) -> None:
    """Make `fl` a PyTorch device backed by `rt` (once per process)."""
    if _libraries:
        return
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", BACKEND_NAME):
        raise RuntimeError(f"PyTorch's PrivateUse1 slot is already taken by '{current}'; "
                           "Torch-FL cannot share a process with that backend")
    # The steps of torch.utils.backend_registration._setup_privateuseone_for_python_backend,
    # minus the rename when the slot already carries our name.
    if current != BACKEND_NAME:
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    native = bridge.load()        # None: the Python route (bridge.status() says why)
    if native is not None:        # first: the runtime's thread state and RNG move onto it
        bridge.install(rt, native)
    else:
        bridge_off.install(rt)    # our errors for the hooks only the bridge serves, and one notice
    # for_storage: UntypedStorage.is_fl / .fl() and the TypedStorage ones (storages.py
    # then routes .fl() and construction through our allocator).
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True,
                                                         unsupported_dtype=storages.unsupported_dtypes())
    fl_module = make_device_module(rt)
    torch._register_device_module(BACKEND_NAME, fl_module)
    serialization.install(rt)     # torch.load / storage moves through our allocator
    parameters.install()          # Module.to keeps Parameter objects (tied weights, optimizers)
    storages.install(rt, resizable=native is not None)   # UntypedStorage(n, device="fl") through our allocator
    ipc.install()                 # fl tensors sent to another process: a clear error, never a hang
    fork.register(rt)             # children forked from now on must not use fl
    if native is None:
        torch._C._acc.register_python_privateuseone_hook(_Hooks(rt))
        torch._C._acc.register_python_privateuseone_device_guard(_DeviceGuard())
        accelerator.install(rt, fl_module)   # torch.accelerator.* for fl (after the hooks make fl current)
    aten = torch.library.Library("aten", "IMPL")
    # Every Python kernel PyTorch calls clears the runtime's frames from what it raises
    # (ops.boundary); the launcher's do it inline.
    owned = GuardedLibrary(aten)
    tensors.register(owned, rt, resizable_storage=native is not None)
    copies.register(owned, rt, pinned_memory=native is not None,
                    bridge_off=bridge_off.reason_and_fix(bridge.status().detail))
    register_record_stream(owned, rt)
    register_seeded_dropout(owned, rt)
    rnn.register(owned)             # the fused LSTM/GRU cells PyTorch picks for non-CPU devices
    attention.register(owned, rt)   # a plugin's fused attention behind scaled_dot_product_attention
    foreach.register(owned, rt)     # out-of-place foreach ops (optimizers) on a plugin's .out kernel
    for name in _FAST_VIEWS:
        if not rt.launcher.register_view(name):       # the bridge's is C++: no Python on a view
            aten.impl(name, _redispatch_view(name), "PrivateUse1")
    unknown = rt.launcher.register(aten, rt.op_names, skip=RUNTIME_OWNED | set(_FAST_VIEWS))
    if unknown:
        logger.warning("plugins offer kernels for ops PyTorch does not know (ignored): %s", unknown)
    catch_all = torch.library.Library("_", "IMPL")
    boxed_fallback = make_boxed_fallback(rt.launcher.chain, rt.current_device)
    GuardedLibrary(catch_all).fallback(boxed_fallback, "PrivateUse1")
    cpp_generic.register(rt, boxed_fallback)   # index_copy.out, arange.start_out: the chain's decomposition in C++
    _libraries.extend([aten, catch_all])
    autocast.register()     # the cast policy of torch.autocast("fl")
    distributed.register(rt)  # the `fl` torch.distributed backend (docs/users/distributed.md)
    lightning.install()     # accelerator="fl" once Lightning is imported (never imports it)
    hf_trainer.install()    # the HF Trainer follows accelerate onto fl (docs/users/do-no-harm.md)
    torch_compile.install(rt)  # torch.compile: dynamo's device interface, Inductor's fl backend (lazily)
    if native is None:
        # PyTorch's Python device guard reports one device, so the autograd engine
        # has a worker queue for fl:0 only and asserts on backward over fl:1.
        # Running backward on the calling thread avoids those queues.  The switch
        # is per thread: threads other than the importing one must call
        # torch.autograd.set_multithreading_enabled(False) themselves
        # (docs/users/limits.md "Autograd and threads").
        # The bridge's guard counts every device, and the engine's queues work.
        torch._C._set_multithreading_enabled(False)


def _redispatch_view(name: str):
    """The PrivateUse1 kernel of a metadata-only view: the CPU kernel, which reads no data.
    A partial of the operator handle's redispatch, not a Python function: every view of
    every model (transpose, unsqueeze, expand ... end in as_strided) calls it, and the
    Python frame cost ~0.8 us a view (docs/benchmarks/index.md "Host cost per op")."""
    return functools.partial(getattr(torch.ops.aten, name).default._handle.redispatch_boxed, _CPU_KEYSET)
