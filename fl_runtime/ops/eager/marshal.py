"""Schema-ordered Python values -> the ABI's fl_arg array (see fl_abi.h).

This is on the path of every op, so it writes the C structs with
struct.pack_into into a per-thread scratch arena instead of allocating cffi
objects: the ABI says the plugin copies what it keeps before launch_kernel
returns, so the arena is reused by the next launch on the same thread.

The first launch of an input signature (shapes, strides, dtypes, ints) records
a template: the arena's bytes plus the sites that change from call to call
(tensor addresses, float scalars and `Scalar[]` entries, wrapped numbers,
random state).  Later
launches of the signature copy the bytes and patch those sites only.
"""
from __future__ import annotations

import struct
import threading

import torch

from fl_runtime import abi, compiled
from fl_runtime.abi import convention as cv
from fl_runtime.abi.convention import (ARG_FLOAT, ARG_INT, ARG_SIZE, BASE_AND_OFFSET, BASE_OFFSET, INT64S, TAG_GENERATOR,
                                       TAG_INT_LIST, TAG_SCALAR_LIST, TAG_VALUE, Arena, ArenaFull)
from fl_runtime.abi import ARG_FLOAT as _KIND_FLOAT
from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.ops.schema import OpPlan

MarshalError = cv.EncodeError      # a value the ABI cannot carry (the launcher falls back)
_local = threading.local()
# replay's tensor sites, compiled (ops/eager/_program.c; fl_runtime/compiled.py), where built
_native = compiled.load("fl_runtime.ops.eager._program")
_patch_tensors = _native.patch_tensors if _native is not None else None


def _arena(min_size: int = 1 << 16) -> Arena:
    arena = getattr(_local, "arena", None)
    if arena is None or arena.size < min_size:
        arena = _local.arena = Arena(max(min_size, 1 << 16))
    return arena


def base_and_offset(t: torch.Tensor) -> tuple[int, int]:
    """The (base, byte_offset) pair of t's fl_tensor: its storage's address and its offset."""
    offset = t.storage_offset() * t.dtype.itemsize
    base = t.data_ptr() - offset
    if base < 0:                 # an empty tensor has no storage (data_ptr 0); nothing is read
        return 0, 0
    return base, offset


def _tensor(arena: Arena, t: torch.Tensor) -> int:
    """Write an fl_tensor for t; returns its address."""
    return cv.put_tensor(arena, *base_and_offset(t), t.dtype, t.shape, t.stride())


def _value(arena: Arena, slot: int, tag: int, value, sites: list, source: int) -> None:
    """One schema value, recording the sites a later launch of the signature patches."""
    if isinstance(value, torch.Tensor) and value.is_cpu and tag == TAG_VALUE:
        if value.dim() != 0:
            raise RuntimeError("Expected all tensors to be on the same device, but found a CPU tensor "
                               f"of shape {tuple(value.shape)} next to fl tensors")
        cv.put_scalar(arena, slot, value.item())     # PyTorch's wrapped numbers travel as scalars
        sites.append((SITE_WRAPPED, slot, source, 0))
        return
    if tag == TAG_SCALAR_LIST and isinstance(value, (list, tuple)):
        at = cv.put_list(arena, slot, tag, value)     # entries patched per call, like a float
        sites.append((SITE_SCALAR_LIST, at, source, 0))
        return
    listed = [0]

    def tensor(t) -> int | None:
        if not isinstance(t, torch.Tensor):
            listed[0] += t is None       # a None entry of a Tensor?[] still has a position
            return None
        address = _tensor(arena, t)
        if tag == TAG_VALUE:
            sites.append((SITE_TENSOR, address - arena.address + BASE_OFFSET, source, 0))
        else:
            sites.append((SITE_LIST_TENSOR, address - arena.address + BASE_OFFSET, source, listed[0]))
        listed[0] += 1
        return address

    cv.put_value(arena, slot, tag, value, tensor)
    if tag == TAG_VALUE and isinstance(value, float):
        sites.append((SITE_FLOAT, slot, source, 0))


# Sites a template patches on every launch: (kind, byte offset in the arena, value index, list index);
# public for the graph path, which fills arenas of its own (graph_record.py)
SITE_TENSOR, SITE_LIST_TENSOR, SITE_OUTPUT, SITE_FLOAT, SITE_WRAPPED, SITE_RNG, SITE_SCALAR_LIST = range(7)


