"""Refuse, at import, a PyTorch outside the window this release was tested with.

The window lives once, in fl_runtime/version.py (TORCH_WINDOW); pyproject.toml's
dependency on torch repeats only its lower bound (tests/platforms/test_torch_version.py checks
that they agree), so that pip never downgrades a newer torch to satisfy Torch-FL.
"""
from __future__ import annotations

import os
import re

import torch

from fl_runtime.errors import TorchVersionError
from fl_runtime.logs import logger
from fl_runtime.version import TORCH_WINDOW, __version__

ALLOW_UNTESTED_ENV = "TORCH_FL_ALLOW_UNTESTED_TORCH"


def supported_torch_range() -> str:
    """The torch versions this build of Torch-FL is tested with, e.g. '>=2.13,<2.16'."""
    return TORCH_WINDOW


# A clause that compares with a plain release ('>=2.13', '<2.15'): decided without packaging,
# whose specifier module cost ~3 ms of every start-up.  Anything else (~=, ===, wildcards,
# pre-releases) is packaging's.
_PLAIN_CLAUSE = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*(\d+(?:\.\d+)*)\s*")
_PLAIN_RELEASE = re.compile(r"\d+(?:\.\d+)*")
_COMPARE = {"<": tuple.__lt__, "<=": tuple.__le__, ">": tuple.__gt__, ">=": tuple.__ge__,
            "==": tuple.__eq__, "!=": tuple.__ne__}


def admits(spec: str, version: str) -> bool:
    """Whether specifier `spec` admits `version`, pre-releases included, as packaging's
    SpecifierSet.contains(version, prereleases=True) answers.  Plain releases against plain
    clauses are release tuples compared zero-padded (PEP 440's rule for them)."""
    clauses = [_PLAIN_CLAUSE.fullmatch(c) for c in spec.split(",")] if spec else []
    if _PLAIN_RELEASE.fullmatch(version) and all(clauses):
        found = _release(version)
        return all(_COMPARE[c.group(1)](*_padded(found, _release(c.group(2)))) for c in clauses)
    from packaging.specifiers import SpecifierSet
    return SpecifierSet(spec).contains(version, prereleases=True)


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def _lower_bound(spec: str) -> str:
    return next(c.split(">=", 1)[1] for c in spec.split(",") if c.startswith(">="))


def check_torch_version(version: str | None = None) -> None:
    """Raise TorchVersionError naming both versions when torch is outside the window; a torch
    newer than the window is let through (and logged) under TORCH_FL_ALLOW_UNTESTED_TORCH=1."""
    found = (version or torch.__version__).split("+")[0]
    spec = supported_torch_range()
    if admits(spec, found):
        return
    if not admits(f">={_lower_bound(spec)}", found):
        raise TorchVersionError(
            f"Torch-FL {__version__} supports torch{spec}, but torch {found} is installed, which is older: "
            f"install a supported PyTorch (pip install 'torch{spec}')")
    if os.environ.get(ALLOW_UNTESTED_ENV) == "1":
        logger.warning("torch %s is newer than the PyTorch minors Torch-FL %s was tested with (torch%s); "
                       "running untested because %s=1", found, __version__, spec, ALLOW_UNTESTED_ENV)
        return
    raise TorchVersionError(
        f"Torch-FL {__version__} supports torch{spec}, but torch {found} is installed, which is newer than "
        f"this release was tested with. Upgrade Torch-FL (pip install -U torch-fl): each PyTorch minor is "
        f"admitted by the first Torch-FL release after it passes the admission checklist (docs/contributors/"
        f"private-pytorch-names.md). Or install a supported PyTorch (pip install 'torch{spec}'). "
        f"To run untested at your own risk, set {ALLOW_UNTESTED_ENV}=1 (logged).")


# ---- what the runtime takes from PyTorch beyond its public API ------------------------
# One line per private entry point fl_runtime uses, with why; how a new minor is admitted:
# docs/contributors/private-pytorch-names.md "Admitting a new minor".  tests/platforms/test_torch_version.py checks
# that every name here exists in the running PyTorch and that the runtime uses no private
# name missing from this table, under each supported minor in CI.
#
# Differences between the supported minors: none so far.  2.13, 2.14 and 2.15 behave the
# same for every path below (the runtime's tests pass unchanged under each, with one plugin
# binary; every name below exists in all three).  When a minor differs, the branch goes here, as a function keyed on
# TORCH_MINOR, with the reason, and callers use the function.
TORCH_MINOR: tuple[int, int] = tuple(int(n) for n in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())

