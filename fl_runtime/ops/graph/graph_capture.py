"""Stream capture and replay: torch.accelerator.Graph on fl (docs/users/graph-capture.md).

The bridge registers `bridge/csrc/graph.cpp` as PyTorch's GraphImplInterface for fl; each
of its calls lands on a `CapturedGraph` here.  As with CUDA graphs:
- **capture** (`capture_begin` .. `capture_end`) runs the user's eager code on the current
  stream, but every vendor launch on that stream is *recorded*, not run: its launch_kernel,
  kernel entry and a private copy of its fl_arg array (tensors, sizes, strides, lists: the
  header says they are valid only during the call).  Device-to-device copies and memsets on
  that stream are recorded the same way.  The addresses are the ones of the capture: the
  tensors the graph reads and writes must stay where they are (the user keeps its inputs;
  what the capture allocates comes from the graph's memory pool, below);
- **replay** runs the recorded launches in order on the current stream, in C
  (_launch_list.c's run_launches, the graph path's loop, with no address patch); once a
  second stream exists it first orders itself after other streams' writes to the storages the
  capture read or wrote, and counts as their writer, as an eager call does (the bridge's
  order_blocks, csrc/stream_order.h), so later work on another stream waits for the replay;
- what cannot be replayed fails the capture with FLGraphCaptureError naming the op: a CPU
  fallback, a copy between host and device or `.item()` (they synchronise with the host),
  a random op (a replay would draw the same numbers again), a launch the vendor declines;
- the **memory pool**: allocations on the capturing stream come from a pool, and memory the
  capture frees returns to that pool, never to the allocator, so a replay's writes never
  land in another tensor.  Graphs captured with the same `pool` id share it (replay them in
  capture order, as CUDA requires); the pool gives its memory back when its last graph is
  reset or deleted and the last tensor it holds is freed.
"""
from __future__ import annotations

import itertools
import threading
from array import array

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode, _push_mode

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.devices.storage import storage_base
from fl_runtime.errors import FLGraphCaptureError, GraphReplayError

_LAUNCH = "fl_status(*)(fl_stream, const fl_kernel_entry *, const fl_arg *, uint32_t)"
_pool_ids = itertools.count(1)
_pools: dict[tuple[int, int], MemPool] = {}      # live pools by id (graphs share by id)
_capturing: dict[int, CapturedGraph] = {}        # device index -> the graph capturing on it
_lock = threading.Lock()


_rt = None      # the runtime, passed in by the bridge (use_runtime): graphs need the bridge


def use_runtime(rt) -> None:
    """Give graph capture the runtime whose devices it records (fl_runtime/bridge install)."""
    global _rt
    _rt = rt


def _runtime():
    if _rt is None:
        raise FLGraphCaptureError("capture", "graph capture needs the native bridge, which is not installed "
                                  "(docs/users/native-bridge.md)")
    return _rt


def graph_pool_handle() -> tuple[int, int]:
    """A fresh pool id to hand to several graphs (torch.cuda.graph_pool_handle's role)."""
    return (0, next(_pool_ids))


def capture_status(device_index: int) -> bool:
    """Whether a capture is under way on fl:device_index (torch.cuda.is_current_stream_capturing)."""
    return device_index in _capturing


