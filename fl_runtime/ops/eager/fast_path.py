"""Per-signature launch programs: the steady state of an op call, decided once.

The full path (launcher.py) spends most of a tiny op's host time deciding things
that are the same every time one call signature repeats: the schema-ordered
values, the device, the kernel entry and its dtype check, the output layouts
(meta kernel, meta_cache.py), how each output is made.  After a call succeeds
on a vendor kernel, the launcher records those decisions here as a `Program`,
keyed on the raw call (`call_key`); a later call with the same key runs the
program: allocate the outputs, replay the marshal template, launch.

What the key holds, and why that is enough (a program replays exactly what the
full path would do for the same key, so it can never give other values):
- per tensor: shape, strides, dtype and device index.  These fix the meta
  kernel's answer (meta_cache keys on less), the device (so the kernel entry,
  allocator and dtype check) and the marshal template's bytes (tensor addresses
  and storage offsets are patched per call, marshal.py);
- per Python value: its type and value, except float scalars, which the template
  patches per call (as meta_cache leaves them out of its key); bool and int stay
  apart (True == 1 as a dict key);
- every part at least as fine as the meta cache's key (meta_cache._key_of), so the
  signature entry (output layouts, marshal template) a program holds is the one the
  full path would find;
- the names of the keyword arguments passed.
Conjugate/negative bits are not in the key, as they are not in the meta cache's:
PyTorch resolves them before a PrivateUse1 kernel for real dtypes, and complex
calls never get a program (`build` refuses them), so a program never meets one.
Things a program cannot know are checked per call: the current stream (per
thread), autocast (an op with a fast variant), that the device still offers the
same kernel entry (tests hide kernels to force the fallbacks), and the hooks
that need the full path (a profile, phase timing, cross-stream write tracking).

Threads: a program is immutable once built; the cache is a dict whose get and
setdefault are atomic, so concurrent builders of one key keep the first.
"""
from __future__ import annotations

import torch

from fl_runtime import compiled
from fl_runtime.abi import ffi
from fl_runtime.devices.allocator import round_size
from fl_runtime.ops.eager.marshal import SITE_FLOAT, SITE_LIST_TENSOR, SITE_OUTPUT, SITE_TENSOR, SITE_WRAPPED, pointer_sites
from fl_runtime.ops.schema import OpPlan

_Tensor = torch.Tensor
_KWARGS = object()        # marks a key with keyword arguments: no positional-only key holds it
_COMPLEX = frozenset({torch.complex64, torch.complex128, torch.complex32})
MAX_PROGRAMS = 4096       # per op: a program per signature; a shape-changing loop must not grow without end


def value_key(value):
    """The part of a call key for one argument (see the module doc)."""
    if isinstance(value, _Tensor):
        return (value.shape, value.stride(), value.dtype, value.get_device())
    cls = type(value)
    if cls is float:
        return float
    if cls is list or cls is tuple:
        # floats in lists stay in (they are baked into the template, as upsampling scales)
        return (cls, *(v if isinstance(v, float) else value_key(v) for v in value))
    if cls is not bool and isinstance(value, float):     # a float subclass (numpy.float64): patched too
        return float
    return (cls, value)       # int, bool, None, str, dtype, memory format, complex...


def call_key(args: tuple, kwargs: dict):
    """The key of one call: hashable unless an argument is not (then TypeError at lookup)."""
    if kwargs:
        return (_KWARGS, tuple(kwargs), tuple(map(value_key, args)), tuple(map(value_key, kwargs.values())))
    return positional_key(args)


def _positional_key(args: tuple):
    return tuple(map(value_key, args))


# call_key of a call without keyword arguments (the common case, read by the launcher's
# kernels): the compiled version (ops/eager/_program.c; fl_runtime/compiled.py) where built.
_native = compiled.load("fl_runtime.ops.eager._program")
if _native is not None:
    _native.configure(torch.Tensor)
positional_key = _native.call_key if _native is not None else _positional_key


class Output:
    """How a program makes one output: None (an undefined output), an argument it
    returns (in-place and out=), or a fresh tensor of a fixed layout."""
    __slots__ = ("alias", "shape", "stride", "dtype", "nbytes", "size")

    def __init__(self, alias: int | None, spec) -> None:
        self.alias = alias
        self.shape, self.stride, self.dtype, self.nbytes = spec if spec is not None else (None, None, None, 0)
        self.size = round_size(self.nbytes)     # the allocator's rounding, done once


