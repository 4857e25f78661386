"""Decompositions Torch-FL adds where PyTorch's own cannot run on fl (docs/users/profiling.md).

The generic kernel runs an op as PyTorch's decomposition of it when every leaf runs
on fl.  A few decompositions that real models need end in ops no vendor can have:
`prims::*` ops (they exist only for tracing compilers; vendors implement ATen ops,
`fl_sdk/include/fl_abi.h`), or a prim whose own implementation calls the op
back.  For those, this table gives a decomposition written
with ATen ops a vendor has; `generic.decomposition_of` consults it first.  Each
entry is checked on meta tensors like PyTorch's (nothing here is trusted blindly),
and each is tested against the CPU in tests/runtime/test_extra_decompositions.py.

Every function is written with whole-tensor ops only (no Python loop over elements,
no `.item()`): the meta trace must see the same calls the real run makes.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch

aten = torch.ops.aten


def _indices(length: int, device: torch.device) -> torch.Tensor:
    """0..length-1 in int64, by doubling: [0] -> [0, 1] -> [0..3] ..., log2(length)
    cat+add calls, exact for every length."""
    values = torch.zeros(1 if length > 0 else 0, dtype=torch.int64, device=device)
    size = values.numel()
    while size < length:
        values = torch.cat([values, values + size])
        size *= 2
    return values[:length]


def arange_start_out(start, end, step=1, *, out: torch.Tensor) -> torch.Tensor:
    """aten::arange.start_out (HF models call it for positions and cache indices).
    PyTorch's decomposition ends in prims::iota, whose own implementation calls
    arange again, so it can never run on fl.  A factory of scalars only: the values
    are made on the host by ATen's own CPU kernel (so they equal the CPU's bit for
    bit, fractional steps included) and reach the device in one stream-ordered copy;
    built on the device it took ~11 launches (560 us per call in a decode loop)."""
    length = _arange_length(start, end, step)     # checks the bounds as aten::arange does
    values = torch.arange(start, end, step, dtype=out.dtype, device="cpu")   # even under a default fl device
    out.resize_(length)
    return out.copy_(values)


def _arange_length(start, end, step) -> int:
    """The element count aten::arange checks and computes (ceil((end-start)/step))."""
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise ValueError(f"arange: upper bound {end} and lower bound {start} inconsistent with step sign {step}")
    return max(0, math.ceil((float(end) - float(start)) / float(step)))


def cumsum(self: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """aten::cumsum for dtypes the vendor's cumsum lacks (HF takes the cumsum of
    int64 attention masks for positions; `generate` counts finished sequences).
    PyTorch's decomposition needs prims::sum and an n*n mask; this is the
    Hillis-Steele scan instead: log2(n) shifted adds, exact for integers, in the
    result dtype cumsum itself uses (int64 for bool and integer inputs)."""
    if dtype is None:
        dtype = torch.int64 if (not self.is_floating_point() and not self.is_complex()) else self.dtype
    result = self.to(dtype)
    if result.dim() == 0:
        return result.clone()
    dim = dim % result.dim()
    length = result.shape[dim]
    shift = 1
    while shift < length:
        zeros_shape = list(result.shape)
        zeros_shape[dim] = shift
        shifted = torch.cat([torch.zeros(zeros_shape, dtype=dtype, device=result.device),
                             result.narrow(dim, 0, length - shift)], dim)
        result = result + shifted
        shift *= 2
    return result


def transformer_encoder_layer_fwd(src, embed_dim: int, num_heads: int, qkv_weight, qkv_bias, proj_weight,
                                  proj_bias, use_gelu: bool, norm_first: bool, eps: float,
                                  norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
                                  ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
                                  mask=None, mask_type=None):
    """aten::_transformer_encoder_layer_fwd, the fused layer nn.TransformerEncoderLayer
    takes in eval / no-grad (its "fast path" admits the PrivateUse1 device).  PyTorch
    has no decomposition; this is the same computation as ATen's
    native/transformers/transformer.cpp, step by step: (pre- or post-) layer norm,
    self-attention through the packed qkv projection, residual, feed-forward, residual.
    Masks: none, an (L, L) attention mask (mask_type 0) or a (B, L) key padding mask
    (mask_type 1), boolean (True = masked) or additive; other layouts (nested
    tensors) decline, and the chain moves on."""
    if src.dim() != 3 or src.is_nested:
        return NotImplemented
    attention_mask = _attention_mask(mask, mask_type, src)
    if attention_mask is NotImplemented:
        return NotImplemented
    x = torch.nn.functional.layer_norm(src, (embed_dim,), norm_weight_1, norm_bias_1, eps) if norm_first else src
    x = src + _self_attention(x, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, attention_mask)
    if not norm_first:
        x = torch.nn.functional.layer_norm(x, (embed_dim,), norm_weight_1, norm_bias_1, eps)
    residual = x
    if norm_first:
        x = torch.nn.functional.layer_norm(x, (embed_dim,), norm_weight_2, norm_bias_2, eps)
    hidden = torch.nn.functional.linear(x, ffn_weight_1, ffn_bias_1)
    hidden = torch.nn.functional.gelu(hidden) if use_gelu else torch.relu(hidden)
    x = residual + torch.nn.functional.linear(hidden, ffn_weight_2, ffn_bias_2)
    if not norm_first:
        x = torch.nn.functional.layer_norm(x, (embed_dim,), norm_weight_2, norm_bias_2, eps)
    return x


def _attention_mask(mask, mask_type, src):
    """The mask as a (B or 1, 1, 1 or L, L) tensor to add or fill, None, or
    NotImplemented for layouts this decomposition does not cover."""
    if mask is None:
        return None
    if mask.dim() == 2 and mask_type == 1:          # key padding: (B, L)
        return mask[:, None, None, :]
    if mask.dim() == 2 and mask_type in (0, None):  # attention mask: (L, L)
        return mask[None, None, :, :]
    if mask.dim() == 4:
        return mask
    return NotImplemented


def _self_attention(x, num_heads: int, qkv_weight, qkv_bias, proj_weight, proj_bias, mask):
    batch, length, embed_dim = x.shape
    head_dim = embed_dim // num_heads
    qkv = torch.nn.functional.linear(x, qkv_weight, qkv_bias)
    qkv = qkv.view(batch, length, 3, num_heads, head_dim).permute(2, 0, 3, 1, 4)
    query, key, value = qkv[0], qkv[1], qkv[2]
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(head_dim)
    if mask is not None:
        scores = (scores.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool
                  else scores + mask)
    attended = torch.matmul(torch.softmax(scores, dim=-1), value)
    attended = attended.transpose(1, 2).reshape(batch, length, embed_dim)
    return torch.nn.functional.linear(attended, proj_weight, proj_bias)


def index_copy_(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor):
    """aten::index_copy_ (transformers' StaticCache writes each token's keys and values
    with it, every layer, every step): PyTorch's decomposition goes through index_put and
    its checks, ~300 µs a call on fl (docs/benchmarks/index.md "Graph path").  This is one scatter_
    with the index broadcast along `source` (a stride-0 view: nothing is copied).  Only
    calls ATen itself would accept reach it: the shapes are checked here (scatter's own
    checks are looser), and index values by the vendor's scatter as ATen checks them
    (in range, never negative; fl_abi.h kernels fail the launch).  Duplicate indices are
    undefined in both."""
    return _index_copy_into(self, self, dim, index, source)


def index_copy(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor):
    """aten::index_copy: index_copy_ on a copy (ATen's index_copy is that, with the
    copy keeping self's strides)."""
    return _index_copy_into(None, self, dim, index, source)


def index_copy_out(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *, out: torch.Tensor):
    """aten::index_copy.out (what the functional index_copy reaches fl as; the in-place
    index_copy_ arrives as out=self).  An `out` of another shape or dtype is left to
    PyTorch's decomposition (it resizes as ATen does)."""
    if out.shape != self.shape or out.dtype != self.dtype:
        return NotImplemented
    return _index_copy_into(out, self, dim, index, source)


def _index_copy_into(out, self, dim: int, index, source):
    """self with source's rows at `index` along dim, written into `out` (a new copy of self
    when None), or NotImplemented for a call _index_copy_shape leaves to PyTorch."""
    shape = _index_copy_shape(self, dim, index, source)
    if shape is NotImplemented:
        return NotImplemented
    if out is None:
        out = self.clone()
    elif out is not self:
        out.copy_(self)
    return out.scatter_(dim % self.dim(), index.reshape(shape).expand(source.shape), source)


def _index_copy_shape(self, dim: int, index, source):
    """The shape index takes to broadcast along `dim`, or NotImplemented for a call this
    decomposition leaves to PyTorch's (which raises ATen's errors for the invalid ones):
    a 0-d self, an index not 1-d int64, or shapes ATen's index_copy_ refuses."""
    if self.dim() == 0 or index.dim() > 1 or index.dtype != torch.int64 or source.dim() != self.dim() \
            or source.dtype != self.dtype or not -self.dim() <= dim < self.dim():
        return NotImplemented
    dim %= self.dim()
    if source.shape[dim] != index.numel() or any(
            source.shape[d] != self.shape[d] for d in range(self.dim()) if d != dim):
        return NotImplemented
    shape = [1] * self.dim()
    shape[dim] = -1
    return shape


_SUM, _MEAN = 0, 1     # EmbeddingBag modes as ATen numbers them (max is 2)


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """aten::_embedding_bag (nn.EmbeddingBag), sum and mean modes.  PyTorch has no
    decomposition.  Every shape is fixed by the inputs' shapes (no data-dependent
    sizes): the bag of each position is how many bag starts are <= it, minus one; rows
    are gathered, weighted, padding rows zeroed, and summed per bag with index_add.
    Returns (output, offset2bag, bag_size, max_indices) with offset2bag and bag_size
    as ATen's mean mode fills them (sum mode's CPU kernel may leave them empty/zero),
    which is what the backward below and ATen's per-sample-weights backward read.
    Max mode, scale_grad_by_freq and sparse decline (the chain moves on), so the
    forward and backward of those take the same path."""
    if mode not in (_SUM, _MEAN) or scale_grad_by_freq or sparse or indices.dim() != 1:
        return NotImplemented
    bags = offsets.numel() - (1 if include_last_offset else 0)
    offset2bag = _offset2bag(indices, offsets, bags)
    keep = _kept(indices, padding_idx)
    rows = weight.index_select(0, indices)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    rows = rows * keep.unsqueeze(1).to(rows.dtype)
    output = torch.zeros(bags, weight.shape[1], dtype=weight.dtype, device=weight.device).index_add(0, offset2bag, rows)
    bag_size = torch.zeros(bags, dtype=torch.int64, device=weight.device).index_add(0, offset2bag, keep.to(torch.int64))
    if mode == _MEAN:
        output = output / bag_size.clamp_min(1).unsqueeze(1).to(output.dtype)
    return output, offset2bag, bag_size, bag_size.clone()


def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    """aten::_embedding_bag_backward for what embedding_bag above computes: each
    position's row of the weight gradient is its bag's gradient (divided by the bag
    size in mean mode, times its sample weight), padding positions contribute nothing."""
    if mode not in (_SUM, _MEAN) or scale_grad_by_freq or sparse or offset2bag.numel() != indices.numel():
        return NotImplemented
    rows = grad.index_select(0, offset2bag)
    if mode == _MEAN:
        rows = rows / bag_size.clamp_min(1).index_select(0, offset2bag).unsqueeze(1).to(rows.dtype)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    rows = rows * _kept(indices, padding_idx).unsqueeze(1).to(rows.dtype)
    weight_grad = torch.zeros(num_weights, grad.shape[1], dtype=grad.dtype, device=grad.device)
    return weight_grad.index_add(0, indices, rows)


def _offset2bag(indices, offsets, bags: int):
    """The bag of each position: how many of the first `bags` offsets are <= it, minus one."""
    positions = _indices(indices.numel(), indices.device)
    return (offsets[:bags].unsqueeze(0) <= positions.unsqueeze(1)).to(torch.int64).sum(1) - 1


def _kept(indices, padding_idx: int):
    """True where the position is not the padding index (ATen: padding_idx < 0 is none)."""
    if padding_idx < 0:
        return torch.ones(indices.shape, dtype=torch.bool, device=indices.device)
    return indices != padding_idx


EXTRA_DECOMPOSITIONS: dict[torch._ops.OpOverload, Callable] = {
    aten.arange.start_out: arange_start_out,
    aten.cumsum.default: cumsum,
    aten.index_copy_.default: index_copy_,
    aten.index_copy.default: index_copy,
    aten.index_copy.out: index_copy_out,
    aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer_fwd,
    aten._embedding_bag.default: embedding_bag,
    aten._embedding_bag_forward_only.default: embedding_bag,
    aten._embedding_bag_backward.default: embedding_bag_backward,
}


def extra_decomposition_of(op: torch._ops.OpOverload) -> Callable | None:
    """Torch-FL's own decomposition of `op`, or None."""
    return EXTRA_DECOMPOSITIONS.get(op)
