"""What the runtime needs to know about an ATen op's schema, compiled once per op.

An OpPlan says, for each schema argument, its name, default and how it is
marshaled, and for each return whether it is a fresh tensor or a mutated
argument (in-place and out= overloads).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fl_runtime.abi.convention import TAG_GENERATOR, TAG_SCALAR_LIST, TAG_TENSOR_LIST, tag_of, unwrap_optional

_NO_DEFAULT = object()


@dataclass(frozen=True)
class ArgSpec:
    name: str
    kwarg_only: bool
    default: object
    tag: int
    is_tensor: bool

    @property
    def required(self) -> bool:
        """No default: every call must pass it."""
        return self.default is _NO_DEFAULT


@dataclass(frozen=True)
class OpPlan:
    op: torch._ops.OpOverload
    name: str                         # "add.Tensor", as kernel tables name it
    qualified_name: str               # "aten::add.Tensor", as PyTorch's messages name it
    args: tuple[ArgSpec, ...]
    returns_alias: tuple[int | None, ...]   # per return: index of the mutated arg, or None
    tensor_arg_indices: tuple[int, ...]
    list_tensor_arg_indices: tuple[int, ...]
    is_inplace_or_out: bool
    has_generator: bool
    out_returns: tuple[bool, ...]     # per return: is it an out= argument (resized to fit)?
    written_arg_indices: frozenset[int] = frozenset()   # arguments the op writes (Tensor(a!), Tensor(a!)[])
    scalar_list_indices: tuple[int, ...] = ()   # `Scalar[]` arguments: data, not layout (abi/convention.py)

    def normalize(self, args: tuple, kwargs: dict) -> list:
        """Schema-ordered values of every argument, defaults filled in."""
        values = list(args)
        for spec in self.args[len(args):]:
            value = kwargs.get(spec.name, spec.default)
            if value is _NO_DEFAULT:
                raise TypeError(f"{self.name}: missing argument '{spec.name}'")
            values.append(value)
        return values


def op_overload(name: str) -> torch._ops.OpOverload:
    """torch.ops.aten overload for 'add.Tensor' / 'mm' (raises AttributeError if unknown)."""
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def aten_op_exists(name: str) -> bool:
    """Whether PyTorch defines aten op `name` ('add.Tensor', 'mm'): one dispatcher lookup,
    without building the Python op packet op_overload makes (start-up asks for every op)."""
    packet, _, overload = name.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{packet}", overload)
    except RuntimeError:
        return False
    return True


def compile_plan(name: str) -> OpPlan:
    op = op_overload(name)
    schema = op._schema
    specs = []
    for arg in schema.arguments:
        type_str = str(arg.type)
        default = arg.default_value if arg.has_default_value() else _NO_DEFAULT
        specs.append(ArgSpec(arg.name, arg.kwarg_only, default, tag_of(type_str),
                             unwrap_optional(type_str) == "Tensor"))
    returns_alias = []
    for ret in schema.returns:
        alias = ret.alias_info
        index = None
        if alias is not None and alias.is_write:
            index = next(i for i, a in enumerate(schema.arguments)
                         if a.alias_info is not None and a.alias_info.before_set == alias.before_set)
        returns_alias.append(index)
    return OpPlan(op=op, name=name, qualified_name=op.name(), args=tuple(specs), returns_alias=tuple(returns_alias),
                  tensor_arg_indices=tuple(i for i, s in enumerate(specs) if s.is_tensor),
                  list_tensor_arg_indices=tuple(i for i, s in enumerate(specs) if s.tag == TAG_TENSOR_LIST),
                  is_inplace_or_out=any(i is not None for i in returns_alias),
                  has_generator=any(s.tag == TAG_GENERATOR for s in specs),
                  out_returns=tuple(i is not None and specs[i].kwarg_only for i in returns_alias),
                  written_arg_indices=frozenset(i for i, a in enumerate(schema.arguments)
                                                if a.alias_info is not None and a.alias_info.is_write),
                  scalar_list_indices=tuple(i for i, s in enumerate(specs) if s.tag == TAG_SCALAR_LIST))


_NUMBER_TYPES = (bool, int, float, complex)
_TENSOR_KINDS = {"Tensor": False, "Optional[Tensor]": False, "List[Tensor]": True}   # as str(arg.type) prints
_tensor_slots: dict = {}     # op -> tensor_slots(op)
_generator_slots: dict = {}  # op -> generator_slot(op)


def tensor_slots(op: torch._ops.OpOverload) -> tuple[tuple[int, str, bool, bool], ...]:
    """(position, name, keyword-only, is a list) of each Tensor, Optional[Tensor] and
    List[Tensor] argument of `op`, read from its schema once per op: the fallback paths ask
    at every call (arange's Scalars reach numbers_as_tensors every forward of an HF model)."""
    found = _tensor_slots.get(op)
    if found is None:
        found = _tensor_slots.setdefault(op, tuple((i, a.name, a.kwarg_only, _TENSOR_KINDS[str(a.type)])
                                                   for i, a in enumerate(op._schema.arguments)
                                                   if str(a.type) in _TENSOR_KINDS))
    return found


def generator_slot(op: torch._ops.OpOverload) -> tuple[int, str, bool] | None:
    """(position, name, keyword-only) of `op`'s Generator argument, None for an op without
    one; read from its schema once per op (the CPU fallback asks at every call)."""
    if op not in _generator_slots:
        _generator_slots.setdefault(op, next(((i, a.name, a.kwarg_only) for i, a in enumerate(op._schema.arguments)
                                               if tag_of(str(a.type)) == TAG_GENERATOR), None))
    return _generator_slots[op]


def numbers_as_tensors(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """`args`/`kwargs` with Python numbers in Tensor slots made 0-dim CPU tensors.

    PyTorch hands a Python kernel a wrapped-number tensor (the 3 of `x |= 3`,
    which reaches us as bitwise_or.Tensor_out) as a Python number, and calling
    the overload back with it fails ("Unable to cast 3 to Tensor") for every op
    but the few PyTorch lets take numbers.  The tensor gets the dtype the number
    promotes to against the call's first tensor, so the result dtype is the one
    the wrapped number gave.  Only the fallback paths call this (the vendor path
    marshals numbers directly)."""
    if not any(isinstance(v, _NUMBER_TYPES) for v in (*args, *kwargs.values())):
        return args, kwargs
    numbers = [(i, name) for i, name, _, is_list in tensor_slots(op)
               if not is_list and isinstance(args[i] if i < len(args) else kwargs.get(name), _NUMBER_TYPES)]
    if not numbers:
        return args, kwargs
    args, kwargs = list(args), dict(kwargs)
    reference = next((v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)), None)
    for i, name in numbers:
        if i < len(args):
            args[i] = _number_tensor(args[i], reference)
        else:
            kwargs[name] = _number_tensor(kwargs[name], reference)
    return tuple(args), kwargs


def _number_tensor(value, reference: torch.Tensor | None) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.result_type(reference, value) if reference is not None else None)
