"""THE tolerance table: how close a kernel's result must be, per op family and dtype.

Four kinds of rule (conformance.compare implements them):
  exact      bit-for-bit PyTorch CPU or the correctly rounded result (any NaN
             matches any NaN; the sign of zero counts)
  ulp        Khronos style: error in units in the last place of the output dtype
             against a float64 reference; if the reference is NaN any NaN passes;
             a subnormal result may be flushed to zero (Khronos' FTZ allowance)
  close      |got - want| <= max(atol + rtol * |want|, 2 ulp), want being PyTorch CPU
             in the same dtype or the correctly rounded result, whichever is nearer
             (torch.testing.assert_close defaults; the 2 ulp because for float16
             rtol 1e-3 is below one step, and PyTorch CPU and a kernel may each be
             one ulp off, on opposite sides)
  magnitude  |got - ref64| <= atol + rtol * magnitude, where magnitude is the op on
             absolute values (sum |x|, |A| @ |B|): the error bound of a sum or dot
             product, which a plain rtol cannot give when terms cancel; atol is
             rtol/eps subnormal steps (the same number of roundings, in gradual
             underflow).  Where the sum overflows the accumulator (float32 for
             float32/16 outputs, as PyTorch's), the result depends on summation
             order, and any inf or NaN is accepted

Whatever the rule, a result bit-identical to PyTorch CPU passes (the contract
is parity with PyTorch).  Integer and bool results are always exact.  A kernel table's fast variant
gets every bound multiplied by FAST_VARIANT_FACTOR (exact stays exact).
Sources: ANCHORS.md section 3 (Khronos OpenCL fp32 ULP limits, PyTorch's
assert_close defaults); the figures marked "suite" are this suite's choices.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .recipes import smallest_subnormal

FAST_VARIANT_FACTOR = 4.0


@dataclass(frozen=True)
class Tolerance:
    kind: str              # exact | ulp | close | magnitude
    ulp: float = 0.0
    rtol: float = 0.0
    atol: float = 0.0
    zero_sign: bool = True   # exact: must the sign of a zero result match?

    def scaled(self, factor: float) -> "Tolerance":
        return replace(self, ulp=self.ulp * factor, rtol=self.rtol * factor, atol=self.atol * factor)

    def describe(self) -> str:
        if self.kind == "exact":
            return "exact" if self.zero_sign else "exact (either signed zero)"
        if self.kind == "ulp":
            return f"<= {self.ulp:g} ulp vs float64 reference"
        against = "PyTorch CPU" if self.kind == "close" else "float64 reference, relative to the magnitude"
        return f"rtol={self.rtol:g} atol={self.atol:g} ({against})"


EXACT = Tolerance("exact")
# IEEE 754 leaves max/min of +0 and -0 to the implementation, and PyTorch CPU itself
# answers differently in its vectorised and scalar loops (float32 maximum(0., -0.) is
# -0. where float16's is 0.): either zero passes.
EXACT_ANY_ZERO = Tolerance("exact", zero_sign=False)
_F64, _F32, _F16, _BF16 = torch.float64, torch.float32, torch.float16, torch.bfloat16

# Khronos OpenCL CTS single-precision limits.  float64: the only reference is
# PyTorch's own float64 (not always correctly rounded: its sqrt is off by one
# ulp at times), so the Khronos double figures plus 1.  half/bfloat16 (suite):
# computing in fp32 and rounding costs 0.5 ulp: 1 ulp for correctly rounded
# ops, 2 for the rest.
_ULP = {              # family: {dtype: ulp}
    "divide": {_F32: 2.5, _F64: 1, _F16: 1, _BF16: 1},
    "sqrt": {_F32: 3, _F64: 1, _F16: 1, _BF16: 1},
    "rsqrt": {_F32: 2, _F64: 3, _F16: 1, _BF16: 1},
    "exp": {_F32: 3, _F64: 4, _F16: 2, _BF16: 2},
    "log": {_F32: 3, _F64: 4, _F16: 2, _BF16: 2},
    "tanh": {_F32: 5, _F64: 6, _F16: 2, _BF16: 2},
    # suite: Khronos has no sigmoid; 1 / (1 + exp(-x)) composes exp (3) and divide (2.5)
    "sigmoid": {_F32: 5, _F64: 6, _F16: 2, _BF16: 2},
    "pow": {_F32: 16, _F64: 17, _F16: 2, _BF16: 2},
}
# torch.testing.assert_close defaults (ANCHORS section 3).
_TORCH_CLOSE = {_F16: (1e-3, 1e-5), _BF16: (1.6e-2, 1e-5), _F32: (1.3e-6, 1e-5), _F64: (1e-7, 1e-7)}
# suite: relative to the magnitude.
_MAGNITUDE_RTOL = {
    "reduction": {_F32: 1e-4, _F64: 1e-10, _F16: 1e-3, _BF16: 1.6e-2},
    "matmul": {_F32: 1e-5, _F64: 1e-13, _F16: 1e-3, _BF16: 1.6e-2,
               # suite: a float8 result (_scaled_mm) is one rounding of a float32 sum; a relative
               # step of the format (its eps) covers it and the sum's own float32 error
               **{dt: torch.finfo(dt).eps for dt in (torch.float8_e4m3fn, torch.float8_e5m2,
                                                    torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)}},
}

# op family per ATen op name (overload and trailing in-place "_" dropped).
FAMILY_OF: dict[str, str] = {
    **dict.fromkeys(["add", "sub", "rsub", "mul", "neg", "abs", "relu", "where", "eq", "ne", "gt", "lt", "ge",
                     "le", "fill", "zero", "copy", "threshold_backward", "argmax", "argmin", "hardtanh_backward",
                     "fmod"], "exact"),   # fmod: IEEE 754 remainder, exactly representable
    "div": "divide", "reciprocal": "divide", "sqrt": "sqrt", "rsqrt": "rsqrt", "exp": "exp",
    "log": "log", "tanh": "tanh", "sigmoid": "sigmoid", "pow": "pow",
    **dict.fromkeys(["lerp", "addcmul", "addcdiv", "sigmoid_backward", "tanh_backward",
                     "_softmax", "_log_softmax"], "close"),
    **dict.fromkeys(["sum", "mean", "nll_loss_forward", "nll_loss2d_forward"], "reduction"),
    **dict.fromkeys(["mm", "addmm", "bmm", "convolution", "convolution_backward", "_scaled_mm"], "matmul"),
    **dict.fromkeys(["maximum", "minimum", "max", "min", "clamp", "clamp_min", "clamp_max", "hardtanh",
                     "max_pool2d_with_indices"], "minmax"),
}
# Ops without a family (kernels the suite knows only through OpInfo samples) are
# held to PyTorch's own assert_close defaults.
DEFAULT_FAMILY = "close"


def base_name(op: str) -> str:
    """'add_.Tensor' -> 'add'; '_softmax' stays '_softmax'."""
    packet = op.split(".")[0]
    return packet[:-1] if packet.endswith("_") and not packet.endswith("__") else packet


def family(op: str) -> str:
    return FAMILY_OF.get(base_name(op), DEFAULT_FAMILY)


def uses_magnitude(op: str) -> bool:
    """Is `op` judged relative to the magnitude of its terms (sums, products)?"""
    return family(op) in _MAGNITUDE_RTOL


def side_effect_tolerance(dtype: torch.dtype) -> Tolerance:
    """For an input an op updates although its schema does not say so (native_batch_norm's
    running statistics, new = (1 - momentum) * old + momentum * batch_statistic): PyTorch's
    assert_close rtol/atol, but relative to the magnitude of the blend's terms
    (conformance.numerics passes |old| + |new - old|, which bounds |(1 - m) old| + |m batch|),
    not to |new|; exact for integers.

    Why the magnitude: PyTorch CPU itself rounds differently by layout.  On a non-contiguous
    float16/bfloat16 input its batch norm rounds the batch mean to the input dtype before the
    blend, on a contiguous one it blends in float32 (PyTorch 2.x, aten/src/ATen/native/
    Normalization.cpp vs batch_norm_kernel.cpp).  Those differ by up to half an ulp of
    momentum * batch_statistic, which is many ulps of the result when the blend cancels
    (float16: 0.0850 vs 0.0845, 8 ulp, for old 2.338, batch mean -2.168, momentum 0.5),
    but within rtol of the terms."""
    if not dtype.is_floating_point:
        return EXACT
    rtol, atol = _TORCH_CLOSE[dtype]
    return Tolerance("magnitude", rtol=rtol, atol=atol)


def tolerance_for(op: str, out_dtype: torch.dtype, fast: bool = False) -> Tolerance:
    """The rule one output of `op` in `out_dtype` is held to."""
    fam = family(op)
    if fam == "exact" or not out_dtype.is_floating_point:
        return EXACT
    if fam == "minmax":
        return EXACT_ANY_ZERO
    if fam in _ULP:
        rule = Tolerance("ulp", ulp=_ULP[fam][out_dtype])
    elif fam == "close":
        rtol, atol = _TORCH_CLOSE[out_dtype]
        rule = Tolerance("close", rtol=rtol, atol=atol)
    else:
        rtol = _MAGNITUDE_RTOL[fam][out_dtype]
        steps = max(1.0, rtol / torch.finfo(out_dtype).eps)
        rule = Tolerance("magnitude", rtol=rtol, atol=steps * smallest_subnormal(out_dtype))
    return rule.scaled(FAST_VARIANT_FACTOR) if fast else rule


def between_runs(op: str, out_dtype: torch.dtype) -> Tolerance:
    """How far two runs of one call may differ for a kernel that is not deterministic alone
    (its two lone runs differ: float atomics, a split chosen by load): its numerics rule
    where that needs no float64 reference, else PyTorch's assert_close bounds for the dtype
    (conformance.concurrency)."""
    rule = tolerance_for(op, out_dtype)
    if rule.kind in ("exact", "close"):
        return rule
    rtol, atol = _TORCH_CLOSE.get(out_dtype, _TORCH_CLOSE[_BF16])
    return Tolerance("close", rtol=max(rtol, rule.rtol), atol=atol)
