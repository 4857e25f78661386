"""ABI: the entry symbol, version negotiation, the table and exact error statuses.

Every bad-argument call must return the exact status fl_abi.h names, and
last_error_message() must then say something.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.plugins import pinned

from conformance import statuses
from conformance.harness import STATUS, Device, kernel_entries, status_name, text

CATEGORY = "abi"
NULL = ffi.NULL


def _get_api(plugin, major: int, minor: int, extra_bytes: int = 0):
    """Call the entry point directly; a newer caller may pass a larger version struct."""
    size = ffi.sizeof("fl_abi_version")
    raw = ffi.new("char[]", size + extra_bytes)
    requested = ffi.cast("fl_abi_version*", raw)
    requested.struct_size, requested.major, requested.minor = size + extra_bytes, major, minor
    out = ffi.new("const fl_api**")
    status = getattr(plugin.lib, abi.ENTRY_SYMBOL)(requested, out)
    return status, out[0], raw


def _expect(plugin, status: int, expected: str, call: str) -> None:
    assert status == STATUS[expected], f"{call} returned {status_name(status)}, expected {expected}"
    message = text(plugin.api.last_error_message())
    assert message.strip(), f"{call} failed with {expected} but last_error_message() is empty"


def test_entry_symbol_is_exported(conformance):
    assert ffi.typeof(getattr(conformance.plugin.lib, abi.ENTRY_SYMBOL)) is not None


def test_loaded_under_its_real_path(conformance):
    """The runtime maps a plugin under its real path where nobody but its owner can switch what
    that path names, so dladdr() + dirname() in the plugin find its install directory
    (docs/vendors/plugin-location.md); installed otherwise, it sees /proc/self/fd/N."""
    plugin = conformance.plugin
    real = os.path.realpath(plugin.source.path)
    entry = int(ffi.cast("uintptr_t", getattr(plugin.lib, abi.ENTRY_SYMBOL)))
    mapped = pinned.mapped_name(entry)
    assert mapped == real, (f"dladdr() names the plugin {mapped}, not its real path {real}, because "
                            f"{plugin.location_note or 'of how it was loaded'}; a plugin that finds its own "
                            "files beside itself would not find them (docs/vendors/plugin-location.md)")


@pytest.mark.parametrize("minor, extra_bytes", [(abi.ABI_MINOR, 0), (abi.ABI_MINOR + 1, 0), (abi.ABI_MINOR + 7, 32)],
                         ids=["requested", "newer-minor", "newer-minor-larger-struct"])
def test_negotiation_accepts_this_and_every_newer_minor_of_major_1(conformance, minor, extra_bytes):
    status, api, _ = _get_api(conformance.plugin, abi.ABI_MAJOR, minor, extra_bytes)
    assert status == abi.SUCCESS, f"requesting ABI {abi.ABI_MAJOR}.{minor} returned {status_name(status)}"
    assert api != NULL
    assert api.abi_version.major == abi.ABI_MAJOR
    assert api.abi_version.minor >= abi.ABI_MIN_SUPPORTED_MINOR


def test_negotiation_of_older_minors_accepts_or_refuses_by_name(conformance):
    """A plugin may refuse a runtime minor it cannot serve (fl_abi.h, "COMPATIBILITY PROMISE": one
    that never calls plugin_initialize), with FL_ERROR_INCOMPATIBLE_ABI and a message saying so;
    from the lowest minor it accepts, it accepts every one."""
    accepted_from = None
    for minor in range(abi.ABI_MIN_SUPPORTED_MINOR, abi.ABI_MINOR):
        status, api, _ = _get_api(conformance.plugin, abi.ABI_MAJOR, minor)
        call = f"fl_plugin_get_api({abi.ABI_MAJOR}.{minor})"
        if status == abi.SUCCESS:
            assert api != NULL and api.abi_version.major == abi.ABI_MAJOR, call
            accepted_from = minor if accepted_from is None else accepted_from
            continue
        assert accepted_from is None, f"{call} refused after {abi.ABI_MAJOR}.{accepted_from} was accepted"
        _expect(conformance.plugin, status, "FL_ERROR_INCOMPATIBLE_ABI", call)


def test_negotiation_refuses_major_2(conformance):
    status, _, _ = _get_api(conformance.plugin, abi.ABI_MAJOR + 1, 0)
    _expect(conformance.plugin, status, "FL_ERROR_INCOMPATIBLE_ABI", "fl_plugin_get_api(2.0)")


def test_negotiation_null_arguments(conformance):
    entry = getattr(conformance.plugin.lib, abi.ENTRY_SYMBOL)
    _expect(conformance.plugin, entry(NULL, ffi.new("const fl_api**")), "FL_ERROR_INVALID_POINTER",
            "fl_plugin_get_api(NULL, out)")
    requested = ffi.new("fl_abi_version*", [ffi.sizeof("fl_abi_version"), abi.ABI_MAJOR, abi.ABI_MINOR])
    _expect(conformance.plugin, entry(requested, NULL), "FL_ERROR_INVALID_POINTER",
            "fl_plugin_get_api(requested, NULL)")


def _function_fields() -> list[str]:
    return [name for name, field in ffi.typeof("fl_api").fields if field.type.kind == "function"]


def _lifecycle(conformance):
    api = conformance.plugin.api
    if not abi.struct_covers(api, "fl_api", "plugin_teardown"):
        statuses.not_supported(f"the plugin speaks ABI {api.abi_version.major}.{api.abi_version.minor}: its table "
                               "ends before the lifecycle calls (ABI 1.2)")
    return api


def test_lifecycle_calls_pair_up_and_leave_the_plugin_usable(conformance, device):
    """fl_abi.h "LIFECYCLE": the runtime's own plugin_initialize holds the plugin; one more
    initialise/teardown pair (a second client in the process) must leave it working."""
    api = _lifecycle(conformance)
    init = ffi.new("fl_plugin_initialize_args*", {"struct_size": ffi.sizeof("fl_plugin_initialize_args"),
                                                  "runtime_major": abi.ABI_MAJOR, "runtime_minor": abi.ABI_MINOR})
    down = ffi.new("fl_plugin_teardown_args*", {"struct_size": ffi.sizeof("fl_plugin_teardown_args")})
    device.check(api.plugin_initialize(init), "plugin_initialize (a second client)")
    device.check(api.plugin_teardown(down), "plugin_teardown (the second client's)")
    stream, ptr = device.new_stream(), device.malloc(64)
    device.h2d(stream, ptr, 0, bytes(range(64)))
    assert device.read(stream, ptr, 0, 64) == bytes(range(64)), "the plugin stopped working after a teardown " \
        "that paired a second initialise: teardowns must be counted"
    device.free(ptr)
    device.destroy_stream(stream)


def test_lifecycle_and_ex_calls_check_their_arguments_struct(conformance, live):
    """fl_abi.h "CALLS": a NULL args pointer is FL_ERROR_INVALID_POINTER, a struct_size below the
    struct's is FL_ERROR_INVALID_VALUE, for every call added in ABI 1.2."""
    api = _lifecycle(conformance)
    for name, type_name in (("plugin_initialize", "fl_plugin_initialize_args"),
                            ("plugin_teardown", "fl_plugin_teardown_args"),
                            ("stream_create_ex", "fl_stream_create_args"),
                            ("launch_kernel_ex", "fl_launch_kernel_args")):
        call = getattr(api, name)
        _expect(conformance.plugin, call(NULL), "FL_ERROR_INVALID_POINTER", f"{name}(NULL)")
        short = ffi.new(f"{type_name}*", {"struct_size": ffi.sizeof("size_t")})
        _expect(conformance.plugin, call(short), "FL_ERROR_INVALID_VALUE", f"{name}(struct_size={ffi.sizeof('size_t')})")


