"""The one place the suite calls a plugin: checked driver calls and kernel launches.

Everything goes through the plugin's fl_api table as loaded by the runtime's
loader and the ABI structs of fl_runtime.abi.ffi.  Kernels are launched the
way the header's calling convention says: schema arguments in order, then one
tensor per return; fresh outputs get the layout PyTorch's meta kernel gives;
in-place returns are the mutated argument itself.

What the harness adds to a plain launch, so that a kernel cannot pass by
accident: every tensor's whole storage is uploaded (holes of strided views
included) after `shift` filler bytes, so data may start at any byte; guard
bytes follow every storage and must survive; fresh outputs start poisoned
(all bits set: NaN, -1, an invalid bool) so unwritten elements show.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.plugins.loader import Plugin
from fl_runtime.abi import convention
from fl_runtime.abi.convention import TAG_GENERATOR
from fl_runtime.ops.schema import OpPlan
from fl_runtime.devices.storage import storage_nbytes

from .target import device_properties

GUARD_BYTES = 64
GUARD_FILL = 0xA5
POISON_FILL = 0xFF


STATUS: dict[str, int] = {name: code for code, name in abi.STATUS_NAMES.items()}   # "FL_SUCCESS" -> 0


def status_name(status: int) -> str:
    return abi.STATUS_NAMES.get(status, f"status {status}")


class CallFailed(AssertionError):
    """A plugin call returned something other than what the caller needed."""

    def __init__(self, call: str, status: int, message: str) -> None:
        super().__init__(f"{call} returned {status_name(status)}: {message or '(no message)'}")
        self.call, self.status, self.message = call, status, message


class Declined(CallFailed):
    """launch_kernel returned FL_ERROR_NOT_SUPPORTED before enqueuing anything: the ABI's
    way for a plugin to refuse arguments its kernel cannot take (fl_abi.h, above
    launch_kernel; the runtime then falls back).  The suite reports such a call as
    not_supported with the plugin's message, never as a failure."""


def text(cdata) -> str:
    return ffi.string(cdata).decode(errors="replace") if cdata != ffi.NULL else ""


class Device:
    """One device of the plugin under test, with checked wrappers over the raw table."""

    def __init__(self, plugin: Plugin, index: int = 0) -> None:
        self.plugin = plugin
        self.api = plugin.api
        self.index = index
        self.facts: dict = device_properties(plugin, index)
        self.alignment: int = self.facts.get("alignment", 0)
        self.total_memory: int = self.facts.get("total_memory", 0)
        self._host_buffers: dict = {}   # stream -> host buffers it may still read or write

    # -- status ---------------------------------------------------------------
    def message(self) -> str:
        return text(self.api.last_error_message())

    def check(self, status: int, call: str) -> None:
        if status != abi.SUCCESS:
            raise CallFailed(call, status, self.message())

    # -- memory ---------------------------------------------------------------
    def malloc(self, size: int, alignment: int = 0) -> int:
        out = ffi.new("fl_devptr*")
        self.check(self.api.fl_malloc(self.index, size, alignment, out),
                   f"fl_malloc(device={self.index}, size={size}, alignment={alignment})")
        return int(out[0])

    def free(self, ptr: int) -> None:
        self.check(self.api.fl_free(self.index, ptr), f"fl_free(device={self.index}, ptr={ptr:#x})")

    def memory_info(self) -> tuple[int, int]:
        free, total = ffi.new("uint64_t*"), ffi.new("uint64_t*")
        self.check(self.api.memory_info(self.index, free, total), "memory_info")
        return int(free[0]), int(total[0])

    # -- streams and copies ---------------------------------------------------
    def new_stream(self) -> object:   # an fl_stream handle (cdata)
        out = ffi.new("fl_stream*")
        self.check(self.api.stream_create(self.index, out), "stream_create")
        return out[0]

    def destroy_stream(self, stream) -> None:
        self.synchronize(stream)
        self.check(self.api.stream_destroy(stream), "stream_destroy")

    def synchronize(self, stream) -> None:
        status = self.api.stream_synchronize(stream)
        self._host_buffers.pop(stream, None)   # the stream is done with them either way
        self.check(status, "stream_synchronize")

    def _keep(self, stream, buffer) -> None:
        # The ABI lets the stream read/write host memory until it reaches the copy.
        self._host_buffers.setdefault(stream, []).append(buffer)

    def h2d(self, stream, ptr: int, offset: int, data: bytes) -> None:
        buffer = ffi.new("char[]", data) if data else ffi.new("char[]", 1)
        self._keep(stream, buffer)
        self.check(self.api.memcpy_h2d_async(stream, ptr, offset, buffer, len(data)),
                   f"memcpy_h2d_async(offset={offset}, size={len(data)})")

    def d2h(self, stream, ptr: int, offset: int, size: int) -> object:
        """Enqueue a copy out; the returned buffer holds the bytes once the stream is synchronized."""
        buffer = ffi.new("char[]", max(size, 1))
        self._keep(stream, buffer)
        self.check(self.api.memcpy_d2h_async(stream, buffer, ptr, offset, size),
                   f"memcpy_d2h_async(offset={offset}, size={size})")
        return buffer

    def read(self, stream, ptr: int, offset: int, size: int) -> bytes:
        buffer = self.d2h(stream, ptr, offset, size)
        self.synchronize(stream)
        return ffi.buffer(buffer, size)[:]

    def memset(self, stream, ptr: int, offset: int, value: int, size: int) -> None:
        self.check(self.api.memset_async(stream, ptr, offset, value, size),
                   f"memset_async(offset={offset}, value={value}, size={size})")

    def d2d(self, stream, dst: int, dst_offset: int, src: int, src_offset: int, size: int) -> None:
        self.check(self.api.memcpy_d2d_async(stream, self.index, dst, dst_offset, self.index, src,
                                             src_offset, size),
                   f"memcpy_d2d_async(dst_offset={dst_offset}, src_offset={src_offset}, size={size})")


