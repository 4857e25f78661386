"""float8 (ABI 1.2): the 8-bit sweeps, the cast sweeps and _scaled_mm's cases and reference.

- Unary ops: every float8 bit pattern in one call (cert; a lean sample in ci), as the
  16-bit sweeps do for float16/bfloat16 (opspecs.sweep_case).
- copy_ (casts): every float8 pattern of the source to the kernel's dtype, and into a
  float8 destination every float16 and bfloat16 pattern plus the float32 and float64
  values on both sides of every rounding boundary of the format and past its largest
  value (saturation, infinity or NaN, by format): bit-exact against PyTorch's CPU casts
  (conformance.compare judges float8 results bit for bit).  Float to integer casts of
  NaN and infinities are undefined in PyTorch, and are left out.
- _scaled_mm: the shapes and layouts PyTorch's meta function accepts (self row-major,
  mat2 column-major, mat2's sides multiples of 16), tensor-wise or row-wise scales,
  bias, scale_result, every output dtype; judged like mm, against float64.
"""
from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from . import strategies as s
from .recipes import FP8_DTYPES, NAMES, build


def _case(op: str, dtype: torch.dtype, args: list) -> dict:
    return {"op": op, "dtype": NAMES[dtype], "args": args, "kwargs": {}, "shift": 0, "out_shift": 0}


def _patterns(dtype: torch.dtype, exhaustive: bool) -> dict:
    recipe = {"bits": "all" if exhaustive else "sample", "dtype": NAMES[dtype]}
    return {"tensor": {**recipe, "shape": [build(recipe).numel()]}}


def boundaries(fp8: torch.dtype, wide: torch.dtype) -> list[float]:
    """Values of `wide` (float32 or float64) on and next to every midpoint between two finite
    `fp8` values, and past the largest one (the rounding and overflow rules)."""
    finite = sorted({v for v in torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fp8).double().tolist()
                     if math.isfinite(v)})
    picked: list[float] = []
    for low, high in zip(finite, finite[1:]):
        mid = torch.tensor([(low + high) / 2], dtype=wide)
        picked += [torch.nextafter(mid, torch.tensor([-math.inf], dtype=wide)).item(), mid.item(),
                   torch.nextafter(mid, torch.tensor([math.inf], dtype=wide)).item()]
    top = finite[-1]
    picked += [top * k for k in (1.03, 1.07, 1.2, 2.0, 1e3)] + [math.inf, math.nan, 1e-30]
    return picked + [-v for v in picked]


def _cast_sources(fp8: torch.dtype, exhaustive: bool) -> list[dict]:
    """Sources for copy_ into `fp8`: the 16-bit patterns (cert: all of them; ci: none, the
    float32 boundaries are the lean sample) and the boundary values."""
    sources = [{"tensor": {"dtype": NAMES[wide], "shape": [], "values": boundaries(fp8, wide)}}
               for wide in (torch.float32, torch.float64)]
    if exhaustive:
        sources += [{"tensor": {"bits": "all", "dtype": NAMES[half], "shape": [1 << 16]}}
                    for half in (torch.float16, torch.bfloat16)]
    for source in sources:
        recipe = source["tensor"]
        if "values" in recipe:
            recipe["shape"] = [len(recipe["values"])]
    return sources


def _destination(dtype: torch.dtype, numel: int) -> dict:
    return {"tensor": {"shape": [numel], "dtype": NAMES[dtype], "seed": 7, "scale": 1.0, "specials": [],
                       "finite": False}}


def copy_cases(dtype: torch.dtype, mask: int, exhaustive: bool) -> list[dict]:
    """copy_ with `dtype` as the destination (the kernel's unit dtype)."""
    from fl_runtime import abi
    cases = []
    if dtype in FP8_DTYPES:
        for source in _cast_sources(dtype, exhaustive):
            if mask >> abi.DTYPE_TO_FL[getattr(torch, source["tensor"]["dtype"])] & 1:
                cases.append(_case("copy_", dtype, [_destination(dtype, source["tensor"]["shape"][0]), source]))
    for fp8 in FP8_DTYPES:
        if fp8 == dtype or not mask >> abi.DTYPE_TO_FL[fp8] & 1:
            continue
        source = _patterns(fp8, exhaustive)
        if not dtype.is_floating_point and dtype != torch.bool:   # NaN -> integer is undefined in PyTorch
            source = {"tensor": {**source["tensor"], "bits": None, "values": _finite_patterns(fp8, exhaustive)}}
            source["tensor"]["shape"] = [len(source["tensor"]["values"])]
        numel = source["tensor"]["shape"][0]
        cases.append(_case("copy_", dtype, [_destination(dtype, numel), source]))
    return cases