def test_stream_create_ex_and_launch_kernel_ex_act_as_their_1_0_forms(conformance, device, live):
    api = _lifecycle(conformance)
    args = ffi.new("fl_stream_create_args*", {"struct_size": ffi.sizeof("fl_stream_create_args"), "device": 0,
                                              "priority": -1})
    device.check(api.stream_create_ex(args), "stream_create_ex(device=0, priority=-1)")
    stream = args.stream
    device.h2d(stream, live.ptr, 0, bytes(range(32)))
    assert device.read(stream, live.ptr, 0, 32) == bytes(range(32)), "a stream from stream_create_ex lost a copy"
    device.destroy_stream(stream)
    bad_device = ffi.new("fl_stream_create_args*", {"struct_size": ffi.sizeof("fl_stream_create_args"),
                                                    "device": _bad_device(live)})
    _expect(conformance.plugin, api.stream_create_ex(bad_device), "FL_ERROR_INVALID_DEVICE",
            "stream_create_ex(bad device)")
    launch = ffi.new("fl_launch_kernel_args*", {"struct_size": ffi.sizeof("fl_launch_kernel_args"),
                                                "stream": NULL, "kernel": live.kernel})
    _expect(conformance.plugin, api.launch_kernel_ex(launch), "FL_ERROR_INVALID_HANDLE",
            "launch_kernel_ex(stream=NULL)")
    launch.stream, launch.kernel = live.stream, NULL
    _expect(conformance.plugin, api.launch_kernel_ex(launch), "FL_ERROR_INVALID_HANDLE",
            "launch_kernel_ex(kernel=NULL)")