# ---- the memory pool -----------------------------------------------------------------------
class MemPool:
    """Device blocks owned by graphs: handed out while one of them captures, and kept (freed
    ones reusable by a later capture in the pool) until no graph and no tensor holds them."""

    def __init__(self, pool_id: tuple[int, int], allocator) -> None:
        self.id = pool_id
        self.allocator = allocator
        self.free: list = []            # blocks the pool holds and nothing uses
        self.lent = 0                   # blocks held by tensors
        self.owned: set = set()         # id() of every block the pool holds
        self.graphs = 0                 # graphs using the pool
        self._lock = threading.RLock()  # a deleter may run (GC) while this thread holds it

    def allocate(self, size: int, stream):
        with self._lock:
            block = self._reuse(size)
        if block is None:      # the allocator's own method: its instance one is the capture's hook
            block = type(self.allocator).allocate_rounded(self.allocator, size, stream)
        with self._lock:
            self.owned.add(id(block))
            self.lent += 1
        return block

    def owns(self, block) -> bool:
        return id(block) in self.owned

    def _reuse(self, size: int):
        fits = [b for b in self.free if b.size >= size]
        if not fits:
            return None
        block = min(fits, key=lambda b: b.size)
        self.free.remove(block)
        return block

    def release(self, block) -> None:
        """A tensor of the pool freed: its bytes stay the pool's (a replay writes them)."""
        with self._lock:
            self.lent -= 1
            self.free.append(block)
        self._maybe_close()

    def attach(self) -> None:
        with self._lock:
            self.graphs += 1

    def detach(self) -> None:
        with self._lock:
            self.graphs -= 1
        self._maybe_close()

    def _maybe_close(self) -> None:
        with self._lock:
            if self.graphs or self.lent:
                return
            free, self.free = self.free, []
        with _lock:
            if _pools.get(self.id) is self:
                del _pools[self.id]
        release = type(self.allocator).release      # the allocator's own, even during another capture
        for block in free:
            release(self.allocator, block)


def _pool_for(pool_id: tuple[int, int], allocator) -> MemPool:
    with _lock:
        if tuple(pool_id) == (0, 0):
            pool_id = (next(_pool_ids), 0)
        pool = _pools.get(tuple(pool_id))
        if pool is None:
            pool = _pools[tuple(pool_id)] = MemPool(tuple(pool_id), allocator)
        elif pool.allocator is not allocator:
            raise FLGraphCaptureError("graph capture", f"memory pool {pool_id} belongs to another device")
    pool.attach()
    return pool


# ---- what a capture records -----------------------------------------------------------------
class _ArgCopy:
    """A launch's fl_arg array, copied with everything it points at (cffi owns the memory)."""

    def __init__(self, args, count: int) -> None:
        self.keep: list = []
        src = ffi.cast("const fl_arg *", args)
        self.args = ffi.new("fl_arg[]", max(count, 1))
        for i in range(count):
            self._copy(src[i], self.args[i])
        self.address = int(ffi.cast("uintptr_t", self.args))

    def _new(self, ctype: str, init):
        value = ffi.new(ctype, init)
        self.keep.append(value)
        return value

    def _tensor(self, t):
        if t == ffi.NULL:
            return ffi.NULL
        ndim = t.ndim
        copy = self._new("fl_tensor *", {"struct_size": ffi.sizeof("fl_tensor"), "base": t.base,
                                         "byte_offset": t.byte_offset, "dtype": t.dtype, "ndim": ndim})
        copy.sizes = self._new("int64_t[]", list(t.sizes[0:ndim]) or [0])
        copy.strides = self._new("int64_t[]", list(t.strides[0:ndim]) or [0])
        return copy

    def _copy(self, a, out) -> None:
        kind, count = a.kind, a.count
        out.kind, out.count = kind, count
        if kind == abi.ARG_TENSOR:
            out.value.tensor = self._tensor(a.value.tensor)
        elif kind in (abi.ARG_INT, abi.ARG_BOOL):
            out.value.i = a.value.i
        elif kind == abi.ARG_FLOAT:
            out.value.f = a.value.f
        elif kind in (abi.ARG_INT_LIST, abi.ARG_BOOL_LIST):
            out.value.ints = self._new("int64_t[]", list(a.value.ints[0:count]) or [0])
        elif kind == abi.ARG_FLOAT_LIST:
            out.value.floats = self._new("double[]", list(a.value.floats[0:count]) or [0.0])
        elif kind == abi.ARG_TENSOR_LIST:
            out.value.tensors = self._new("fl_tensor *[]", [self._tensor(a.value.tensors[j])
                                                            for j in range(count)] or [ffi.NULL])
        elif kind == abi.ARG_STRING:
            out.value.str = self._new("char[]", ffi.string(a.value.str))


