"""Memory: allocation alignment, byte-exact copies and memset, out-of-memory, accounting,
and pinned host memory (ABI 1.2).

Properties run with hypothesis (sizes, alignments, offsets drawn; derandomised
by the run's seed).  All traffic goes through one stream of device 0.

Pinned host memory (fl_host_memory.h): a plugin that offers the extension must
answer host_alloc/host_free with the statuses the header names, give blocks the
host can read and write at any time, and keep copies between its devices and a
block exact and in stream order: they may run truly asynchronously, but still
after the work queued before them and before the work queued after (a copy from a
block reads what a copy into it, queued earlier, wrote).  The ordering probe queues
the copies behind >= 40 ms of measured busy work (conformance.stream_probes), so a
copy that runs at enqueue instead of in stream order reads or leaves stale bytes
every time.  A plugin without the extension: not_supported.
"""
from __future__ import annotations

import ctypes
import random

import pytest
from hypothesis import given, strategies as st

from fl_runtime.abi import ffi
from fl_runtime.plugins.extensions import host_memory_of

from conformance import statuses
from conformance.harness import STATUS, status_name, text
from conformance.stream_probes import CHUNK, PROBE_BYTES, measure_busy
# The IPC extension's checks (fl_ipc.h), collected in this category
from conformance.ipc_checks import *  # noqa: F401,F403

CATEGORY = "memory"

SIZES = st.one_of(st.integers(1, 64), st.sampled_from([255, 256, 257, 4095, 4096, 4097, (1 << 20) + 1]),
                  st.integers(1, 1 << 20))
ALIGNMENTS = st.sampled_from([0] + [1 << k for k in range(0, 22)])   # 0 = the device's own


def _payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def test_malloc_honours_alignment_and_never_overlaps(conformance, device):
    device_alignment = device.alignment

    @conformance.property_settings()
    @given(st.lists(st.tuples(SIZES, ALIGNMENTS), min_size=1, max_size=8))
    def allocations_are_aligned(requests):
        blocks = []
        try:
            for size, alignment in requests:
                ptr = device.malloc(size, alignment)
                blocks.append((ptr, size))
                need = max(alignment, device_alignment)
                assert ptr % need == 0, (f"fl_malloc(size={size}, alignment={alignment}) returned {ptr:#x}, "
                                         f"not a multiple of {need} (device alignment {device_alignment})")
            ordered = sorted(blocks)
            for (a, size_a), (b, _) in zip(ordered, ordered[1:]):
                assert a + size_a <= b, f"allocations overlap: [{a:#x}, +{size_a}) and {b:#x}"
        finally:
            for ptr, _ in blocks:
                device.free(ptr)

    allocations_are_aligned()


def test_copies_round_trip_byte_exact(conformance, device):
    stream = device.new_stream()

    @conformance.property_settings()
    @given(st.integers(1, 70_000), st.integers(0, 67), st.integers(0, 67), st.integers(0, 2 ** 32))
    def round_trip(size, src_offset, dst_offset, seed):
        data = _payload(seed, size)
        src, dst = device.malloc(src_offset + size + 64), device.malloc(dst_offset + size + 64)
        try:
            device.memset(stream, dst, 0, 0x5A, dst_offset + size + 64)
            device.h2d(stream, src, src_offset, data)
            device.d2d(stream, dst, dst_offset, src, src_offset, size)
            whole = device.read(stream, dst, 0, dst_offset + size + 64)
            assert whole[dst_offset:dst_offset + size] == data, "h2d -> d2d -> d2h changed the bytes"
            assert whole[:dst_offset] == b"\x5a" * dst_offset and whole[dst_offset + size:] == b"\x5a" * 64, \
                "d2d wrote outside [dst_offset, dst_offset + size)"
        finally:
            device.free(src)
            device.free(dst)

    try:
        round_trip()
    finally:
        device.destroy_stream(stream)


def test_memset_is_byte_exact_at_odd_offsets(conformance, device):
    stream = device.new_stream()

    @conformance.property_settings()
    @given(st.integers(1, 20_000), st.data())
    def memset_exact(total, data):
        offset = data.draw(st.integers(0, total - 1))
        size = data.draw(st.integers(0, total - offset))
        value = data.draw(st.integers(0, 255))
        before = _payload(total, total)
        ptr = device.malloc(total)
        try:
            device.h2d(stream, ptr, 0, before)
            device.memset(stream, ptr, offset, value, size)
            expected = before[:offset] + bytes([value]) * size + before[offset + size:]
            assert device.read(stream, ptr, 0, total) == expected, \
                f"memset(offset={offset}, value={value}, size={size}) of {total} bytes is not byte-exact"
        finally:
            device.free(ptr)

    try:
        memset_exact()
    finally:
        device.destroy_stream(stream)


