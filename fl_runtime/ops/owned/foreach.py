"""Foreach ops (tensor lists) on the plugin's list kernels: one launch per list.

torch.optim's foreach paths (the default on fl, as on CUDA: docs/users/optimizers.md)
call tensor-list ops.  As CUDA does (ATen's can_use_fast_route), a call takes the
list kernel only when every tensor is on one device with one dtype and entry k of
each list has one shape; anything else runs PyTorch's per-tensor loop, on fl's
ordinary kernels, as it would without a list kernel.  The in-place ops return
nothing, so the launcher runs them.  An out-of-place one returns a new list
(`Tensor[]`), which the launcher's output path does not build: here the runtime
allocates the outputs (allocation only, no launch) and launches the `.out`
overload, which returns nothing.  The ScalarList overloads take one scalar per
entry; their Scalar[] travels as a list of doubles (fl_abi.h), patched per call.
"""
from __future__ import annotations

from typing import Callable

import torch

# out-of-place foreach op -> the per-tensor op PyTorch's slow path would call
_OUT_OF_PLACE: dict[str, Callable] = {"_foreach_sqrt": torch.sqrt}
_FLOATS = (torch.float32, torch.float64)   # result dtype == input dtype only for these


# in-place foreach op (kernel-table name) -> PyTorch's per-tensor loop for it
_IN_PLACE: dict[str, Callable] = {
    "_foreach_add_.Scalar": lambda self, scalar: [t.add_(scalar) for t in self],
    "_foreach_mul_.Scalar": lambda self, scalar: [t.mul_(scalar) for t in self],
    "_foreach_add_.List": lambda self, other, *, alpha=1: [t.add_(o, alpha=alpha) for t, o in zip(self, other)],
    "_foreach_lerp_.Scalar": lambda self, tensors1, weight: [t.lerp_(e, weight) for t, e in zip(self, tensors1)],
    "_foreach_addcmul_.Scalar": lambda self, tensor1, tensor2, value=1: [
        t.addcmul_(a, b, value=value) for t, a, b in zip(self, tensor1, tensor2)],
    "_foreach_addcdiv_.Scalar": lambda self, tensor1, tensor2, value=1: [
        t.addcdiv_(a, b, value=value) for t, a, b in zip(self, tensor1, tensor2)],
    "_foreach_sqrt_": lambda self: [t.sqrt_() for t in self],
    # Scalar[]: entry k's own scalar (AdamW's per-parameter bias corrections)
    "_foreach_div_.ScalarList": lambda self, scalars: [t.div_(s) for t, s in zip(self, scalars)],
    "_foreach_addcdiv_.ScalarList": lambda self, tensor1, tensor2, scalars: [
        t.addcdiv_(a, b, value=s) for t, a, b, s in zip(self, tensor1, tensor2, scalars)],
}
# The launcher must not register these itself: register() below wraps them.
RUNTIME_OWNED = set(_IN_PLACE)


def register(library: torch.library.Library, rt) -> None:
    """Give fl a kernel for each foreach op some plugin has a list kernel for (for an
    out-of-place op: its `.out` kernel)."""
    for name, per_tensor in _IN_PLACE.items():
        if name in rt.op_names:
            rt.launcher.register_owned(library, name, _make_in_place(rt, name, per_tensor))
    for name, per_tensor in _OUT_OF_PLACE.items():
        if f"{name}.out" in rt.op_names:
            library.impl(name, _make_kernel(rt, name, per_tensor), "PrivateUse1")


def _make_in_place(rt, name: str, per_tensor: Callable) -> Callable:
    launcher = rt.launcher

    def kernel(*args, **kwargs) -> None:
        plan = launcher.plan(name)     # which positional arguments are tensor lists, which Scalar[]
        lists = [args[i] for i in plan.list_tensor_arg_indices if i < len(args)]
        _check_lengths(name, lists)
        _check_scalar_lengths(name, lists[0], [args[i] for i in plan.scalar_list_indices if i < len(args)])
        if _fast_route(launcher, name, lists):
            launcher.launch(name, args, kwargs)
        else:
            per_tensor(*args, **kwargs)
    kernel.__name__ = f"fl_{name.replace('.', '_')}"
    return kernel


def _check_lengths(name: str, lists: list) -> None:
    """PyTorch's own checks (check_foreach_api_restrictions): a per-tensor zip would
    silently drop the extra entries."""
    if not lists[0]:
        raise RuntimeError(f"{name}: Tensor list must have at least one tensor.")
    if any(len(other) != len(lists[0]) for other in lists[1:]):
        raise RuntimeError(f"{name}: Tensor lists must have the same number of tensors, got "
                           f"{', '.join(str(len(other)) for other in lists)}.")


def _check_scalar_lengths(name: str, tensors: list, scalar_lists: list) -> None:
    """PyTorch's check for the ScalarList overloads: a zip would drop the extra entries."""
    for scalars in scalar_lists:
        if len(scalars) != len(tensors):
            raise RuntimeError(f"{name}: Tensor list must have same number of elements as scalar list, got "
                               f"{len(tensors)} tensors and {len(scalars)} scalars.")


def _fast_route(launcher, name: str, lists: list) -> bool:
    """One fl device, one dtype the device's kernel declares, entry k of one shape in every list."""
    first = lists[0][0]
    device, dtype = first.get_device(), first.dtype
    if device < 0 or not launcher.has_kernel(device, name, dtype):
        return False
    for k, entry in enumerate(lists[0]):
        for tensors in lists:
            t = tensors[k]
            if t.get_device() != device or t.dtype != dtype or t.shape != entry.shape:
                return False
    return True


def _make_kernel(rt, name: str, per_tensor: Callable) -> Callable:
    out_name = f"{name}.out"
    out_op = getattr(torch.ops.aten, name).out
    launcher = rt.launcher

    def kernel(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        if not _one_launch_fits(launcher, out_name, tensors):
            return [per_tensor(t) for t in tensors]
        outputs = [torch.empty_like(t) for t in tensors]
        out_op(tensors, out=outputs)
        return outputs
    kernel.__name__ = f"fl_{name}"
    return kernel


def _one_launch_fits(launcher, out_name: str, tensors: list[torch.Tensor]) -> bool:
    """All on one fl device, one floating dtype the device's `.out` kernel declares
    (integer inputs give float results, which empty_like would not)."""
    if not tensors:
        return False
    first = tensors[0]
    device, dtype = first.get_device(), first.dtype
    if device < 0 or dtype not in _FLOATS:
        return False
    if any(t.get_device() != device or t.dtype != dtype for t in tensors):
        return False
    return launcher.has_kernel(device, out_name, dtype)
