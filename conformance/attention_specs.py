"""Cases and references for the fused attention kernels a plugin may offer:
`_scaled_dot_product_fused_attention_overrideable` and its `_backward`
(the runtime's ops/owned/attention.py calls them for scaled_dot_product_attention).

PyTorch has no CPU kernel for either op (they exist for vendors to fill), so the
expected values come from PyTorch's math path, `_scaled_dot_product_attention_math`
(what scaled_dot_product_attention runs on the CPU), in the kernel's dtype, and
its autograd for the backward; conformance.numerics uses these functions in place
of the op itself.  Shapes follow the kernel contract: query [B, Hq, L, E], key
[B, Hk, S, E], value [B, Hk, S, Ev] with Hq a multiple of Hk (grouped-query
attention), an optional bias [B, Hq, L, S], dropout 0.  Values are finite: the
math path's float32 overflow and 0 * inf in masked positions are PyTorch's own
rounding, not a contract.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from . import strategies as s

FORWARD = "_scaled_dot_product_fused_attention_overrideable"
BACKWARD = FORWARD + "_backward"


def _geometry(draw: s.Draw) -> dict:
    hk = draw(st.integers(1, 2))
    return {"b": draw(st.integers(1, 2)), "hk": hk, "hq": hk * draw(st.integers(1, 2)),
            "l": draw(st.integers(1, 5)), "s": draw(st.integers(1, 6)),
            "e": draw(st.integers(1, 8)), "ev": draw(st.integers(1, 8))}


def _qkv_bias(draw: s.Draw, dtype: torch.dtype, g: dict) -> list:
    q = s.tensor(draw, [g["b"], g["hq"], g["l"], g["e"]], dtype, finite=True)
    k = s.tensor(draw, [g["b"], g["hk"], g["s"], g["e"]], dtype, finite=True)
    v = s.tensor(draw, [g["b"], g["hk"], g["s"], g["ev"]], dtype, finite=True)
    bias = s.tensor(draw, [g["b"], g["hq"], g["l"], g["s"]], dtype, finite=True) if draw(st.booleans()) else None
    return [q, k, v, bias]


def _scale(draw: s.Draw) -> dict:
    return {"scale": draw(st.sampled_from([None, 0.5, 2.0]))}


def forward(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    g = _geometry(draw)
    return [*_qkv_bias(draw, dtype, g), 0.0, draw(st.booleans()), False], _scale(draw)


def backward(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    g = _geometry(draw)
    q, k, v, bias = _qkv_bias(draw, dtype, g)
    out_shape = [g["b"], g["hq"], g["l"], g["ev"]]
    grad_out, out = s.tensor(draw, out_shape, dtype, finite=True), s.tensor(draw, out_shape, dtype, finite=True)
    lse = s.tensor(draw, [g["b"], g["hq"], g["l"]], torch.float32, finite=True)
    seed, offset = s.index_tensor(draw, [], 0, 1), s.index_tensor(draw, [], 0, 1)
    return [grad_out, q, k, v, bias, [True, True, True, bias is not None], out, lse, None, None,
            g["l"], g["s"], 0.0, draw(st.booleans()), seed, offset], _scale(draw)


def _math(query, key, value, bias, is_causal, scale):
    return torch.ops.aten._scaled_dot_product_attention_math(query, key, value, bias, 0.0, is_causal, None,
                                                             scale=scale, enable_gqa=True)[0]


def forward_reference(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False,
                      return_debug_mask=False, *, scale=None) -> list:
    """output, logsumexp (float32, as the op's meta function allocates), the philox pair 0;
    the undefined and SymInt returns are None (the kernel gets no buffer for them)."""
    out = _math(query, key, value, attn_bias, is_causal, scale)
    group = query.shape[1] // key.shape[1]
    keys = key.repeat_interleave(group, 1)
    factor = scale if scale is not None else query.shape[-1] ** -0.5
    scores = (query @ keys.transpose(-2, -1)) * factor
    if is_causal:
        keep = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_bias is not None:
        scores = scores + attn_bias
    lse = torch.logsumexp(scores, -1).to(torch.float32)
    zero = torch.zeros((), dtype=torch.int64)
    return [out, lse, None, None, None, None, zero, zero.clone(), None]


def backward_reference(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
                       cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *,
                       scale=None) -> list:
    """The math path's gradients (autograd) for query, key, value and the bias."""
    inputs = [t.detach().requires_grad_() for t in (query, key, value)]
    if attn_bias is not None:
        inputs.append(attn_bias.detach().requires_grad_())
    with torch.enable_grad():
        out = _math(*inputs[:3], inputs[3] if attn_bias is not None else None, is_causal, scale)
        grads = torch.autograd.grad(out, inputs, grad_out)
    return [*grads, None] if attn_bias is None else list(grads)


ATTENTION_GENERATORS = {FORWARD: forward, BACKWARD: backward}
# The expected values of ops PyTorch has no CPU kernel for (conformance.numerics).
CPU_REFERENCES = {FORWARD: forward_reference, BACKWARD: backward_reference}
