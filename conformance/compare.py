"""Apply a tolerance rule to one output: a Verdict with the worst element."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .recipes import FP8_DTYPES, MANTISSA_BITS, smallest_subnormal
from .tolerances import Tolerance


# PyTorch CPU itself rounds float16 intermediates (e.g. sigmoid_backward is off by
# one ulp), so a kernel one ulp off the other side is two ulps from it.
CLOSE_ULPS = 2


@dataclass
class Verdict:
    ok: bool
    max_error: float       # in the rule's unit: ulp, or absolute difference
    ratio: float           # worst error / allowed error (<= 1 passes; inf for a wrong NaN/inf/sign)
    bad: int               # elements out of tolerance
    detail: str            # the worst element, for messages


def ulp_of(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of `dtype` values around |x| (float64 in, float64 out)."""
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(x.abs())
    spacing = torch.ldexp(torch.ones_like(x), (exponent - 1 - MANTISSA_BITS[dtype]).to(x.dtype))
    return torch.where(x.abs() < info.tiny, torch.full_like(x, smallest_subnormal(dtype)), spacing)


def _finite_stand_in(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """inf -> the value one ulp beyond the largest finite one, so overflow has a size."""
    info = torch.finfo(dtype)
    beyond = info.max + float(ulp_of(torch.tensor([info.max], dtype=torch.float64), dtype)[0])
    return torch.where(x.isinf(), torch.sign(x) * beyond, x)


def _ratio(error: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """error / allowed, with 0 for no error and inf for inf / inf."""
    ratio = torch.where(error == 0, 0.0, error / allowed)
    return torch.where(ratio.isnan(), math.inf, ratio)


def _worst(error: torch.Tensor, allowed: torch.Tensor, got: torch.Tensor, want: torch.Tensor,
           unit: str) -> Verdict:
    ratio = _ratio(error, allowed).reshape(-1)
    if ratio.numel() == 0:
        return Verdict(True, 0.0, 0.0, 0, "")
    i = int(torch.argmax(ratio))
    index = tuple(int(v) for v in torch.unravel_index(torch.tensor(i), got.shape)) if got.dim() else ()
    detail = (f"worst at index {index}: got {got.reshape(-1)[i].item()!r}, "
              f"expected {want.reshape(-1)[i].item()!r} ({unit} error {error.reshape(-1)[i].item():.4g})")
    bad = int((ratio > 1).sum())
    return Verdict(bad == 0, float(error.max()), float(ratio[i]), bad, detail)


@dataclass
class Reference:
    """What one output is judged against (conformance.numerics computes these)."""
    cpu: torch.Tensor                       # PyTorch CPU in the kernel's own dtypes
    wide: torch.Tensor | None = None        # the op in float64 (floating outputs only)
    size: torch.Tensor | None = None        # the op on |finite inputs| in float64: a sum's error scale
    accumulated: torch.Tensor | None = None  # the sum a kernel accumulates (for a mean: the sum, not / n)
    also: tuple = ()                        # other answers PyTorch CPU gives in its other loops (cpu_loops.py)

    def rounded(self, dtype: torch.dtype) -> torch.Tensor | None:
        """The float64 result rounded to the output dtype: the correctly rounded answer."""
        return None if self.wide is None else self.wide.to(dtype)


def _as_numbers(t: torch.Tensor) -> torch.Tensor:
    # Bool outputs are compared as bytes: a kernel that leaves 0xFF poison is not "True".  So are
    # float8 ones, bit for bit: their NaN patterns are part of PyTorch's casts (fl_abi.h, fl_dtype).
    return t.view(torch.uint8) if t.dtype == torch.bool or t.dtype in FP8_DTYPES else t


def _identical(g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Bit-for-bit equal, except that any NaN matches any NaN (float8: bit for bit)."""
    if g.dtype in FP8_DTYPES:
        return _as_numbers(g) == _as_numbers(w.to(g.dtype))
    if not g.is_floating_point():
        return g == w
    return (g == w) & (torch.signbit(g) == torch.signbit(w)) | (g.isnan() & w.isnan())


def exact(got: torch.Tensor, ref: Reference, zero_sign: bool = True) -> Verdict:
    """Equal to PyTorch CPU, or to the correctly rounded result (PyTorch rounds some
    float16 intermediates, e.g. in add with alpha, where an exact kernel does not);
    without `zero_sign`, +0 and -0 match each other."""
    g, w = _as_numbers(got.contiguous()), _as_numbers(ref.cpu.contiguous())
    same = _identical(g, w)
    if not zero_sign and g.is_floating_point():
        same |= (g == 0) & (w == 0)
    if g.is_floating_point() and ref.wide is not None:
        same |= _identical(g, ref.rounded(got.dtype).expand(g.shape))
    for answer in ref.also:      # an element PyTorch CPU answers differently by loop: either answer
        same |= _identical(g, _as_numbers(answer.contiguous()).expand(g.shape))
    diff = torch.where(same, 0.0, (g.double() - w.double()).abs())
    diff = torch.where(~same & ((diff == 0) | diff.isnan()), math.inf, diff)   # sign of zero, NaN
    return _worst(diff, torch.zeros_like(diff), got, ref.cpu, "absolute")


def _same_as_cpu(got: torch.Tensor, ref: Reference) -> torch.Tensor:
    """Bit-identical to PyTorch CPU always passes: the contract is parity with PyTorch
    (whose float16 pow(-inf, 0.5) is +inf while its float32 one is NaN)."""
    return _identical(got, ref.cpu.expand(got.shape))


def _special_mismatch(g: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Elements judged outright: NaN must meet NaN, an infinite reference must be met exactly."""
    return (g.isnan() != ref.isnan()) | (ref.isinf() & (g != ref))


def ulp(got: torch.Tensor, ref: Reference, tol: Tolerance) -> Verdict:
    dtype = got.dtype
    g, wide = got.double(), ref.wide.double().expand(got.shape)
    rounded = ref.rounded(dtype).double().expand(got.shape)
    stand_in = _finite_stand_in(wide, dtype)
    error = (_finite_stand_in(g, dtype) - stand_in).abs() / ulp_of(stand_in, dtype)
    flushed = (g == 0) & (rounded.abs() < torch.finfo(dtype).tiny)   # Khronos allows flush-to-zero
    error = torch.where((g == rounded) | (g.isnan() & wide.isnan()) | flushed, 0.0, error)
    error = torch.where(_special_mismatch(g, wide), math.inf, error)
    error = torch.where(_same_as_cpu(got, ref), 0.0, error)
    return _worst(error, torch.full_like(error, max(tol.ulp, 1e-300)), got, rounded, "ulp")


def _close_to(g: torch.Tensor, want: torch.Tensor, tol: Tolerance) -> tuple[torch.Tensor, torch.Tensor]:
    w = want.double().expand(g.shape)
    error = torch.where((g == w) | (g.isnan() & w.isnan()), 0.0, (g - w).abs())
    error = torch.where(_special_mismatch(g, w), math.inf, error)
    return error, torch.maximum(tol.atol + tol.rtol * w.abs(), CLOSE_ULPS * ulp_of(w, want.dtype))


def close(got: torch.Tensor, ref: Reference, tol: Tolerance) -> Verdict:
    """Close to PyTorch CPU or to the correctly rounded result, whichever is nearer
    (PyTorch CPU overflows float16 intermediates that an accurate kernel does not)."""
    g = got.double()
    error, allowed = _close_to(g, ref.cpu, tol)
    want = ref.cpu.expand(got.shape)
    if ref.wide is not None:
        error_w, allowed_w = _close_to(g, ref.rounded(got.dtype), tol)
        better = _ratio(error_w, allowed_w) < _ratio(error, allowed)
        error, allowed = torch.where(better, error_w, error), torch.where(better, allowed_w, allowed)
        want = torch.where(better, ref.rounded(got.dtype).expand(got.shape), want)
    return _worst(error, allowed, got, want, "absolute")


def magnitude(got: torch.Tensor, ref: Reference, tol: Tolerance) -> Verdict:
    g, wide = got.double(), ref.wide.double().expand(got.shape)
    rounded = ref.rounded(got.dtype).double().expand(got.shape)
    size = ref.size.double().expand(got.shape)
    error = torch.where((g == rounded) | (g.isnan() & wide.isnan()), 0.0, (g - wide).abs())
    error = torch.where(_special_mismatch(g, wide), math.inf, error)
    # Partial sums beyond the range of the accumulator (float32 up to float32 outputs,
    # as PyTorch accumulates) overflow in an order-dependent way: there, an inf/NaN on
    # either side is no evidence against the kernel.
    accumulator = torch.float64 if got.dtype == torch.float64 else torch.float32
    accumulated = (ref.accumulated if ref.accumulated is not None else ref.size).double().expand(got.shape)
    order_dependent = ~(accumulated <= torch.finfo(accumulator).max) & ~(g.isfinite() & wide.isfinite())
    error = torch.where(order_dependent | _same_as_cpu(got, ref), 0.0, error)
    return _worst(error, tol.atol + tol.rtol * size, got, rounded, "absolute")


def judge(got: torch.Tensor, tol: Tolerance, ref: Reference) -> Verdict:
    """One output against its rule."""
    if tol.kind == "exact":
        return exact(got, ref, tol.zero_sign)
    if tol.kind == "ulp":
        return ulp(got, ref, tol)
    if tol.kind == "close":
        return close(got, ref, tol)
    return magnitude(got, ref, tol)
