"""The kernel calling convention of fl_abi.h ("kernel calling convention"), in one place.

How each schema argument travels (`tag_of`), and the writers that put Python
values into the ABI's `fl_arg` / `fl_tensor` structs.  The runtime's marshaler
(fl_runtime.ops.eager.marshal, with its per-signature templates) and the conformance
harness both encode through these functions, so the two can never disagree.

The writers pack bytes with `struct` into an `Arena` (a scratch buffer: fl_arg
slots, then a heap of fl_tensor structs, dims, lists and strings) instead of
allocating one cffi object per value: that is what keeps the hot path cheap.
Every packed field's offset is taken from cffi (`ffi.offsetof`), which read
the structs from the header, never written by hand; `FIELD_OFFSETS` lists them
and a test pins them.
"""
from __future__ import annotations

import struct
from collections.abc import Callable

import torch

from fl_runtime import abi
from fl_runtime.abi import ffi

# How a schema argument is marshaled when its Python value alone cannot tell.
# TAG_SCALAR_LIST (`Scalar[]`, printed "List[number]": the foreach ScalarList overloads) travels
# as FL_ARG_FLOAT_LIST like `float[]`, but its values are data, not layout: optimizers pass new
# ones every step, so the meta cache and the marshal templates treat it as they treat a float.
(TAG_VALUE, TAG_GENERATOR, TAG_INT_LIST, TAG_FLOAT_LIST, TAG_BOOL_LIST, TAG_TENSOR_LIST,
 TAG_SCALAR_LIST) = range(7)
_LIST_TAGS = {"List[int]": TAG_INT_LIST, "List[SymInt]": TAG_INT_LIST, "List[float]": TAG_FLOAT_LIST,
              "List[bool]": TAG_BOOL_LIST, "List[Tensor]": TAG_TENSOR_LIST,
              "List[Optional[Tensor]]": TAG_TENSOR_LIST, "Generator": TAG_GENERATOR,
              "List[number]": TAG_SCALAR_LIST}
_LIST_KINDS = {TAG_INT_LIST: abi.ARG_INT_LIST, TAG_GENERATOR: abi.ARG_INT_LIST, TAG_BOOL_LIST: abi.ARG_BOOL_LIST,
               TAG_FLOAT_LIST: abi.ARG_FLOAT_LIST, TAG_TENSOR_LIST: abi.ARG_TENSOR_LIST,
               TAG_SCALAR_LIST: abi.ARG_FLOAT_LIST}


def unwrap_optional(type_str: str) -> str:
    """'Optional[List[int]]' -> 'List[int]' (torch prints schema types this way)."""
    if type_str.startswith("Optional[") and type_str.endswith("]"):
        return type_str[len("Optional["):-1]
    return type_str


def tag_of(type_str: str) -> int:
    """The marshaling tag of a schema argument type (as str(arg.type) prints it)."""
    return _LIST_TAGS.get(unwrap_optional(type_str), TAG_VALUE)


# ---- struct layouts, from cffi -------------------------------------------------

def _layout(type_name: str, fields: list[tuple[str, str]]) -> tuple[struct.Struct, dict[str, int]]:
    """A struct.Struct writing `fields` ((name, format char), in order) at the offsets
    cffi gives, padded to the struct's size; and those offsets."""
    offsets = {name: ffi.offsetof(type_name, name) for name, _ in fields}
    fmt, at = "=", 0
    for name, code in fields:
        fmt += "x" * (offsets[name] - at) + code
        at = offsets[name] + struct.calcsize("=" + code)
    fmt += "x" * (ffi.sizeof(type_name) - at)
    return struct.Struct(fmt), offsets


ARG_INT, _ARG_OFFSETS = _layout("fl_arg", [("kind", "i"), ("count", "I"), ("value", "q")])
ARG_FLOAT, _ = _layout("fl_arg", [("kind", "i"), ("count", "I"), ("value", "d")])
TENSOR, _TENSOR_OFFSETS = _layout("fl_tensor", [("struct_size", "Q"), ("base", "Q"), ("byte_offset", "Q"),
                                                ("dtype", "i"), ("ndim", "i"), ("sizes", "Q"), ("strides", "Q")])
ARG_SIZE = ffi.sizeof("fl_arg")
TENSOR_SIZE = ffi.sizeof("fl_tensor")
BASE_OFFSET = _TENSOR_OFFSETS["base"]          # where a template patches a tensor's address
assert _TENSOR_OFFSETS["byte_offset"] == BASE_OFFSET + 8, "fl_tensor.base and .byte_offset must be adjacent"
BASE_AND_OFFSET = struct.Struct("=QQ")
FIELD_OFFSETS = {"fl_arg": _ARG_OFFSETS, "fl_tensor": _TENSOR_OFFSETS}
INT64S = [struct.Struct(f"={n}q") for n in range(0, 65)]
_DTYPE_TO_FL = abi.DTYPE_TO_FL


class EncodeError(TypeError):
    """A value the ABI cannot carry (the runtime then falls back)."""


class ArenaFull(Exception):
    """The arena is too small for this call: retry with a larger one."""


class Arena:
    """One scratch buffer: [ARGS fl_arg slots | heap of fl_tensor structs, dims, lists, strings].
    The plugin copies what it keeps before launch_kernel returns (fl_abi.h), so an arena
    is reused by the next launch."""
    ARGS = 64

    def __init__(self, size: int = 1 << 16) -> None:
        self.cdata = ffi.new("char[]", size)
        self.size = size
        self.address = int(ffi.cast("uintptr_t", self.cdata))
        self.mem = ffi.buffer(self.cdata)
        self.args = ffi.cast("const fl_arg*", self.cdata)
        self.top = 0

    def start(self) -> None:
        """Forget the heap: the next call's values go after the argument slots."""
        self.top = Arena.ARGS * ARG_SIZE

    def reserve(self, nbytes: int) -> int:
        """Offset of nbytes of 8-aligned heap space."""
        offset = self.top
        self.top = offset + (nbytes + 7) // 8 * 8
        if self.top > self.size:
            raise ArenaFull
        return offset