class Template:
    """The arena bytes of one signature's launch and the sites that vary.

    The tensor sites (arguments and outputs, the common kind) are kept apart from the
    rest, each with its element size: the signature fixes every tensor's dtype (the
    meta cache's key holds it, and an output's comes from its spec), so the replay
    needs no dtype lookup per tensor."""
    __slots__ = ("arena", "blob", "sites", "inputs", "outputs", "others", "size")

    def __init__(self, arena: Arena, sites: list, values: list, outputs: list) -> None:
        self.arena = arena
        self.blob = bytes(arena.mem[0:arena.top])
        self.size = len(self.blob)
        self.sites = tuple(sites)
        self.inputs = tuple((at, i, values[i].dtype.itemsize) for kind, at, i, _ in sites if kind == SITE_TENSOR)
        self.outputs = tuple((at, j, outputs[j].dtype.itemsize) for kind, at, j, _ in sites if kind == SITE_OUTPUT)
        self.others = tuple(site for site in sites if site[0] not in (SITE_TENSOR, SITE_OUTPUT))


def marshal(plan: OpPlan, values: list, outputs: list, take_rng, entry) -> tuple:
    """Build the fl_arg array for one launch: schema args, then outputs.

    take_rng(numel, generator) gives the (seed, offset) pair for a Generator argument (the
    device's default generator for None, else the explicit fl generator passed);
    `entry` is the signature's cache entry (its .template is read and set here).
    Returns (pointer to the args, count); valid until the next marshal on this thread.
    """
    count = len(values) + len(outputs)
    if count > Arena.ARGS:
        raise MarshalError(f"{plan.name}: {count} arguments exceed the {Arena.ARGS} a call can carry")
    if plan.has_generator:
        _refuse_foreign_generator(plan, values)      # before a template could replay the device's stream
    arena = _arena()
    template = entry.template
    if template is not None and template.arena is arena:
        _replay(template, arena, values, outputs, take_rng)
        return arena.args, count
    while True:
        try:
            sites: list = []
            fill(arena, plan, values, outputs, take_rng, sites)
            entry.template = Template(arena, sites, values, outputs)
            return arena.args, count
        except ArenaFull:
            arena = _arena(arena.size * 4)


def _refuse_foreign_generator(plan: OpPlan, values: list) -> None:
    """An explicit generator that is not an fl one (a CPU generator; on the Python route the
    only kind, as PyTorch makes device generators only through C++ hooks): the launcher's CPU
    fallback runs the op with it, so its seed governs the values (docs/users/limits.md
    "Tensors and devices").  Checked on every launch: a template recorded without a generator would
    otherwise draw from the device's stream instead."""
    for spec, value in zip(plan.args, values):
        if spec.tag == TAG_GENERATOR and value is not None and value.device.type != DEVICE_TYPE:
            raise MarshalError(f"an explicit {value.device.type} torch.Generator draws on its own device; "
                               "the op runs there with it, as its seed asks")


def replay(plan: OpPlan, values: list, outputs: list, entry) -> tuple:
    """marshal() for a per-signature program (ops/eager/fast_path.py: no Generator argument,
    an argument count marshal() already accepted)."""
    template = entry.template
    arena = getattr(_local, "arena", None)
    if template is None or template.arena is not arena:
        return marshal(plan, values, outputs, None, entry)
    if _patch_tensors is not None:
        _patch_tensors(arena.address, template.blob, template.inputs, template.outputs, values, outputs)
        if template.others:
            _replay_sites(template.others, arena, values, outputs, None)
        return arena.args, len(values) + len(outputs)
    mem = arena.mem
    mem[0:template.size] = template.blob
    pack = BASE_AND_OFFSET.pack_into
    for at, i, itemsize in template.inputs:
        t = values[i]
        offset = t.storage_offset() * itemsize
        base = t.data_ptr() - offset
        if base < 0:             # empty tensor, as in _tensor
            base = offset = 0
        pack(mem, at, base, offset)
    for at, j, itemsize in template.outputs:
        t = outputs[j]
        offset = t.storage_offset() * itemsize
        base = t.data_ptr() - offset
        if base < 0:
            base = offset = 0
        pack(mem, at, base, offset)
    if template.others:
        _replay_sites(template.others, arena, values, outputs, None)
    return arena.args, len(values) + len(outputs)


