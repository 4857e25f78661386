"""Which kernel-table ops the suite can generate cases for, and how.

A generator draws one call's schema arguments (positional list + keyword
dict) for a dtype; values are recipes (conformance.recipes), so the whole
case is a small dict.  Ops of a kernel table missing here are reported as
"untested", never as passing.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import torch
from hypothesis import strategies as st

from fl_runtime import abi
from fl_runtime.ops.schema import compile_plan

from . import opinfo_cases
from .attention_specs import ATTENTION_GENERATORS
from .fp8_specs import FP8_GENERATORS
from .nn_specs import NN_GENERATORS
from .optim_specs import OPTIM_GENERATORS
from . import strategies as s
from .recipes import DTYPES, NAMES, special_values

Generator = Callable[[s.Draw, torch.dtype, int], tuple[list, dict]]


@dataclass(frozen=True)
class OpSpec:
    generate: Generator
    special_grid: bool = False    # binary tensor op: also try every pair of special values
    with_opinfo: bool = False     # draw OpInfo's samples too (they reach what the recipe does not)


def _alpha(draw: s.Draw, dtype: torch.dtype) -> dict:
    if not draw(st.booleans()):
        return {}
    if dtype == torch.bool:
        return {"alpha": True}
    return {"alpha": draw(st.sampled_from([2.0, -0.5] if dtype.is_floating_point else [2, -3]))}


def binary(inplace: bool = False, alpha: bool = False, scalar_other: bool = False,
           integral: bool = False) -> Generator:
    """self op other; `integral`: a scalar other stays an integer (bitwise ops refuse floats)."""
    def generate(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
        out = s.shape(draw)
        self_ = s.tensor(draw, out if inplace else s.broadcast_to(draw, out), dtype, mutable=inplace)
        other = (s.scalar(draw, dtype, allow_float=not (inplace or integral)) if scalar_other
                 else s.tensor(draw, s.broadcast_to(draw, out), dtype))
        return [self_, other], (_alpha(draw, dtype) if alpha else {})
    return generate


def unary(inplace: bool = False) -> Generator:
    def generate(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
        return [s.tensor(draw, s.shape(draw), dtype, mutable=inplace)], {}
    return generate


def pow_scalar(inplace: bool = False) -> Generator:
    def generate(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
        exponents = [2.0, 0.5, 3.0, -1.0, 0.0, 2.5, -2.0] if dtype.is_floating_point else [2, 3, 0, 1]
        return [s.tensor(draw, s.shape(draw), dtype, mutable=inplace), draw(st.sampled_from(exponents))], {}
    return generate


def pow_scalar_base(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    """pow.Scalar(Scalar self, Tensor exponent): a scalar base to tensor powers."""
    bases = [2.0, 0.5, -1.5, 0.0, -0.0, 10.0, 1.0, math.inf, math.nan] if dtype.is_floating_point else [2, 1, 0, -1, 3]
    base = draw(st.sampled_from(bases if dtype != torch.uint8 else [2, 1, 0, 3]))
    # integer exponents from [-3, 3): larger ones only test wrap-around of the overflow
    exponent = s.tensor(draw, s.shape(draw), dtype)
    if not dtype.is_floating_point:
        exponent["tensor"].update(scale=3.0, specials=[])
    return [base, exponent], {}


def hardtanh_bounds(draw: s.Draw, dtype: torch.dtype) -> list:
    """min_val, max_val (either order: PyTorch clamps to max_val when they cross)."""
    if dtype.is_floating_point:
        return draw(st.lists(st.sampled_from([-1.0, 1.0, 0.0, -0.0, -0.5, 0.25, 2.0, -3.0]), min_size=2, max_size=2))
    return [s.scalar(draw, dtype, allow_float=False) for _ in range(2)]


def hardtanh(inplace: bool = False) -> Generator:
    def generate(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
        return [s.tensor(draw, s.shape(draw), dtype, mutable=inplace), *hardtanh_bounds(draw, dtype)], {}
    return generate


def hardtanh_backward(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    out = s.shape(draw)
    grad, self_ = (s.tensor(draw, s.broadcast_to(draw, out), dtype) for _ in range(2))
    return [grad, self_, *hardtanh_bounds(draw, dtype)], {}


def clamp(inplace: bool = False) -> Generator:
    def generate(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
        low = s.scalar(draw, dtype, allow_float=False) if draw(st.booleans()) else None
        high = s.scalar(draw, dtype, allow_float=False) if low is None or draw(st.booleans()) else None
        return [s.tensor(draw, s.shape(draw), dtype, mutable=inplace), low, high], {}
    return generate


def same_shape(count: int, scalar_name: str | None = None, inplace: bool = False,
               scalars: tuple = (0.5, 2.0, -1.0)) -> Generator:
    """`count` tensors that broadcast together, plus an optional named scalar (value=, weight=, ...)."""
    def generate(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
        out = s.shape(draw)
        first = s.tensor(draw, out if inplace else s.broadcast_to(draw, out), dtype, mutable=inplace)
        args = [first] + [s.tensor(draw, s.broadcast_to(draw, out), dtype) for _ in range(count - 1)]
        if scalar_name is None:
            return args, {}
        # Scalars are drawn representable in the dtype (PyTorch would wrap -1 to 255 for uint8).
        ints = (2, 1, 0) if dtype in (torch.uint8, torch.bool) else (2, -1, 1)
        value = draw(st.sampled_from(scalars if dtype.is_floating_point else ints))
        return (args + [value], {}) if scalar_name == "positional" else (args, {scalar_name: value})
    return generate


def where(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    out = s.shape(draw)
    return [s.tensor(draw, s.broadcast_to(draw, out), torch.bool),
            s.tensor(draw, s.broadcast_to(draw, out), dtype), s.tensor(draw, s.broadcast_to(draw, out), dtype)], {}


def where_out(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    """where.self_out: where's inputs, and an out= tensor of the broadcast shape (the op kind an
    out= overlapping an input reaches: conformance.overlap)."""
    args, _ = where(draw, dtype, mask)
    shape = torch.broadcast_shapes(*(a["tensor"]["shape"] for a in args))
    return args, {"out": s.tensor(draw, list(shape), dtype, mutable=True)}


def index_add(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    """index_add_(self, dim, index, source, alpha): source's rows added at index (duplicates
    accumulate) along dim."""
    dims = s.shape(draw, min_dims=1, empty=False)
    dim = draw(st.integers(0, len(dims) - 1))
    length = draw(st.integers(0, 6))
    source = dims[:dim] + [length] + dims[dim + 1:]
    kwargs = {"alpha": draw(st.sampled_from([2, -1]))} if draw(st.booleans()) and dtype != torch.bool else {}
    index = s.index_tensor(draw, [length], 0, dims[dim])     # index_add_ takes no negative index
    return [s.tensor(draw, dims, dtype, mutable=True), dim, index, s.tensor(draw, source, dtype)], kwargs


def _dims_of(draw: s.Draw, ndim: int) -> list[int]:
    if ndim == 0:
        return draw(st.sampled_from([[], [0], [-1]]))
    return draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))


def reduce_all(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    return [s.tensor(draw, s.shape(draw), dtype)], {}


def reduce_dims(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    dims = s.shape(draw)
    return [s.tensor(draw, dims, dtype), _dims_of(draw, len(dims)), draw(st.booleans())], {}


def reduce_dims_out(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    """sum.IntList_out: reduce_dims plus an `out` of the result's shape, in its own layout."""
    [self_, dims, keepdim], _ = reduce_dims(draw, dtype, mask)
    shape = self_["tensor"]["shape"]
    reduced = {d % len(shape) for d in dims} if shape and dims else set(range(len(shape)))
    out_shape = [1 if d in reduced else n for d, n in enumerate(shape) if keepdim or d not in reduced]
    return [self_, dims, keepdim], {"out": s.tensor(draw, out_shape, dtype, mutable=True)}