MAX_FILLING_ALLOCATIONS = 4096


def test_out_of_memory_is_a_status_not_a_crash(device):
    """Fill the device, then ask for more than is left: FL_ERROR_OUT_OF_MEMORY with a message.
    Half the memory (plus one alignment) is asked for twice.  A device that caps one allocation
    lower (OpenCL's CL_DEVICE_MAX_MEM_ALLOC_SIZE) answers FL_ERROR_INVALID_SIZE, "larger than
    the device can ever hold" (fl_abi.h), to the first request; the size is then halved until
    one is taken, and that size filled until the device runs out."""
    free_before, total = device.memory_info()
    size, held, status = total // 2 + device.alignment, [], None
    try:
        while len(held) < MAX_FILLING_ALLOCATIONS:
            status, ptr = _try_malloc(device, size)
            if status == STATUS["FL_SUCCESS"]:
                held.append(ptr)
            elif status == STATUS["FL_ERROR_INVALID_SIZE"] and not held and size > device.alignment:
                size //= 2
            else:
                break
        assert held, f"no fl_malloc of {total} bytes' device succeeded, down to {size} bytes"
        assert status == STATUS["FL_ERROR_OUT_OF_MEMORY"], \
            f"fl_malloc({size}) after {len(held)} of that size on a device of {total} bytes returned " \
            f"{status_name(status)}, expected FL_ERROR_OUT_OF_MEMORY"
        assert device.message().strip(), "FL_ERROR_OUT_OF_MEMORY without a last_error_message()"
    finally:
        for ptr in held:
            device.free(ptr)
    assert device.memory_info()[0] == free_before, "free memory did not return to its level after the frees"


def _try_malloc(device, size: int) -> tuple[int, int | None]:
    out = ffi.new("fl_devptr*")
    status = device.api.fl_malloc(device.index, size, 0, out)
    return status, (out[0] if status == STATUS["FL_SUCCESS"] else None)


def test_memory_info_returns_to_baseline(conformance, device):
    @conformance.property_settings()
    @given(st.lists(SIZES, min_size=1, max_size=12))
    def accounting(sizes):
        baseline, total = device.memory_info()
        assert baseline <= total
        blocks = [device.malloc(size) for size in sizes]
        try:
            during = device.memory_info()[0]
            assert during <= baseline - sum(sizes), \
                f"{sum(sizes)} bytes allocated but free memory went from {baseline} to {during}"
        finally:
            for ptr in blocks:
                device.free(ptr)
        assert device.memory_info()[0] == baseline, "free memory did not return to its baseline after the frees"

    accounting()


# ---- allocator integrity: live data while neighbours come and go ----------------------

# Small blocks share pages with their neighbours; large ones span pages, and freeing them
# may hand pages back to the host (as the reference plugin does), which must never reach
# a live neighbour's bytes.
SMALL_SIZES = (1, 8, 100, 255, 256, 257, 1000, 4095, 4097)
LARGE_SIZES = ((64 << 10) + 1, 200_000, (1 << 20) + 4097, 3 << 19)
CHURN_ROUNDS = 6


class _Blocks:
    """Live allocations and the bytes each must hold."""

    def __init__(self, device, stream, rng: random.Random) -> None:
        self.device, self.stream, self.rng = device, stream, rng
        self.live: dict[int, bytes] = {}

    def allocate(self, size: int) -> None:
        ptr = self.device.malloc(size)
        self.live[ptr] = self.rng.randbytes(size)
        self.device.h2d(self.stream, ptr, 0, self.live[ptr])

    def free(self, ptrs: list[int]) -> None:
        self.device.synchronize(self.stream)   # nothing queued may still use them
        for ptr in ptrs:
            del self.live[ptr]
            self.device.free(ptr)

    def check(self, after: str) -> None:
        for ptr, data in sorted(self.live.items()):
            seen = self.device.read(self.stream, ptr, 0, len(data))
            if seen != data:
                first = next(i for i, (x, y) in enumerate(zip(seen, data)) if x != y)
                raise AssertionError(
                    f"after {after}, the live allocation at {ptr:#x} ({len(data)} bytes) changed from byte "
                    f"{first} on ({sum(x != y for x, y in zip(seen, data))} bytes differ): freeing or "
                    "allocating a neighbour damaged data the caller still owns")


