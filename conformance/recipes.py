"""Tensors from recipes: small JSON-able dicts that rebuild the exact same input.

A case (one kernel call) is stored as recipes, not values, so that a worker
process, the JSON report and a reproducer script all rebuild bit-identical
inputs from a few numbers: a torch.Generator seed, a scale, special values
planted at given positions, and a storage layout (dimension order, steps,
storage offset, broadcast dimensions).  Storage the view does not cover is
filled with other random values, so a kernel that reads holes gets them wrong.
"""
from __future__ import annotations

import math

import torch

from fl_runtime.devices.storage import contiguous_strides

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "bool": torch.bool, "complex64": torch.complex64,
    # ABI 1.2: tested only for kernels that declare them (conformance.kernel_plan)
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz, "float8_e5m2fnuz": torch.float8_e5m2fnuz,
}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
NAMES: dict[torch.dtype, str] = {dt: name for name, dt in DTYPES.items()}
MANTISSA_BITS = {torch.float64: 52, torch.float32: 23, torch.float16: 10, torch.bfloat16: 7,
                 torch.float8_e4m3fn: 3, torch.float8_e4m3fnuz: 3, torch.float8_e5m2: 2, torch.float8_e5m2fnuz: 2}


def smallest_subnormal(dtype: torch.dtype) -> float:
    info = torch.finfo(dtype)
    return info.tiny * info.eps


def special_values(dtype: torch.dtype, finite_only: bool = False) -> list:
    """The values every kernel must get right: signed zeros, infinities, NaN,
    subnormals, the extremes of the type and a few exact small numbers."""
    if dtype == torch.bool:
        return [True, False]
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        sub = smallest_subnormal(dtype)
        values = [0.0, -0.0, 1.0, -1.0, 0.5, info.eps, sub, -sub, info.tiny - sub, info.tiny, -info.tiny,
                  info.max, -info.max, math.inf, -math.inf, math.nan]
        return [v for v in values if math.isfinite(v) and abs(v) <= 100] if finite_only else values
    info = torch.iinfo(dtype)
    return sorted({0, 1, info.max, info.min, info.max - 1, info.min + 1, -1 if info.min < 0 else 2})


def _values(dtype: torch.dtype, numel: int, seed: int, scale: float, specials: list, finite: bool,
            index: dict | None = None) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if index is not None:   # an index tensor: values in [low, high), distinct when asked
        low, high = index["low"], index["high"]
        if index.get("unique"):   # index_put_ without accumulate has no defined winner among duplicates
            return (torch.randperm(high - low, generator=gen)[:numel] + low).to(dtype)
        return torch.randint(low, high, (numel,), generator=gen, dtype=torch.int64).to(dtype)
    if dtype.is_floating_point:
        x = (torch.randn(numel, generator=gen, dtype=torch.float64) * scale).to(dtype)
    elif dtype == torch.bool:
        x = torch.randint(0, 2, (numel,), generator=gen).to(dtype)
    else:
        info = torch.iinfo(dtype)
        low, high = max(info.min, -int(scale)), min(info.max, int(scale))   # high itself comes as a special
        x = torch.randint(low, high, (numel,), generator=gen, dtype=torch.int64).to(dtype)
    pool = special_values(dtype, finite)
    for position, which in specials:
        if numel:
            x[position % numel] = pool[which % len(pool)]
    return x


def _all_bit_patterns(dtype: torch.dtype) -> torch.Tensor:
    """Every 8- or 16-bit pattern once: the exhaustive sweeps of float8 and float16/bfloat16."""
    if dtype.itemsize == 1:
        return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
    return torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).view(dtype)


# float8 patterns every sample keeps: zeros, the NaN and infinity patterns, the extremes
# and the smallest subnormals of each sign.
_FP8_EDGES = (0x00, 0x80, 0x7f, 0xff, 0x7e, 0xfe, 0x7c, 0xfc, 0x7d, 0xfd, 0x01, 0x81, 0x08, 0x88)


def _sampled_bit_patterns(dtype: torch.dtype) -> torch.Tensor:
    """A lean sample of the 8-bit patterns (every 8th, plus the edges): the ci profile's sweep."""
    picked = sorted(set(range(3, 256, 8)) | set(_FP8_EDGES))
    return torch.tensor(picked, dtype=torch.int32).to(torch.uint8).view(dtype)