# ---- writers ---------------------------------------------------------------------

def put_tensor(arena: Arena, base: int, byte_offset: int, dtype: torch.dtype, shape, strides) -> int:
    """Write an fl_tensor (and its dims) into the heap; returns its address."""
    ndim = len(shape)
    at = arena.reserve(TENSOR_SIZE + 16 * ndim)
    dims = at + TENSOR_SIZE
    INT64S[2 * ndim].pack_into(arena.mem, dims, *shape, *strides)
    address = arena.address
    TENSOR.pack_into(arena.mem, at, TENSOR_SIZE, base, byte_offset, _DTYPE_TO_FL[dtype], ndim,
                     address + dims, address + dims + 8 * ndim)
    return address + at


def put_scalar(arena: Arena, slot: int, value) -> None:
    """A Scalar: FL_ARG_BOOL, FL_ARG_INT or FL_ARG_FLOAT at the slot's byte offset."""
    if isinstance(value, bool):
        ARG_INT.pack_into(arena.mem, slot, abi.ARG_BOOL, 0, int(value))
    elif isinstance(value, int):
        ARG_INT.pack_into(arena.mem, slot, abi.ARG_INT, 0, value)
    elif isinstance(value, float):
        ARG_FLOAT.pack_into(arena.mem, slot, abi.ARG_FLOAT, 0, value)
    else:
        raise EncodeError(f"cannot pass {type(value).__name__} value {value!r} to a kernel")


def scalar_as_double(value) -> float:
    """One entry of a `Scalar[]` (fl_abi.h: FL_ARG_FLOAT_LIST, each entry a double).  An int a
    double cannot hold exactly is refused (the call falls back), never rounded."""
    if isinstance(value, float) or isinstance(value, int) and abs(value) <= 1 << 53:
        return float(value)
    raise EncodeError(f"cannot pass {type(value).__name__} value {value!r} in a Scalar[] to a kernel "
                      "(its entries travel as doubles)")


def put_none(arena: Arena, slot: int) -> None:
    ARG_INT.pack_into(arena.mem, slot, abi.ARG_NONE, 0, 0)


def put_tensor_arg(arena: Arena, slot: int, address: int) -> None:
    ARG_INT.pack_into(arena.mem, slot, abi.ARG_TENSOR, 0, address)


def put_list(arena: Arena, slot: int, tag: int, items, tensor: Callable | None = None) -> int:
    """A list argument (ints, bools, floats, a generator's {seed, offset}, or tensors
    through `tensor(item) -> fl_tensor address`, called on every entry in order, None
    (written as NULL) for a None entry of a Tensor?[]); returns the heap offset of its items."""
    count = len(items)
    at = arena.reserve(8 * count)
    if tag == TAG_TENSOR_LIST:
        struct.pack_into(f"={count}Q", arena.mem, at, *(tensor(t) or 0 for t in items))
    elif tag == TAG_FLOAT_LIST:
        struct.pack_into(f"={count}d", arena.mem, at, *(float(v) for v in items))
    elif tag == TAG_SCALAR_LIST:
        struct.pack_into(f"={count}d", arena.mem, at, *map(scalar_as_double, items))
    else:
        struct.pack_into(f"={count}q", arena.mem, at, *(int(v) for v in items))
    ARG_INT.pack_into(arena.mem, slot, _LIST_KINDS[tag], count, arena.address + at)
    return at


def put_value(arena: Arena, slot: int, tag: int, value, tensor: Callable) -> None:
    """One schema argument (or output) at the slot's byte offset.

    `tensor(value)` writes the caller's tensor type and returns the fl_tensor's
    address, or None when `value` is not one (the runtime passes torch tensors,
    the conformance harness tensors it placed in device memory)."""
    if value is None or isinstance(value, (torch.device, torch.layout, torch.memory_format)):
        put_none(arena, slot)        # placement is the runtime's business, not the kernel's
        return
    address = tensor(value)
    if address is not None:
        put_tensor_arg(arena, slot, address)
    elif tag != TAG_VALUE:
        put_list(arena, slot, tag, [value] if isinstance(value, (int, float)) else value, tensor)
    elif isinstance(value, torch.dtype):
        ARG_INT.pack_into(arena.mem, slot, abi.ARG_INT, 0, _DTYPE_TO_FL[value])
    elif isinstance(value, str):
        encoded = value.encode() + b"\0"
        at = arena.reserve(len(encoded))
        arena.mem[at:at + len(encoded)] = encoded
        ARG_INT.pack_into(arena.mem, slot, abi.ARG_STRING, 0, arena.address + at)
    else:
        put_scalar(arena, slot, value)


def encode_call(tagged_values: list[tuple[int, object]], tensor_for: Callable) -> Arena:
    """A fresh arena holding one call's fl_arg array (schema values, then outputs):
    `tagged_values` is [(tag, value)], `tensor_for(arena)` gives the tensor writer
    for that arena.  For callers without a hot path (the conformance harness)."""
    if len(tagged_values) > Arena.ARGS:
        raise EncodeError(f"{len(tagged_values)} arguments exceed the {Arena.ARGS} a call can carry")
    size = 1 << 12
    while True:
        arena = Arena(size)
        arena.start()
        writer = tensor_for(arena)
        try:
            for i, (tag, value) in enumerate(tagged_values):
                put_value(arena, i * ARG_SIZE, tag, value, writer)
            return arena
        except ArenaFull:
            size *= 4
