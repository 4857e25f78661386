"""Generic kernels for ops on every user's common path, written with ops every plugin has.

Printing a tensor (`masked_select`, `nonzero`), `torch.equal`, DDP's gradient
scaling (`mul.out`: any out= overload) and GradScaler's two AMP ops
(`_amp_foreach_non_finite_check_and_unscale_`, `_amp_update_scale_`) have no
decomposition PyTorch could run on fl, so a new plugin would send each to the CPU
fallback (docs/users/profiling.md).  Here each is written with elementwise ops,
reductions, `cumsum`, `scatter_` and `index_select`, and the generic kernel runs it
on the device when the plugin has those (the chain checks that on meta tensors, as
for every decomposition).

Data-dependent results (how many elements a mask selects, whether two tensors are
equal) are read from the device once, at the point PyTorch's own kernels read them;
on meta tensors (the chain's feasibility trace) `_host_int` and `_host_bool` stand in
with a fixed value, so the trace sees the same calls the real run makes.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch._prims_common import can_safe_cast_to

aten = torch.ops.aten


def _host_int(t: torch.Tensor) -> int:
    return 0 if t.is_meta else int(t.item())


def _host_bool(t: torch.Tensor) -> bool:
    return True if t.is_meta else bool(t.item())


def _true_positions(flat_mask: torch.Tensor) -> torch.Tensor:
    """The int64 positions of the True entries of a 1-d bool tensor, in order.  Each True
    entry's rank among the Trues (a cumsum) is where its position goes; the False entries
    all go to one spare slot past the end, dropped after the scatter."""
    count = _host_int(flat_mask.sum())
    ranks = torch.cumsum(flat_mask.to(torch.int64), 0) - 1
    spare = torch.full_like(ranks, count)
    target = torch.where(flat_mask, ranks, spare)
    positions = torch.zeros(count + 1, dtype=torch.int64, device=flat_mask.device)
    positions.scatter_(0, target, torch.arange(flat_mask.numel(), dtype=torch.int64, device=flat_mask.device))
    return positions[:count]


def nonzero(self: torch.Tensor) -> torch.Tensor:
    """aten::nonzero: the (count, ndim) int64 coordinates of the nonzero entries, row-major."""
    linear = _true_positions((self != 0).reshape(-1))
    # Each column picks from a grid of that dimension's coordinates (no integer division,
    # which a plugin may lack for int64).  A 0-d tensor takes the same calls as a 1-d one
    # (the chain decides once per dtype, from one trace), then keeps no column.
    shape = self.shape or (1,)
    columns = []
    for dim, size in enumerate(shape):
        along = [1] * len(shape)
        along[dim] = size
        grid = torch.arange(size, dtype=torch.int64, device=self.device).reshape(along).expand(shape)
        columns.append(grid.reshape(-1).index_select(0, linear))
    return torch.stack(columns, 1)[:, :self.dim()]


def masked_select(self: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """aten::masked_select (printing a float tensor calls it): the entries where the
    broadcast mask is True, as a 1-d tensor."""
    values, mask = torch.broadcast_tensors(self, mask)
    return values.reshape(-1).index_select(0, _true_positions(mask.reshape(-1)))


def equal(self: torch.Tensor, other: torch.Tensor) -> bool:
    """aten::equal: same shape and every element equal (NaN is not equal to itself)."""
    if self.shape != other.shape:
        return False
    return _host_bool(torch.eq(self, other).all())


def amp_foreach_non_finite_check_and_unscale_(grads: list[torch.Tensor], found_inf: torch.Tensor,
                                              inv_scale: torch.Tensor) -> None:
    """GradScaler.unscale_: found_inf becomes 1 when any gradient holds an inf or NaN;
    every gradient is multiplied by inv_scale (as PyTorch's CPU and CUDA kernels do)."""
    if not grads:
        return
    flags = [torch.isfinite(g).logical_not().any() for g in grads]
    any_bad = torch.stack(flags).any()
    found_inf.copy_(torch.where(any_bad, torch.ones_like(found_inf), found_inf))
    for g in grads:
        g.mul_(inv_scale)


def amp_update_scale_(scale: torch.Tensor, growth_tracker: torch.Tensor, found_inf: torch.Tensor,
                      growth_factor: float, backoff_factor: float, growth_interval: int) -> torch.Tensor:
    """GradScaler.update: after a step with infs, back off and restart the count; after
    growth_interval clean steps in a row, grow (unless that overflows) and restart."""
    skipped = found_inf > 0
    successful = growth_tracker + 1
    due = successful == growth_interval
    grown = scale * growth_factor
    grow = due.logical_and(torch.isfinite(grown))
    new_scale = torch.where(skipped, scale * backoff_factor, torch.where(grow, grown, scale))
    new_tracker = torch.where(skipped.logical_or(due), torch.zeros_like(successful), successful)
    growth_tracker.copy_(new_tracker)
    return scale.copy_(new_scale)


COMMON_KERNELS: dict[torch._ops.OpOverload, Callable] = {
    aten.nonzero.default: nonzero,
    aten.masked_select.default: masked_select,
    aten.equal.default: equal,
    aten._amp_foreach_non_finite_check_and_unscale_.default: amp_foreach_non_finite_check_and_unscale_,
    aten._amp_update_scale_.default: amp_update_scale_,
}


# ---- any out= overload: its functional overload, then a copy into `out` ------------------------

def _out_names(op: torch._ops.OpOverload) -> list[str]:
    """The names of op's out= tensors (keyword-only arguments it writes)."""
    return [a.name for a in op._schema.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]


def _signature(op: torch._ops.OpOverload, leave_out: list[str]) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in op._schema.arguments if a.name not in leave_out]