PRIVATE_APIS: dict[str, str] = {
    "torch._C._acc.PrivateUse1Hooks": "the Python-backend hooks (is_available, has_primary_context)",
    "torch._C._acc.DeviceGuard": "the Python-backend device guard (reports one device: docs/users/limits.md)",
    "torch._C._acc.register_python_privateuseone_hook": "installs the hooks",
    "torch._C._acc.register_python_privateuseone_device_guard": "installs the device guard",
    "torch._C._accelerator_getAccelerator": "whether fl is the current accelerator (integration/accelerator)",
    "torch._C._accelerator_getDeviceIndex": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_setDeviceIndex": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_exchangeDevice": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_maybeExchangeDevice": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_getStream": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_setStream": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_synchronizeDevice": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_isAllocatorInitialized": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_emptyCache": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_emptyHostCache": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_getDeviceStats": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_resetAccumulatedStats": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_resetPeakStats": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_getMemoryInfo": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._accelerator_getDeviceCapability": "torch.accelerator, routed to torch.fl without the bridge",
    "torch._C._GLIBCXX_USE_CXX11_ABI": "the C++ ABI flag the native bridge is compiled with (bridge/build.py)",
    "torch._C._get_privateuse1_backend_name": "refuses to share the slot with another backend",
    "torch._C._autograd.DeviceType.PrivateUse1": "the device type of torch.Stream / record_stream",
    "torch._C._set_multithreading_enabled": "backward on the calling thread (one device-guard queue)",
    "torch._C._from_dlpack": "wraps vendor memory as a tensor (kDLExtDev = PrivateUse1)",
    "torch._C._dispatch_has_kernel_for_dispatch_key": "the fallback chain: which ops run natively",
    "torch._C._dispatch_find_schema_or_throw": "start-up: whether aten defines an op a plugin offers (ops.schema)",
    "torch._C.DispatchKeySet": "redispatch of views and storage metadata ops to the CPU kernel",
    "torch._C.DispatchKey.CPU": "the same",
    "torch._C._DispatchOperatorHandle.redispatch_boxed": "view kernels: the CPU kernel without a Python frame",
    "torch._C.DispatchKey.AutocastPrivateUse1": "the cast policy of torch.autocast('fl')",
    "torch._C._ExcludeDispatchKeyGuard": "autocast kernels run the op below the autocast key",
    "torch._register_device_module": "makes torch.fl exist",
    "torch._decomp.decomposition_table": "the generic kernel (PyTorch's decompositions)",
    "torch._refs": "reference implementations the decompositions call",
    "torch._neg_view": "copies of lazy negative views",
    "torch._ops.OpOverload": "what the dispatcher hands a Python kernel",
    "torch._C._dispatch_has_computed_kernel_for_dispatch_key": "the CPU link only for ops with a CPU kernel",
    "torch._C.StorageBase": "torch.UntypedStorage(n, device='fl') allocates through the runtime",
    "torch.__future__.get_swap_module_params_on_conversion": "Module.to keeps Parameter objects across fl",
    "torch._has_compatible_shallow_copy_type": "when Module._apply would replace a Parameter",
    "torch._storage_classes": "the storage types whose pickling refuses fl (IPC)",
    "torch._tensor_classes": "the tensor types whose pickling refuses fl (IPC)",
    "torch.distributed.distributed_c10d.BackendConfig": "fl tensors reach the fl process group under 'gloo'",
    "torch._C._get_overrideable_sdp_enabled": "sdpa_kernel() allows the plugin's fused attention (ops/owned/attention)",
    "torch._C._profiler.ProfilerState": "use_device='fl' profiles run as CPU Kineto profiles (tools/torch_profiler)",
    "torch.autograd.profiler.profile._start_trace": "where a use_device='fl' profile starts Torch-FL's alongside",
    "torch.autograd.profiler.profile._ensure_function_events": "where fl device times join PyTorch's events",
    "torch._dynamo.device_interface.DeviceInterface": "dynamo's device interface for fl (torch.compile)",
    "torch._dynamo.device_interface.register_interface_for_device": "registers it",
    "torch._inductor.compile_fx": "imported when Inductor first compiles: fl's backend registers then",
    "torch._dynamo.backends.registry.register_backend": "backend=\"fl\" (the graph path), registered once "
                                                        "dynamo's backend registry is imported",
    "torch._dynamo.backends.common.aot_autograd": "the graph path's forward and backward ATen graphs",
    "torch._dynamo.trace_rules.add": "dynamo never traces the runtime's own frames (its kernels are Python)",
    "torch._inductor.config.fallback_by_default": "fl graphs lower every node to an ATen call",
    "torch._inductor.codegen.common.register_backend_for_device": "Inductor's backend for fl",
    "torch._inductor.codegen.common.register_device_op_overrides": "device calls in fl wrapper code",
    "torch._inductor.codegen.common.DeviceOpOverrides": "the same",
    "torch._inductor.codegen.wrapper.PythonWrapperCodegen": "fl graphs' wrapper code (unchanged)",
    "torch._inductor.custom_graph_pass.CustomGraphModulePass": "the pass that marks an fl graph's lowering",
    "torch._inductor.scheduler.BaseScheduling": "fl's scheduling, which generates no kernels",
    "torch._inductor.cudagraph_utils.CUDAGraphPolicy": "mode=\"reduce-overhead\" captures fl graphs with "
                                                       "torch.accelerator.Graph (integration/reduce_overhead)",
    "torch._prims_common.can_safe_cast_to": "the generic out= kernel refuses an unsafe cast as the CPU does",
    "torch._C.Generator": "the generator type itself, which the bridge-off refusal subclasses (bridge/off.py)",
}


def missing_private_apis() -> list[str]:
    """The PRIVATE_APIS names the running PyTorch lacks (empty on a supported minor)."""
    import importlib
    missing = []
    for dotted in PRIVATE_APIS:
        found = torch
        parts = dotted.split(".")
        for i, part in enumerate(parts[1:], 1):
            value = getattr(found, part, None)
            if value is None:     # a submodule PyTorch imports only on use (dynamo, Inductor)
                try:
                    value = importlib.import_module(".".join(parts[:i + 1]))
                except ImportError:
                    value = None
            found = value
            if found is None:
                missing.append(dotted)
                break
    return missing
