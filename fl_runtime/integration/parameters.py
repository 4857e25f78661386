"""Parameters keep their identity when a module moves to or from fl (docs/users/models.md).

`nn.Module._apply` (behind `.to`, `.cpu`, `.fl`, `.double` ...) keeps a
Parameter object when the converted tensor has a "compatible shallow-copy
type" (`param.data = converted`); otherwise it builds a *new* Parameter.
PyTorch's check knows CPU, CUDA and a few other dense backends but not
PrivateUse1, and `param.data =` enforces the same check in C++, so for CPU <-> fl
it cannot be made to pass.  A new Parameter per conversion unties tied
weights (`lm_head.weight is wte.weight`) and orphans an optimizer built before
`.to()`: silent wrong training.

PyTorch's other way to keep identity is `torch.utils.swap_tensors`, used by
`_apply` when `torch.__future__.get_swap_module_params_on_conversion()` is
True.  That switch is process-wide; flipping it would change CPU-only users'
conversions too.  Instead this module wraps `Module._apply` and the switch's
getter: when `_apply` reads the switch for one module (once, after converting
the children), the getter converts that module's own parameters (the results
are reused by `_apply`, so nothing is converted twice or out of order) and
answers True on this thread only, and only
when a conversion moves a parameter between fl and another device type (where
`param.data =` is impossible) and the swap can succeed: a parameter held by a live
autograd graph or a view cannot be swapped, and gets PyTorch's new Parameter with
a warning that says so.  Everything else, CPU-only code included, takes
PyTorch's path unchanged.  `load_state_dict` copies into the existing
parameters (`copy_`) and needs nothing.
"""
from __future__ import annotations

import functools
import threading
import warnings

import torch
import torch.__future__ as future
from torch import nn

from fl_runtime.devices.registry import DEVICE_TYPE


class _Pending(threading.local):
    """Per thread: the conversion of the module whose `_apply` is about to read the swap
    switch (PyTorch reads it once per module, after converting the children)."""

    def __init__(self) -> None:
        self.conversion: _ConvertOnce | None = None


_pending = _Pending()
_installed: list = []


def install() -> None:
    """Wrap `Module._apply` and the swap switch's getter (once per process)."""
    if _installed:
        return
    original_apply = nn.Module._apply
    original_getter = future.get_swap_module_params_on_conversion

    def get_swap_module_params_on_conversion() -> bool:
        conversion, _pending.conversion = _pending.conversion, None     # answered once per _apply
        if conversion is not None and conversion.needs_swap():
            return True
        return original_getter()

    @functools.wraps(original_apply)
    def _apply(self, fn, recurse=True):
        own = [p for p in self._parameters.values() if p is not None]
        conversion = _ConvertOnce(self, fn, own) if own and not original_getter() else None
        previous, _pending.conversion = _pending.conversion, conversion
        try:
            return original_apply(self, fn if conversion is None else conversion.fn, recurse)
        finally:
            _pending.conversion = previous

    future.get_swap_module_params_on_conversion = get_swap_module_params_on_conversion
    nn.Module._apply = _apply
    _installed.append((original_apply, original_getter))


class _ConvertOnce:
    """One module's conversion: when `_apply` asks whether to swap, `fn` is applied to the
    module's own parameters (in `_apply`'s own order: after the children) to see where they
    go, and each result is handed to `_apply`'s own call instead of converting twice."""

    def __init__(self, module: nn.Module, fn, params: list) -> None:
        self._module = module
        self._fn = fn
        self._params = params
        self._ready: dict[int, torch.Tensor] = {}

    def needs_swap(self) -> bool:
        with torch.no_grad():
            pairs = [(p, self._fn(p)) for p in self._params]
        self._ready = {id(p): applied for p, applied in pairs}
        return _needs_swap(self._module, pairs)

    def fn(self, tensor):
        ready = self._ready.pop(id(tensor), None)
        return ready if ready is not None else self._fn(tensor)


def _needs_swap(module: nn.Module, pairs: list) -> bool:
    """True when a parameter crosses between fl and another device type, where
    PyTorch would otherwise replace the Parameter object, and swapping can work."""
    crossing = False
    for param, applied in pairs:
        if not isinstance(applied, torch.Tensor):
            continue
        involves_fl = DEVICE_TYPE in (param.device.type, applied.device.type)
        crossing |= involves_fl and not torch._has_compatible_shallow_copy_type(param, applied)
    if not crossing:
        return False
    held = [name for name, param in module._parameters.items() if param is not None and not _swappable(param)]
    if held:
        warnings.warn(f"torch_fl: {type(module).__name__}.{held[0]} moves to a new Parameter object on this "
                      "conversion, as PyTorch does for backends it does not know: something else (a live "
                      "autograd graph, a view) holds the tensor, so it cannot be swapped in place. Weights tied "
                      "to it and optimizers built before the conversion keep the old one; convert the model "
                      "before running it or building its optimizer.", stacklevel=4)
        return False
    return True


def _swappable(param: torch.Tensor) -> bool:
    """Whether torch.utils.swap_tensors accepts `param` (its own use-count rule: one
    reference, or two when the second is the leaf's AccumulateGrad node)."""
    count = param._use_count()
    if count <= 1:
        return True
    if count != 2 or not param.is_leaf or not param.requires_grad:
        return False
    edge = torch.autograd.graph.get_gradient_edge(param)   # lazily made here if it did not exist
    swappable = param._use_count() == 2
    del edge
    return swappable
