"""The checks a plugin's fl_api table must pass before the runtime uses it.

Torch-free and free of fl_runtime imports: the loader runs these in the user's
process, and the isolated probe (fl_runtime.plugins.probe_child) loads this file
by path and runs the very same checks in a child that never imports torch.  A
failed check is a TableRefusal; each caller turns it into its own error class.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The fl_api fields ABI 1.0 defines; a table shorter than this is refused.
REQUIRED_FIELD = "launch_kernel"
# More devices than any machine holds: a larger device_count is a corrupt answer.
MAX_DEVICES_PER_PLUGIN = 4096
# A plugin's strings are names and messages; reading stops here even if one is unterminated.
MAX_STRING = 4096

ABI_REFUSAL, LOAD_REFUSAL = "abi", "load"   # IncompatibleABIError / PluginLoadError


class TableRefusal(Exception):
    """The plugin's table cannot be used; `kind` says which error class the caller raises."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class AbiLevels:
    """What this runtime speaks, read from the header (fl_runtime.abi or the probe child)."""
    major: int
    minor: int
    min_supported_minor: int
    success: int
    incompatible: int
    status_names: dict
    entry_symbol: str

    @classmethod
    def from_ffi(cls, ffi: Any, entry_symbol: str) -> AbiLevels:
        consts = ffi.dlopen(None)   # the process itself: only enum/#define values are read
        return cls(consts.FL_ABI_VERSION_MAJOR, consts.FL_ABI_VERSION_MINOR, consts.FL_ABI_MIN_SUPPORTED_MINOR,
                   consts.FL_SUCCESS, consts.FL_ERROR_INCOMPATIBLE_ABI,
                   dict(ffi.typeof("fl_status").elements), entry_symbol)


def read_string(ffi: Any, cdata: Any) -> str:
    return ffi.string(cdata, MAX_STRING).decode(errors="replace") if cdata != ffi.NULL else ""


def struct_covers(ffi: Any, struct_ptr: Any, type_name: str, field: str) -> bool:
    """True when a size-prefixed struct is large enough to hold `field` (FL_STRUCT_HAS_FIELD)."""
    offset = ffi.offsetof(type_name, field)
    size = ffi.sizeof(ffi.typeof(getattr(ffi.new(f"{type_name}*"), field)))
    return struct_ptr.struct_size >= offset + size


def negotiate(ffi: Any, levels: AbiLevels, get_api: Callable) -> Any:
    """Call fl_plugin_get_api for this runtime's ABI and check the table it returns."""
    requested = ffi.new("fl_abi_version*", {"struct_size": ffi.sizeof("fl_abi_version"),
                                            "major": levels.major, "minor": levels.minor})
    out = ffi.new("const fl_api**")
    status = get_api(requested, out)
    ours = f"{levels.major}.{levels.minor}"
    if status == levels.incompatible:
        raise TableRefusal(ABI_REFUSAL, f"refuses ABI {ours}; {_refusal_reason(ffi, levels, out[0])}")
    if status != levels.success or out[0] == ffi.NULL:
        raise TableRefusal(LOAD_REFUSAL, f"{levels.entry_symbol} failed with "
                           f"{levels.status_names.get(status, status)}")
    api = out[0]
    major, minor = api.abi_version.major, api.abi_version.minor
    if major != levels.major or minor < levels.min_supported_minor:
        raise TableRefusal(ABI_REFUSAL, f"speaks ABI {major}.{minor}, this runtime accepts "
                           f"{levels.major}.{levels.min_supported_minor} to {ours}: rebuild the plugin "
                           "against this Torch-FL SDK or install a matching Torch-FL")
    if not struct_covers(ffi, api, "fl_api", REQUIRED_FIELD):
        raise TableRefusal(ABI_REFUSAL, f"its function table is {api.struct_size} bytes, "
                           f"too short for ABI {major}.{minor}")
    validate_table(ffi, api)
    return api


def _refusal_reason(ffi: Any, levels: AbiLevels, table: Any) -> str:
    """Why a plugin refused this runtime's minor: its own message when it left its table in *out
    (fl_abi.h "COMPATIBILITY PROMISE": only abi_version and last_error_message are read from it)."""
    generic = "it needs another Torch-FL release (see `torch-fl doctor`)"
    if table == ffi.NULL or table.abi_version.major != levels.major or table.last_error_message == ffi.NULL:
        return generic
    message = read_string(ffi, table.last_error_message())
    version = f"{table.abi_version.major}.{table.abi_version.minor}"
    return f"it speaks ABI {version}: {message}" if message else generic


def validate_table(ffi: Any, api: Any) -> None:
    """Refuse a table the runtime would crash on: a NULL `info` or a NULL function
    pointer among the fields the plugin's struct_size covers (fl_abi.h: every
    function of the negotiated minor is required).  A wild non-NULL pointer cannot
    be detected from here; the isolated probe (fl_runtime.plugins.probe) catches
    the crash it causes at load time."""
    if api.info == ffi.NULL:
        raise TableRefusal(LOAD_REFUSAL, "its fl_api table has info = NULL (fl_abi.h requires the "
                           "plugin_name/vendor/device_type record): fix the plugin's fl_plugin_get_api")
    if api.info.struct_size < ffi.offsetof("fl_plugin_info", "vendor"):
        raise TableRefusal(LOAD_REFUSAL, f"its fl_plugin_info.struct_size is {api.info.struct_size}, "
                           "too small to hold plugin_name: fix the plugin's info record")
    for name in function_fields(ffi):
        if struct_covers(ffi, api, "fl_api", name) and getattr(api, name) == ffi.NULL:
            raise TableRefusal(LOAD_REFUSAL, f"its fl_api table has {name} = NULL; every function of "
                               "the ABI minor it speaks is required (fl_abi.h): fix the plugin")


def initialize(ffi: Any, levels: AbiLevels, api: Any) -> None:
    """plugin_initialize (fl_abi.h "LIFECYCLE", ABI 1.2) on a table that has it; a failure
    refuses the plugin with its own message.  A table of an older minor ends before it."""
    if not struct_covers(ffi, api, "fl_api", "plugin_initialize"):
        return
    args = ffi.new("fl_plugin_initialize_args*", {"struct_size": ffi.sizeof("fl_plugin_initialize_args"),
                                                  "runtime_major": levels.major, "runtime_minor": levels.minor})
    status = api.plugin_initialize(args)
    if status != levels.success:
        message = read_string(ffi, api.last_error_message())
        raise TableRefusal(LOAD_REFUSAL, f"plugin_initialize failed with {levels.status_names.get(status, status)}: "
                           f"{message or 'no message'}")


def teardown(ffi: Any, api: Any) -> int | None:
    """plugin_teardown, pairing one successful initialize (None: the table has no lifecycle)."""
    if not struct_covers(ffi, api, "fl_api", "plugin_teardown"):
        return None
    return api.plugin_teardown(ffi.new("fl_plugin_teardown_args*",
                                       {"struct_size": ffi.sizeof("fl_plugin_teardown_args")}))


def function_fields(ffi: Any) -> list[str]:
    return [name for name, field in ffi.typeof("fl_api").fields
            if field.type.kind == "function"]    # cffi: a function pointer's kind