def _finite_patterns(fp8: torch.dtype, exhaustive: bool) -> list[float]:
    values = build(_patterns(fp8, exhaustive)["tensor"]).double().tolist()
    return [v for v in values if math.isfinite(v)]


def sweep_cases(op: str, dtype: torch.dtype, mask: int, exhaustive: bool, elementwise: bool) -> list[dict]:
    """The float8 sweeps of one kernel on one dtype (none for other kernels); `elementwise`:
    the op is elementwise unary (conformance.opspecs.elementwise_unary), so one call takes
    every pattern."""
    if op == "copy_":
        return copy_cases(dtype, mask, exhaustive)
    if dtype in FP8_DTYPES and elementwise:
        return [_case(op, dtype, [_patterns(dtype, exhaustive)])]
    return []


# ---- _scaled_mm ---------------------------------------------------------------------

def _scale(draw: s.Draw, shape: list[int]) -> dict:
    """Positive finite scales, as quantisation gives them."""
    count = math.prod(shape)
    values = draw(st.lists(st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0, 0.1]), min_size=count, max_size=count))
    return {"tensor": {"shape": shape, "dtype": "float32", "values": values}}


def _operand(draw: s.Draw, dims: list[int], dtype: torch.dtype, column_major: bool) -> dict:
    value = s.tensor(draw, dims, dtype)
    step = draw(st.sampled_from([1, 2]))
    value["tensor"].update(perm=[1, 0] if column_major else None, expand=[],
                           step=([1, step] if column_major else [step, 1]) if step > 1 else None)
    return value


def scaled_mm(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    m = draw(st.sampled_from([1, 3, 16, 33]))
    k, n = draw(st.sampled_from([16, 32])), draw(st.sampled_from([16, 32]))
    self_, mat2 = _operand(draw, [m, k], dtype, False), _operand(draw, [k, n], dtype, True)
    out_dtype = draw(st.sampled_from([None, torch.float32, torch.bfloat16, torch.float16]))
    rowwise = out_dtype == torch.bfloat16 and draw(st.booleans())
    scale_a, scale_b = (_scale(draw, [m, 1]), _scale(draw, [1, n])) if rowwise else (_scale(draw, []),
                                                                                       _scale(draw, []))
    kwargs: dict = {}
    if out_dtype is not None:
        kwargs["out_dtype"] = {"dtype": NAMES[out_dtype]}
    if draw(st.booleans()):
        kwargs["bias"] = s.tensor(draw, [n], out_dtype or torch.float32, finite=True)
    if out_dtype is None and draw(st.integers(0, 3)) == 0:
        kwargs["scale_result"] = _scale(draw, [])
    return [self_, mat2, scale_a, scale_b], kwargs


def scaled_mm_reference(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                        use_fast_accum=False):
    """torch._scaled_mm on float8 inputs; on the float64 copies the suite's wide (and absolute)
    references make, the same formula in float64 as PyTorch's CPU computes it (2.13): the
    product, times both scales, plus bias, and only then, only with a bias and a float8
    output, divided by scale_result (without a bias its CPU kernel ignores scale_result;
    tests/abi/test_conformance_units.py pins that)."""
    if self.dtype in FP8_DTYPES:
        return torch._scaled_mm(self, mat2, scale_a=scale_a, scale_b=scale_b, bias=bias, scale_result=scale_result,
                                out_dtype=out_dtype, use_fast_accum=use_fast_accum)
    result = (self @ mat2) * scale_a.double() * scale_b.double()
    if bias is not None:
        result = result + bias.double()
    if bias is not None and scale_result is not None and (out_dtype is None or out_dtype in FP8_DTYPES):
        result = result / scale_result.double()
    return result


FP8_GENERATORS = {"_scaled_mm": scaled_mm}
CPU_REFERENCES = {"_scaled_mm": scaled_mm_reference}
