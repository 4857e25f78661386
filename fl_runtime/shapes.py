"""Output shapes, strides and dtypes of an op, from PyTorch's own meta kernels.

Running the meta kernel costs tens of microseconds, so results are cached per
op and input signature (shapes, strides, dtypes and non-tensor arguments):
a training loop repeats the same signatures, so steady state is one dict hit.
"""
from __future__ import annotations

import torch

from .schema import TAG_GENERATOR, OpPlan
from .storage import storage_nbytes

OutputSpec = tuple  # (shape, stride, dtype, storage bytes), or None for an undefined output

_META = torch.device("meta")


def _key_of(value):
    if isinstance(value, torch.Tensor):
        return (value.shape, value.stride(), value.dtype, value.device.type == "cpu")
    if isinstance(value, (list, tuple)):
        return tuple(_key_of(v) for v in value)
    if isinstance(value, torch.Generator):
        return None
    return value


def _to_meta(value):
    if isinstance(value, torch.Tensor):
        if value.device.type == "cpu":
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

    def specs(self, values: list) -> tuple[OutputSpec, ...]:
        key = tuple(_key_of(v) for v in values)
        specs = self._memo.get(key)
        if specs is None:
            specs = self._memo[key] = self._run_meta(values)
        return specs

    def _run_meta(self, values: list) -> tuple[OutputSpec, ...]:
        plan = self.plan
        args, kwargs = [], {}
        for spec, value in zip(plan.args, values):
            meta = None if spec.tag == TAG_GENERATOR else _to_meta(value)
            if spec.kwarg_only:
                kwargs[spec.name] = meta
            else:
                args.append(meta)
        result = plan.op(*args, **kwargs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        return tuple(None if r is None else
                     (tuple(r.shape), tuple(r.stride()), r.dtype,
                      storage_nbytes(r.shape, r.stride(), r.element_size())) for r in results)
