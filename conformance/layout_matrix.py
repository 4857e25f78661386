"""A deterministic layout matrix per (kernel, dtype): the fast paths no draw has to find.

Vendors' kernels branch on layout: a BLAS call when operands are aligned and
row- or column-major, a vector loop when data are contiguous, a scalar tail
after the last full vector.  Hypothesis draws reach some of those branches a
few percent of the time; this matrix reaches every one on every run.  Each
tensor input takes every layout of LAYOUTS (contiguous, transposed, storage
offset one element, stride 0), with data aligned (byte shift 0) and misaligned
(an odd byte shift, which the ABI allows), at sizes around vector widths and
the block size (strategies.BLOCK); softmax and log_softmax on float32/float64
also get inputs of large magnitude (exp overflows without the max subtracted).

`cert` runs the full matrix (every size x every combination of the inputs'
layouts x both alignments); `ci` runs a covering subset of four cases: every input
meets every layout, input j rotated by j against input 0 (so a transposed
second operand meets a contiguous, aligned first one: a BLAS path for a
column-major B), both alignments occur, and sizes cycle through a vector
tail, a two-vector tail, a single element and a block boundary.

The kernels covered are the ones whose arguments the matrix can build without
a hand recipe: elementwise unary and binary ops (found from their schemas),
softmax / log_softmax, full and last-dimension reductions, mm and bmm.
"""
from __future__ import annotations

import functools
import itertools
from typing import Callable

import torch

from fl_runtime.ops.schema import compile_plan

from .opspecs import elementwise_unary
from .recipes import NAMES
from .strategies import BLOCK

LAYOUTS = ("contiguous", "transposed", "offset", "stride0")
SHIFTS = {"aligned": 0, "misaligned": 3}
# Last-dimension sizes: around 4/8/16/32-lane vectors, then the block boundary.
SIZES_FULL = (1, 3, 7, 8, 9, 16, 17, 31, 32, 33, 64, 65, BLOCK - 1, BLOCK + 1)
SIZES_CI = (9, 33, 1, BLOCK + 1)
MATMUL_SIZES_FULL = (1, 7, 8, 9, 16, 17, 33, 65)
MATMUL_SIZES_CI = (17, 9, 1, 65)
ROWS = 3
LARGE_MAGNITUDE = {torch.float32: 1e4, torch.float64: 1e6}
_SOFTMAX = ("_softmax", "_log_softmax")
_REDUCE_ALL = ("sum", "mean", "max", "min")
_REDUCE_LAST = ("sum.dim_IntList", "mean.dim")

Builder = Callable[[int, torch.dtype], tuple[list, dict]]   # size -> (schema args with shapes, kwargs)


def _layout(name: str, ndim: int, mutable: bool) -> dict:
    if name == "transposed" and ndim >= 2:
        return {"perm": list(range(ndim))[::-1]}
    if name == "offset":
        return {"offset": 1}
    if name == "stride0" and ndim >= 1 and not mutable:   # an in-place target may not alias itself
        return {"expand": [0]}
    return {}


def _tensor(shape: list[int], dtype: torch.dtype, seed: int, scale: float = 1.0) -> dict:
    return {"tensor": {"shape": shape, "dtype": NAMES[dtype], "seed": seed, "scale": scale, "specials": []}}


@functools.cache
def _shape_rule(op: str) -> tuple[int, tuple[bool, ...]] | None:
    """(tensor inputs, which are mutated) for elementwise unary / binary ops, else None."""
    try:
        plan = compile_plan(op)
    except AttributeError:
        return None
    mutated = tuple(i in plan.returns_alias for i in plan.tensor_arg_indices)
    if elementwise_unary(op):
        return 1, mutated
    if (plan.tensor_arg_indices != (0, 1) or plan.list_tensor_arg_indices or plan.has_generator
            or len(plan.returns_alias) != 1 or any(plan.out_returns)
            or any(spec.required for spec in plan.args[2:])):
        return None
    try:
        result = plan.op(torch.empty(5, device="meta"), torch.empty(5, device="meta"))
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return None
    return (2, mutated) if isinstance(result, torch.Tensor) and tuple(result.shape) == (5,) else None


