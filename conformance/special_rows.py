"""Rows of special values for ops that reduce, normalise, scan or sort along a dimension.

Real models feed these kernels rows that random cases almost never draw: a fully masked
attention row (all -inf), an overflowed row (all +inf), a row poisoned by one NaN or
made of NaN, a row holding both infinities, and an empty dimension.  PyTorch's CPU
answer for each is fixed (softmax of an all -inf row is NaN, max of a row with a NaN is
NaN and argmax points at the NaN, var of +inf and -inf is NaN ...), and a kernel that
special-cases such a row differently is wrong where it hurts most.

For every floating dtype, an op of SPECS gets, as explicit cases before its drawn ones
(conformance.kernel_checks):

  rows     a [ROWS, LENGTH] input, reduced along dim 1, whose row r carries pattern
           r of PATTERNS (so every pattern sits beside every other in one call);
  columns  the same rows stored as columns ([LENGTH, ROWS], reduced along dim 0: the
           kernels' strided path), patterns shifted by three;
  empty    a dimension of length 0, where PyTorch allows it (where it refuses, there is
           no reference and the case is skipped).

Ops without a dimension argument (sum, max, prod ...) get one call per pattern over a
1-d input.  Normalisations put the patterns in their normalised groups; backward forms
take the forward's saved statistics of such rows (conformance.recipes.derive).  NaN
placement is judged element for element by conformance.compare: NaN must meet NaN.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from .recipes import NAMES

ROWS, LENGTH = 6, 19      # 19: a vector loop's full blocks and a tail
PATTERNS = ("all -inf", "all +inf", "all NaN", "one NaN", "+inf with -inf", "finite")


def _finite(i: int) -> float:
    """Small exact values (no rounding in any dtype), varied along the row."""
    return ((i * 7919) % 17 - 8) / 4.0


def _pattern(which: int, row: int, length: int) -> list[float]:
    name = PATTERNS[which % len(PATTERNS)]
    if name == "all -inf":
        return [-math.inf] * length
    if name == "all +inf":
        return [math.inf] * length
    if name == "all NaN":
        return [math.nan] * length
    values = [_finite(row * length + i) for i in range(length)]
    if name == "one NaN" and length:
        values[(3 * row + 1) % length] = math.nan
    if name == "+inf with -inf":
        values = [math.inf if i % 2 == 0 else -math.inf for i in range(length)]
    return values


def _tensor(shape: list[int], dtype: torch.dtype, values: list[float]) -> dict:
    return {"tensor": {"shape": shape, "dtype": NAMES[dtype], "values": values}}


def row_tensor(dtype: torch.dtype, rows: int, length: int, shift: int, along: int) -> dict:
    """rows x length values, row r holding pattern r + shift; `along` = 1 stores the rows
    as rows ([rows, length]), 0 as columns ([length, rows])."""
    grid = [_pattern(r + shift, r, length) for r in range(rows)]
    if along == 1:
        return _tensor([rows, length], dtype, [v for row in grid for v in row])
    return _tensor([length, rows], dtype, [grid[r][i] for i in range(length) for r in range(rows)])


def _finite_tensor(shape: list[int], dtype: torch.dtype) -> dict:
    return _tensor(shape, dtype, [_finite(i) + 0.25 for i in range(math.prod(shape))])


# ---- per op: (tensor of rows, dim) -> schema args, kwargs ------------------------------

Along = Callable[[dict, int, torch.dtype], tuple[list, dict]]


def _dim_list(x: dict, dim: int, dtype: torch.dtype) -> tuple[list, dict]:
    return [x, [dim]], {}


def _dim_int(x: dict, dim: int, dtype: torch.dtype) -> tuple[list, dict]:
    return [x, dim], {}


def _softmax(x: dict, dim: int, dtype: torch.dtype) -> tuple[list, dict]:
    return [x, dim, False], {}


def _norm(x: dict, dim: int, dtype: torch.dtype) -> tuple[list, dict]:
    return [x, 2.0, [dim]], {}


def _topk(x: dict, dim: int, dtype: torch.dtype) -> tuple[list, dict]:
    return [x, min(2, x["tensor"]["shape"][dim]), dim], {}


def _sum_out(x: dict, dim: int, dtype: torch.dtype) -> tuple[list, dict]:
    shape = x["tensor"]["shape"]
    return [x, [dim], False], {"out": _finite_tensor([shape[1 - dim]], dtype)}


def _backward(forward: str) -> Along:
    """_softmax_backward_data / _log_softmax_backward_data: special rows in the gradient,
    and the forward's output of special rows (shifted) as `output`."""
    def along(x: dict, dim: int, dtype: torch.dtype) -> tuple[list, dict]:
        shape = x["tensor"]["shape"]
        rows, length = (shape[0], shape[1]) if dim == 1 else (shape[1], shape[0])
        source = row_tensor(dtype, rows, length, 2, dim)
        output = {"derived": {"op": forward, "args": [source, dim, False], "output": 0}}
        return [x, output, dim, {"dtype": NAMES[dtype]}], {}
    return along