# ---- kernels -------------------------------------------------------------------

@dataclass(frozen=True)
class KernelEntry:
    """One kernel-table row, as the suite names and finds it."""
    index: int
    op: str
    dtypes: int
    variant: int
    pointer: object = field(compare=False, repr=False)

    @property
    def variant_name(self) -> str:
        return abi.VARIANT_NAMES.get(self.variant, f"variant{self.variant}")


def kernel_entries(plugin: Plugin) -> list[KernelEntry]:
    entries, count = ffi.new("const fl_kernel_entry**"), ffi.new("uint32_t*")
    plugin.check(plugin.api.kernel_table(entries, count), "kernel_table")
    return [KernelEntry(i, text(entries[0][i].op), int(entries[0][i].dtypes), int(entries[0][i].variant),
                        entries[0] + i) for i in range(count[0])]


def storage_bytes(t: torch.Tensor) -> bytes:
    storage = t.untyped_storage()
    return ffi.buffer(ffi.cast("char*", storage.data_ptr()), storage.nbytes())[:] if storage.nbytes() else b""


def tensor_over(data: bytes, like: torch.Tensor) -> torch.Tensor:
    """A CPU tensor with like's dtype, shape, strides and offset over a copy of `data`."""
    storage = torch.UntypedStorage.from_buffer(data, dtype=torch.uint8) if data else torch.UntypedStorage(0)
    return torch.empty(0, dtype=like.dtype).set_(storage, like.storage_offset(), like.shape, like.stride())


@dataclass(frozen=True)
class DeviceTensor:
    """A tensor already in device memory, as an fl_tensor describes it."""
    base: int
    byte_offset: int
    dtype: torch.dtype
    shape: tuple
    strides: tuple


def _device_tensor_writer(arena):
    """The calling convention's tensor writer for DeviceTensors (fl_runtime.abi.convention)."""
    def tensor(value):
        if not isinstance(value, DeviceTensor):
            return None
        return convention.put_tensor(arena, value.base, value.byte_offset, value.dtype, value.shape, value.strides)
    return tensor