class Program:
    """What the full path decided for one call signature on one device."""
    __slots__ = ("choice", "device", "device_index", "tail", "outputs", "entry", "count_key", "arg_count",
                 "single_new", "allocator", "native")

    def __init__(self, choice, device, allocator, tail: tuple, outputs: tuple, entry, count_key: tuple,
                 arg_count: int) -> None:
        self.allocator = allocator        # the device's CachingAllocator
        self.choice = choice              # KernelChoice: launch_fn, entry, autocast
        self.device = device              # DeviceInfo: its kernel map is checked per call
        self.device_index = device.index
        self.tail = tail                  # defaults of the schema arguments the call left out
        self.outputs = outputs            # Output per return
        self.entry = entry                # meta_cache.SignatureEntry: the marshal template
        self.count_key = count_key        # (qualified name, "native") for accounting
        self.arg_count = arg_count        # schema arguments + outputs (fl_arg slots)
        # the common case, one fresh output: made without the loop
        self.single_new = outputs[0] if len(outputs) == 1 and outputs[0].alias is None and \
            outputs[0].shape is not None else None
        self.native = None                # (epoch, native_spec) once the native bridge asked


# Template sites -> the native program's (source, ...) rows (bridge/csrc/launch_program.h)
_TENSOR_SOURCES = {SITE_TENSOR: 0, SITE_LIST_TENSOR: 1, SITE_OUTPUT: 2}


def native_spec(program: Program, name: str, epoch: int) -> tuple | None:
    """The program as the native bridge's C++ kernel replays it (bridge/csrc/launch_program.h,
    LaunchProgram::from_spec), or None when it holds something C++ does not replay (the
    kernel table no longer offers its entry; a site other than tensors, floats and wrapped
    numbers).  The template's pointers are relocated there (marshal.pointer_sites)."""
    template = program.entry.template
    if template is None or program.device.kernels.get(name) is not program.choice:
        return None
    tensors, floats, wrapped = [], [], []
    for kind, at, i, j in template.sites:
        if kind in _TENSOR_SOURCES:
            tensors.append((at, _TENSOR_SOURCES[kind], i, j))
        elif kind == SITE_FLOAT:
            floats.append((at, i))
        elif kind == SITE_WRAPPED:
            wrapped.append((at, i))
        else:
            return None
    outputs = tuple((-1 if out.alias is None else out.alias, None if out.shape is None else tuple(out.shape),
                     None if out.stride is None else tuple(out.stride), out.dtype, out.nbytes)
                    for out in program.outputs)
    choice = program.choice
    return (program.device_index, choice.autocast is not None, epoch, int(ffi.cast("uintptr_t", choice.launch_fn)),
            int(ffi.cast("uintptr_t", choice.entry)), program.arg_count, template.blob, template.arena.address,
            pointer_sites(template, program.arg_count), tuple(tensors), tuple(floats), tuple(wrapped), outputs,
            program.count_key[0])


def eligible(plan: OpPlan) -> bool:
    """Whether an op's calls can get programs: not random ops (a Generator argument and
    the random state it consumes), nor ops without a tensor argument to give the device,
    nor ops with a `Scalar[]` argument (value_key keeps a list's floats, and an optimizer
    passes new ones every step: a program per step)."""
    return bool(plan.tensor_arg_indices or plan.list_tensor_arg_indices) and not plan.has_generator \
        and not plan.scalar_list_indices


def _plain(t: torch.Tensor) -> bool:
    """A tensor a program may replay: no complex dtype, no conjugate or negative bit."""
    return t.dtype not in _COMPLEX and not t.is_conj() and not t.is_neg()


def build(plan: OpPlan, choice, device, allocator, args: tuple, kwargs: dict, values: list, specs, entry,
          outputs: list) -> Program | None:
    """The program for a call the full path just launched natively, or None when the
    call is one a program must not replay (see the module doc)."""
    if kwargs and any(name not in {s.name for s in plan.args} for name in kwargs):
        return None
    on_device = False
    for i in plan.tensor_arg_indices:
        value = values[i]
        if isinstance(value, _Tensor):
            if not _plain(value):
                return None
            on_device = on_device or value.get_device() >= 0
    for i in plan.list_tensor_arg_indices:
        # Every entry on this device (the full path copied CPU index tensors to it, and a
        # program does not): the key holds each entry's device, so later calls match.
        for value in values[i] or ():
            if value is None:
                continue
            if not isinstance(value, _Tensor) or value.get_device() != device.index or not _plain(value):
                return None
            on_device = True
    if not on_device:
        return None
    made = []
    for alias, spec, is_out, out in zip(plan.returns_alias, specs, plan.out_returns, outputs):
        if alias is not None:
            if is_out and spec is not None and tuple(values[alias].shape) != tuple(spec[0]):
                return None        # an out= resized by this call: the next one has another key
            made.append(Output(alias, None))
        elif spec is None or out is None:
            made.append(Output(None, None))
        else:
            if spec[3] == 0 or isinstance(out, _Tensor) and out.dtype in _COMPLEX:
                return None        # empty outputs have no block (storage.wrap_block(None, ...))
            made.append(Output(None, spec))
    tail = tuple(spec.default for spec in plan.args[len(args):])
    return Program(choice, device, allocator, tail, tuple(made), entry, (plan.qualified_name, "native"),
                   len(values) + len(outputs))
