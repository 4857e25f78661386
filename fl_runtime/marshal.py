"""Schema-ordered Python values -> the ABI's fl_arg array (see fl_abi.h).

This is on the path of every op, so it writes the C structs with
struct.pack_into into a per-thread scratch arena instead of allocating cffi
objects: the ABI says the plugin copies what it keeps before launch_kernel
returns, so the arena is reused by the next launch on the same thread.

The first launch of an input signature (shapes, strides, dtypes, ints) records
a template: the arena's bytes plus the sites that change from call to call
(tensor addresses, float scalars, wrapped numbers, random state).  Later
launches of the signature copy the bytes and patch those sites only.
"""
from __future__ import annotations

import struct
import threading

import torch

from . import abi
from .abi import ffi
from .schema import TAG_BOOL_LIST, TAG_FLOAT_LIST, TAG_GENERATOR, TAG_INT_LIST, TAG_TENSOR_LIST, OpPlan

_DTYPE_TO_FL = abi.DTYPE_TO_FL
_ARG_INT = struct.Struct("=iIq")        # fl_arg with an integer/pointer value
_ARG_FLOAT = struct.Struct("=iId")      # fl_arg with a double value
_TENSOR = struct.Struct("=QQQiiQQ")     # fl_tensor
_BASE_AND_OFFSET = struct.Struct("=QQ")  # fl_tensor.base, .byte_offset (at +8)
_TENSOR_SIZE = ffi.sizeof("fl_tensor")
_ARG_SIZE = ffi.sizeof("fl_arg")
assert _ARG_INT.size == _ARG_SIZE and _TENSOR.size == _TENSOR_SIZE, "fl_abi.h layout changed"
_INT64S = [struct.Struct(f"={n}q") for n in range(0, 65)]

ARG_NONE, ARG_TENSOR, ARG_INT, ARG_FLOAT, ARG_BOOL = (abi.ARG_NONE, abi.ARG_TENSOR, abi.ARG_INT,
                                                      abi.ARG_FLOAT, abi.ARG_BOOL)


class MarshalError(TypeError):
    """A value the ABI cannot carry (the caller falls back)."""


class Arena:
    """One scratch buffer: [fl_arg slots | heap of fl_tensor structs, dims, lists, strings]."""
    ARGS = 64

    def __init__(self, size: int = 1 << 16) -> None:
        self.cdata = ffi.new("char[]", size)
        self.size = size
        self.address = int(ffi.cast("uintptr_t", self.cdata))
        self.mem = ffi.buffer(self.cdata)
        self.args = ffi.cast("const fl_arg*", self.cdata)
        self.top = 0

    def reserve(self, nbytes: int) -> int:
        """Offset of nbytes of 8-aligned heap space."""
        offset = self.top
        self.top = offset + (nbytes + 7) // 8 * 8
        if self.top > self.size:
            raise _ArenaFull
        return offset


class _ArenaFull(Exception):
    pass


_local = threading.local()


def _arena(min_size: int = 1 << 16) -> Arena:
    arena = getattr(_local, "arena", None)
    if arena is None or arena.size < min_size:
        arena = _local.arena = Arena(max(min_size, 1 << 16))
    return arena


def _tensor(arena: Arena, t: torch.Tensor) -> int:
    """Write an fl_tensor for t; returns its address."""
    shape = t.shape
    ndim = len(shape)
    dtype = t.dtype
    offset = t.storage_offset() * dtype.itemsize
    base = t.data_ptr() - offset
    if base < 0:                 # an empty tensor has no storage (data_ptr 0); nothing is read
        base = offset = 0
    at = arena.reserve(_TENSOR_SIZE + 16 * ndim)
    dims = at + _TENSOR_SIZE
    mem = arena.mem
    _INT64S[2 * ndim].pack_into(mem, dims, *shape, *t.stride())
    address = arena.address
    _TENSOR.pack_into(mem, at, _TENSOR_SIZE, base, offset, _DTYPE_TO_FL[dtype],
                      ndim, address + dims, address + dims + 8 * ndim)
    return address + at


