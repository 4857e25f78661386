"""Arguments that share memory (fl_abi.h, "ARGUMENTS THAT SHARE MEMORY").

The runtime passes a kernel calls whose output shares an allocation with an input:
`x.copy_(x.t())`, `a[1:].copy_(a[:-1])`, an in-place op whose other input is a view of
its output (`a[1:].add_(a[:-1])`), `out=` overlapping an input.  The ABI's promise,
for every op kind: the kernel computes as if it had read all of its inputs before
writing any output.  PyTorch's CPU refuses most such calls ("unsupported operation:
some elements of the input tensor and the written-to tensor refer to a single memory
location"); the answer a kernel must give is the one PyTorch gives for the same call
with the input cloned first.

An overlap case is an ordinary case of the op (its hand recipe) rewired: the tensor the
op writes (self of an in-place op, out=, copy_'s destination) and one tensor it reads
become views of one storage, with drawn dimension orders, steps, storage offsets and
(for the input) broadcast dimensions, the input's offset drawn inside the output's
span so that they overlap.  numerics.check_case runs it: the kernel gets both views in
one allocation (harness.call_kernel places tensors that share a storage once), the
reference gets the input cloned, and the written view and the bytes around it are
judged as for any in-place op.
"""
from __future__ import annotations

import math
from typing import Callable

from hypothesis import strategies as st

from fl_runtime.ops.schema import OpPlan, compile_plan

from . import strategies as s
from .recipes import NAMES, _storage_layout, build

# Ops whose inputs may not be rewired onto another dtype's storage: only copy_ reads any dtype.
_ANY_SOURCE_DTYPE = frozenset({"copy_"})


def roles(plan: OpPlan) -> tuple[int, list[int]] | None:
    """(the schema index of the tensor the op writes, the indices of the plain tensors it
    reads), or None when the op writes no tensor argument or reads no other."""
    written = next((alias for alias in plan.returns_alias if alias is not None), None)
    if written is None:
        return None
    read = [i for i in plan.tensor_arg_indices if i != written and i not in plan.written_arg_indices]
    return (written, read) if read else None


def applies(op: str) -> bool:
    """Whether the suite sends `op` overlap cases: it writes a tensor argument, reads another,
    and has a hand recipe to start from."""
    from .opspecs import OPSPECS
    try:
        return op in OPSPECS and roles(compile_plan(op)) is not None
    except AttributeError:
        return False


def _view(draw: s.Draw, shape: list[int], can_expand: bool) -> dict:
    """A view's layout inside the shared storage (recipes._storage_layout's keys)."""
    ndim = len(shape)
    perm = list(draw(st.permutations(range(ndim)))) if ndim > 1 and draw(st.booleans()) else None
    step = [draw(st.sampled_from([1, 1, 2])) for _ in shape] or None
    expand = [d for d in range(ndim) if can_expand and shape[d] > 1 and draw(st.integers(0, 4)) == 0]
    return {"perm": perm, "step": step, "offset": 0, "expand": expand}


def _span(shape: list[int], layout: dict) -> int:
    return _storage_layout(shape, layout)[3]


@st.composite
def cases(draw: s.Draw, op: str, dtype, mask: int, schema_values: Callable[[OpPlan, dict], list]) -> dict:
    """An overlap case for `op` on `dtype` (the written tensor's dtype); `schema_values`
    turns a case into the call's values (conformance.numerics.schema_values)."""
    from .opspecs import OPSPECS
    plan = compile_plan(op)
    written, read = roles(plan)
    args, kwargs = OPSPECS[op].generate(draw, dtype, mask)
    base = {"op": op, "dtype": NAMES[dtype], "args": args, "kwargs": kwargs, "shift": s.byte_shift(draw),
            "out_shift": 0}
    values = schema_values(plan, base)
    candidates = [i for i in read if op in _ANY_SOURCE_DTYPE or
                  (hasattr(values[i], "dtype") and values[i].dtype == values[written].dtype)]
    if not candidates:
        from hypothesis import reject
        reject()
    source = draw(st.sampled_from(candidates))
    out_shape, in_shape = list(values[written].shape), list(values[source].shape)
    out_view, in_view = _view(draw, out_shape, False), _view(draw, in_shape, True)
    out_view["offset"] = draw(st.integers(0, 3))
    out_end = out_view["offset"] + _span(out_shape, out_view)
    in_view["offset"] = draw(st.integers(0, max(out_end - 1, 0)))
    numel = max(out_end, in_view["offset"] + _span(in_shape, in_view))
    storage = {"shape": [numel], "dtype": NAMES[values[written].dtype], **s.values(draw, values[written].dtype,
                                                                                  finite=True)}
    overlap = {"storage": storage, "views": {str(written): [out_shape, out_view], str(source): [in_shape, in_view]}}
    return {**base, "overlap": overlap}


def rewire(values: list, overlap: dict) -> list:
    """`values` with the written tensor and the input made views of the one shared storage."""
    storage = build({**overlap["storage"], "perm": None, "step": None, "offset": 0, "expand": []})
    values = list(values)
    for index, (shape, layout) in overlap["views"].items():
        _, strides, offset, _ = _storage_layout(shape, layout)
        expand = set(layout.get("expand", ()))
        strides = [0 if d in expand else stride for d, stride in enumerate(strides)]
        values[int(index)] = storage.as_strided(shape, strides, offset)
    return values


def shares_storage(a, b) -> bool:
    return (hasattr(a, "untyped_storage") and hasattr(b, "untyped_storage") and a.untyped_storage().nbytes() > 0
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