def test_live_allocations_survive_neighbours_freed_and_reused(device):
    """Interleaved small and large allocations hold random bytes; rounds free the large ones
    (neighbours of live small ones), then some small ones, allocate new blocks of other sizes
    into the holes, and read every live allocation back after each step."""
    rng = random.Random(20240613)
    stream = device.new_stream()
    blocks = _Blocks(device, stream, rng)
    try:
        for i in range(4 * len(LARGE_SIZES)):   # small, large, small, large ...: neighbours by construction
            sizes = SMALL_SIZES if i % 2 == 0 else LARGE_SIZES
            blocks.allocate(sizes[i // 2 % len(sizes)])
        blocks.check("the first allocations")
        for round_ in range(CHURN_ROUNDS):
            large = [p for p, d in blocks.live.items() if len(d) > 4097]
            blocks.free(rng.sample(large, max(1, len(large) // 2)))
            blocks.check(f"round {round_ + 1}: freeing large blocks")
            small = [p for p, d in blocks.live.items() if len(d) <= 4097]
            blocks.free(rng.sample(small, len(small) // 3))
            blocks.check(f"round {round_ + 1}: freeing small blocks")
            for _ in range(6):
                blocks.allocate(rng.choice(SMALL_SIZES))
            for _ in range(2):
                blocks.allocate(rng.choice(LARGE_SIZES))
            blocks.check(f"round {round_ + 1}: allocating into the freed space")
    finally:
        device.synchronize(stream)
        for ptr in list(blocks.live):
            device.free(ptr)
        device.destroy_stream(stream)


# ---- pinned host memory (ABI 1.2, fl_host_memory.h) ------------------------------------



@pytest.fixture
def host_memory(conformance):
    ext = host_memory_of(conformance.plugin)
    if ext is None:
        statuses.not_supported("the plugin offers no pinned host-memory extension (fl_host_memory.h)")
    probe = _alloc_args(device=0, size=64)
    if ext.table.host_alloc(probe) == STATUS["FL_ERROR_NOT_SUPPORTED"]:   # a skeleton offered too early
        statuses.not_supported(f"host_alloc declines: {text(conformance.plugin.api.last_error_message())}")
    ext.free(int(ffi.cast("uintptr_t", probe.ptr)))
    return ext


def _alloc_args(**fields):
    return ffi.new("fl_host_alloc_args*", {"struct_size": ffi.sizeof("fl_host_alloc_args"), **fields})


def _free_args(ptr):
    return ffi.new("fl_host_free_args*", {"struct_size": ffi.sizeof("fl_host_free_args"), "ptr": ptr})


def _expect_status(conformance, status: int, expected: str, call: str) -> None:
    assert status == STATUS[expected], f"{call} returned {status_name(status)}, expected {expected}"
    assert text(conformance.plugin.api.last_error_message()).strip(), \
        f"{call} failed with {expected} but last_error_message() is empty"


def _device_count(conformance) -> int:
    count = ffi.new("int32_t*")
    conformance.plugin.api.device_count(count)
    return count[0]


def test_host_alloc_and_free_statuses(conformance, host_memory):
    table = host_memory.table
    bad = {
        "host_alloc(NULL)": (table.host_alloc(ffi.NULL), "FL_ERROR_INVALID_POINTER"),
        "host_alloc(struct_size=8)": (table.host_alloc(ffi.new("fl_host_alloc_args*", {"struct_size": 8})),
                                      "FL_ERROR_INVALID_VALUE"),
        "host_alloc(size=0)": (table.host_alloc(_alloc_args(device=0, size=0)), "FL_ERROR_INVALID_SIZE"),
        "host_alloc(size=2^62)": (table.host_alloc(_alloc_args(device=0, size=1 << 62)), "FL_ERROR_INVALID_SIZE"),
        "host_alloc(flags=1)": (table.host_alloc(_alloc_args(device=0, size=64, flags=1)), "FL_ERROR_INVALID_VALUE"),
        "host_alloc(bad device)": (table.host_alloc(_alloc_args(device=_device_count(conformance), size=64)),
                                   "FL_ERROR_INVALID_DEVICE"),
        "host_free(NULL args)": (table.host_free(ffi.NULL), "FL_ERROR_INVALID_POINTER"),
        "host_free(a host buffer of its own)": (table.host_free(_free_args(ffi.new("char[]", 64))),
                                                "FL_ERROR_INVALID_POINTER"),
    }
    for call, (status, expected) in bad.items():
        _expect_status(conformance, status, expected, call)
    args = _alloc_args(device=0, size=4096)
    assert table.host_alloc(args) == 0, f"host_alloc(4096) failed: {text(conformance.plugin.api.last_error_message())}"
    block = args.ptr
    _expect_status(conformance, table.host_free(_free_args(ffi.cast("char*", block) + 64)), "FL_ERROR_INVALID_POINTER",
            "host_free(an interior pointer)")
    assert table.host_free(_free_args(block)) == 0, "host_free of a live block failed"
    _expect_status(conformance, table.host_free(_free_args(block)), "FL_ERROR_INVALID_POINTER", "host_free twice")


def test_blocks_are_aligned_distinct_and_writable_by_the_host(host_memory):
    sizes = [1, 63, 4096, 100_003, 1 << 20]
    blocks = [host_memory.alloc(0, size) for size in sizes]
    try:
        for address, size in zip(blocks, sizes):
            assert address % 64 == 0, f"a {size}-byte block at 0x{address:x} is not 64-byte aligned"
            ctypes.memset(address, size % 251, size)          # the host may write it at any time
        ends = sorted((address, address + size) for address, size in zip(blocks, sizes))
        assert all(end <= start for (_, end), (start, _) in zip(ends, ends[1:])), "two live blocks overlap"
        for address, size in zip(blocks, sizes):
            assert ctypes.string_at(address, size) == bytes([size % 251]) * size, "a block lost the host's bytes"
    finally:
        for address in blocks:
            host_memory.free(address)


@pytest.fixture
def pinned_setup(device, host_memory):
    """A stream with busy work measured on it, two device buffers, two pinned blocks."""
    stream = device.new_stream()
    scratch, first, second = device.malloc(2 * CHUNK), device.malloc(PROBE_BYTES), device.malloc(PROBE_BYTES)
    blocks = [host_memory.alloc(0, PROBE_BYTES) for _ in range(2)]
    try:
        yield measure_busy(device, stream, scratch), stream, first, second, blocks
    finally:
        device.synchronize(stream)
        for address in blocks:
            host_memory.free(address)
        for ptr in (scratch, first, second):
            device.free(ptr)
        device.destroy_stream(stream)


def _h2d(device, stream, dst: int, address: int) -> None:
    device.check(device.api.memcpy_h2d_async(stream, dst, 0, ffi.cast("void*", address), PROBE_BYTES),
                 "memcpy_h2d_async (from a pinned block)")


def _d2h(device, stream, address: int, src: int) -> None:
    device.check(device.api.memcpy_d2h_async(stream, ffi.cast("void*", address), src, 0, PROBE_BYTES),
                 "memcpy_d2h_async (into a pinned block)")


def test_copies_through_pinned_blocks_are_exact_and_in_stream_order(device, pinned_setup):
    """Behind busy work: memset a device buffer, copy it into pinned block A, A into a second
    device buffer, that into pinned block B.  B must hold the memset's bytes: each copy ran
    after the one before it on the stream, whatever the host did meanwhile."""
    busy, stream, first, second, (block_a, block_b) = pinned_setup
    pattern = bytes((i * 7 + 3) % 256 for i in range(PROBE_BYTES))
    for round_, fill in enumerate((0x5A, 0xC3)):
        ctypes.memmove(block_a, pattern, PROBE_BYTES)        # stale bytes the copies must replace
        ctypes.memset(block_b, 0, PROBE_BYTES)
        device.h2d(stream, second, 0, bytes(PROBE_BYTES))
        device.synchronize(stream)
        busy.enqueue(stream)
        device.memset(stream, first, 0, fill, PROBE_BYTES)
        _d2h(device, stream, block_a, first)
        _h2d(device, stream, second, block_a)
        _d2h(device, stream, block_b, second)
        device.synchronize(stream)
        got = ctypes.string_at(block_b, PROBE_BYTES)
        assert got == bytes([fill]) * PROBE_BYTES, (
            f"round {round_}: a copy through pinned memory ran out of stream order or inexactly: the last "
            f"block holds {got[:8].hex()}..., expected {fill:02x}")
    ctypes.memmove(block_a, pattern, PROBE_BYTES)          # and a plain round trip, byte for byte
    _h2d(device, stream, first, block_a)
    _d2h(device, stream, block_b, first)
    device.synchronize(stream)
    assert ctypes.string_at(block_b, PROBE_BYTES) == pattern, "a round trip through pinned blocks changed bytes"
