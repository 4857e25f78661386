"""Output shapes, strides and dtypes of an op, from PyTorch's own meta kernels.

Running the meta kernel costs tens of microseconds, so results are cached per
op and input signature (shapes, strides, dtypes and non-tensor arguments):
a training loop repeats the same signatures, so steady state is one dict hit.
Float scalars are left out of the signature (their value never changes an
output's layout, and optimizers pass a new one every step), and so are the
values of `Scalar[]` arguments (the foreach ScalarList overloads'); `float[]`
lists stay in (upsampling scales do change layouts).  Each signature's entry also holds
the marshaler's template for it (see marshal.py).
"""
from __future__ import annotations

import torch

from fl_runtime.devices.storage import storage_nbytes
from fl_runtime.abi.convention import TAG_GENERATOR, TAG_SCALAR_LIST
from fl_runtime.ops.schema import OpPlan

OutputSpec = tuple  # (shape, stride, dtype, storage bytes), or None for an undefined output

_META = torch.device("meta")


def _key_of(value):
    if isinstance(value, torch.Tensor):
        return (value.shape, value.stride(), value.dtype, value.is_cpu)
    cls = type(value)
    # Exact types first: isinstance against torch.Generator goes through a Python
    # __instancecheck__ (~0.7 us), too slow for every int argument.
    if cls is int or value is None:
        return value
    if cls is float:
        return float
    if cls is bool:
        return (bool, value)      # True == 1 as a dict key, but not as a kernel argument
    if isinstance(value, float):
        return float
    if isinstance(value, bool):
        return (bool, value)
    if isinstance(value, (list, tuple)):
        return tuple(v if isinstance(v, float) else _key_of(v) for v in value)
    if isinstance(value, torch.Generator):
        return None
    return value


class SignatureEntry:
    """What is known about one input signature of an op."""
    __slots__ = ("specs", "template")

    def __init__(self, specs) -> None:
        self.specs = specs
        self.template = None      # filled by the marshaler on first use


def _to_meta(value):
    if isinstance(value, torch.Tensor):
        if value.is_cpu:
            return value      # 0-dim CPU scalars take part in type promotion as they are
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=_META)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_meta(v) for v in value)
    if isinstance(value, torch.Generator):
        return None
    return value


class OutputSpecCache:
    """Per-op memo of meta-kernel results."""

    def __init__(self, plan: OpPlan) -> None:
        self.plan = plan
        self._memo: dict = {}

    def lookup(self, values: list) -> SignatureEntry:
        key = tuple(map(_key_of, values))      # map: no generator frame per value (hot path)
        if self.plan.scalar_list_indices:
            key = self._without_scalar_values(key, values)
        entry = self._memo.get(key)
        if entry is None:
            # Threads: a miss runs the meta kernel outside any lock; if two threads miss
            # at once, setdefault keeps the first entry and both use it.
            entry = self._memo.setdefault(key, SignatureEntry(self._run_meta(values)))
        return entry

    def _without_scalar_values(self, key: tuple, values: list) -> tuple:
        """A `Scalar[]` argument (abi/convention.py, TAG_SCALAR_LIST) keyed by its length and
        entry types, as a float scalar is keyed by its type: optimizers pass new values every
        step, and a template patches them (marshal.py)."""
        key = list(key)
        for i in self.plan.scalar_list_indices:
            value = values[i]
            key[i] = (TAG_SCALAR_LIST, tuple(map(type, value))) if isinstance(value, (list, tuple)) else key[i]
        return tuple(key)

    def _run_meta(self, values: list) -> tuple[OutputSpec, ...]:
        plan = self.plan
        if not plan.returns_alias:
            # An op that returns nothing (`-> ()`: _fused_adamw_, _foreach_add_.Scalar) has no
            # output to lay out, and some (_fused_sgd_) have no meta kernel to ask: the vendor
            # kernel checks its own arguments.
            return ()
        args, kwargs = [], {}
        for spec, value in zip(plan.args, values):
            meta = None if spec.tag == TAG_GENERATOR else _to_meta(value)
            if spec.kwarg_only:
                kwargs[spec.name] = meta
            else:
                args.append(meta)
        result = plan.op(*args, **kwargs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        # A return that is not a tensor (a SymInt such as the attention ops' max_q) gets
        # no buffer: the op's runtime-owned kernel supplies it (ops/owned/attention.py).
        return tuple(None if not isinstance(r, torch.Tensor) else
                     (tuple(r.shape), tuple(r.stride()), r.dtype,
                      storage_nbytes(r.shape, r.stride(), r.element_size())) for r in results)
