"""The generic kernel: run an op as PyTorch's decomposition of it (the second link; docs/users/profiling.md).

PyTorch ships decompositions of most ATen ops into smaller ones
(`torch._decomp.decomposition_table`, which holds the core-ATen set and the
`torch._refs`-based ones).  An op the vendor lacks can run on fl as its
decomposition when every op the decomposition calls (its leaves) runs on fl
too: a vendor kernel for the dtypes, a view, an op the runtime implements
itself, or, recursively, another feasible decomposition.

Feasibility is checked once per (device, op, dtypes), by running the
decomposition on meta tensors of the same shapes under a dispatch mode that
records each leaf call; nothing touches the device.  Running the generic
kernel is then just calling the decomposition with the fl tensors: each leaf
dispatches to fl like any other op.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch._decomp import decomposition_table
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from fl_runtime.ops.fallback.common_kernels import (COMMON_KERNELS, functional_of, out_overload_decomposition,
                                                    out_overload_of)
from fl_runtime.ops.fallback.extra_decompositions import extra_decomposition_of

_META = torch.device("meta")

Leaf = tuple  # (OpOverload, args, kwargs, result) as the decomposition called it, on meta tensors


class InfeasibleDecomposition(Exception):
    """The decomposition cannot be traced for these inputs (data-dependent, no meta kernel...)."""


def decomposition_of(op: torch._ops.OpOverload) -> Callable | None:
    """The decomposition of `op`, or None when it has none: Torch-FL's own where PyTorch's
    cannot run on fl (extra_decompositions, common_kernels; an out= overload as its
    functional overload unless that one calls the out= overload back), else PyTorch's."""
    found = extra_decomposition_of(op) or COMMON_KERNELS.get(op)
    if found is not None:
        return found
    functional = functional_of(op)
    if functional is not None and not routes_to_out(functional):
        return out_overload_decomposition(op, functional)
    return decomposition_table.get(op)


def implicit_or_table_decomposition(op: torch._ops.OpOverload) -> Callable | None:
    """How `op` is rewritten when it is called inside a generic kernel: a
    CompositeImplicitAutograd op by its own composite (the dispatcher does that on fl
    too), any other by its table decomposition."""
    if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
        return op.decompose
    return decomposition_of(op)


class _LeafRecorder(TorchDispatchMode):
    """Records every op call that reaches the dispatcher's Python key."""

    def __init__(self) -> None:
        super().__init__()
        self.leaves: list[Leaf] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        self.leaves.append((func, args, kwargs, result))
        return result


def _to_meta(value):
    # 0-dim CPU tensors stay: they take part in type promotion as wrapped scalars.
    if isinstance(value, torch.Tensor) and not (value.is_cpu and value.dim() == 0):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=_META)
    if isinstance(value, torch.Generator):
        return None
    return value


def trace_leaves(decomposition: Callable, args: tuple, kwargs: dict) -> list[Leaf]:
    """The ops `decomposition(*args, **kwargs)` calls, traced on meta tensors."""
    meta_args, meta_kwargs = tree_map(_to_meta, (args, kwargs))
    recorder = _LeafRecorder()
    try:
        with recorder:
            result = decomposition(*meta_args, **meta_kwargs)
    except Exception as exc:    # any failure means "not this way"; the chain moves on
        raise InfeasibleDecomposition(f"{type(exc).__name__}: {exc}") from exc
    if result is NotImplemented:
        raise InfeasibleDecomposition("the decomposition does not apply to these arguments")
    return recorder.leaves


def routes_to_out(op: torch._ops.OpOverload) -> bool:
    """Whether `op` on fl runs PyTorch's CompositeExplicitAutogradNonFunctional kernel,
    which allocates the result and calls the op's out= overload (gelu -> gelu.out)."""
    name = op.name()
    return (not torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")
            and torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutogradNonFunctional"))


def out_call(op: torch._ops.OpOverload, args: tuple, kwargs: dict, result) -> Leaf | None:
    """The out= call a routes_to_out op makes on fl, or None when it cannot be formed."""
    out_op = out_overload_of(op)
    if out_op is None or not isinstance(result, torch.Tensor):
        return None
    out = torch.empty_strided(result.shape, result.stride(), dtype=result.dtype, device=_META)
    return out_op, args, {**kwargs, "out": out}, out


def run(decomposition: Callable, args: tuple, kwargs: dict):
    """Run the generic kernel: the decomposition on the fl tensors themselves."""
    result = decomposition(*args, **kwargs)
    if result is NotImplemented:     # PyTorch's way for a decomposition to decline these arguments
        raise InfeasibleDecomposition("the decomposition does not apply to these arguments")
    return result