def _builder(op: str) -> tuple[Builder, tuple[bool, ...], bool] | None:
    """How to build the op's arguments at a size, which tensor inputs are mutated, and
    whether it is a matmul (its own sizes)."""
    if op in _SOFTMAX:
        return (lambda n, dt: ([_tensor([ROWS, n], dt, 1), -1, False], {})), (False,), False
    if op in _REDUCE_ALL:
        return (lambda n, dt: ([_tensor([ROWS, n], dt, 1)], {})), (False,), False
    if op in _REDUCE_LAST:
        return (lambda n, dt: ([_tensor([ROWS, n], dt, 1), [-1], False], {})), (False,), False
    if op == "mm":
        return (lambda n, dt: ([_tensor([n, n + 2], dt, 1), _tensor([n + 2, n + 1], dt, 2)], {})), (False, False), True
    if op == "bmm":
        return (lambda n, dt: ([_tensor([2, n, n + 2], dt, 1), _tensor([2, n + 2, n + 1], dt, 2)], {})), \
            (False, False), True
    rule = _shape_rule(op)
    if rule is None:
        return None
    count, mutated = rule
    return (lambda n, dt: ([_tensor([ROWS, n], dt, 1 + i) for i in range(count)], {})), mutated, False


def _plans(inputs: int, full: bool) -> list[tuple[tuple[str, ...], str, int]]:
    """(layout per input, alignment, size index) for each case."""
    if full:
        return [(combo, align, -1) for combo in itertools.product(LAYOUTS, repeat=inputs) for align in SHIFTS]
    # Each input meets every layout; input j is rotated by j, so with two inputs the second
    # is transposed while the first is contiguous and aligned (a BLAS path for a column-major B).
    names = list(SHIFTS)
    return [(tuple(LAYOUTS[(i + j) % len(LAYOUTS)] for j in range(inputs)), names[(i // 2 + i) % 2], i)
            for i in range(len(LAYOUTS))]


def cases(op: str, dtype: torch.dtype, full: bool) -> list[dict]:
    """The matrix for one kernel and dtype (empty for kernels it does not cover)."""
    found = _builder(op)
    if found is None or dtype == torch.complex64:
        return []
    build, mutated, matmul = found
    sizes = (MATMUL_SIZES_FULL if full else MATMUL_SIZES_CI) if matmul else (SIZES_FULL if full else SIZES_CI)
    out = []
    for combo, align, which in _plans(len(mutated), full):
        for size in (sizes if which < 0 else [sizes[which % len(sizes)]]):
            args, kwargs = build(size, dtype)
            tensors = [a for a in args if isinstance(a, dict) and "tensor" in a]
            for recipe, layout, mutable in zip(tensors, combo, mutated):
                recipe["tensor"].update(_layout(layout, len(recipe["tensor"]["shape"]), mutable))
            what = f"layout matrix: size {size}, {align}, inputs {', '.join(combo)}"
            out.append({"op": op, "dtype": NAMES[dtype], "args": args, "kwargs": kwargs,
                        "shift": SHIFTS[align], "out_shift": SHIFTS[align], "matrix": what})
            if op in _SOFTMAX and dtype in LARGE_MAGNITUDE:
                loud = {**out[-1], "matrix": what + ", large magnitude",
                        "args": [{"tensor": {**args[0]["tensor"], "scale": LARGE_MAGNITUDE[dtype]}}, *args[1:]]}
                out.append(loud)
    return out


def transposed_copy(op: str, dtype: torch.dtype) -> dict | None:
    """For copy_, in both profiles: a transposed source whose two dimensions both exceed a
    small tile, into a contiguous target (what .contiguous() of a transposed tensor does).
    The matrix's sources have only ROWS rows, so a kernel's tiled transpose path (the
    reference's copy_tiled, 8x8 tiles) was never reached (branch coverage of the ci
    profile); 19 x 21 also leaves partial tiles at both edges."""
    if op != "copy_" or dtype == torch.complex64:
        return None
    source = _tensor([19, 21], dtype, 2)
    source["tensor"].update(_layout("transposed", 2, False))
    return {"op": op, "dtype": NAMES[dtype], "args": [_tensor([19, 21], dtype, 1), source], "kwargs": {},
            "shift": 0, "out_shift": 0, "matrix": "layout matrix: 19x21 copy from a transposed source (tiled)"}


def empty_inner_dimension(op: str, dtype: torch.dtype) -> dict | None:
    """For mm and bmm, in both profiles: a product over an empty inner dimension (k = 0) is
    all zeros, a separate path in a kernel (no BLAS call; the reference's `scale_zero`) that
    drawn cases reached only by luck (branch coverage of the ci profile: never)."""
    if op not in ("mm", "bmm") or dtype == torch.complex64:
        return None
    batch = [2] if op == "bmm" else []
    args = [_tensor([*batch, 3, 0], dtype, 1), _tensor([*batch, 0, 4], dtype, 2)]
    return {"op": op, "dtype": NAMES[dtype], "args": args, "kwargs": {}, "shift": 0, "out_shift": 0,
            "matrix": "layout matrix: empty inner dimension (k = 0), the product is zeros"}