ALONG_DIM: dict[str, Along] = {
    "_softmax": _softmax, "_log_softmax": _softmax, "softmax.int": _dim_int, "log_softmax.int": _dim_int,
    "_softmax_backward_data": _backward("_softmax"), "_log_softmax_backward_data": _backward("_log_softmax"),
    "logsumexp": _dim_list, "amax": _dim_list, "amin": _dim_list, "argmax": _dim_int, "argmin": _dim_int,
    "max.dim": _dim_int, "min.dim": _dim_int, "sum.dim_IntList": _dim_list, "sum.IntList_out": _sum_out,
    "mean.dim": _dim_list, "var.correction": _dim_list, "std.correction": _dim_list,
    "var_mean.correction": _dim_list, "std_mean.correction": _dim_list, "linalg_vector_norm": _norm,
    "norm.ScalarOpt_dim": _norm, "cumsum": _dim_int, "cumprod": _dim_int, "prod.dim_int": _dim_int,
    "sort": _dim_int, "sort.stable": lambda x, d, t: ([x], {"stable": True, "dim": d}), "topk": _topk,
    "all.dim": _dim_int, "any.dim": _dim_int, "all.dims": _dim_list, "any.dims": _dim_list,
    "nansum": _dim_list, "aminmax": lambda x, d, t: ([x], {"dim": d}),
}
WHOLE = frozenset({"sum", "mean", "max", "min", "prod", "all", "any", "nansum"})   # no dimension argument


# ---- normalisations: the patterns fill each normalised group ---------------------------

def _groups(dtype: torch.dtype, shape: list[int], group_of: Callable[[tuple], int], shift: int) -> dict:
    """A tensor of `shape` whose group g (the elements i with group_of(i) == g, in order)
    holds pattern g + shift."""
    grid = torch.cartesian_prod(*[torch.arange(n) for n in shape]).reshape(-1, len(shape))
    indices = [tuple(i) for i in grid.tolist()]
    members: dict[int, int] = {}
    for index in indices:
        members[group_of(index)] = members.get(group_of(index), 0) + 1
    patterns = {g: _pattern(g + shift, g, n) for g, n in members.items()}
    taken: dict[int, int] = {}
    values = []
    for index in indices:
        g = group_of(index)
        values.append(patterns[g][taken.get(g, 0)])
        taken[g] = taken.get(g, 0) + 1
    return _tensor(shape, dtype, values)


def _layer_norm_input(dtype: torch.dtype, shift: int) -> dict:
    return row_tensor(dtype, ROWS, LENGTH, shift, 1)