def launch(dev: Device, stream, entry: KernelEntry, plan: OpPlan, values: list,
           outputs: list[DeviceTensor | None]) -> None:
    """Enqueue one kernel: schema values (DeviceTensors, scalars, lists), then the outputs,
    encoded by the runtime's own calling-convention writers."""
    tagged = [(spec.tag, value) for spec, value in zip(plan.args, values)]
    tagged += [(convention.TAG_VALUE, out) for out in outputs]
    arena = convention.encode_call(tagged, _device_tensor_writer)
    status = dev.api.launch_kernel(stream, entry.pointer, arena.args, len(tagged))
    if status == abi.ERROR_NOT_SUPPORTED:
        raise Declined(f"launch_kernel({entry.op})", status, dev.message())
    dev.check(status, f"launch_kernel({entry.op})")


@dataclass
class _Placed:
    """A CPU tensor's storage in device memory: [shift filler | storage | guard]."""
    like: torch.Tensor
    ptr: int
    shift: int
    nbytes: int

    @property
    def total(self) -> int:
        return self.shift + self.nbytes + GUARD_BYTES

    @property
    def device_tensor(self) -> DeviceTensor:
        t = self.like
        return DeviceTensor(self.ptr, self.shift + t.storage_offset() * t.element_size(), t.dtype,
                            tuple(t.shape), tuple(t.stride()))


def _view_on_device(item: _Placed, view: torch.Tensor) -> DeviceTensor:
    """`view` (of the storage `item` placed) as the kernel sees it in device memory."""
    return DeviceTensor(item.ptr, item.shift + view.storage_offset() * view.element_size(), view.dtype,
                        tuple(view.shape), tuple(view.stride()))


def _place(dev: Device, stream, t: torch.Tensor, shift: int, placed: list) -> _Placed:
    data = storage_bytes(t)
    item = _Placed(t, dev.malloc(shift + len(data) + GUARD_BYTES), shift, len(data))
    placed.append(item)
    dev.h2d(stream, item.ptr, 0, bytes([GUARD_FILL]) * shift + data + bytes([GUARD_FILL]) * GUARD_BYTES)
    return item


def _fetch(dev: Device, stream, item: _Placed) -> tuple[torch.Tensor, list[str]]:
    raw = dev.read(stream, item.ptr, 0, item.total)
    problems = []
    if any(b != GUARD_FILL for b in raw[:item.shift]):
        problems.append(f"wrote into the {item.shift} bytes before a tensor's storage")
    if any(b != GUARD_FILL for b in raw[item.shift + item.nbytes:]):
        problems.append(f"wrote past the end of a tensor's storage ({item.nbytes} bytes)")
    return tensor_over(raw[item.shift:item.shift + item.nbytes], item.like), problems


def output_layouts(plan: OpPlan, values: list) -> list[torch.Tensor | None]:
    """Meta tensors with the layout PyTorch gives each return (the runtime's rule)."""
    if not plan.returns_alias:   # `-> ()` (in-place tensor-list ops): nothing to lay out, as in the runtime
        return []
    args, kwargs = [], {}
    for spec, value in zip(plan.args, values):
        if isinstance(value, torch.Tensor):
            value = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        elif spec.tag == TAG_GENERATOR:
            value = None   # the kernel gets {seed, offset}; PyTorch would want a torch.Generator
        if spec.kwarg_only:
            kwargs[spec.name] = value
        else:
            args.append(value)
    result = plan.op(*args, **kwargs)
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _poisoned_like(meta: torch.Tensor) -> torch.Tensor:
    nbytes = storage_nbytes(meta.shape, meta.stride(), meta.element_size())
    return tensor_over(bytes([POISON_FILL]) * nbytes,
                       torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype))


@dataclass
class KernelRun:
    """What one launch left behind, all copied back to the host."""
    args_after: list          # schema values; tensors replaced by their storage after the launch
    outputs: list             # one CPU tensor per return (None for an undefined one)
    problems: list[str]       # guard-byte damage


