"""The generic kernels the native bridge runs in C++ (bridge/csrc/fallback_decompositions.h).

A static-cache decode writes its key/value cache with index_copy_ and makes positions with
arange on every step; both reach fl as an op no vendor has (aten::index_copy.out,
aten::arange.start_out), which the fallback chain runs as Torch-FL's own decomposition
(extra_decompositions.py).  With the bridge, a C++ kernel runs that same decomposition for the
calls the chain would run so, without the interpreter, and hands every other call to the boxed
fallback here, unchanged.  It learns the chain's decision for a call's (device, dtypes) from
`_decided` after a call Python ran, and forgets it when the chain's switches change.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from fl_runtime.ops import accounting
from fl_runtime.ops.boundary import leaves_runtime
from fl_runtime.ops.fallback.cpu import _first_fl_device
from fl_runtime.ops.fallback.extra_decompositions import extra_decomposition_of

aten = torch.ops.aten

# The ops with a C++ generic kernel, by the name the bridge registers them under.
CPP_GENERIC: dict[str, torch._ops.OpOverload] = {
    "index_copy.out": aten.index_copy.out,
    "arange.start_out": aten.arange.start_out,
}


def register(rt, boxed_fallback: Callable) -> list[str]:
    """Give each op of CPP_GENERIC no plugin has a kernel for its C++ kernel (a vendor's kernel
    stays the launcher's, which falls back through the chain on a device without it), with
    `boxed_fallback(op, *args, **kwargs)` behind it.  Returns the names registered (none on the
    Python route)."""
    native = rt.launcher.native
    if native is None:
        return []
    chain = rt.launcher.chain
    registered = []
    for name, op in CPP_GENERIC.items():
        if name in rt.op_names:
            continue
        native.register_fallback_decomposition(name, _fallback_of(boxed_fallback, op),
                                               _decided_of(chain, op, rt.current_device))
        chain.cpp_generic.add(op)
        registered.append(name)
    chain.on_configure(native.forget_fallback_decisions)
    accounting.also_count(native.take_fallback_counts, accounting.GENERIC)
    return registered


def _fallback_of(boxed_fallback: Callable, op: torch._ops.OpOverload) -> Callable:
    def fallback(*args, **kwargs):
        return boxed_fallback(op, *args, **kwargs)
    return leaves_runtime(fallback)


def _decided_of(chain, op: torch._ops.OpOverload, current_device: Callable[[], int]) -> Callable[..., bool]:
    """Whether the chain runs a call like this one as the decomposition C++ has (its decision
    is cached per (device, op, dtypes) by the call Python just ran)."""
    decomposition = extra_decomposition_of(op)

    def decided(*args, **kwargs) -> bool:
        decision = chain.decide(op, args, kwargs, _first_fl_device(args, kwargs, current_device))
        return decision.path == accounting.GENERIC and decision.decomposition is decomposition
    return decided
