"""A caching allocator per device over the vendor's fl_malloc / fl_free.

Blocks freed by PyTorch go back to a pool keyed by (stream, rounded size) and
are handed out again without a vendor call, so a steady training loop makes no
vendor allocation per op.  A block is only reused on the stream it was
allocated on (FIFO order makes that safe); if other streams used it, it waits
for events recorded on those streams first (docs/users/devices.md).

Threads (docs/users/devices.md "Threads"): one lock per allocator guards the pool, the live
map and the stats; PyTorch's deleter (any thread, possibly inside another
allocation through the garbage collector) only appends to a deque, which
needs no lock (the compiled deleter, storage.py, only to a C list, which
`collect_freed()` moves into the deques before each allocation and report).
A re-entrant lock, because emptying the cache on an out-of-memory retry
happens inside allocate().

The driver is not trusted (fl_abi.h, fl_malloc): every block fl_malloc returns is checked to be
non-zero, aligned to the device's alignment and outside every block this
allocator holds; a bad one is refused with a VendorError naming the plugin.
"""
from __future__ import annotations

import bisect
import threading
from collections import deque
from dataclasses import dataclass, field

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.devices.registry import DeviceInfo
from fl_runtime.devices import memory_history
from fl_runtime.devices import storage as _storage
from fl_runtime.devices.storage import release_held
from fl_runtime.errors import FLOutOfMemoryError, VendorError
from fl_runtime.logs import logger
from fl_runtime.tracebacks import release_remembered

_SMALL_LIMIT = 1 << 20      # below 1 MiB round to 512 B, above to 128 KiB
_SMALL_ROUND = 512
_LARGE_ROUND = 128 << 10