def _scalar(arena: Arena, slot: int, value) -> None:
    if isinstance(value, bool):
        _ARG_INT.pack_into(arena.mem, slot, ARG_BOOL, 0, int(value))
    elif isinstance(value, int):
        _ARG_INT.pack_into(arena.mem, slot, ARG_INT, 0, value)
    elif isinstance(value, float):
        _ARG_FLOAT.pack_into(arena.mem, slot, ARG_FLOAT, 0, value)
    else:
        raise MarshalError(f"cannot pass {type(value).__name__} value {value!r} to a kernel")


def _list(arena: Arena, slot: int, tag: int, value, sites: list, source: int) -> None:
    count = len(value)
    if tag == TAG_TENSOR_LIST:
        at = arena.reserve(8 * count)
        pointers = []
        for j, t in enumerate(value):
            address = 0 if t is None else _tensor(arena, t)
            if t is not None:
                sites.append((_SITE_LIST_TENSOR, address - arena.address, source, j))
            pointers.append(address)
        struct.pack_into(f"={count}Q", arena.mem, at, *pointers)
        kind = abi.ARG_TENSOR_LIST
    elif tag == TAG_FLOAT_LIST:
        at = arena.reserve(8 * count)
        struct.pack_into(f"={count}d", arena.mem, at, *(float(v) for v in value))
        kind = abi.ARG_FLOAT_LIST
    else:
        at = arena.reserve(8 * count)
        struct.pack_into(f"={count}q", arena.mem, at, *(int(v) for v in value))
        kind = abi.ARG_BOOL_LIST if tag == TAG_BOOL_LIST else abi.ARG_INT_LIST
    _ARG_INT.pack_into(arena.mem, slot, kind, count, arena.address + at)


def _value(arena: Arena, slot: int, tag: int, value, sites: list, source: int) -> None:
    if value is None:
        _ARG_INT.pack_into(arena.mem, slot, ARG_NONE, 0, 0)
    elif isinstance(value, torch.Tensor):
        if value.is_cpu:
            if value.dim() != 0:
                raise RuntimeError("Expected all tensors to be on the same device, but found a CPU tensor "
                                   f"of shape {tuple(value.shape)} next to fl tensors")
            _scalar(arena, slot, value.item())     # PyTorch's wrapped numbers travel as scalars
            sites.append((_SITE_WRAPPED, slot, source, 0))
        else:
            address = _tensor(arena, value)
            _ARG_INT.pack_into(arena.mem, slot, ARG_TENSOR, 0, address)
            sites.append((_SITE_TENSOR, address - arena.address, source, 0))
    elif tag in (TAG_INT_LIST, TAG_FLOAT_LIST, TAG_BOOL_LIST, TAG_TENSOR_LIST):
        _list(arena, slot, tag, [value] if isinstance(value, (int, float)) else value, sites, source)
    elif isinstance(value, float):
        _ARG_FLOAT.pack_into(arena.mem, slot, ARG_FLOAT, 0, value)
        sites.append((_SITE_FLOAT, slot, source, 0))
    elif isinstance(value, torch.dtype):
        _ARG_INT.pack_into(arena.mem, slot, ARG_INT, 0, _DTYPE_TO_FL[value])
    elif isinstance(value, str):
        encoded = value.encode() + b"\0"
        at = arena.reserve(len(encoded))
        arena.mem[at:at + len(encoded)] = encoded
        _ARG_INT.pack_into(arena.mem, slot, abi.ARG_STRING, 0, arena.address + at)
    elif isinstance(value, (torch.device, torch.layout, torch.memory_format)):
        _ARG_INT.pack_into(arena.mem, slot, ARG_NONE, 0, 0)   # placement is the runtime's business
    else:
        _scalar(arena, slot, value)


