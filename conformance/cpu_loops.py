"""Ops whose PyTorch CPU kernel answers differently in its vectorised and scalar loops.

ATen's CPU elementwise kernels have two bodies: a vector lambda for the chunks that
fill a SIMD register and a scalar lambda for the tail.  Where the two are not the
same function of their inputs, the reference a kernel is compared with depends on
where an element sits in the tensor, so there is no single right answer for it: the
suite accepts either body's.  Each entry computes both bodies on the CPU, elementwise
with operations that agree in every loop (comparisons and `where`), and
conformance.numerics attaches them to the output's Reference (`also`).

- hardtanh_backward (aten/src/ATen/native/cpu/Activation.cpp, hardtanh_backward_kernel):
  scalar `(x <= min || x >= max) ? 0 : grad`, vector `((x > min) & (x < max)) & grad`.
  For x = NaN the scalar body passes grad through and the vector body gives 0 (a
  4094-element tensor with NaN at 0 and at the end gets 0 and grad).
  tests/abi/test_conformance_units.py checks that PyTorch still behaves so.
- abs on float8 (aten/src/ATen/native/cpu/UnaryOpsKernel.cpp, abs_kernel): the scalar body
  goes through float (`std::abs`), so -0 gives +0 and a NaN the positive NaN pattern; the
  vector body on a 64-element chunk compares and negates in the format, and keeps the sign
  bit of -0 and of NaN.  A 256-element float8 tensor gets the vector answer, an 8-element
  one the scalar answer.  tests/abi/test_conformance_units.py checks that too.
"""
from __future__ import annotations

from collections.abc import Callable

import torch


def _hardtanh_backward(grad: torch.Tensor, x: torch.Tensor, low, high) -> tuple[torch.Tensor, ...]:
    zero = torch.zeros((), dtype=grad.dtype)
    scalar_body = torch.where((x <= low) | (x >= high), zero, grad)
    vector_body = torch.where((x > low) & (x < high), grad, zero)
    return scalar_body, vector_body


_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)


def _fp8_abs(x: torch.Tensor, *_) -> tuple[torch.Tensor, ...]:
    if x.dtype not in _FP8:
        return ()
    scalar_body = x.float().abs().to(x.dtype)
    bits = x.contiguous().view(torch.uint8)
    negative = ((bits & 0x80) != 0) & ((bits & 0x7f) != 0) & ~x.contiguous().isnan()
    vector_body = torch.where(negative, bits & 0x7f, bits).view(x.dtype).reshape(x.shape)
    return scalar_body, vector_body


# op (kernel-table name) -> (CPU inputs in schema order) -> every loop's answer for output 0
SECOND_ANSWERS: dict[str, Callable[..., tuple[torch.Tensor, ...]]] = {
    "hardtanh_backward": _hardtanh_backward,
    "abs": _fp8_abs,
    "abs_": _fp8_abs,
}


def loop_answers(op: str, values: list) -> tuple[torch.Tensor, ...]:
    """Each CPU loop body's answer for output 0 of `op` on `values`; () for other ops."""
    answers = SECOND_ANSWERS.get(op)
    return () if answers is None else answers(*values)