def round_size(nbytes: int) -> int:
    step = _SMALL_ROUND if nbytes < _SMALL_LIMIT else _LARGE_ROUND
    return max(step, (nbytes + step - 1) // step * step)


@dataclass(eq=False, slots=True)
class Block:
    """One vendor allocation."""
    ptr: int
    size: int
    stream: object                      # the Stream it was allocated for
    writer: object = None               # the Stream of the last write, for ordering
    used_by: set = field(default_factory=set)   # other Streams that used it


@dataclass
class MemoryStats:
    allocated: int = 0          # bytes in live tensors
    reserved: int = 0           # bytes held from the vendor (live + cached)
    peak_allocated: int = 0
    peak_reserved: int = 0
    vendor_mallocs: int = 0
    vendor_frees: int = 0
    cache_hits: int = 0
    alloc_retries: int = 0      # vendor mallocs retried after emptying the cache
    ooms: int = 0               # out-of-memory errors raised

    def reset_peaks(self) -> None:
        self.peak_allocated = self.allocated
        self.peak_reserved = self.reserved

    def reset_accumulated(self) -> None:
        """Zero the counters that only grow (torch.cuda.reset_accumulated_memory_stats)."""
        self.vendor_mallocs = self.vendor_frees = self.cache_hits = self.alloc_retries = self.ooms = 0


class CachingAllocator:
    def __init__(self, device: DeviceInfo, synchronize_device) -> None:
        self.device = device
        self._api = device.plugin.api
        self._synchronize_device = synchronize_device
        self.stats = MemoryStats()
        self.live: dict[int, Block] = {}            # ptr -> Block, for blocks in tensors
        self._pool: dict[tuple[int, int], list[Block]] = {}
        self._freed: deque[Block] = deque()          # filled by deleters (lock-free), drained here
        self._waiting: list[tuple[Block, list]] = []  # (block, events) used by other streams
        self._lock = threading.RLock()
        self._held = _HeldRanges()                   # every block taken from the vendor, for validation

    # -- the hot path ---------------------------------------------------------
    def allocate(self, nbytes: int, stream) -> Block:
        return self.allocate_rounded(round_size(nbytes), stream)

    def allocate_rounded(self, size: int, stream) -> Block:
        """allocate() for a size round_size() already gave (the per-signature programs
        round once, ops/eager/fast_path.py)."""
        _storage.collect_freed()     # storages PyTorch freed through the compiled deleter (storage.py)
        with self._lock:
            if self._freed:
                self._drain_freed()
            bucket = self._pool.get((stream.key, size))
            stats = self.stats
            if bucket:
                block = bucket.pop()
                stats.cache_hits += 1
            else:
                block = self._vendor_malloc(size, stream)
            self.live[block.ptr] = block
            allocated = stats.allocated = stats.allocated + size
            if allocated > stats.peak_allocated:
                stats.peak_allocated = allocated
        if memory_history.recorder.enabled:
            memory_history.recorder.record("alloc", self.device.index, block.ptr, size, stream.stream_id)
        return block

    def release(self, block: Block) -> None:
        """Called when PyTorch frees a tensor's storage; may run inside any op (GC), on any
        thread, even one holding this allocator's lock: so no lock, a deque append only."""
        self._freed.append(block)

    def record_stream(self, ptr: int, stream) -> None:
        """Tensor.record_stream: the block at `ptr` is in use on `stream`, so once freed it
        goes back to the pool only after the work enqueued on `stream` by then has finished."""
        with self._lock:
            block = self.live.get(ptr)
            if block is None:
                raise ValueError(f"record_stream: fl:{self.device.index} has no live allocation at {ptr:#x}; "
                                 "the tensor's storage was not made by the Torch-FL allocator")
            if stream.key != block.stream.key:
                block.used_by.add(stream)

    def holds(self, address: int) -> bool:
        """Whether `address` lies in a block this allocator holds from the vendor."""
        with self._lock:
            return self._held.overlapping(address, 1) is not None

    def settle(self) -> None:
        """Account for storages PyTorch freed since the last allocation (for the stats API)."""
        release_held()      # a failed op's inputs, kept past its exception's unwinding
        release_remembered()    # tensors that live errors' runtime frames still held (fl_runtime.tracebacks)
        _storage.collect_freed()
        with self._lock:
            if self._freed:
                self._drain_freed()
            if self._waiting:
                self._collect_waiting()

    def pooled_blocks(self) -> list[Block]:
        """A snapshot of the cached (free) blocks."""
        with self._lock:
            return self.pooled_blocks_locked()

    # -- the slow paths (called with the lock held) ----------------------------
    def _drain_freed(self) -> None:
        freed = self._freed
        live = self.live
        stats = self.stats
        recorder = memory_history.recorder
        while freed:     # popleft is atomic: a deleter appending meanwhile loses nothing
            block = freed.popleft()
            live.pop(block.ptr, None)
            stats.allocated -= block.size
            if recorder.enabled:
                for action in ("free_requested", "free_completed"):
                    recorder.record(action, self.device.index, block.ptr, block.size, block.stream.stream_id)
            if block.used_by:
                self._waiting.append((block, [self._record_on(s) for s in block.used_by]))
            else:
                block.writer = None
                bucket = self._pool.get((block.stream.key, block.size))
                if bucket is None:
                    self._to_pool(block)
                else:
                    bucket.append(block)
        if self._waiting:
            self._collect_waiting()

    def _record_on(self, stream):
        from fl_runtime.devices.streams import Event
        event = Event(self.device)
        event.record(stream)
        return event

    def _collect_waiting(self) -> None:
        still = []
        for block, events in self._waiting:
            if all(e.query() for e in events):
                self._to_pool(block)
            else:
                still.append((block, events))
        self._waiting = still

    def _to_pool(self, block: Block) -> None:
        block.used_by = set()
        block.writer = None
        self._pool.setdefault((block.stream.key, block.size), []).append(block)

    def _vendor_malloc(self, size: int, stream) -> Block:
        if self.stats.reserved + size > self.device.memory_limit:
            cached = self.stats.reserved - self.stats.allocated
            self.stats.alloc_retries += 1
            self.empty_cache()
            if self.stats.reserved + size > self.device.memory_limit:
                self.stats.ooms += 1
                raise out_of_memory(self, size, cached, "limit")
        out = ffi.new("fl_devptr*")
        status = self._api.fl_malloc(self.device.local_index, size, 0, out)
        if status == abi.ERROR_OUT_OF_MEMORY:
            cached = self.stats.reserved - self.stats.allocated
            self.stats.alloc_retries += 1
            self.empty_cache()
            status = self._api.fl_malloc(self.device.local_index, size, 0, out)
            if status == abi.ERROR_OUT_OF_MEMORY:
                self.stats.ooms += 1
                raise out_of_memory(self, size, cached, "vendor_oom")
        call = f"fl_malloc(device=fl:{self.device.index}, size={size})"
        self.device.plugin.check(status, call)
        ptr = int(out[0])
        self._validate_block(ptr, size, call)
        self._held.add(ptr, size)
        stats = self.stats
        stats.reserved += size
        stats.peak_reserved = max(stats.peak_reserved, stats.reserved)
        stats.vendor_mallocs += 1
        if memory_history.recorder.enabled:
            memory_history.recorder.record("segment_alloc", self.device.index, ptr, size, stream.stream_id)
        return Block(ptr, size, stream)

    def _validate_block(self, ptr: int, size: int, call: str) -> None:
        """Refuse a block the driver should never have returned (fl_abi.h: 0 is never a valid
        fl_devptr; every result is a multiple of the device's alignment; and a block is not
        handed out twice). Using it would silently alias tensors, so raise instead."""
        alignment = self.device.alignment
        if ptr == 0:
            problem = "it returned address 0, which the ABI says is never valid"
        elif alignment > 0 and ptr % alignment:
            problem = f"it returned {ptr:#x}, which is not a multiple of the device's alignment {alignment}"
        else:
            clash = self._held.overlapping(ptr, size)
            if clash is None:
                return
            problem = (f"it returned {ptr:#x} (+{size} bytes), which overlaps the block {clash[0]:#x} "
                       f"(+{clash[1]} bytes) it already gave and that is still in use or cached")
        # Free what is the plugin's to take back: never an address that aliases a held block
        # (that would release memory under a live tensor), never 0.
        if ptr != 0 and self._held.overlapping(ptr, size) is None:
            self._api.fl_free(self.device.local_index, ptr)
        raise unusable_block(self.device, call, problem)

    def empty_cache(self) -> None:
        """Give every cached block back to the vendor (waits for the device first)."""
        release_held()
        release_remembered()
        _storage.collect_freed()
        # Take the pool first, then wait for the device: all work that touched those blocks
        # was enqueued before they were freed, hence before the wait.  A block freed during
        # the wait may still be in use by work enqueued after it began, so it stays pooled
        # (reused in stream order), never handed back to the vendor (docs/users/devices.md).
        with self._lock:
            if self._freed:
                self._drain_freed()
            self._collect_waiting()
            taken = [block for bucket in self._pool.values() for block in bucket]
            self._pool.clear()
        self._synchronize_device()
        with self._lock:
            for block in taken:
                self._vendor_free(block)
        if memory_history.recorder.enabled:
            for block in taken:
                memory_history.recorder.record("segment_free", self.device.index, block.ptr, block.size,
                                               block.stream.stream_id)

    def limit_changed(self) -> None:
        """memory_fraction changed: this allocator reads device.memory_limit at each vendor malloc."""

    def cached_figures(self) -> tuple[int, int]:
        """(bytes, blocks) in the pool."""
        pooled = self.pooled_blocks()
        return sum(b.size for b in pooled), len(pooled)

    def segments(self) -> list[tuple[int, int, int, int, str]]:
        """Every block held from the vendor: (address, size, requested, stream id, state), state as
        PyTorch's memory snapshot names it."""
        self.settle()
        with self._lock:
            waiting = {block.ptr for block, _ in self._waiting}
            states = {ptr: "active_allocated" for ptr in self.live}
            held = [(start, self._held._sizes[start]) for start in self._held._starts]
            streams = {b.ptr: b.stream.stream_id for b in (*self.live.values(), *self.pooled_blocks_locked(),
                                                          *(w[0] for w in self._waiting))}
        return [(ptr, size, size, streams.get(ptr, 0),
                 "active_pending_free" if ptr in waiting else states.get(ptr, "inactive")) for ptr, size in held]

    def pooled_blocks_locked(self) -> list[Block]:
        return [block for bucket in self._pool.values() for block in bucket]

    def _vendor_free(self, block: Block) -> None:
        self._held.remove(block.ptr)
        status = self._api.fl_free(self.device.local_index, block.ptr)
        self.stats.reserved -= block.size
        self.stats.vendor_frees += 1
        if status != abi.SUCCESS:
            try:
                self.device.plugin.check(status, f"fl_free(device=fl:{self.device.index})")
            except VendorError as exc:   # a leak is better than a crash on the free path
                logger.error("%s", exc)


class _HeldRanges:
    """Start addresses (sorted) and sizes of the blocks an allocator holds from the vendor:
    a bisect answers "does [ptr, ptr + size) overlap one of them?" on each vendor malloc."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._sizes: dict[int, int] = {}

    def overlapping(self, ptr: int, size: int) -> tuple[int, int] | None:
        """The (start, size) of a held block overlapping [ptr, ptr + size), or None."""
        at = bisect.bisect_right(self._starts, ptr)
        if at:
            start = self._starts[at - 1]
            if start + self._sizes[start] > ptr:
                return start, self._sizes[start]
        if at < len(self._starts) and self._starts[at] < ptr + size:
            start = self._starts[at]
            return start, self._sizes[start]
        return None

    def add(self, ptr: int, size: int) -> None:
        bisect.insort(self._starts, ptr)
        self._sizes[ptr] = size

    def remove(self, ptr: int) -> None:
        if self._sizes.pop(ptr, None) is not None:
            del self._starts[bisect.bisect_left(self._starts, ptr)]


def memory_stats(allocator) -> dict[str, int]:
    """torch.cuda.memory_stats-shaped figures for one device (keys named as CUDA's where
    the meaning is the same; 'num_device_alloc'/'num_device_free' count vendor calls)."""
    allocator.settle()
    stats = allocator.stats
    cached_bytes, cached_blocks = allocator.cached_figures()
    return {
        "allocated_bytes.all.current": stats.allocated,
        "allocated_bytes.all.peak": stats.peak_allocated,
        "reserved_bytes.all.current": stats.reserved,
        "reserved_bytes.all.peak": stats.peak_reserved,
        "inactive_split_bytes.all.current": cached_bytes,
        "active.all.current": len(allocator.live),
        "inactive_split.all.current": cached_blocks,
        "num_alloc_retries": stats.alloc_retries,
        "num_ooms": stats.ooms,
        "num_device_alloc": stats.vendor_mallocs,
        "num_device_free": stats.vendor_frees,
        "num_cache_hits": stats.cache_hits,
        "limit_bytes": allocator.device.memory_limit,
    }


def format_size(nbytes: int) -> str:
    """Bytes as PyTorch's out-of-memory message writes them (KiB/MiB/GiB, two decimals)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.2f} {unit}"
    return f"{nbytes} bytes"


def out_of_memory(allocator, size: int, cached_released: int, why: str) -> FLOutOfMemoryError:
    """The out-of-memory error of both routes (this allocator's and the bridge's C++ one),
    worded as CUDA's, with only the advice that applies.  `why`: "limit" (memory_fraction's
    cap) or "vendor_oom" (the device has no free block large enough)."""
    device = allocator.device
    name = f"fl:{device.index}"
    try:
        free, total = device_memory_info(allocator)
    except VendorError:
        free, total = None, device.total_memory
    stats = allocator.stats
    capped = why == "limit" and device.memory_fraction < 1     # at 1 the cap is the device itself
    text = [f"{name} out of memory. Tried to allocate {format_size(size)}.",
            f"{name} has a total capacity of {format_size(total)}"
            + (f" of which {format_size(free)} is free." if free is not None else "."),
            f"Torch-FL holds {format_size(stats.reserved)}: {format_size(stats.allocated)} allocated by tensors, "
            f"{format_size(stats.reserved - stats.allocated)} reserved but unallocated"
            + (f" ({format_size(cached_released)} of cached blocks were given back before the retry)."
               if cached_released else ".")]
    if capped:
        text.append(f"This process may use {format_size(device.memory_limit)} of it (memory_fraction "
                    f"{device.memory_fraction:g}, from the config or torch.fl.set_per_process_memory_fraction).")
    else:
        text.append("The device has no free block large enough.")
    advice = ["free tensors you no longer need (del, or let them go out of scope)", "use smaller batches"]
    if capped:
        advice.append("raise memory_fraction")
    if not capped and free is not None and total and free < total - stats.reserved:
        advice.append("other processes hold memory on this device: check them (torch-fl devices)")
    text.append("To fit: " + ", or ".join(advice) + ".")
    return FLOutOfMemoryError(" ".join(text))


def unusable_block(device, call: str, problem: str) -> VendorError:
    """The error for a block fl_malloc should never have returned (both routes)."""
    return VendorError(call, abi.SUCCESS, "an unusable block",
                       f"{problem}; Torch-FL refused the block rather than risk two tensors sharing memory or wrong "
                       "values. The plugin's allocator is faulty: report it to its vendor", device.plugin.name)


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):,.1f} MiB"