def _index(draw: s.Draw, size: int, length: int, unique: bool) -> dict:
    """An int64 index tensor into a dimension of `size`: values in [-size, size), or distinct
    ones in [0, size) when `unique`."""
    return s.index_tensor(draw, [length], 0 if unique else -size, size, unique)


def index_put(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    """_index_put_impl_(self, indices, values, accumulate, unsafe): integer indices into the
    leading dims (after a None at times), or a bool mask; without accumulate the indexed
    positions are distinct (PyTorch defines no winner among duplicates)."""
    dims = s.shape(draw, min_dims=1, empty=False)
    accumulate = draw(st.booleans())
    if draw(st.integers(0, 3)) == 0:   # a bool mask over dim 0
        indices = [s.tensor(draw, dims[:1], torch.bool)]
        indexed = s.broadcast_to(draw, dims[1:])
    else:
        skip = 1 if len(dims) > 1 and draw(st.booleans()) else 0
        count = draw(st.integers(1, min(2, len(dims) - skip)))
        length = draw(st.integers(0, dims[skip] if not accumulate else 8))
        indices = [None] * skip + [_index(draw, dims[skip + i], length, unique=i == 0 and not accumulate)
                                   for i in range(count)]
        indexed = s.broadcast_to(draw, dims[:skip] + [length] + dims[skip + count:])
    values = s.tensor(draw, indexed, dtype)
    return [s.tensor(draw, dims, dtype, mutable=True), indices, values, accumulate, False], {}


def argmax(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    dims = s.shape(draw)
    dim = draw(st.one_of(st.none(), st.integers(-max(len(dims), 1), max(len(dims), 1) - 1)))
    return [s.tensor(draw, dims, dtype), dim, draw(st.booleans())], {}


def softmax(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    dims = s.shape(draw)
    return [s.tensor(draw, dims, dtype), draw(st.integers(-max(len(dims), 1), max(len(dims), 1) - 1)), False], {}


_SIDE = st.one_of(st.integers(0, 8), st.sampled_from([15, 33, 64, 65, 130]))


def mm(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    m, k, n = draw(_SIDE), draw(_SIDE), draw(_SIDE)
    return [s.tensor(draw, [m, k], dtype), s.tensor(draw, [k, n], dtype)], {}


def bmm(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    b, m, k, n = draw(st.integers(0, 3)), draw(_SIDE), draw(_SIDE), draw(_SIDE)
    return [s.tensor(draw, [b, m, k], dtype), s.tensor(draw, [b, k, n], dtype)], {}


def addmm(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    m, k, n = draw(_SIDE), draw(_SIDE), draw(_SIDE)
    bias = draw(st.sampled_from([[m, n], [n], [1, n], [m, 1], []]))
    kwargs = {"beta": draw(st.sampled_from([1.0, 0.0, 0.5])), "alpha": draw(st.sampled_from([1.0, -2.0]))}
    return [s.tensor(draw, bias, dtype), s.tensor(draw, [m, k], dtype), s.tensor(draw, [k, n], dtype)], kwargs


def copy(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    dims = s.shape(draw)
    sources = [dt for dt in DTYPES.values() if mask >> abi.DTYPE_TO_FL[dt] & 1 and dt != torch.complex64]
    src_dtype = draw(st.sampled_from(sources or [dtype]))
    # PyTorch leaves float -> integer undefined for NaN, inf and out-of-range values.
    finite = src_dtype.is_floating_point and not dtype.is_floating_point and dtype != torch.bool
    src = s.tensor(draw, s.broadcast_to(draw, dims), src_dtype, finite=finite)
    return [s.tensor(draw, dims, dtype, mutable=True), src, False], {}


def fill(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    return [s.tensor(draw, s.shape(draw), dtype, mutable=True), s.scalar(draw, dtype, allow_float=False)], {}


def _inplace_pairs(make: Callable[[bool], Generator], names: list[str], overload: str = "") -> dict:
    """'exp' -> {'exp': ..., 'exp_': ...} (with '.Tensor' style overloads appended)."""
    table = {}
    for name in names:
        table[name + overload] = OpSpec(make(False))
        table[name + "_" + overload] = OpSpec(make(True))
    return table


def _gridded(table: dict) -> dict:
    return {op: OpSpec(spec.generate, special_grid=True) for op, spec in table.items()}


OPSPECS: dict[str, OpSpec] = {
    **_gridded(_inplace_pairs(lambda i: binary(i, alpha=True), ["add", "sub"], ".Tensor")),
    **_inplace_pairs(lambda i: binary(i, alpha=True, scalar_other=True), ["add", "sub"], ".Scalar"),
    **_gridded(_inplace_pairs(lambda i: binary(i), ["mul", "div"], ".Tensor")),
    **_inplace_pairs(lambda i: binary(i, scalar_other=True), ["mul", "div"], ".Scalar"),
    "rsub.Scalar": OpSpec(binary(alpha=True, scalar_other=True)),
    "maximum": OpSpec(binary(), special_grid=True), "minimum": OpSpec(binary(), special_grid=True),
    **{f"{cmp}.Tensor": OpSpec(binary(), special_grid=True) for cmp in ("eq", "ne", "gt", "lt", "ge", "le")},
    **{f"{cmp}.Scalar": OpSpec(binary(scalar_other=True)) for cmp in ("eq", "ne", "gt", "lt", "ge", "le")},
    **_inplace_pairs(unary, ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu"]),
    "pow.Tensor_Scalar": OpSpec(pow_scalar()), "pow_.Scalar": OpSpec(pow_scalar(True)),
    "clamp": OpSpec(clamp()), "clamp_": OpSpec(clamp(True)),
    "where.self": OpSpec(where), "where.self_out": OpSpec(where_out, with_opinfo=True),
    "index_add_": OpSpec(index_add, with_opinfo=True),
    **_inplace_pairs(lambda i: same_shape(2, "positional", i, (0.5, 0.25, -1.0, 2.0)), ["lerp"], ".Scalar"),
    **_inplace_pairs(lambda i: same_shape(3, "value", i), ["addcmul", "addcdiv"]),
    "threshold_backward": OpSpec(same_shape(2, "positional", scalars=(0.0, 0.5, -1.0))),
    "sigmoid_backward": OpSpec(same_shape(2)), "tanh_backward": OpSpec(same_shape(2)),
    "sum": OpSpec(reduce_all), "mean": OpSpec(reduce_all), "max": OpSpec(reduce_all), "min": OpSpec(reduce_all),
    "sum.dim_IntList": OpSpec(reduce_dims), "mean.dim": OpSpec(reduce_dims), "argmax": OpSpec(argmax),
    "_softmax": OpSpec(softmax), "_log_softmax": OpSpec(softmax),
    "mm": OpSpec(mm), "bmm": OpSpec(bmm), "addmm": OpSpec(addmm),
    "copy_": OpSpec(copy), "fill_.Scalar": OpSpec(fill), "zero_": OpSpec(unary(inplace=True)),
    "argmin": OpSpec(argmax), "sum.IntList_out": OpSpec(reduce_dims_out), "isfinite": OpSpec(unary()),
    **{f"bitwise_{op}.Scalar": OpSpec(binary(scalar_other=True, integral=True)) for op in ("and", "or", "xor")},
    **{f"{op}.Scalar": OpSpec(binary(scalar_other=True)) for op in ("fmod", "remainder")},
    **_inplace_pairs(lambda i: binary(i, scalar_other=True), ["clamp_min", "clamp_max"]),
    **_inplace_pairs(hardtanh, ["hardtanh"]), "hardtanh_backward": OpSpec(hardtanh_backward),
    "pow.Scalar": OpSpec(pow_scalar_base), "_index_put_impl_": OpSpec(index_put),
    **{op: OpSpec(generate, with_opinfo=True) for op, generate in NN_GENERATORS.items()},
    **{op: OpSpec(generate) for op, generate in ATTENTION_GENERATORS.items()},
    **{op: OpSpec(generate) for op, generate in OPTIM_GENERATORS.items()},
    **{op: OpSpec(generate) for op, generate in FP8_GENERATORS.items()},
}


def cases(op: str, dtype: torch.dtype, mask: int) -> st.SearchStrategy[dict]:
    """Hypothesis strategy of whole cases for one kernel and dtype: the hand recipe (and
    OpInfo's samples where the spec says so), else OpInfo samples (raises
    opinfo_cases.NoSource when there are none)."""
    if op not in OPSPECS:
        return opinfo_cases.cases(op, dtype)
    spec = OPSPECS[op]

    @st.composite
    def case(draw: s.Draw) -> dict:
        args, kwargs = spec.generate(draw, dtype, mask)
        return {"op": op, "dtype": NAMES[dtype], "args": args, "kwargs": kwargs,
                "shift": s.byte_shift(draw), "out_shift": s.byte_shift(draw)}
    if spec.with_opinfo:
        try:
            return st.one_of(case(), opinfo_cases.cases(op, dtype))   # shrinks towards the recipe
        except opinfo_cases.NoSource:
            pass
    return case()


def grid_case(op: str, dtype: torch.dtype) -> dict | None:
    """Every ordered pair of special values (NaN, +-inf, +-0, subnormals, extremes ...) at
    once, for binary tensor ops: self[i, j] = special i against other[j] = special j.
    Random cases plant specials only now and then; IEEE corner cases deserve certainty."""
    if op not in OPSPECS or not OPSPECS[op].special_grid:
        return None
    count = len(special_values(dtype))
    rows = {"shape": [count, count], "dtype": NAMES[dtype], "seed": 1, "scale": 1.0,
            "specials": [[i * count + j, i] for i in range(count) for j in range(count)]}
    columns = {"shape": [count], "dtype": NAMES[dtype], "seed": 2, "scale": 1.0,
               "specials": [[j, j] for j in range(count)]}
    return {"op": op, "dtype": NAMES[dtype], "args": [{"tensor": rows}, {"tensor": columns}], "kwargs": {},
            "shift": 0, "out_shift": 0}


@functools.cache
def elementwise_unary(op: str) -> bool:
    """Is `op` (Tensor self, scalars with defaults) -> one tensor of self's shape? Then every
    float16/bfloat16 input fits in one call (gelu, sin, erf, isnan ... as well as the hand-made
    unary specs)."""
    try:
        plan = compile_plan(op)
    except AttributeError:   # not an ATen op this torch knows
        return False
    if (plan.tensor_arg_indices != (0,) or plan.list_tensor_arg_indices or plan.has_generator
            or len(plan.returns_alias) != 1 or any(plan.out_returns)
            or any(spec.required for spec in plan.args[1:])):
        return False
    try:
        result = plan.op(torch.empty(5, device="meta"))
    except (RuntimeError, TypeError, ValueError, NotImplementedError):   # needs more than defaults (clamp)
        return False
    return isinstance(result, torch.Tensor) and tuple(result.shape) == (5,)


def sweep_case(op: str, dtype: torch.dtype) -> dict | None:
    """Every 16-bit input at once, for unary float ops on float16/bfloat16."""
    if dtype not in (torch.float16, torch.bfloat16):
        return None
    if not elementwise_unary(op):
        return None
    recipe = {"bits": "all", "dtype": NAMES[dtype], "shape": [1 << 16]}
    return {"op": op, "dtype": NAMES[dtype], "args": [{"tensor": recipe}], "kwargs": {}, "shift": 0,
            "out_shift": 0}