def _storage_layout(shape: list[int], recipe: dict) -> tuple[list[int], list[int], int, int]:
    """(held shape, strides, storage offset, storage numel) a layout recipe describes;
    stride-0 (expanded) dimensions are held once."""
    ndim = len(shape)
    perm = recipe.get("perm") or list(range(ndim))
    step = recipe.get("step") or [1] * ndim
    expand = set(recipe.get("expand", ()))
    offset = recipe.get("offset", 0)
    held = [1 if d in expand else n for d, n in enumerate(shape)]   # what storage really holds
    physical = [held[p] * step[p] for p in perm]                    # storage dims, outermost first
    physical_strides = contiguous_strides(physical)
    strides = [0] * ndim
    for i, p in enumerate(perm):
        strides[p] = physical_strides[i] * step[p]
    storage_numel = offset + (math.prod(physical) if math.prod(held) else 0)
    return held, strides, offset, storage_numel


def build(recipe: dict) -> torch.Tensor:
    """The CPU tensor a tensor recipe describes (a strided view into a larger storage)."""
    dtype = DTYPES[recipe["dtype"]]
    if recipe.get("bits") == "all":
        return _all_bit_patterns(dtype)
    if recipe.get("bits") == "sample":
        return _sampled_bit_patterns(dtype)
    if "values" in recipe:      # explicit numbers (cast boundaries, conformance.fp8_specs)
        return torch.tensor(recipe["values"], dtype=torch.float64).to(dtype).reshape(recipe["shape"])
    shape = list(recipe["shape"])
    held, strides, offset, storage_numel = _storage_layout(shape, recipe)
    finite = recipe.get("finite", False)
    storage = _values(dtype, storage_numel, recipe["seed"] + 1, recipe["scale"], [], finite)
    storage.as_strided(held, strides, offset).copy_(
        _values(dtype, math.prod(held), recipe["seed"], recipe["scale"], recipe.get("specials", []),
                finite, recipe.get("index")).reshape(held))
    expand = set(recipe.get("expand", ()))
    return storage.as_strided(shape, [0 if d in expand else s for d, s in enumerate(strides)], offset)


def relayout(t: torch.Tensor, layout: dict, seed: int) -> torch.Tensor:
    """`t`'s values in another storage layout (dimension order, steps, storage offset;
    never stride 0), the storage around them filled with other values."""
    layout = {**layout, "expand": []}
    held, strides, offset, storage_numel = _storage_layout(list(t.shape), layout)
    filler = _values(t.dtype, storage_numel, seed, 1.0 if t.dtype.is_floating_point else 3.0, [], False)
    view = filler.as_strided(held, strides, offset)
    view.copy_(t)
    return view


def plant(t: torch.Tensor, specials: list) -> torch.Tensor:
    """A contiguous copy of floating tensor `t` with special values (NaN, inf, -0,
    subnormals ...) at drawn positions."""
    out, pool = t.contiguous().clone(), special_values(t.dtype)
    flat = out.view(-1)
    for position, which in specials:
        if flat.numel():
            flat[position % flat.numel()] = pool[which % len(pool)]
    return out


def derive(recipe: dict) -> torch.Tensor:
    """An input another op computes from the case's own inputs, on the CPU: the `indices`
    max_pool2d_with_indices_backward needs are those its forward returned for that input,
    which no value recipe can draw.  {"op": ATen overload, "args": case values, "output": k}."""
    from fl_runtime.ops.schema import op_overload   # schema imports torch ops; only cases that derive need it
    result = op_overload(recipe["op"])(*[materialize(v) for v in recipe["args"]])
    return result[recipe["output"]] if isinstance(result, (tuple, list)) else result


def materialize(value: object) -> object:
    """A case value -> what the kernel gets: tensors from recipes (built or derived),
    dtypes from names."""
    if isinstance(value, dict):
        if "tensor" in value:
            return build(value["tensor"])
        if "derived" in value:
            return derive(value["derived"])
        if "dtype" in value:
            return DTYPES[value["dtype"]]
        raise ValueError(f"unknown case value {value!r}")
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):   # Tensor?[] may hold None
        return [materialize(v) for v in value]
    return value