def memory_summary(allocator) -> str:
    """A readable table of one device's memory_stats (torch.cuda.memory_summary's role)."""
    figures = memory_stats(allocator)
    device = allocator.device
    rows = [
        ("Allocated (live tensors)", _mib(figures["allocated_bytes.all.current"]),
         _mib(figures["allocated_bytes.all.peak"])),
        ("Reserved (held from vendor)", _mib(figures["reserved_bytes.all.current"]),
         _mib(figures["reserved_bytes.all.peak"])),
        ("Cached (free, in pool)", _mib(figures["inactive_split_bytes.all.current"]), ""),
        ("Live blocks", str(figures["active.all.current"]), ""),
        ("Cached blocks", str(figures["inactive_split.all.current"]), ""),
        ("Vendor mallocs / frees", f"{figures['num_device_alloc']} / {figures['num_device_free']}", ""),
        ("Cache hits", str(figures["num_cache_hits"]), ""),
        ("Retries after emptying cache", str(figures["num_alloc_retries"]), ""),
        ("Out-of-memory errors", str(figures["num_ooms"]), ""),
    ]
    width = max(len(r[0]) for r in rows)
    title = (f"fl:{device.index} {device.name} - limit {_mib(device.memory_limit)} of "
             f"{_mib(device.total_memory)} (memory_fraction {device.memory_fraction:g})")
    lines = [title, "=" * len(title), f"{'Metric':<{width}}  {'Current':>14}  {'Peak':>14}"]
    lines += [f"{name:<{width}}  {current:>14}  {peak:>14}" for name, current, peak in rows]
    return "\n".join(lines)


def device_memory_info(allocator) -> tuple[int, int]:
    """(free, total) bytes as the vendor reports them (fl_api.memory_info)."""
    free, total = ffi.new("uint64_t*"), ffi.new("uint64_t*")
    device = allocator.device
    device.plugin.check(device.plugin.api.memory_info(device.local_index, free, total),
                        f"memory_info(device=fl:{device.index})")
    return int(free[0]), int(total[0])
