"""Fused attention for fl: PyTorch's vendor hook for scaled_dot_product_attention.

PyTorch lets a PrivateUse1 backend offer its own attention through
`_fused_sdp_choice` returning SDPBackend.OVERRIDEABLE, after which
`scaled_dot_product_attention` calls `_scaled_dot_product_fused_attention_overrideable`
(and autograd its `_backward`).  But ATen asks for the choice through a C++
DispatchStub (`_fused_sdp_choice_stub`), which only a C++ backend can fill, so
from Python the hook is never reached: the stub reports PrivateUse1 unsupported
and the math path always runs (docs/users/attention.md).

So this module registers, for fl:
- `_fused_sdp_choice`: OVERRIDEABLE when the device's plugin has kernels for both
  overrideable ops in the query's dtype and the call is one they take (4-d
  inputs, no dropout, a mask that broadcasts to [B, Hq, L, S], grouped-query heads
  only with enable_gqa); MATH otherwise, and whenever
  `torch.nn.attention.sdpa_kernel` leaves OVERRIDEABLE out;
- `scaled_dot_product_attention`, under AutogradPrivateUse1 and PrivateUse1
  (inference mode), making that choice as ATen would have (directly, so that it also
  holds under torch.compile's fake tensors): OVERRIDEABLE calls the
  overrideable op (PyTorch's autograd formula then calls its backward), anything
  else runs ATen's own composite (validation, mask conversion, math path), so
  users see exactly PyTorch's behaviour and errors there;
- the overrideable forward itself, because two of its returns are SymInts
  (max_q, max_k) that no kernel argument can carry: the launcher runs the
  vendor kernel for the tensor returns and this module fills in the two ints.
  The backward's returns are all tensors: it is an ordinary launcher op.

With the native bridge, C++ serves the steady state of both (bridge/csrc/sdpa_kernel.h): its
`scaled_dot_product_attention` kernel (both keys) makes the same choice from the same metadata
(asking `_has_fused` once per device, dtype and kernel-table epoch) and calls the same ops, and
the forward is a launcher-owned op whose recorded program C++ replays, filling max_q and max_k
from the `sizes` register_owned hands it.  These calls stay in Python: any tensor with a
Python or functional layer (torch.compile's FakeTensors: their choice must be made here, from
metadata, as C++ cannot see what a subclass would answer), symbolic sizes, conjugate or
negative views, a Python mode on the thread, and everything the eager kernels send to Python
(a forward's first call per signature, profiles, a stream the bridge does not know).
PyTorch's `_fused_sdp_choice_stub` stays unfilled, so ATen's composite still answers MATH
for PrivateUse1 and `_fused_sdp_choice` (Python, above) reports the choice.
"""
from __future__ import annotations

import torch
from torch.nn.attention import SDPBackend

from fl_runtime.logs import logger
from fl_runtime.ops.boundary import leaves_runtime

FORWARD = "_scaled_dot_product_fused_attention_overrideable"
BACKWARD = "_scaled_dot_product_fused_attention_overrideable_backward"
RUNTIME_OWNED = {FORWARD, "_fused_sdp_choice", "scaled_dot_product_attention"}
_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_OVERRIDEABLE = int(SDPBackend.OVERRIDEABLE.value)
_MATH = int(SDPBackend.MATH.value)


def _broadcasts(mask: torch.Tensor, shape: tuple) -> bool:
    if mask.dim() > len(shape):
        return False
    return all(m in (1, s) for m, s in zip(reversed(mask.shape), reversed(shape)))


