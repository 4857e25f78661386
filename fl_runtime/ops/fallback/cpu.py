"""What happens to an op no vendor kernel takes: views, the fallback chain, CPU.

- Views (a return aliases an input without writing it) only change metadata:
  PyTorch's CPU kernel for them never touches data, so they are redispatched
  to it and the result stays on fl.
- Everything else goes to the fallback chain (chain.py), which picks the
  generic kernel, this module's CPU fallback, or an UnsupportedOpError.
- The CPU fallback copies inputs out, runs PyTorch's CPU kernel, copies
  mutated inputs and results back (in-place and out= semantics preserved),
  and warns once per op.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch.utils._pytree import tree_leaves, tree_map

_CPU_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_CPU = torch.device("cpu")
_warned: set[str] = set()
_write_args: dict = {}   # op -> indices of schema arguments the op mutates
_cpu_runnable: dict = {}  # op -> whether PyTorch has a CPU (or composite) kernel for it
_views: dict = {}         # op -> is_view_op(op)


def is_view_op(op) -> bool:
    """Whether every return of `op` aliases an input without writing it (read from the schema
    once per op: every call of an op without a kernel asks)."""
    found = _views.get(op)
    if found is None:
        returns = op._schema.returns
        found = _views[op] = bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write
                                                   for r in returns)
    return found


def has_cpu_kernel(op) -> bool:
    """Whether PyTorch can run `op` on the CPU at all: a CPU kernel, or a composite
    (CompositeImplicit/Explicit) one the CPU dispatch table computes from it.  Ops
    written only for CUDA (the fused RNN cells, cuDNN ops) have none: the CPU
    fallback must never be chosen for them (docs/users/profiling.md)."""
    found = _cpu_runnable.get(op)
    if found is None:
        found = _cpu_runnable[op] = torch._C._dispatch_has_computed_kernel_for_dispatch_key(op.name(), "CPU")
    return found


def _mutated_arg_names(op) -> list[str]:
    names = _write_args.get(op)
    if names is None:
        names = _write_args[op] = [a.name for a in op._schema.arguments
                                   if a.alias_info is not None and a.alias_info.is_write]
    return names


def _first_fl_device(args, kwargs, current_device) -> int:
    """The fl index an op runs on: its first fl tensor's, else its `device=` argument's
    (a factory: torch.triu_indices(3, 3, device="fl:1")), else the current device."""
    devices = []
    for value in (*args, *kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if isinstance(item, torch.Tensor) and item.device.type not in ("cpu", "meta"):
                return item.device.index
            if isinstance(item, torch.device) and item.type not in ("cpu", "meta"):
                devices.append(item)
    for device in devices:
        return current_device() if device.index is None else device.index
    return current_device()


def make_boxed_fallback(chain, current_device: Callable[[], int]):
    """PyTorch's entry for every PrivateUse1 op without a registered kernel: views
    are redispatched to the CPU kernel (metadata only), the rest go to `chain`."""
    def boxed_fallback(op, *args, **kwargs):
        if is_view_op(op):
            return op.redispatch(_CPU_KEYSET, *args, **kwargs)
        return chain.run(op, args, kwargs, _first_fl_device(args, kwargs, current_device))
    return boxed_fallback


def cpu_fallback(op, args: tuple, kwargs: dict, device_index: int, why: str | None = None) -> tuple[object, int]:
    """Run `op` with PyTorch's CPU kernel on copies of the fl inputs (`why`: the reason,
    when it is not simply that no kernel exists).
    Returns (result on fl, bytes copied between fl and the host)."""
    name = op.name()
    if name not in _warned:
        _warned.add(name)
        reason = f"the vendor kernel cannot take this call ({why})" if why else "no kernel"
        warnings.warn(f"torch_fl: '{name}' on fl:{device_index}: {reason}; running it on the CPU "
                      "(inputs copied out and results copied back). This is slow; "
                      "TORCH_FL_STRICT=1 makes it an error.", stacklevel=4)
    copied = [0]
    write_only = _out_tensor_ids(op, args, kwargs)

    def to_cpu(value):
        if isinstance(value, torch.device):     # a factory's device=: made on the CPU, then moved
            return _CPU if value.type != "cpu" else value
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            if id(value) in write_only:      # out=: the kernel overwrites it, no need to read it
                return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype)
            copied[0] += value.nbytes
            return value.cpu()
        return value
    cpu_args, cpu_kwargs = tree_map(to_cpu, (args, kwargs))
    result = op(*cpu_args, **cpu_kwargs)
    copied[0] += _copy_back_mutations(op, args, kwargs, cpu_args, cpu_kwargs)
    moved = _results_to_device(op, result, args, kwargs, device_index)
    copied[0] += sum(t.nbytes for t in _fresh_tensors(op, moved))
    return moved, copied[0]


def _out_tensor_ids(op, args: tuple, kwargs: dict) -> set[int]:
    """ids of the out= tensors of this call (keyword-only arguments the op writes) that
    share no memory with its inputs (x.erfinv_() is erfinv.out(x, out=x): x must be read)."""
    names = {arg.name for arg in op._schema.arguments
             if arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write}
    outs = {id(t): t for t in tree_leaves([kwargs.get(name) for name in names]) if isinstance(t, torch.Tensor)}
    if not outs:
        return set()
    inputs = tree_leaves((args, {k: v for k, v in kwargs.items() if k not in names}))
    read = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
    return {i for i, t in outs.items() if t.untyped_storage().data_ptr() not in read}


def _fresh_tensors(op, moved) -> list:
    """The results that were copied to the device (not the mutated arguments)."""
    returns = op._schema.returns
    values = moved if len(returns) > 1 else (moved,)
    fresh = []
    for ret, value in zip(returns, values):
        if ret.alias_info is None:
            items = value if isinstance(value, (list, tuple)) else (value,)
            fresh.extend(v for v in items if isinstance(v, torch.Tensor))
    return fresh


def _schema_value(op, name: str, args, kwargs):
    for i, arg in enumerate(op._schema.arguments):
        if arg.name == name:
            return args[i] if i < len(args) else kwargs.get(name)
    return None


def _copy_back_mutations(op, args, kwargs, cpu_args, cpu_kwargs) -> int:
    """Copy what the CPU kernel wrote into the fl arguments; returns the bytes copied."""
    nbytes = 0
    for name in _mutated_arg_names(op):
        original = _schema_value(op, name, args, kwargs)
        updated = _schema_value(op, name, cpu_args, cpu_kwargs)
        pairs = zip(original, updated) if isinstance(original, (list, tuple)) else [(original, updated)]
        for dst, src in pairs:
            if isinstance(dst, torch.Tensor) and dst.device.type != "cpu":
                if dst.shape != src.shape:
                    dst.resize_(src.shape)
                dst.copy_(src)
                nbytes += src.nbytes
    return nbytes


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
