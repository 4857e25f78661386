"""The C ABI as cffi sees it: declarations read from fl_abi.h and its extension
headers (fl_collectives.h, ...), never retyped.

Each header marks the plain-C region cffi can parse between FL_CDEF_BEGIN and
FL_CDEF_END; this module extracts them once (abi.header.read_cdef), so the
headers stay the only copy.
`ffi` comes from cffi's out-of-line module generated from that region and cached
(abi.outofline): the header is not parsed again at every import.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from fl_runtime.abi.header import cdef_region, read_cdef
from fl_runtime.abi.outofline import MISSING_SYMBOL, PACKAGED, load_ffi


def _header_path() -> Path:
    """fl_sdk/include/fl_abi.h, found without importing the SDK (the runtime sits below it)."""
    spec = importlib.util.find_spec("fl_sdk")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the Torch-FL ABI header is missing: the fl_sdk package is not installed; "
                           "reinstall torch-fl")
    return Path(next(iter(spec.submodule_search_locations))) / "include" / "fl_abi.h"


HEADER_PATH = _header_path()

ENTRY_SYMBOL = "fl_plugin_get_api"


CDEF: str = read_cdef(HEADER_PATH)      # every header's region, as the out-of-line module is keyed
ffi = load_ffi(CDEF, PACKAGED)
_cdef_region = cdef_region      # the extraction, for the header tests
# Constants the runtime needs, taken from the header through cffi.
_consts = ffi.dlopen(None)  # the process itself: only enum/#define values are read
ABI_MAJOR: int = _consts.FL_ABI_VERSION_MAJOR
ABI_MINOR: int = _consts.FL_ABI_VERSION_MINOR
ABI_MIN_SUPPORTED_MINOR: int = _consts.FL_ABI_MIN_SUPPORTED_MINOR
SUCCESS: int = _consts.FL_SUCCESS
NOT_READY: int = _consts.FL_NOT_READY
ERROR_OUT_OF_MEMORY: int = _consts.FL_ERROR_OUT_OF_MEMORY
ERROR_INCOMPATIBLE_ABI: int = _consts.FL_ERROR_INCOMPATIBLE_ABI
ERROR_NOT_SUPPORTED: int = _consts.FL_ERROR_NOT_SUPPORTED

STATUS_NAMES: dict[int, str] = dict(ffi.typeof("fl_status").elements)

_TORCH_TO_FL = {
    torch.float32: "FL_FLOAT32", torch.float64: "FL_FLOAT64", torch.float16: "FL_FLOAT16",
    torch.bfloat16: "FL_BFLOAT16", torch.int8: "FL_INT8", torch.uint8: "FL_UINT8",
    torch.int16: "FL_INT16", torch.int32: "FL_INT32", torch.int64: "FL_INT64",
    torch.bool: "FL_BOOL", torch.complex64: "FL_COMPLEX64",
    # ABI 1.2 (fl_abi.h, fl_dtype): PyTorch's float8 formats
    torch.float8_e4m3fn: "FL_FLOAT8_E4M3FN", torch.float8_e5m2: "FL_FLOAT8_E5M2",
    torch.float8_e4m3fnuz: "FL_FLOAT8_E4M3FNUZ", torch.float8_e5m2fnuz: "FL_FLOAT8_E5M2FNUZ",
}
DTYPE_TO_FL: dict[torch.dtype, int] = {dt: getattr(_consts, name) for dt, name in _TORCH_TO_FL.items()}
FL_TO_DTYPE: dict[int, torch.dtype] = {code: dt for dt, code in DTYPE_TO_FL.items()}

ARG_NONE = _consts.FL_ARG_NONE
ARG_TENSOR = _consts.FL_ARG_TENSOR
ARG_INT = _consts.FL_ARG_INT
ARG_FLOAT = _consts.FL_ARG_FLOAT
ARG_BOOL = _consts.FL_ARG_BOOL
ARG_INT_LIST = _consts.FL_ARG_INT_LIST
ARG_FLOAT_LIST = _consts.FL_ARG_FLOAT_LIST
ARG_BOOL_LIST = _consts.FL_ARG_BOOL_LIST
ARG_TENSOR_LIST = _consts.FL_ARG_TENSOR_LIST
ARG_STRING = _consts.FL_ARG_STRING

# ABI 1.1: the extension chain and the collectives extension (fl_abi.h, "EXTENSIONS").
EXTENSION_COLLECTIVES: int = _consts.FL_EXTENSION_COLLECTIVES
# ABI 1.2: pinned host memory (fl_host_memory.h)
EXTENSION_HOST_MEMORY: int = _consts.FL_EXTENSION_HOST_MEMORY
# ABI 1.3: inter-process device memory (fl_ipc.h)
EXTENSION_IPC: int = _consts.FL_EXTENSION_IPC
REDUCE_OPS: dict[str, int] = {name: getattr(_consts, f"FL_REDUCE_{name.upper()}")
                              for name in ("sum", "prod", "min", "max", "avg")}
COMM_UNIQUE_ID_BYTES: int = _consts.FL_COMM_UNIQUE_ID_BYTES
# ABI 1.2: which ranks a communicator can join (fl_comm_reach).
COMM_REACH_HOST: int = _consts.FL_COMM_REACH_HOST
COMM_REACH_ANY: int = _consts.FL_COMM_REACH_ANY

VARIANT_NAMES = {_consts.FL_VARIANT_PRECISE: "precise", _consts.FL_VARIANT_FAST: "fast"}


def dtype_mask_names(mask: int) -> list[str]:
    """The torch dtypes a (1 << fl_dtype) mask names, for display."""
    return [str(dt).removeprefix("torch.") for dt, code in DTYPE_TO_FL.items() if mask & (1 << code)]


def struct_covers(struct_ptr, type_name: str, field: str) -> bool:
    """True when a size-prefixed struct is large enough to hold `field` (FL_STRUCT_HAS_FIELD)."""
    offset = ffi.offsetof(type_name, field)
    size = ffi.sizeof(ffi.typeof(getattr(ffi.new(f"{type_name}*"), field)))
    return struct_ptr.struct_size >= offset + size
