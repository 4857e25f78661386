"""What happens to an op no vendor kernel takes: views, CPU fallback, or an error.

- Views (a return aliases an input without writing it) only change metadata:
  PyTorch's CPU kernel for them never touches data, so they are redispatched
  to it and the result stays on fl.
- Everything else runs on the CPU when `fallback.enable_cpu_fallback` allows
  it: inputs are copied out, PyTorch's CPU kernel runs, mutated inputs and
  results are copied back; one warning per op.
- Otherwise UnsupportedOpError names the op, the device and what to do.
  TORCH_FL_STRICT=1 turns every fallback into that error, for debugging.
"""
from __future__ import annotations

import os
import warnings

import torch
from torch.utils._pytree import tree_map

from . import op_stats
from .errors import UnsupportedOpError

_CPU_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_warned: set[str] = set()
_write_args: dict = {}   # op -> indices of schema arguments the op mutates
_settings = {"enable_cpu_fallback": True}


def configure(enable_cpu_fallback: bool) -> None:
    _settings["enable_cpu_fallback"] = enable_cpu_fallback


def is_view_op(op) -> bool:
    returns = op._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _mutated_arg_names(op) -> list[str]:
    names = _write_args.get(op)
    if names is None:
        names = _write_args[op] = [a.name for a in op._schema.arguments
                                   if a.alias_info is not None and a.alias_info.is_write]
    return names


def _first_fl_device(args, kwargs) -> int:
    for value in (*args, *kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if isinstance(item, torch.Tensor) and item.device.type != "cpu":
                return item.device.index
    return 0


def boxed_fallback(op, *args, **kwargs):
    """PyTorch's entry for every PrivateUse1 op without a registered kernel."""
    if is_view_op(op):
        return op.redispatch(_CPU_KEYSET, *args, **kwargs)
    return run_on_cpu(op, args, kwargs, _first_fl_device(args, kwargs))


def _strict() -> bool:
    return os.environ.get("TORCH_FL_STRICT", "") not in ("", "0")


def ensure_cpu_fallback_allowed(name: str, device_index: int) -> None:
    """Raise UnsupportedOpError when the config or TORCH_FL_STRICT forbids the CPU fallback."""
    if _strict() or not _settings["enable_cpu_fallback"]:
        why = ("TORCH_FL_STRICT is set" if _strict() else
               "the CPU fallback is off (fallback.enable_cpu_fallback: false in the config)")
        raise UnsupportedOpError(name, f"fl:{device_index}", f"{why}; turn the fallback on, move this "
                                 "step to the CPU yourself, or ask the plugin's vendor for a kernel")


def run_on_cpu(op, args: tuple, kwargs: dict, device_index: int):
    """Run `op` with PyTorch's CPU kernel on copies of the fl inputs."""
    name = op.name()
    device = f"fl:{device_index}"
    ensure_cpu_fallback_allowed(name, device_index)
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"torch_fl: '{name}' has no kernel on {device}; running it on the CPU "
                      "(inputs copied out and results copied back). This is slow; "
                      "TORCH_FL_STRICT=1 makes it an error.", stacklevel=3)
    op_stats.record(name, op_stats.CPU)

    def to_cpu(value):
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            return value.cpu()
        return value
    cpu_args, cpu_kwargs = tree_map(to_cpu, (args, kwargs))
    result = op(*cpu_args, **cpu_kwargs)
    _copy_back_mutations(op, args, kwargs, cpu_args, cpu_kwargs)
    return _results_to_device(op, result, args, kwargs, device_index)


def _schema_value(op, name: str, args, kwargs):
    for i, arg in enumerate(op._schema.arguments):
        if arg.name == name:
            return args[i] if i < len(args) else kwargs.get(name)
    return None


def _copy_back_mutations(op, args, kwargs, cpu_args, cpu_kwargs) -> None:
    for name in _mutated_arg_names(op):
        original = _schema_value(op, name, args, kwargs)
        updated = _schema_value(op, name, cpu_args, cpu_kwargs)
        pairs = zip(original, updated) if isinstance(original, (list, tuple)) else [(original, updated)]
        for dst, src in pairs:
            if isinstance(dst, torch.Tensor) and dst.device.type != "cpu":
                if dst.shape != src.shape:
                    dst.resize_(src.shape)
                dst.copy_(src)


def _results_to_device(op, result, args, kwargs, device_index: int):
    returns = op._schema.returns
    results = result if isinstance(result, (tuple, list)) and len(returns) > 1 else (result,)
    moved = []
    for ret, value in zip(returns, results):
        alias = ret.alias_info
        if alias is not None and alias.is_write:
            name = next(a.name for a in op._schema.arguments
                        if a.alias_info is not None and a.alias_info.before_set == alias.before_set)
            moved.append(_schema_value(op, name, args, kwargs))
        elif isinstance(value, torch.Tensor):
            moved.append(value.to(f"fl:{device_index}"))
        elif isinstance(value, (list, tuple)):
            moved.append(type(value)(v.to(f"fl:{device_index}") if isinstance(v, torch.Tensor) else v
                                     for v in value))
        else:
            moved.append(value)
    if len(returns) > 1:
        return tuple(moved)
    return moved[0] if moved else None