@dataclass
class Staged:
    """One call laid out in device memory and ready to launch (stage, then launch_staged,
    then collect; release frees it whatever happened)."""
    dev: Device
    stream: object
    entry: KernelEntry
    plan: OpPlan
    values: list               # schema values (CPU)
    device_values: list        # the same as the kernel sees them
    outputs: list              # one DeviceTensor (or None) per return
    placed: list               # every _Placed storage, fresh outputs included
    by_id: dict                # id(CPU tensor) -> its _Placed
    fresh: dict                # return index -> _Placed of a fresh output


def stage(dev: Device, stream, entry: KernelEntry, plan: OpPlan, values: list, shift: int = 0,
          out_shift: int = 0) -> Staged:
    """Allocate and upload (on `stream`) every storage of a call, fresh outputs poisoned."""
    metas = output_layouts(plan, values)
    staged = Staged(dev, stream, entry, plan, values, [], [], [], {}, {})
    by_storage: dict[int, _Placed] = {}

    def on_device(value):
        if isinstance(value, (list, tuple)):
            return [on_device(v) for v in value]
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) not in staged.by_id:
            # Views of one storage go to one allocation, as the runtime passes them (fl_abi.h,
            # "ARGUMENTS THAT SHARE MEMORY"): a write through one is seen through the other.
            storage = value.untyped_storage()
            key = storage.data_ptr() if storage.nbytes() else -id(value)
            if key not in by_storage:
                by_storage[key] = _place(dev, stream, value, shift, staged.placed)
            staged.by_id[id(value)] = by_storage[key]
        return _view_on_device(staged.by_id[id(value)], value)

    try:
        staged.device_values = [on_device(v) for v in values]
        staged.fresh = {j: _place(dev, stream, _poisoned_like(meta), out_shift, staged.placed)
                        for j, (meta, alias) in enumerate(zip(metas, plan.returns_alias))
                        if alias is None and isinstance(meta, torch.Tensor)}   # a SymInt return gets no buffer
    except BaseException:
        release(staged)
        raise
    staged.outputs = [staged.device_values[alias] if alias is not None else
                      (staged.fresh[j].device_tensor if j in staged.fresh else None)
                      for j, alias in enumerate(plan.returns_alias)]
    return staged


def launch_staged(staged: Staged) -> None:
    launch(staged.dev, staged.stream, staged.entry, staged.plan, staged.device_values, staged.outputs)


def collect(staged: Staged) -> KernelRun:
    """Synchronize the call's stream and copy everything back (guard bytes checked)."""
    dev, stream = staged.dev, staged.stream
    dev.synchronize(stream)
    after: dict[int, torch.Tensor] = {}
    problems: list[str] = []
    for item in staged.placed:
        after[id(item)], damage = _fetch(dev, stream, item)
        problems += damage

    def fetched(v):
        if isinstance(v, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in v):
            return [fetched(t) for t in v]     # a tensor list: each entry as the launch left it
        if not isinstance(v, torch.Tensor):
            return v
        whole = after[id(staged.by_id[id(v)])]   # the storage as the launch left it, seen as `v`
        return torch.empty(0, dtype=v.dtype).set_(whole.untyped_storage(), v.storage_offset(), v.shape, v.stride())
    args_after = [fetched(v) for v in staged.values]
    results = [args_after[alias] if alias is not None else
               (after[id(staged.fresh[j])] if j in staged.fresh else None)
               for j, alias in enumerate(staged.plan.returns_alias)]
    return KernelRun(args_after, results, problems)


def release(staged: Staged) -> None:
    """Free the call's memory once nothing queued on its stream may still use it."""
    staged.dev.api.stream_synchronize(staged.stream)   # after a failure too
    for item in staged.placed:
        staged.dev.free(item.ptr)
    staged.placed.clear()


def call_kernel(dev: Device, stream, entry: KernelEntry, plan: OpPlan, values: list,
                shift: int = 0, out_shift: int = 0) -> KernelRun:
    """Run `entry` on schema-ordered `values` (CPU tensors and scalars) and copy everything
    back; raises Declined when the plugin declines the call, CallFailed when the launch or
    the stream reports an error."""
    staged = stage(dev, stream, entry, plan, values, shift, out_shift)
    try:
        launch_staged(staged)
        return collect(staged)
    finally:
        release(staged)
