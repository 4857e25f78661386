"""`torch.autocast("fl", dtype=...)`: the cast policy for fl devices.

PyTorch only runs autocast kernels that a backend registers for its Autocast
dispatch key (AutocastPrivateUse1 for us).  Every op falls through that key
unless listed here, and the listed ones follow the policy CUDA uses:

- LOWER: matmul-like ops and convolutions run in the autocast dtype
  (float16/bfloat16), where low precision is fast and accurate enough;
- FP32: reductions, softmax, norms, transcendental functions and losses are
  run in float32, because they lose too much in 16 bits;
- PROMOTE: ops mixing several inputs run in the widest input float type.

The kernels cast fl floating-point arguments, then call the op again with the
Autocast key excluded, so it reaches the vendor kernel (or the CPU fallback
when the vendor has no kernel for that dtype).
"""
from __future__ import annotations

import functools

import torch
from torch.utils._pytree import tree_map

from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.ops.boundary import leaves_runtime

BACKEND = DEVICE_TYPE
LOWER = (
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "addr", "mv", "matmul", "dot", "vdot", "linear",
    "conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "conv_tbc", "prelu", "einsum", "chain_matmul", "linalg_multi_dot",
    "_scaled_dot_product_attention_math", "scaled_dot_product_attention",
    # RNNs, as CUDA's and the CPU's policies have them (the cells run in the autocast dtype)
    "lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
)
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
    "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm",
    "batch_norm", "norm", "frobenius_norm", "nuclear_norm", "cosine_similarity", "dist", "pdist",
    "cdist", "renorm", "logsumexp", "softmax", "log_softmax", "_softmax", "_log_softmax", "sum", "prod",
    "cumsum", "cumprod", "mean", "var", "std", "nll_loss", "nll_loss2d", "cross_entropy_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "soft_margin_loss",
    "multilabel_margin_loss", "multi_margin_loss", "triplet_margin_loss", "hinge_embedding_loss",
    "cosine_embedding_loss", "poisson_nll_loss", "binary_cross_entropy_with_logits",
)
PROMOTE = ("cat", "stack", "addcdiv", "addcmul", "atan2", "bilinear", "cross", "grid_sampler",
           "index_put", "scatter_add", "tensordot")

_AUTOCAST_KEY = torch._C.DispatchKey.AutocastPrivateUse1
_LOW_PRECISION = (torch.float16, torch.bfloat16)
_libraries: list = []


def policy_of(name: str) -> str | None:
    """'lower', 'fp32', 'promote' or None (runs in its input types) for an aten op name."""
    for policy, names in (("lower", LOWER), ("fp32", FP32), ("promote", PROMOTE)):
        if name in names:
            return policy
    return None


def _is_fl_float(value) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.device.type == BACKEND


def _cast_all(values, dtype: torch.dtype, only_from: tuple | None = None):
    """Cast fl floating tensors in args/kwargs to dtype (only those of `only_from` dtypes, if given)."""
    def cast(value):
        if _is_fl_float(value) and value.dtype != dtype and (only_from is None or value.dtype in only_from):
            return value.to(dtype)
        return value
    return tree_map(cast, values)


def _widest(values) -> torch.dtype | None:
    dtypes = [v.dtype for v in torch.utils._pytree.tree_leaves(values) if _is_fl_float(v)]
    return functools.reduce(torch.promote_types, dtypes) if dtypes else None


def _target_args(policy: str, args: tuple, kwargs: dict):
    if policy == "lower":
        # Like CUDA: only float32 (and float64 is left alone) goes down to the fast dtype.
        return _cast_all((args, kwargs), torch.get_autocast_dtype(BACKEND), (torch.float32,))
    if policy == "fp32":
        return _cast_all((args, kwargs), torch.float32, _LOW_PRECISION)
    widest = _widest((args, kwargs))
    return (args, kwargs) if widest is None else _cast_all((args, kwargs), widest)


def _make_kernel(op, policy: str):
    def kernel(*args, **kwargs):
        cast_args, cast_kwargs = _target_args(policy, args, kwargs)
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_AUTOCAST_KEY)):
            return op(*cast_args, **cast_kwargs)
    kernel.__name__ = f"fl_autocast_{policy}_{op.__name__.replace('.', '_')}"
    return kernel


def _overloads(name: str):
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return []
    return [(f"{name}.{o}" if o != "default" else name, getattr(packet, o)) for o in packet.overloads()]


def register() -> list[str]:
    """Register the policy for AutocastPrivateUse1 (once per process); returns the op
    names this PyTorch does not have (skipped)."""
    if _libraries:
        return []
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    kernels = torch.library.Library("aten", "IMPL")
    missing = []
    for policy, names in (("lower", LOWER), ("fp32", FP32), ("promote", PROMOTE)):
        for name in names:
            overloads = _overloads(name)
            if not overloads:
                missing.append(name)
            for qualified, op in overloads:
                kernels.impl(qualified, leaves_runtime(_make_kernel(op, policy)), "AutocastPrivateUse1")
    _libraries.extend([fallthrough, kernels])
    return missing