class _Launch:
    __slots__ = ("launch_fn", "entry", "args", "count", "op")

    def __init__(self, launch_fn, entry, args: _ArgCopy, count: int, op: str) -> None:
        self.launch_fn, self.entry, self.args, self.count, self.op = launch_fn, entry, args, count, op


class _Copy:
    """A device-to-device copy or memset recorded on the capturing stream: replayed as called."""
    __slots__ = ("call", "args", "op")

    def __init__(self, call, args: tuple, op: str) -> None:
        self.call, self.args, self.op = call, args, op


# ---- the capture's hooks --------------------------------------------------------------------
_SYNCING = frozenset({torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default})


class _CaptureGuard(TorchDispatchMode):
    """Sees every ATen call while a graph captures: refuses what a replay could not repeat
    before it runs, and names the op each recorded launch belongs to."""

    def __init__(self, graph: CapturedGraph) -> None:
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        tensors = [x for x in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        target = kwargs.get("device")
        target = torch.device(target).type if target is not None else None
        on_fl = target == DEVICE_TYPE or any(t.device.type == DEVICE_TYPE for t in tensors)
        if on_fl:
            if func in _SYNCING:
                raise self.graph.refuse(name, "reads a device value on the host (a synchronising call)")
            host = [t for t in tensors if t.device.type != DEVICE_TYPE]
            if host or target not in (None, DEVICE_TYPE):
                raise self.graph.refuse(name, "copies between the host and the device (a synchronising call)")
            if torch.Tag.nondeterministic_seeded in func.tags:
                raise self.graph.refuse(name, "draws random numbers (a replay would draw the same ones again)")
        previous, self.graph.current_op = self.graph.current_op, name
        recorded = len(self.graph.steps)
        try:
            out = func(*args, **kwargs)
        finally:
            self.graph.current_op = previous
        if not on_fl or not self._on_capturing_stream(tensors):
            return out
        if len(self.graph.steps) > recorded:
            self.graph.note_storages(tensors, _written(func, args, kwargs, out))
        elif not _records_nothing(func, tensors, out):
            # it computed without a recorded launch (a path that bypassed the capture's hooks):
            # a replay would skip it, silently
            raise self.graph.refuse(name, "ran on the device without a launch the capture could record")
        return out


    def _on_capturing_stream(self, tensors: list) -> bool:
        graph = self.graph
        devices = {t.device.index for t in tensors if t.device.type == DEVICE_TYPE}
        if devices and devices != {graph.device_index}:
            return False
        return _runtime().streams.current(graph.device_index).key == graph.stream_key


_NO_DATA = frozenset({torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default,
                      torch.ops.aten.empty_like.default, torch.ops.aten.new_empty.default,
                      torch.ops.aten.new_empty_strided.default, torch.ops.aten.detach.default,
                      torch.ops.aten.alias.default, torch.ops.aten.lift_fresh.default,
                      torch.ops.aten.resize_.default, torch.ops.aten.set_.source_Storage_storage_offset,
                      torch.ops.aten.set_.source_Storage, torch.ops.aten.set_.source_Tensor,
                      torch.ops.aten._has_compatible_shallow_copy_type.default})


def _written(func, args: tuple, kwargs: dict, out) -> list:
    """The tensors a call writes: the arguments its schema marks written (`Tensor(a!)`) and the
    results that are new or written (not views of an input)."""
    schema = getattr(func, "_schema", None)
    leaves = torch.utils._pytree.tree_leaves
    if schema is None:         # not an OpOverload: every tensor it touched may have been written
        return [t for t in leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
    written = []
    for position, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            value = args[position] if position < len(args) else kwargs.get(argument.name)
            written.extend(leaves(value))
    if len(schema.returns) == 1:
        results = (out,)                 # one return, maybe a Tensor[]
    else:
        results = out if isinstance(out, (tuple, list)) else ()     # none: out is None
    for returned, result in zip(schema.returns, results):
        if returned.alias_info is None or returned.alias_info.is_write:
            written.extend(leaves(result))
    return [t for t in written if isinstance(t, torch.Tensor)]


def _records_nothing(func, tensors: list, out) -> bool:
    """Whether a call may rightly record no launch: a view or metadata op, an allocation,
    or one whose tensors hold no element."""
    if func in _NO_DATA or getattr(func, "is_view", False) or torch.Tag.inplace_view in func.tags:
        return True
    results = [x for x in torch.utils._pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]
    return all(t.numel() == 0 for t in (*tensors, *results)) or (not results and not tensors)


class _CapturingApi:
    """The plugin's function table as the runtime sees it during a capture: copies and
    memsets on the capturing stream are recorded; a host copy or a synchronisation of that
    stream fails the capture; everything else goes to the plugin."""

    def __init__(self, api, graph: CapturedGraph) -> None:
        self._api, self._graph = api, graph

    def __getattr__(self, name: str):
        return getattr(self._api, name)

    def _mine(self, stream) -> bool:
        return int(ffi.cast("uintptr_t", stream)) == self._graph.stream_key

    def memcpy_d2d_async(self, stream, *rest):
        if not self._mine(stream):
            return self._api.memcpy_d2d_async(stream, *rest)
        self._graph.steps.append(_Copy(self._api.memcpy_d2d_async, rest, self._graph.current_op or "copy_"))
        return abi.SUCCESS

    def memset_async(self, stream, *rest):
        if not self._mine(stream):
            return self._api.memset_async(stream, *rest)
        self._graph.steps.append(_Copy(self._api.memset_async, rest, self._graph.current_op or "memset"))
        return abi.SUCCESS

    def _host_copy(self, name: str):
        def call(stream, *rest):
            if self._mine(stream):
                raise self._graph.refuse(self._graph.current_op or name,
                                         "copies between the host and the device (a synchronising call)")
            return getattr(self._api, name)(stream, *rest)
        return call

    def __dir__(self):
        return dir(self._api)


for _name in ("memcpy_h2d_async", "memcpy_d2h_async"):
    setattr(_CapturingApi, _name, property(lambda self, n=_name: self._host_copy(n)))


# ---- the graph ------------------------------------------------------------------------------
class CapturedGraph:
    """One torch.accelerator.Graph on fl (module docstring)."""

    def __init__(self, keep_graph: bool = False) -> None:
        self.keep_graph = keep_graph
        self.steps: list = []
        self.pool: MemPool | None = None
        self.device_index: int | None = None
        self.stream_key = 0
        self.current_op: str | None = None
        self.replays = 0
        self.debug = False
        self._program: list | None = None      # (launch words, copies) segments, once instantiated
        self._undo: list = []
        self._failure: FLGraphCaptureError | None = None
        self.reads: set[int] = set()           # storage addresses the recorded launches read
        self.writes: set[int] = set()          # ... and write (replay orders on both)
        self._storages: tuple = ((), ())       # (read only, written), as order_blocks takes them

    # -- capture -------------------------------------------------------------------------
    def capture_begin(self, pool_id: tuple[int, int] = (0, 0), mode: int = 0) -> None:
        if self.steps or self._program is not None:
            raise FLGraphCaptureError("capture_begin", "this graph holds a capture already; call reset() first")
        rt = _runtime()
        index = torch.accelerator.current_device_index()
        stream = rt.streams.current(index)
        with _lock:
            if _capturing:      # the hooks (plugin table, fallback chain) are per process
                busy = next(iter(_capturing))
                raise FLGraphCaptureError("capture_begin", f"another graph is capturing on fl:{busy}; "
                                          "end it first (one capture at a time in a process)")
            _capturing[index] = self
        self.device_index, self.stream_key = index, stream.key
        try:
            self.pool = _pool_for(pool_id, rt.allocators[index])
            self._hook(rt, index)
        except BaseException:
            self._unhook()
            raise

    def capture_end(self) -> None:
        if self.device_index is None or _capturing.get(self.device_index) is not self:
            raise FLGraphCaptureError("capture_end", "no capture under way on this graph")
        self._unhook()
        failure, self._failure = self._failure, None
        if failure is not None:          # raised inside the capture, maybe swallowed by user code
            self.steps = []
            self.reads, self.writes = set(), set()
            raise failure
        if not self.keep_graph:
            self.instantiate()

    def note_storages(self, read: list, written: list) -> None:
        """A recorded call read `read` and wrote `written` (fl tensors of the capturing device)."""
        for tensors, into in ((read, self.reads), (written, self.writes)):
            for t in tensors:
                if t.device.type == DEVICE_TYPE and t.device.index == self.device_index:
                    base = storage_base(t)
                    if base:
                        into.add(base)

    def refuse(self, op: str, why: str) -> FLGraphCaptureError:
        """The error for an op a replay could not repeat; kept so capture_end raises it too."""
        error = FLGraphCaptureError(op, f"it {why}, which a graph cannot replay; move it out of the "
                                    "captured region (docs/users/graph-capture.md)")
        self._failure = self._failure or error
        return error

    def _hook(self, rt, index: int) -> None:
        device = rt.device(index)
        choices = {id(c): c for c in device.kernels.values()}
        choices.update({id(c.autocast): c.autocast for c in list(choices.values()) if c.autocast is not None})
        for choice in choices.values():
            original = choice.launch_fn
            choice.launch_fn = self._recorder(original)
            self._undo.append((setattr, choice, "launch_fn", original))
        plugin = device.plugin
        self._undo.append((setattr, plugin, "api", plugin.api))
        plugin.api = _CapturingApi(plugin.api, self)
        allocator = rt.allocators[index]
        pool, key = self.pool, self.stream_key
        allocate_rounded = allocator.allocate_rounded

        def allocate_in_pool(size: int, stream, *requested):
            if stream.key != key:
                return allocate_rounded(size, stream, *requested)
            return pool.allocate(size, stream)
        allocator.allocate_rounded = allocate_in_pool
        allocator.release = _PoolRelease(pool, allocator)
        self._undo.append((delattr, allocator, "allocate_rounded"))
        self._undo.append((delattr, allocator, "release"))
        rt.launcher.note_capturing(True)
        self._undo.append((rt.launcher.note_capturing, False))
        chain = rt.launcher.chain
        self._undo.append((delattr, chain, "_cpu"))
        chain._cpu = self._cpu_refused
        mode = _CaptureGuard(self)
        _push_mode(mode)
        self._undo.append((_pop_mode,))

    def _unhook(self) -> None:
        undo, self._undo = self._undo, []
        for action, *args in reversed(undo):
            action(*args)
        with _lock:
            if _capturing.get(self.device_index) is self:
                del _capturing[self.device_index]

    def _cpu_refused(self, op, *_):
        raise self.refuse(op.name(), "runs through the CPU fallback (the vendor has no kernel for this call)")

    def _recorder(self, original):
        graph = self

        def record(stream, entry, args, count):
            if int(ffi.cast("uintptr_t", stream)) != graph.stream_key:
                return original(stream, entry, args, count)
            graph.steps.append(_Launch(original, entry, _ArgCopy(args, count), count,
                                       graph.current_op or ffi.string(entry.op).decode()))
            return abi.SUCCESS
        callback = ffi.callback(_LAUNCH, record)
        self._undo.append((list.append, [], callback))      # the callback lives until the unhook
        return callback

    # -- replay --------------------------------------------------------------------------
    def instantiate(self) -> None:
        segments: list = []
        words = array("Q")
        names: list = []
        for step in self.steps:
            if isinstance(step, _Launch):
                words.extend((int(ffi.cast("uintptr_t", step.launch_fn)), int(ffi.cast("uintptr_t", step.entry)),
                              step.args.address, step.count, 0))
                names.append(step.op)
            else:
                if names:
                    segments.append((words.tobytes(), names))
                    words, names = array("Q"), []
                segments.append(step)
        if names:
            segments.append((words.tobytes(), names))
        self._program = segments
        self._storages = (tuple(self.reads - self.writes), tuple(self.writes))

    def replay(self) -> None:
        if self._program is None:
            if not self.steps:
                raise FLGraphCaptureError("replay", "this graph holds no capture; capture it first")
            self.instantiate()
        rt = _runtime()
        stream = rt.streams.current(self.device_index)
        handle = stream.handle
        plugin = rt.device(self.device_index).plugin
        self.replays += 1
        if rt._cross_stream:       # other streams in use: order after their writes, then count as writer
            self._order_after_writers(rt, stream)
            try:
                self._enqueue(plugin, handle)
            finally:               # the replay's writes are enqueued (bridge/csrc/stream_order.h)
                rt.allocators[self.device_index].bridge.settle_writes()
        else:
            self._enqueue(plugin, handle)

    def _enqueue(self, plugin, handle) -> None:
        from fl_runtime.ops.graph.launch_list import _run_launches
        for segment in self._program:
            if isinstance(segment, _Copy):
                plugin.check(segment.call(handle, *segment.args), f"{segment.op} in a graph replay")
                continue
            program, names = segment
            failed = _run_launches(program, b"", 0, int(ffi.cast("uintptr_t", handle)))
            if failed is not None:
                position, status = failed
                message = plugin.api.last_error_message()
                text = ffi.string(message).decode(errors="replace") if message != ffi.NULL else "no message"
                raise GraphReplayError(f"replaying a graph on fl:{self.device_index}: the launch of "
                                       f"{names[position]} failed ({abi.STATUS_NAMES.get(status, status)}: {text})")

    def _order_after_writers(self, rt, stream) -> None:
        index = self.device_index
        if not rt.allocators[index].bridge.order_blocks(index, stream.stream_id, *self._storages):
            raise GraphReplayError(f"replaying a graph on fl:{index}: its stream {stream.stream_id} is unknown to "
                                   "the native bridge, which orders the replay after other streams' writes; make "
                                   "the stream after torch_fl is imported (docs/users/graph-capture.md)")

    def reset(self) -> None:
        if self.device_index is not None and _capturing.get(self.device_index) is self:
            self._unhook()
        self.steps, self._program = [], None
        self.reads, self.writes = set(), set()
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.detach()

    def pool_id(self) -> tuple[int, int]:
        if self.pool is None:
            raise FLGraphCaptureError("pool", "this graph has no memory pool yet; capture it first")
        return self.pool.id

    def launches(self) -> int:
        return sum(isinstance(step, _Launch) for step in self.steps)

    def enable_debug_mode(self) -> None:
        self.debug = True

    def debug_dump(self, path: str) -> None:
        if not self.debug:
            raise FLGraphCaptureError("debug_dump", "call enable_debug_mode() before the capture")
        with open(path, "w", encoding="utf-8") as out:
            for i, step in enumerate(self.steps):
                kind = "launch" if isinstance(step, _Launch) else "copy"
                out.write(f"{i}\t{kind}\t{step.op}\n")

    def __del__(self) -> None:
        try:
            self.reset()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass


class _PoolRelease:
    """The allocator's release while a graph captures (and, for the tensors allocated then,
    ever after): blocks the pool lent go back to the pool, others to the allocator."""

    def __init__(self, pool: MemPool, allocator) -> None:
        self.pool = pool
        self.release = type(allocator).release.__get__(allocator)

    def __call__(self, block) -> None:
        (self.pool.release if self.pool.owns(block) else self.release)(block)