def _fused_fits(rt, query, key, value, attn_mask, dropout_p, is_causal, enable_gqa) -> bool:
    """Does this call meet what the overrideable kernels take (see module docstring)?"""
    tensors = (query, key, value)
    if not all(isinstance(t, torch.Tensor) and t.device.type == "fl" and not t.is_nested for t in tensors):
        return False
    if any(t.dim() != 4 or t.dtype != query.dtype or t.device != query.device for t in tensors):
        return False
    if dropout_p != 0.0 or (is_causal and attn_mask is not None) or query.numel() == 0 or key.numel() == 0:
        return False
    (b, hq, l, e), (bk, hk, s, ek), (bv, hv, sv, _) = query.shape, key.shape, value.shape
    if not (b == bk == bv and e == ek and hk == hv and s == sv and hk > 0):
        return False
    if hq != hk and not (enable_gqa and hq % hk == 0):
        return False
    if attn_mask is not None:
        if (not isinstance(attn_mask, torch.Tensor) or attn_mask.device != query.device
                or attn_mask.dtype not in (torch.bool, query.dtype) or not _broadcasts(attn_mask, (b, hq, l, s))):
            return False
    return _has_fused(rt, query.device.index, query.dtype)


def _has_fused(rt, index: int, dtype: torch.dtype) -> bool:
    """Has fl:index's plugin both overrideable kernels in `dtype`?  (The bridge's C++ kernel asks
    this once per device, dtype and kernel-table epoch.)"""
    launcher = rt.launcher
    return launcher.has_kernel(index, FORWARD, dtype) and launcher.has_kernel(index, BACKWARD, dtype)


def _as_bias(attn_mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor | None:
    """The additive [B, Hq, L, S] bias the kernels read: a bool mask as 0 / -inf (as
    ATen's convert_boolean_attn_mask), broadcast by a view (no copy)."""
    if attn_mask is None:
        return None
    if attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill_(~attn_mask, float("-inf"))
    b, hq, l, _ = query.shape
    return attn_mask.expand(b, hq, l, key.shape[-2])


def _launch_call(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,
                 scale=None) -> tuple[tuple, dict]:
    """The overrideable forward's call as its launch takes it: every argument, however the
    dispatcher handed them (a program is found by the launch's own arguments)."""
    return (query, key, value, attn_bias, dropout_p, is_causal, return_debug_mask), {"scale": scale}


def register(library: torch.library.Library, rt) -> None:
    """Register the choice, the attention entry point and the overrideable forward for fl."""
    def fused_sdp_choice(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
                         scale=None, enable_gqa=False) -> int:
        if torch._C._get_overrideable_sdp_enabled() and _fused_fits(
                rt, query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
            return _OVERRIDEABLE
        return _MATH

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=False):
        # The choice itself, not the op: under torch.compile's fake tensors the op would answer
        # from PyTorch's meta kernel (MATH); the choice reads only metadata.
        choice = fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                                  enable_gqa=enable_gqa)
        if choice == _OVERRIDEABLE:
            bias = _as_bias(attn_mask, query, key)
            return torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
                query, key, value, bias, dropout_p, is_causal, False, scale=scale)[0]
        # ATen's own composite: its stub answers MATH for PrivateUse1, as asked.
        return _SDPA.decompose(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                               enable_gqa=enable_gqa)

    def fused_forward(*args, **kwargs):
        launch_args, launch_kwargs = _launch_call(*args, **kwargs)
        result = list(rt.launcher.launch(FORWARD, launch_args, launch_kwargs))
        result[4], result[5] = launch_args[0].shape[-2], launch_args[1].shape[-2]   # max_q, max_k: SymInts
        return tuple(result)

    def forward_program(args: tuple, kwargs: dict):
        """The program fused_forward's launch recorded for this call (the bridge replays it)."""
        return rt.launcher.native_program(FORWARD, *_launch_call(*args, **kwargs))

    library.impl("_fused_sdp_choice", fused_sdp_choice, "PrivateUse1")
    # max_q, max_k (outputs 4, 5) are the sizes of query's and key's dim -2, in C++ too.
    rt.launcher.register_owned(library, FORWARD, fused_forward, forward_program, sizes=((4, 0, -2), (5, 1, -2)))
    native = rt.launcher.native
    why = "the native bridge is off" if native is None else native.register_sdpa(
        leaves_runtime(scaled_dot_product_attention), lambda index, dtype: _has_fused(rt, index, dtype))
    if why:
        if native is not None:
            logger.debug("scaled_dot_product_attention stays in Python: %s", why)
        for key in ("PrivateUse1", "AutogradPrivateUse1"):
            library.impl("scaled_dot_product_attention", scaled_dot_product_attention, key)
