"""The C ABI header: one source of truth, strict C, size-prefixed structs."""
import subprocess

from fl_runtime import abi
from fl_sdk import ABI_HEADER
from fl_sdk.build import compiler

SIZE_PREFIXED = ["fl_abi_version", "fl_device_properties", "fl_tensor", "fl_kernel_entry",
                 "fl_plugin_info", "fl_api"]


def test_header_compiles_cleanly_as_c_and_cxx(tmp_path):
    source = tmp_path / "use.c"
    source.write_text('#include <string.h>\n#include "fl_abi.h"\n'
                      "int main(void) { fl_api api; memset(&api, 0, sizeof api);\n"
                      "  api.struct_size = FL_STRUCT_SIZE(fl_api, launch_kernel);\n"
                      "  return FL_STRUCT_HAS_FIELD(&api, fl_api, launch_kernel) ? 0 : 1; }\n")
    for flags in (["-x", "c", "-std=c99"], ["-x", "c++", "-std=c++17"]):
        cmd = [compiler(), *flags, "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{ABI_HEADER.parent}",
               str(source), "-o", str(tmp_path / "a.out")]
        if "c++" in flags:
            cmd[0] = "g++"
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert subprocess.run([str(tmp_path / "a.out")]).returncode == 0


def test_cffi_declarations_come_from_the_header():
    region = abi._cdef_region(ABI_HEADER.read_text())
    assert "typedef struct fl_api" in region
    assert abi.ABI_MAJOR == 1 and abi.ABI_MIN_SUPPORTED_MINOR <= abi.ABI_MINOR


def test_every_struct_starts_with_its_size():
    for name in SIZE_PREFIXED:
        assert abi.ffi.offsetof(name, "struct_size") == 0, name


def test_enums_are_32_bit_and_dtype_codes_cover_torch_dtypes():
    for enum in ("fl_status", "fl_dtype", "fl_arg_kind", "fl_kernel_variant"):
        assert abi.ffi.sizeof(enum) == 4
    assert len(set(abi.DTYPE_TO_FL.values())) == len(abi.DTYPE_TO_FL)


def test_status_names_are_distinct_and_success_is_zero():
    assert abi.SUCCESS == 0
    assert abi.STATUS_NAMES[abi.SUCCESS] == "FL_SUCCESS"
