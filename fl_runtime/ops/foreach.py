"""Out-of-place foreach ops as one launch of the plugin's `.out` kernel.

torch.optim's foreach paths (the default on fl, as on CUDA: README "Optimizers")
call tensor-list ops.  The in-place ones (`_foreach_mul_.Scalar`, ...) return
nothing, so the launcher runs them like any op when a plugin has them.  An
out-of-place one returns a new list (`Tensor[]`), which the launcher's
output path does not build; here the runtime allocates the outputs itself
(allocation only: no launch) and runs the `.out` overload, which returns
nothing.  Without a usable `.out` kernel the call takes PyTorch's own
per-tensor loop, as it would without this module.
"""
from __future__ import annotations

from typing import Callable

import torch

# out-of-place foreach op -> the per-tensor op PyTorch's slow path would call
_OUT_OF_PLACE: dict[str, Callable] = {"_foreach_sqrt": torch.sqrt}
_FLOATS = (torch.float32, torch.float64)   # result dtype == input dtype only for these


def register(library: torch.library.Library, rt) -> None:
    """Give fl a kernel for each out-of-place foreach op some plugin has a `.out` kernel for."""
    for name, per_tensor in _OUT_OF_PLACE.items():
        if f"{name}.out" in rt.op_names:
            library.impl(name, _make_kernel(rt, name, per_tensor), "PrivateUse1")


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
