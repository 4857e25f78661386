"""Refuse, at import, a PyTorch outside the range pyproject.toml declares.

The range lives once, in pyproject's dependency on torch; installed, it is read
from the package metadata, in a source checkout from pyproject.toml itself.
"""
from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import torch

from fl_runtime.errors import TorchVersionError

_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def supported_torch_range() -> str:
    """The torch version specifier this build of Torch-FL declares, e.g. '<2.15,>=2.13'.

    Running from a source checkout (editable installs too), pyproject.toml beside the
    package is the truth: installed metadata, or a stale *.egg-info left in the tree by
    an earlier build, may describe another revision."""
    if _PYPROJECT.is_file():
        requirements = re.findall(r'"(torch[<>=!~ ][^"]*)"', _PYPROJECT.read_text())
    else:
        try:
            requirements = importlib.metadata.requires("torch-fl") or []
        except importlib.metadata.PackageNotFoundError:
            requirements = []
    for text in requirements:
        specifier = _torch_specifier(text)
        if specifier is not None:
            return specifier
    raise TorchVersionError("Torch-FL's metadata declares no torch requirement; reinstall torch-fl")


# A plain `torch<specifiers>` requirement, read without packaging.requirements (whose
# marker grammar every start-up would otherwise import); anything else goes to it.
_PLAIN_TORCH = re.compile(r"torch\s*((?:[<>=!~]=?|===)[^;@\[\]]*)")
# A clause that compares with a plain release ('>=2.13', '<2.15'): decided without packaging,
# whose specifier module cost ~3 ms of every start-up.  Anything else (~=, ===, wildcards,
# pre-releases) is packaging's.
_PLAIN_CLAUSE = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*(\d+(?:\.\d+)*)\s*")
_PLAIN_RELEASE = re.compile(r"\d+(?:\.\d+)*")
_COMPARE = {"<": tuple.__lt__, "<=": tuple.__le__, ">": tuple.__gt__, ">=": tuple.__ge__,
            "==": tuple.__eq__, "!=": tuple.__ne__}


def _torch_specifier(text: str) -> str | None:
    """The specifier of a requirement on torch without markers ('<2.15,>=2.13'), else None."""
    plain = _PLAIN_TORCH.fullmatch(text.strip())
    if plain:
        clauses = plain.group(1).split(",")
        if all(_PLAIN_CLAUSE.fullmatch(c) for c in clauses):   # packaging's str(): sorted, no spaces
            return ",".join(sorted("".join(c.split()) for c in clauses))
        from packaging.specifiers import SpecifierSet
        return str(SpecifierSet(plain.group(1)))
    from packaging.requirements import Requirement
    req = Requirement(text)
    return str(req.specifier) if req.name == "torch" and not req.marker else None


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


def check_torch_version(version: str | None = None) -> None:
    """Raise TorchVersionError naming both versions when torch is unsupported."""
    found = (version or torch.__version__).split("+")[0]
    spec = supported_torch_range()
    if not admits(spec, found):
        raise TorchVersionError(
            f"Torch-FL supports torch{spec}, but torch {found} is installed: "
            f"install a supported PyTorch (pip install 'torch{spec}') or a Torch-FL release built for {found}")


# ---- what the runtime takes from PyTorch beyond its public API ------------------------
# One line per private entry point fl_runtime uses, with why; the README's "Supported
# PyTorch versions" says how a new minor is admitted: tests/test_torch_version.py checks
# that every name here exists in the running PyTorch and that the runtime uses no private
# name missing from this table, under each supported minor in CI.
#
# Differences between the supported minors: none so far.  2.13 and 2.14 behave the same
# for every path below (the runtime's tests pass unchanged under both, with one plugin
# binary).  When a minor differs, the branch goes here, as a function keyed on
# TORCH_MINOR, with the reason, and callers use the function.
TORCH_MINOR: tuple[int, int] = tuple(int(n) for n in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())

PRIVATE_APIS: dict[str, str] = {
    "torch._C._acc.PrivateUse1Hooks": "the Python-backend hooks (is_available, has_primary_context)",
    "torch._C._acc.DeviceGuard": "the Python-backend device guard (reports one device: README limits)",
    "torch._C._acc.register_python_privateuseone_hook": "installs the hooks",
    "torch._C._acc.register_python_privateuseone_device_guard": "installs the device guard",
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
    "torch._C._get_overrideable_sdp_enabled": "sdpa_kernel() allows the plugin's fused attention (ops/attention)",
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
