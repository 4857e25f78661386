"""The Python route's side of the native bridge: when the bridge is off, say so in our words.

Generators, pinned memory, storage resizes and the device count of PyTorch's guard exist only
as C++ hooks (docs/users/native-bridge.md).  Without the bridge, PyTorch answers them with its
own NotImplementedError ("You should register PrivateUse1HooksInterface ..."), which tells a
user nothing.  Here each hook we can reach from Python raises NativeBridgeOffError naming the
reason and the fix, and the first fl use says once that the bridge is off and how to build it
(a start never compiles: fl_runtime/bridge/build.py).  `torch-fl doctor` says the same.
"""
from __future__ import annotations

import threading

import torch

from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.errors import NativeBridgeOffError
from fl_runtime.logs import logger

SERVED_ONLY_BY_IT = "generators, pinned memory, storage resizes, backward on fl:1+ from worker threads"


def reason_and_fix(detail: str) -> tuple[str, str]:
    """(why the bridge is off, what to do) from its status detail."""
    from fl_runtime.bridge import SWITCH_ENV
    reason = detail.removeprefix("off: ")
    if reason.startswith(f"{SWITCH_ENV}=0"):
        return reason, f"unset {SWITCH_ENV} to use it"
    from fl_runtime.bridge.build import BUILD_COMMAND
    return reason, f"run `{BUILD_COMMAND}` once (it needs a C++ compiler, e.g. g++), then restart the program"


def error(what: str) -> NativeBridgeOffError:
    from fl_runtime import bridge
    return NativeBridgeOffError(what, *reason_and_fix(bridge.status().detail))


def install(rt) -> None:
    """On the Python route: our errors for the hooks Python can reach, and the one notice."""
    torch.Generator = _refusing_generator()
    _announce_at_first_use(rt)


class _GeneratorType(type(torch._C.Generator)):      # PyTorch's own metaclass of Generator
    """torch.Generator stays the type of every generator: isinstance and issubclass answer
    for torch._C.Generator, which every generator PyTorch makes still is."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch._C.Generator)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, torch._C.Generator)


def _refusing_generator() -> type:
    """torch.Generator, except that a generator on fl raises NativeBridgeOffError (PyTorch's
    C type cannot be patched); every other device gets PyTorch's own generator."""
    base = torch._C.Generator

    class Generator(base, metaclass=_GeneratorType):
        __doc__ = base.__doc__

        def __new__(cls, device=None):
            if device is None:
                return base()
            if torch.device(device).type == DEVICE_TYPE:
                raise error(f"torch.Generator(device='{device}')")
            return base(device)

    Generator.__module__, Generator.__qualname__ = "torch", "Generator"
    return Generator


def _announce_at_first_use(rt) -> None:
    """Say once, at the first fl allocation (not at `import torch`: a program that never uses
    fl hears nothing), that the bridge is off, why, and the command that builds it.  The
    wrapper removes itself, so later allocations pay nothing."""
    from fl_runtime import bridge
    from fl_runtime.bridge import SWITCH_ENV
    detail = bridge.status().detail
    if detail.startswith(f"off: {SWITCH_ENV}=0"):
        return                     # asked for: nothing to announce
    original = rt.new_tensor_from_spec
    lock = threading.Lock()

    def first_use(*args, **kwargs):
        with lock:
            if rt.__dict__.pop("new_tensor_from_spec", None) is not None:
                reason, fix = reason_and_fix(detail)
                logger.warning("the native bridge is off (%s): on fl, %s are unavailable or limited; %s",
                               reason, SERVED_ONLY_BY_IT, fix)
        return original(*args, **kwargs)
    rt.new_tensor_from_spec = first_use