def test_table_covers_abi_1_0(conformance):
    api = conformance.plugin.api
    assert abi.struct_covers(api, "fl_api", "launch_kernel"), \
        f"fl_api.struct_size={api.struct_size} does not cover ABI 1.0 (up to launch_kernel)"
    assert api.abi_version.struct_size >= ffi.sizeof("fl_abi_version")


@pytest.mark.parametrize("field", _function_fields())
def test_function_pointer_is_set(conformance, field):
    api = conformance.plugin.api
    if not abi.struct_covers(api, "fl_api", field):
        statuses.not_supported(f"the plugin speaks ABI {api.abi_version.major}.{api.abi_version.minor}: its table "
                               f"ends before fl_api.{field}")
    assert getattr(api, field) != NULL, f"fl_api.{field} is NULL"


def test_plugin_info_strings(conformance):
    info = conformance.plugin.api.info
    assert info != NULL, "fl_api.info is NULL"
    assert abi.struct_covers(info, "fl_plugin_info", "plugin_version")
    for name in ("plugin_name", "vendor", "device_type", "plugin_version"):
        assert text(getattr(info, name)).strip(), f"fl_plugin_info.{name} is empty"


def test_devices_and_properties(conformance):
    plugin = conformance.plugin
    count = ffi.new("int32_t*")
    assert plugin.api.device_count(count) == abi.SUCCESS and count[0] >= 1, "the plugin reports no device"
    uuids = set()
    for index in range(count[0]):
        facts = Device(plugin, index).facts
        for name in ("name", "vendor", "uuid", "driver_version"):
            assert facts[name].strip(), f"device {index}: fl_device_properties.{name} is empty"
        assert facts["total_memory"] > 0, f"device {index}: total_memory is 0"
        alignment = facts["alignment"]
        assert alignment > 0 and alignment & (alignment - 1) == 0, \
            f"device {index}: alignment {alignment} is not a power of two"
        assert facts["supported_dtypes"], f"device {index}: supported_dtypes is empty"
        uuids.add(facts["uuid"])
    assert len(uuids) == count[0], "device uuids are not unique"


def test_device_properties_respects_an_older_callers_size(conformance):
    """An older caller's smaller struct: only whole covered fields are written, and
    struct_size comes back no larger than what the caller gave."""
    full = ffi.sizeof("fl_device_properties")
    older = ffi.offsetof("fl_device_properties", "alignment")   # a caller that knew fields up to total_memory
    raw = ffi.new("unsigned char[]", [0xEE] * full)
    props = ffi.cast("fl_device_properties*", raw)
    props.struct_size = older
    assert conformance.plugin.api.device_properties(0, props) == abi.SUCCESS
    assert props.struct_size <= older
    assert all(b == 0xEE for b in raw[older:full]), "device_properties wrote past the caller's struct_size"


def test_kernel_table_entries(conformance):
    for entry in kernel_entries(conformance.plugin):
        assert entry.op, f"kernel table entry {entry.index} has no op name"
        assert entry.dtypes, f"kernel {entry.op} declares no dtype"
        assert entry.variant in abi.VARIANT_NAMES, f"kernel {entry.op}: unknown variant {entry.variant}"


# ---- exact statuses for bad arguments -----------------------------------------------

@dataclass
class Live:
    """Live handles the bad calls need next to the bad argument."""
    dev: Device
    stream: object
    event: object
    ptr: int
    freed: int
    kernel: object


@pytest.fixture
def live(device):
    stream, ptr = device.new_stream(), device.malloc(4 * device.alignment)
    freed = device.malloc(64)
    device.free(freed)
    event = ffi.new("fl_event*")
    device.check(device.api.event_create(0, event), "event_create")
    entries = kernel_entries(device.plugin)
    yield Live(device, stream, event[0], ptr, freed, entries[0].pointer if entries else NULL)
    device.api.event_destroy(event[0])
    device.destroy_stream(stream)
    device.free(ptr)


def _bad_device(live: Live) -> int:
    count = ffi.new("int32_t*")
    live.dev.api.device_count(count)
    return count[0]


