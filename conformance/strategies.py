"""Hypothesis building blocks for kernel inputs: shapes, layouts, value recipes, scalars.

Every strategy shrinks towards the plain case (small contiguous tensor, no
special values, aligned data), so a failing example comes out minimal: if
it still has a transposed layout or a NaN, that is what the kernel gets wrong.
`draw` is hypothesis' draw function (strategies are used inside @st.composite).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from hypothesis import strategies as st

from .recipes import NAMES, special_values

Draw = Callable

BLOCK = 4096   # shapes cross multiples of this: where vectorised / blocked kernels split work
_LARGE_SHAPES = st.one_of(
    st.integers(BLOCK - 2, 2 * BLOCK + 3).map(lambda n: [n]),
    st.tuples(st.integers(2, 3), st.integers(BLOCK // 2 - 1, BLOCK // 2 + 2)).map(list),
    st.tuples(st.integers(63, 67), st.integers(63, 67)).map(list),
)


def shape(draw: Draw, min_dims: int = 0, max_dims: int = 4, empty: bool = True, large: bool = True,
          max_side: int = 5) -> list[int]:
    """Small shapes first; then 0-d, empty and block-crossing ones."""
    kinds = ["small", "scalar"] + (["empty"] if empty else []) + (["large"] if large else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "scalar" and min_dims == 0:
        return []
    if kind == "large" and max_dims >= 2:
        dims = draw(_LARGE_SHAPES)
        return dims if len(dims) >= min_dims else [1] * (min_dims - len(dims)) + dims
    dims = draw(st.lists(st.integers(1, max_side), min_size=max(min_dims, 1), max_size=max_dims))
    if kind == "empty":
        dims[draw(st.integers(0, len(dims) - 1))] = 0
    return dims


def broadcast_to(draw: Draw, out: list[int]) -> list[int]:
    """A shape that broadcasts to `out`: leading dims dropped, some dims set to 1."""
    keep = draw(st.integers(0, len(out))) if draw(st.booleans()) else len(out)
    tail = out[len(out) - keep:]
    return [1 if draw(st.integers(0, 3)) == 0 else n for n in tail]


def layout(draw: Draw, dims: list[int], can_expand: bool) -> dict:
    """Storage layout: dimension order, element steps, storage offset, stride-0 dims."""
    ndim = len(dims)
    plain = {"perm": None, "step": None, "offset": 0, "expand": []}
    if ndim == 0 or draw(st.integers(0, 2)) == 0:   # a third of tensors keep the plain layout
        return {**plain, "offset": draw(st.sampled_from([0, 1, 3]))}
    perm = draw(st.permutations(range(ndim))) if draw(st.booleans()) else None
    step = draw(st.lists(st.sampled_from([1, 1, 2]), min_size=ndim, max_size=ndim))
    expand = [d for d in range(ndim) if can_expand and dims[d] > 1 and draw(st.integers(0, 4)) == 0]
    return {"perm": list(perm) if perm else None, "step": step if any(s > 1 for s in step) else None,
            "offset": draw(st.sampled_from([0, 1, 3, 5])), "expand": expand}


def _scales(dtype: torch.dtype) -> list[float]:
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        return [1.0, 1e-2, 1e2, info.tiny * 16, info.max / 8]
    if dtype == torch.bool:
        return [1.0]
    return [100.0, 3.0, float(torch.iinfo(dtype).max)]


def values(draw: Draw, dtype: torch.dtype, finite: bool = False) -> dict:
    """Random values (seed, scale) with special values planted at drawn positions."""
    pool = len(special_values(dtype, finite))
    specials = draw(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, pool - 1)), max_size=5))
    scales = [s for s in _scales(dtype) if not finite or s <= 100]
    return {"seed": draw(st.integers(0, 2 ** 31 - 1)), "scale": draw(st.sampled_from(scales)),
            "specials": [list(s) for s in specials], "finite": finite}


def tensor(draw: Draw, dims: list[int], dtype: torch.dtype, mutable: bool = False,
           finite: bool = False) -> dict:
    """A tensor case value; `mutable` ones (in-place targets) never alias themselves."""
    recipe = {"shape": list(dims), "dtype": NAMES[dtype], **values(draw, dtype, finite),
              **layout(draw, dims, can_expand=not mutable)}
    return {"tensor": recipe}


def index_tensor(draw: Draw, dims: list[int], low: int, high: int, unique: bool = False) -> dict:
    """An int64 tensor of indices (gather/scatter positions, class targets) in [low, high)."""
    index = tensor(draw, dims, torch.int64)
    index["tensor"].update(specials=[], index={"low": low, "high": high, "unique": unique})
    return index


def scalar(draw: Draw, dtype: torch.dtype, allow_float: bool = True) -> bool | int | float:
    """A Python scalar argument fitting `dtype` (a float one for integer dtypes, at times)."""
    if dtype == torch.bool:
        return draw(st.booleans())
    if dtype.is_floating_point or (allow_float and draw(st.integers(0, 4)) == 0):
        return draw(st.sampled_from([2.0, -0.5, 1.0, 0.0, -0.0, 3.25, 1e-3, 1e30, math.inf, -math.inf,
                                     math.nan]))
    info = torch.iinfo(dtype)
    return draw(st.sampled_from([v for v in (2, 1, 0, -3, 7, 100, info.max, info.min) if info.min <= v <= info.max]))


def byte_shift(draw: Draw) -> int:
    """Bytes between an allocation and a tensor's storage: the ABI allows any, so test odd ones."""
    return draw(st.sampled_from([0, 1, 2, 3, 4, 6, 7]))


def elements(dims: list[int]) -> int:
    return math.prod(dims)
