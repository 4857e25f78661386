"""Cases for the optimizer kernels a plugin may offer: PyTorch's fused steps
(`_fused_adam_`, `_fused_adamw_`, `_fused_sgd_`, each also `.tensor_lr`) and the
tensor-list ops its foreach paths call (`_foreach_mul_.Scalar`, ...,
`_foreach_div_.ScalarList`).

They return nothing: conformance.numerics judges the lists the schema lets them
write (`Tensor(a!)[]`) against PyTorch CPU's, entry by entry.  Every list holds
1-3 entries; entry k of each list shares one shape (PyTorch's own contract for
the fused steps; the foreach kernels may decline anything else).  The fused
steps get finite values and non-negative second moments, as an optimizer keeps
them: on NaN ATen's own CPU kernel answers differently in its vector and scalar
loops (at::vec::maximum vs std::max), so there is no single reference there.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from . import strategies as s


def _shapes(draw: s.Draw) -> list[list[int]]:
    return [s.shape(draw, max_dims=3, large=False) for _ in range(draw(st.integers(1, 3)))]


def _list(draw: s.Draw, shapes: list, dtype: torch.dtype, mutable: bool = False, finite: bool = True,
          non_negative: bool = False) -> list:
    made = [s.tensor(draw, shape, dtype, mutable=mutable, finite=finite) for shape in shapes]
    if non_negative:    # |x|: a fresh contiguous tensor (conformance.recipes.derive)
        made = [{"derived": {"op": "abs", "args": [t], "output": 0}} for t in made]
    return made


def _plain(draw: s.Draw, shapes: list, dtype: torch.dtype, non_negative: bool = False) -> list:
    """Finite values without planted specials, dense (the fused steps' inputs).  Dense because
    ATen's CPU fused kernels (FusedAdamKernel.cpp, FusedSGDKernel.cpp) read every tensor by
    data pointer as if contiguous: on a strided view the reference itself is wrong."""
    made = _list(draw, shapes, dtype, mutable=not non_negative)
    for t in made:
        t["tensor"].update(specials=[], perm=None, step=None, expand=[])
    if non_negative:
        made = [{"derived": {"op": "abs", "args": [t], "output": 0}} for t in made]
    return made


def _steps(draw: s.Draw, n: int) -> list:
    """state_steps: float32 scalars holding a step count >= 1 (the caller incremented it)."""
    return [{"derived": {"op": "full", "args": [[], float(draw(st.integers(1, 50)))], "output": 0}}
            for _ in range(n)]


def _lr(draw: s.Draw, tensor_lr: bool):
    lr = draw(st.sampled_from([1e-3, 0.1, 1.0]))
    return {"derived": {"op": "full", "args": [[], lr], "output": 0}} if tensor_lr else lr


def _scaler(draw: s.Draw) -> dict:
    """GradScaler's optional grad_scale and found_inf (one-element float32 tensors)."""
    def scalar(values: list):
        value = draw(st.sampled_from([None, *values]))
        return None if value is None else {"derived": {"op": "full", "args": [[], value], "output": 0}}
    return {"grad_scale": scalar([4.0, 0.5]), "found_inf": scalar([0.0, 1.0])}


def _adam(tensor_lr: bool):
    def generate(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
        shapes = _shapes(draw)
        amsgrad = draw(st.booleans())
        lists = [_plain(draw, shapes, dtype), _plain(draw, shapes, dtype), _plain(draw, shapes, dtype),
                 _plain(draw, shapes, dtype, non_negative=True),
                 _plain(draw, shapes, dtype, non_negative=True) if amsgrad else [],
                 _steps(draw, len(shapes))]
        return lists, {"lr": _lr(draw, tensor_lr), "beta1": draw(st.sampled_from([0.9, 0.0, 0.6])),
                       "beta2": draw(st.sampled_from([0.999, 0.9])), "weight_decay": draw(st.sampled_from([0.0, 0.01])),
                       "eps": draw(st.sampled_from([1e-8, 1e-3])), "amsgrad": amsgrad,
                       "maximize": draw(st.booleans()), **_scaler(draw)}
    return generate


def _sgd(tensor_lr: bool):
    def generate(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
        shapes = _shapes(draw)
        momentum = draw(st.sampled_from([0.0, 0.9]))
        bufs = _plain(draw, shapes, dtype) if momentum else []
        return [_plain(draw, shapes, dtype), _plain(draw, shapes, dtype), bufs], {
            "weight_decay": draw(st.sampled_from([0.0, 0.01])), "momentum": momentum,
            "lr": _lr(draw, tensor_lr), "dampening": draw(st.sampled_from([0.0, 0.1])),
            "nesterov": bool(momentum) and draw(st.booleans()), "maximize": draw(st.booleans()),
            "is_first_step": draw(st.booleans()), **_scaler(draw)}
    return generate


def _foreach(n_operands: int, scalar_name: str | None, scalar_kwarg: bool = False,
             operand_non_negative: bool = False):
    """_foreach_<op>_(self[], operands[]..., scalar): the scalar positional, or keyword-only
    (the List overloads' alpha)."""
    def generate(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
        shapes = _shapes(draw)
        args = [_list(draw, shapes, dtype, mutable=True)]
        args += [_list(draw, shapes, dtype, non_negative=operand_non_negative) for _ in range(n_operands)]
        value = draw(st.sampled_from([2.0, -0.5, 1.0, 0.0, 0.25, 0.9, 3]))
        if scalar_name is None:
            return args, {}
        return (args, {scalar_name: value}) if scalar_kwarg else (args + [value], {})
    return generate


def _foreach_scalarlist(n_operands: int):
    """_foreach_<op>_.ScalarList(self[], operands[]..., scalars): entry k's own scalar (AdamW's
    per-parameter bias corrections); ints among them, as a Scalar[] may hold."""
    def generate(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
        shapes = _shapes(draw)
        args = [_list(draw, shapes, dtype, mutable=True)]
        args += [_list(draw, shapes, dtype) for _ in range(n_operands)]
        scalars = [draw(st.sampled_from([2.0, -0.5, 1.0, 0.25, 0.9, 3, 1e-3, -7])) for _ in shapes]
        return args + [scalars], {}
    return generate


def _sqrt_out(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    shapes = _shapes(draw)
    return [_list(draw, shapes, dtype, non_negative=True)], {"out": _list(draw, shapes, dtype, mutable=True)}


def _sqrt_(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    return [_list(draw, _shapes(draw), dtype, mutable=True, non_negative=True)], {}


OPTIM_GENERATORS = {
    "_fused_adam_": _adam(False), "_fused_adam_.tensor_lr": _adam(True),
    "_fused_adamw_": _adam(False), "_fused_adamw_.tensor_lr": _adam(True),
    "_fused_sgd_": _sgd(False), "_fused_sgd_.tensor_lr": _sgd(True),
    "_foreach_add_.Scalar": _foreach(0, "scalar"), "_foreach_mul_.Scalar": _foreach(0, "scalar"),
    "_foreach_add_.List": _foreach(1, "alpha", scalar_kwarg=True),
    "_foreach_lerp_.Scalar": _foreach(1, "weight"),
    "_foreach_addcmul_.Scalar": _foreach(2, "value"), "_foreach_addcdiv_.Scalar": _foreach(2, "value"),
    "_foreach_sqrt_": _sqrt_, "_foreach_sqrt.out": _sqrt_out,
    "_foreach_div_.ScalarList": _foreach_scalarlist(0), "_foreach_addcdiv_.ScalarList": _foreach_scalarlist(2),
}