def _replay(template: Template, arena: Arena, values: list, outputs: list, take_rng) -> None:
    arena.mem[0:template.size] = template.blob
    _replay_sites(template.sites, arena, values, outputs, take_rng)


def _replay_sites(sites: tuple, arena: Arena, values: list, outputs: list, take_rng) -> None:
    mem = arena.mem
    for kind, at, i, j in sites:
        if kind <= SITE_OUTPUT:
            t = values[i] if kind == SITE_TENSOR else values[i][j] if kind == SITE_LIST_TENSOR else outputs[i]
            offset = t.storage_offset() * t.dtype.itemsize
            base = t.data_ptr() - offset
            if base < 0:         # empty tensor, as in _tensor
                base = offset = 0
            BASE_AND_OFFSET.pack_into(mem, at, base, offset)
        elif kind == SITE_FLOAT:
            ARG_FLOAT.pack_into(mem, at, _KIND_FLOAT, 0, values[i])
        elif kind == SITE_WRAPPED:
            cv.put_scalar(arena, at, values[i].item())
        elif kind == SITE_SCALAR_LIST:      # the signature fixed its length (meta_cache.py)
            scalars = values[i]
            struct.pack_into(f"={len(scalars)}d", mem, at, *map(cv.scalar_as_double, scalars))
        else:
            numel = sum(o.numel() for o in outputs if o is not None)
            INT64S[2].pack_into(mem, at, *take_rng(numel, values[i]))


_POINTER_KINDS = frozenset({abi.ARG_INT_LIST, abi.ARG_FLOAT_LIST, abi.ARG_BOOL_LIST, abi.ARG_STRING})
_SIZES_AT = cv.FIELD_OFFSETS["fl_tensor"]["sizes"]
_STRIDES_AT = cv.FIELD_OFFSETS["fl_tensor"]["strides"]
_VALUE_AT = cv.FIELD_OFFSETS["fl_arg"]["value"]


def pointer_sites(template: Template, count: int) -> tuple[int, ...]:
    """Offsets of the template's pointers into its own arena (fl_arg values that point to
    fl_tensors, lists and strings; each fl_tensor's sizes and strides), so a copy of the
    blob elsewhere can be relocated (the native bridge's launch programs,
    bridge/csrc/launch_program.h).  Walks the calling convention's structure: exact."""
    blob, base = template.blob, template.arena.address
    sites: list[int] = []

    def tensor(address: int) -> None:
        at = address - base
        sites.extend((at + _SIZES_AT, at + _STRIDES_AT))

    for slot in range(0, count * ARG_SIZE, ARG_SIZE):
        kind, n, value = ARG_INT.unpack_from(blob, slot)
        if kind == abi.ARG_TENSOR:
            sites.append(slot + _VALUE_AT)
            tensor(value)
        elif kind == abi.ARG_TENSOR_LIST:
            sites.append(slot + _VALUE_AT)
            for k in range(n):
                at = value - base + 8 * k
                (entry,) = INT64S[1].unpack_from(blob, at)
                if entry:
                    sites.append(at)
                    tensor(entry)
        elif kind in _POINTER_KINDS:
            sites.append(slot + _VALUE_AT)
    return tuple(sites)


def fill(arena: Arena, plan: OpPlan, values: list, outputs: list, take_rng, sites: list) -> None:
    arena.start()
    slot = 0
    for i, (spec, value) in enumerate(zip(plan.args, values)):
        if spec.tag == TAG_GENERATOR:
            numel = sum(o.numel() for o in outputs if o is not None)
            at = cv.put_list(arena, slot, TAG_INT_LIST, take_rng(numel, value))
            sites.append((SITE_RNG, at, i, 0))
        else:
            _value(arena, slot, spec.tag, value, sites, i)
        slot += ARG_SIZE
    for j, out in enumerate(outputs):
        if out is None:
            cv.put_none(arena, slot)
        else:
            address = _tensor(arena, out)
            cv.put_tensor_arg(arena, slot, address)
            sites.append((SITE_OUTPUT, address - arena.address + BASE_OFFSET, j, 0))
        slot += ARG_SIZE
