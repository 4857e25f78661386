"""The header's cffi declarations, torch-free.

Split from fl_runtime.abi so that a process that must not import torch (the
isolated plugin probe, fl_runtime.plugins.probe_child) builds the same `ffi`
from the same header: it loads this file by path.  Standard library and cffi only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import cffi

CDEF_BEGIN, CDEF_END = "/* FL_CDEF_BEGIN */", "/* FL_CDEF_END */"


def cdef_region(header_text: str, header_path: object = "fl_abi.h") -> str:
    """The plain-C region cffi can parse, between the header's FL_CDEF markers."""
    if CDEF_BEGIN not in header_text or CDEF_END not in header_text:
        raise RuntimeError(f"{header_path} lacks the {CDEF_BEGIN} / {CDEF_END} markers cffi reads")
    return header_text.split(CDEF_BEGIN, 1)[1].split(CDEF_END, 1)[0]


def build_ffi(header_path: object) -> cffi.FFI:
    """An FFI holding every declaration of the header at `header_path`."""
    import cffi     # here, not at the top: a start-up that loads the cached module never needs it

    with open(header_path, encoding="utf-8") as handle:
        text = handle.read()
    ffi = cffi.FFI()
    ffi.cdef(cdef_region(text, header_path))
    return ffi