def functional_of(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The overload of op's packet taking the same arguments without the out= ones
    (mul.out -> mul.Tensor), or None when op writes no out= tensors or none matches."""
    outs = _out_names(op)
    if not outs or len(op._schema.returns) != len(outs):
        return None
    inputs = _signature(op, outs)
    for name in op.overloadpacket.overloads():
        candidate = getattr(op.overloadpacket, name)
        if candidate is op or candidate._schema.is_mutable or len(candidate._schema.returns) != len(outs):
            continue
        if _signature(candidate, []) == inputs:
            return candidate
    return None


def out_overload_of(functional: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The out= overload taking `functional`'s arguments (div.Tensor_mode -> div.out_mode)."""
    inputs = _signature(functional, [])
    for name in functional.overloadpacket.overloads():
        candidate = getattr(functional.overloadpacket, name)
        outs = _out_names(candidate)
        if outs and _signature(candidate, outs) == inputs:
            return candidate
    return None


def out_overload_decomposition(op: torch._ops.OpOverload, functional: torch._ops.OpOverload) -> Callable:
    """A decomposition of the out= overload `op` into `functional` (functional_of(op)) and
    copies into the out= tensors (resized as out= semantics allow)."""
    outs = _out_names(op)

    def decomposition(*args, **kwargs):
        targets = [kwargs.pop(name) for name in outs]
        results = functional(*args, **kwargs)
        results = results if isinstance(results, tuple) else (results,)
        refused = _unsafe_cast(op, targets, results)
        if refused is not None:
            # the temporaries go now, not while the error unwinds (docs/users/limits.md
            # "Errors and memory": a block freed with an exception pending)
            del results
            raise RuntimeError(refused)
        for target, result in zip(targets, results):
            if target.shape != result.shape:
                target.resize_(result.shape)
            target.copy_(result)
        return targets[0] if len(targets) == 1 else tuple(targets)

    return decomposition



def _unsafe_cast(op: torch._ops.OpOverload, targets: list, results: tuple) -> str | None:
    """The CPU's error for a result an out= tensor cannot hold (out= never casts unsafely),
    or None."""
    for target, result in zip(targets, results):
        if not can_safe_cast_to(cast_to=target.dtype, cast_from=result.dtype):
            return f"result type {result.dtype} can't be cast to the desired output type {target.dtype} ({op.name()})"
    return None
