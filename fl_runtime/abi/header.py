"""The headers' cffi declarations, torch-free.

Split from fl_runtime.abi so that a process that must not import torch (the
isolated plugin probe, fl_runtime.plugins.probe_child) builds the same `ffi`
from the same headers: it loads this file by path.  Standard library and cffi only.

The ABI is fl_abi.h plus one header per optional feature set beside it
(fl_collectives.h, fl_host_memory.h, ...; fl_abi.h "COMPATIBILITY PROMISE").
Each marks the plain-C region cffi can parse between FL_CDEF_BEGIN and
FL_CDEF_END; `read_cdef` joins fl_abi.h's region with those of every sibling
header that has the markers, in file-name order, so a new extension header is
read without a list to keep in step.  The regions also hold each size-prefixed
struct's FL_DEFINE_STRUCT_TRAITS line right after the struct (fl_abi.h, "STRUCT
SIZES"): a macro cffi cannot parse, so the extraction drops those lines, and
`struct_traits` reads them (the header tests hold each to its struct's last field).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import cffi

CDEF_BEGIN, CDEF_END = "/* FL_CDEF_BEGIN */", "/* FL_CDEF_END */"
CORE_HEADER = "fl_abi.h"
# One whole line per size-prefixed struct: FL_DEFINE_STRUCT_TRAITS(type, last_field);
_TRAITS_LINE = re.compile(r"^FL_DEFINE_STRUCT_TRAITS\((\w+), (\w+)\);[ \t]*\n", re.M)


def cdef_region(header_text: str, header_path: object = CORE_HEADER) -> str:
    """The plain-C region cffi can parse, between one header's FL_CDEF markers."""
    if CDEF_BEGIN not in header_text or CDEF_END not in header_text:
        raise RuntimeError(f"{header_path} lacks the {CDEF_BEGIN} / {CDEF_END} markers cffi reads")
    region = header_text.split(CDEF_BEGIN, 1)[1].split(CDEF_END, 1)[0]
    return _TRAITS_LINE.sub("", region)


def struct_traits(header_path: object) -> dict[str, str]:
    """Each size-prefixed struct of the ABI whose core header is `header_path`, with the last
    field its FL_DEFINE_STRUCT_TRAITS line names."""
    return {name: last for path in abi_headers(header_path)
            for name, last in _TRAITS_LINE.findall(path.read_text(encoding="utf-8"))}


def abi_headers(header_path: object) -> list[Path]:
    """fl_abi.h (at `header_path`) first, then the sibling headers with FL_CDEF regions."""
    core = Path(str(header_path))
    siblings = sorted(path for path in core.parent.glob("*.h")
                      if path != core and CDEF_BEGIN in path.read_text(encoding="utf-8"))
    return [core, *siblings]


def read_cdef(header_path: object) -> str:
    """Every declaration of the ABI whose core header is `header_path`, as one cdef text."""
    return "".join(cdef_region(path.read_text(encoding="utf-8"), path) for path in abi_headers(header_path))


def build_ffi(header_path: object) -> cffi.FFI:
    """An FFI holding every declaration of the ABI whose core header is `header_path`."""
    import cffi     # here, not at the top: a start-up that loads the cached module never needs it

    ffi = cffi.FFI()
    ffi.cdef(read_cdef(header_path))
    return ffi