HOST = ffi.new("char[]", 64)
# (id, call on a Live, expected status)
BAD_CALLS = [
    ("device_count-null", lambda l: l.dev.api.device_count(NULL), "FL_ERROR_INVALID_POINTER"),
    ("device_properties-null", lambda l: l.dev.api.device_properties(0, NULL), "FL_ERROR_INVALID_POINTER"),
    ("device_properties-bad-device", lambda l: l.dev.api.device_properties(
        _bad_device(l), ffi.new("fl_device_properties*", [ffi.sizeof("fl_device_properties")])),
     "FL_ERROR_INVALID_DEVICE"),
    ("malloc-null-out", lambda l: l.dev.api.fl_malloc(0, 64, 0, NULL), "FL_ERROR_INVALID_POINTER"),
    ("malloc-bad-device", lambda l: l.dev.api.fl_malloc(_bad_device(l), 64, 0, ffi.new("fl_devptr*")),
     "FL_ERROR_INVALID_DEVICE"),
    ("malloc-negative-device", lambda l: l.dev.api.fl_malloc(-1, 64, 0, ffi.new("fl_devptr*")),
     "FL_ERROR_INVALID_DEVICE"),
    ("malloc-alignment-3", lambda l: l.dev.api.fl_malloc(0, 64, 3, ffi.new("fl_devptr*")), "FL_ERROR_INVALID_VALUE"),
    ("malloc-alignment-48", lambda l: l.dev.api.fl_malloc(0, 64, 48, ffi.new("fl_devptr*")),
     "FL_ERROR_INVALID_VALUE"),
    ("malloc-size-0", lambda l: l.dev.api.fl_malloc(0, 0, 0, ffi.new("fl_devptr*")), "FL_ERROR_INVALID_SIZE"),
    ("malloc-over-total", lambda l: l.dev.api.fl_malloc(0, l.dev.total_memory + 1, 0, ffi.new("fl_devptr*")),
     "FL_ERROR_INVALID_SIZE"),
    ("free-twice", lambda l: l.dev.api.fl_free(0, l.freed), "FL_ERROR_INVALID_POINTER"),
    ("free-interior-pointer", lambda l: l.dev.api.fl_free(0, l.ptr + l.dev.alignment),
     "FL_ERROR_INVALID_POINTER"),
    ("free-foreign-pointer", lambda l: l.dev.api.fl_free(0, int(ffi.cast("uintptr_t", HOST))),
     "FL_ERROR_INVALID_POINTER"),
    ("free-zero", lambda l: l.dev.api.fl_free(0, 0), "FL_ERROR_INVALID_POINTER"),
    ("free-bad-device", lambda l: l.dev.api.fl_free(_bad_device(l), l.ptr), "FL_ERROR_INVALID_DEVICE"),
    ("memory_info-null", lambda l: l.dev.api.memory_info(0, NULL, NULL), "FL_ERROR_INVALID_POINTER"),
    ("memory_info-bad-device", lambda l: l.dev.api.memory_info(_bad_device(l), ffi.new("uint64_t*"),
                                                                ffi.new("uint64_t*")), "FL_ERROR_INVALID_DEVICE"),
    ("stream_create-null", lambda l: l.dev.api.stream_create(0, NULL), "FL_ERROR_INVALID_POINTER"),
    ("stream_create-bad-device", lambda l: l.dev.api.stream_create(_bad_device(l), ffi.new("fl_stream*")),
     "FL_ERROR_INVALID_DEVICE"),
    ("stream_synchronize-null", lambda l: l.dev.api.stream_synchronize(NULL), "FL_ERROR_INVALID_HANDLE"),
    ("stream_query-null", lambda l: l.dev.api.stream_query(NULL), "FL_ERROR_INVALID_HANDLE"),
    ("stream_destroy-null", lambda l: l.dev.api.stream_destroy(NULL), "FL_ERROR_INVALID_HANDLE"),
    ("stream_wait_event-null-stream", lambda l: l.dev.api.stream_wait_event(NULL, l.event),
     "FL_ERROR_INVALID_HANDLE"),
    ("stream_wait_event-null-event", lambda l: l.dev.api.stream_wait_event(l.stream, NULL),
     "FL_ERROR_INVALID_HANDLE"),
    ("event_create-null", lambda l: l.dev.api.event_create(0, NULL), "FL_ERROR_INVALID_POINTER"),
    ("event_create-bad-device", lambda l: l.dev.api.event_create(_bad_device(l), ffi.new("fl_event*")),
     "FL_ERROR_INVALID_DEVICE"),
    ("event_record-null-event", lambda l: l.dev.api.event_record(NULL, l.stream), "FL_ERROR_INVALID_HANDLE"),
    ("event_record-null-stream", lambda l: l.dev.api.event_record(l.event, NULL), "FL_ERROR_INVALID_HANDLE"),
    ("event_synchronize-null", lambda l: l.dev.api.event_synchronize(NULL), "FL_ERROR_INVALID_HANDLE"),
    ("event_query-null", lambda l: l.dev.api.event_query(NULL), "FL_ERROR_INVALID_HANDLE"),
    ("event_destroy-null", lambda l: l.dev.api.event_destroy(NULL), "FL_ERROR_INVALID_HANDLE"),
    ("event_elapsed-null-event", lambda l: l.dev.api.event_elapsed_ms(NULL, l.event, ffi.new("float*")),
     "FL_ERROR_INVALID_HANDLE"),
    ("memcpy_h2d-null-stream", lambda l: l.dev.api.memcpy_h2d_async(NULL, l.ptr, 0, HOST, 64),
     "FL_ERROR_INVALID_HANDLE"),
    ("memcpy_d2h-null-stream", lambda l: l.dev.api.memcpy_d2h_async(NULL, HOST, l.ptr, 0, 64),
     "FL_ERROR_INVALID_HANDLE"),
    ("memcpy_d2d-null-stream", lambda l: l.dev.api.memcpy_d2d_async(NULL, 0, l.ptr, 0, 0, l.ptr, 64, 64),
     "FL_ERROR_INVALID_HANDLE"),
    ("memset-null-stream", lambda l: l.dev.api.memset_async(NULL, l.ptr, 0, 0, 64), "FL_ERROR_INVALID_HANDLE"),
    ("memcpy_h2d-freed-pointer", lambda l: l.dev.api.memcpy_h2d_async(l.stream, l.freed, 0, HOST, 64),
     "FL_ERROR_INVALID_POINTER"),
    ("kernel_table-null", lambda l: l.dev.api.kernel_table(NULL, ffi.new("uint32_t*")), "FL_ERROR_INVALID_POINTER"),
    ("kernel_table-null-count", lambda l: l.dev.api.kernel_table(ffi.new("const fl_kernel_entry**"), NULL),
     "FL_ERROR_INVALID_POINTER"),
    ("launch_kernel-null-stream", lambda l: l.dev.api.launch_kernel(NULL, l.kernel, NULL, 0),
     "FL_ERROR_INVALID_HANDLE"),
    ("launch_kernel-null-kernel", lambda l: l.dev.api.launch_kernel(l.stream, NULL, NULL, 0),
     "FL_ERROR_INVALID_HANDLE"),
]