def _group_norm_input(dtype: torch.dtype, shift: int) -> dict:   # N=3, C=4, HxW=5, 2 groups: 6 groups of 10
    return _groups(dtype, [3, 4, 5], lambda i: i[0] * 2 + i[1] // 2, shift)


def _batch_norm_input(dtype: torch.dtype, shift: int) -> dict:   # N=4, C=6, L=3: a channel is a group of 12
    return _groups(dtype, [4, 6, 3], lambda i: i[1], shift)


def _normalisations(dtype: torch.dtype, shift: int) -> dict[str, tuple[list, dict]]:
    f = lambda shape: _finite_tensor(shape, dtype)   # noqa: E731 - weights, biases, statistics
    ln, gn, bn = _layer_norm_input(dtype, shift), _group_norm_input(dtype, shift), _batch_norm_input(dtype, shift)
    ln_fwd = [ln, [LENGTH], f([LENGTH]), f([LENGTH]), 1e-5]
    gn_fwd = [gn, f([4]), f([4]), 3, 4, 5, 2, 1e-5]
    bn_fwd = [bn, f([6]), f([6]), f([6]), _tensor([6], dtype, [1.0 + i for i in range(6)]), True, 0.1, 1e-5]
    saved = lambda op, args, k: {"derived": {"op": op, "args": args, "output": k}}   # noqa: E731
    return {
        "native_layer_norm": (ln_fwd, {}),
        "native_group_norm": (gn_fwd, {}),
        "native_batch_norm": (bn_fwd, {}),
        "native_layer_norm_backward": ([_layer_norm_input(dtype, shift + 3), ln, [LENGTH],
                                        saved("native_layer_norm", ln_fwd, 1), saved("native_layer_norm", ln_fwd, 2),
                                        f([LENGTH]), f([LENGTH]), [True, True, True]], {}),
        "native_group_norm_backward": ([_group_norm_input(dtype, shift + 3), gn, saved("native_group_norm", gn_fwd, 1),
                                        saved("native_group_norm", gn_fwd, 2), f([4]), 3, 4, 5, 2,
                                        [True, True, True]], {}),
        "native_batch_norm_backward": ([_batch_norm_input(dtype, shift + 3), bn, f([6]), None, None,
                                        saved("native_batch_norm", bn_fwd, 1), saved("native_batch_norm", bn_fwd, 2),
                                        True, 1e-5, [True, True, True]], {}),
    }


NORMALISATIONS = frozenset(_normalisations(torch.float32, 0))


def applies(op: str) -> bool:
    return op in ALONG_DIM or op in WHOLE or op in NORMALISATIONS


def cases(op: str, dtype: torch.dtype) -> list[dict]:
    """The special-row cases of `op` on `dtype` (none for other ops and non-floating dtypes)."""
    if not dtype.is_floating_point or not applies(op) or dtype.itemsize == 1:
        return []

    def case(label: str, args: list, kwargs: dict) -> dict:
        return {"op": op, "dtype": NAMES[dtype], "args": args, "kwargs": kwargs, "shift": 0, "out_shift": 0,
                "matrix": f"special rows ({label}; row r holds pattern r of {', '.join(PATTERNS)})"}

    if op in NORMALISATIONS:
        return [case(f"normalised groups, patterns from {s}", *_normalisations(dtype, s)[op]) for s in (0, 3)]
    if op in WHOLE:
        return [case(PATTERNS[p], [_tensor([LENGTH], dtype, _pattern(p, p, LENGTH))], {})
                for p in range(len(PATTERNS))] + [case("empty input", [_tensor([0], dtype, [])], {})]
    along = ALONG_DIM[op]
    return [case("rows along dim 1", *along(row_tensor(dtype, ROWS, LENGTH, 0, 1), 1, dtype)),
            case("columns along dim 0", *along(row_tensor(dtype, ROWS, LENGTH, 3, 0), 0, dtype)),
            case("empty dimension", *along(_tensor([ROWS, 0], dtype, []), 1, dtype))]