# Sites a template patches on every launch: (kind, byte offset in the arena, value index, list index)
_SITE_TENSOR, _SITE_LIST_TENSOR, _SITE_OUTPUT, _SITE_FLOAT, _SITE_WRAPPED, _SITE_RNG = range(6)


class Template:
    """The arena bytes of one signature's launch and the sites that vary."""
    __slots__ = ("arena", "blob", "sites")

    def __init__(self, arena: Arena, sites: list) -> None:
        self.arena = arena
        self.blob = bytes(arena.mem[0:arena.top])
        self.sites = tuple(sites)


def marshal(plan: OpPlan, values: list, outputs: list, take_rng, entry) -> tuple:
    """Build the fl_arg array for one launch: schema args, then outputs.

    take_rng(numel) gives the (seed, offset) pair for a Generator argument;
    `entry` is the signature's cache entry (its .template is read and set here).
    Returns (pointer to the args, count); valid until the next marshal on this thread.
    """
    count = len(values) + len(outputs)
    if count > Arena.ARGS:
        raise MarshalError(f"{plan.name}: {count} arguments exceed the {Arena.ARGS} the runtime marshals")
    arena = _arena()
    template = entry.template
    if template is not None and template.arena is arena:
        _replay(template, arena, values, outputs, take_rng)
        return arena.args, count
    while True:
        try:
            sites: list = []
            _fill(arena, plan, values, outputs, take_rng, sites)
            entry.template = Template(arena, sites)
            return arena.args, count
        except _ArenaFull:
            arena = _arena(arena.size * 4)


def _replay(template: Template, arena: Arena, values: list, outputs: list, take_rng) -> None:
    mem = arena.mem
    mem[0:len(template.blob)] = template.blob
    for kind, at, i, j in template.sites:
        if kind <= _SITE_OUTPUT:
            t = values[i] if kind == _SITE_TENSOR else values[i][j] if kind == _SITE_LIST_TENSOR else outputs[i]
            offset = t.storage_offset() * t.dtype.itemsize
            base = t.data_ptr() - offset
            if base < 0:         # empty tensor, as in _tensor
                base = offset = 0
            _BASE_AND_OFFSET.pack_into(mem, at + 8, base, offset)
        elif kind == _SITE_FLOAT:
            _ARG_FLOAT.pack_into(mem, at, ARG_FLOAT, 0, values[i])
        elif kind == _SITE_WRAPPED:
            _scalar(arena, at, values[i].item())
        else:
            numel = sum(o.numel() for o in outputs if o is not None)
            _INT64S[2].pack_into(mem, at, *take_rng(numel))


def _fill(arena: Arena, plan: OpPlan, values: list, outputs: list, take_rng, sites: list) -> None:
    arena.top = Arena.ARGS * _ARG_SIZE
    slot = 0
    for i, (spec, value) in enumerate(zip(plan.args, values)):
        if spec.tag == TAG_GENERATOR:
            if value is not None:
                raise MarshalError("an explicit torch.Generator is not supported by fl kernels yet")
            numel = sum(o.numel() for o in outputs if o is not None)
            _list(arena, slot, TAG_INT_LIST, take_rng(numel), sites, i)
            pointer = struct.unpack_from("=iIq", arena.mem, slot)[2]
            sites.append((_SITE_RNG, pointer - arena.address, i, 0))
        else:
            _value(arena, slot, spec.tag, value, sites, i)
        slot += _ARG_SIZE
    for j, out in enumerate(outputs):
        if out is None:
            _ARG_INT.pack_into(arena.mem, slot, ARG_NONE, 0, 0)
        else:
            address = _tensor(arena, out)
            _ARG_INT.pack_into(arena.mem, slot, ARG_TENSOR, 0, address)
            sites.append((_SITE_OUTPUT, address - arena.address, j, 0))
        slot += _ARG_SIZE