@pytest.mark.parametrize("name, call, expected", BAD_CALLS, ids=[name for name, _, _ in BAD_CALLS])
def test_bad_argument_status(conformance, live, name, call, expected):
    _expect(conformance.plugin, call(live), expected, name)


def test_launch_refuses_a_tensor_whose_extent_overflows(conformance, live):
    """Sizes and strides whose extent, ((2-1)*2^62 + (2-1)*2^62 + 1) * 4 bytes, wraps past 2^64 to
    4 bytes: a driver that multiplies without an overflow check finds those 4 bytes inside the
    live allocation and hands the kernel a tensor reaching 2^65 bytes past it.  fl_abi.h,
    "kernel calling convention": such a launch is FL_ERROR_INVALID_VALUE, before the kernel runs."""
    if live.kernel == NULL:
        statuses.not_supported("the plugin's kernel table is empty: no kernel to launch")
    sizes, strides = ffi.new("int64_t[]", [2, 2]), ffi.new("int64_t[]", [1 << 62, 1 << 62])
    tensor = ffi.new("fl_tensor*", {"struct_size": ffi.sizeof("fl_tensor"), "base": live.ptr, "byte_offset": 0,
                                    "dtype": abi.DTYPE_TO_FL[torch.float32], "ndim": 2, "sizes": sizes,
                                    "strides": strides})
    args = ffi.new("fl_arg[]", 1)
    args[0].kind, args[0].value.tensor = abi.ARG_TENSOR, tensor
    status = live.dev.api.launch_kernel(live.stream, live.kernel, args, 1)
    live.dev.api.stream_synchronize(live.stream)     # a kernel that ran anyway: its sticky error goes
    _expect(conformance.plugin, status, "FL_ERROR_INVALID_VALUE",
            "launch_kernel with a float32 tensor of sizes (2, 2) and strides (2^62, 2^62)")
