"""The C ABI header: one source of truth, strict C, size-prefixed structs."""
import re
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


def test_every_size_prefixed_struct_has_traits_naming_its_last_field():
    """fl_abi.h "STRUCT SIZES": each struct that starts with struct_size (or, an extension, with
    its fl_extension_base) is followed by FL_DEFINE_STRUCT_TRAITS naming its last field, so a
    field appended without moving the traits line is caught here."""
    from fl_runtime.abi import header
    traits = header.struct_traits(ABI_HEADER)
    structs = {}
    for name in re.findall(r"^typedef struct (fl_\w+) \{", header.read_cdef(ABI_HEADER), re.M):
        fields = abi.ffi.typeof(name).fields
        if fields[0][0] in ("struct_size", "base"):
            structs[name] = fields[-1][0]
    assert {"fl_api", "fl_all_reduce_args", "fl_collectives_extension", "fl_ipc_extension"} <= set(structs)
    assert traits == structs


def test_enums_are_32_bit_and_dtype_codes_cover_torch_dtypes():
    for enum in ("fl_status", "fl_dtype", "fl_arg_kind", "fl_kernel_variant"):
        assert abi.ffi.sizeof(enum) == 4
    assert len(set(abi.DTYPE_TO_FL.values())) == len(abi.DTYPE_TO_FL)


def test_status_names_are_distinct_and_success_is_zero():
    assert abi.SUCCESS == 0
    assert abi.STATUS_NAMES[abi.SUCCESS] == "FL_SUCCESS"


def test_calling_convention_packs_every_field_where_the_header_puts_it():
    """The marshaler packs fl_arg / fl_tensor with struct at offsets taken from cffi;
    pin them (x86-64 / aarch64 LP64 layout of fl_abi.h), so a header change that moves
    a field is seen here and not as garbage arguments in a kernel."""
    from fl_runtime.abi import convention, ffi
    assert convention.FIELD_OFFSETS == {
        "fl_arg": {"kind": 0, "count": 4, "value": 8},
        "fl_tensor": {"struct_size": 0, "base": 8, "byte_offset": 16, "dtype": 24, "ndim": 28,
                      "sizes": 32, "strides": 40},
    }
    for type_name, fields in convention.FIELD_OFFSETS.items():
        for field, offset in fields.items():
            assert ffi.offsetof(type_name, field) == offset, (type_name, field)
    assert convention.ARG_INT.size == convention.ARG_FLOAT.size == ffi.sizeof("fl_arg") == 16
    assert convention.TENSOR.size == ffi.sizeof("fl_tensor") == 48


def test_encoded_arguments_read_back_through_cffi():
    """What the writers pack is what a C reader of fl_abi.h sees."""
    import torch

    from fl_runtime import abi
    from fl_runtime.abi import convention as cv
    from fl_runtime.abi import ffi

    def tensor_for(arena):
        def tensor(value):
            if isinstance(value, tuple):
                base, offset, shape, strides = value
                return cv.put_tensor(arena, base, offset, torch.float16, shape, strides)
            return None
        return tensor
    tagged = [(cv.TAG_VALUE, (0x1000, 24, (2, 3), (3, 1))), (cv.TAG_VALUE, 2.5), (cv.TAG_VALUE, True),
              (cv.TAG_VALUE, -7), (cv.TAG_INT_LIST, [4, 5, 6]), (cv.TAG_FLOAT_LIST, [0.5]),
              (cv.TAG_TENSOR_LIST, [None, (0x2000, 0, (1,), (1,))]), (cv.TAG_VALUE, torch.int32),
              (cv.TAG_VALUE, "mean"), (cv.TAG_VALUE, None)]
    arena = cv.encode_call(tagged, tensor_for)
    args = arena.args
    t = args[0].value.tensor
    assert args[0].kind == abi.ARG_TENSOR and t.struct_size == ffi.sizeof("fl_tensor")
    assert (t.base, t.byte_offset, t.dtype, t.ndim) == (0x1000, 24, abi.DTYPE_TO_FL[torch.float16], 2)
    assert [t.sizes[i] for i in range(2)] == [2, 3] and [t.strides[i] for i in range(2)] == [3, 1]
    assert (args[1].kind, args[1].value.f) == (abi.ARG_FLOAT, 2.5)
    assert (args[2].kind, args[2].value.i) == (abi.ARG_BOOL, 1)
    assert (args[3].kind, args[3].value.i) == (abi.ARG_INT, -7)
    assert args[4].kind == abi.ARG_INT_LIST and [args[4].value.ints[i] for i in range(args[4].count)] == [4, 5, 6]
    assert args[5].kind == abi.ARG_FLOAT_LIST and args[5].value.floats[0] == 0.5
    assert args[6].kind == abi.ARG_TENSOR_LIST and args[6].count == 2
    assert args[6].value.tensors[0] == ffi.NULL and args[6].value.tensors[1].base == 0x2000
    assert (args[7].kind, args[7].value.i) == (abi.ARG_INT, abi.DTYPE_TO_FL[torch.int32])
    assert args[8].kind == abi.ARG_STRING and ffi.string(args[8].value.str) == b"mean"
    assert args[9].kind == abi.ARG_NONE


KERNEL_FILE = """#include "fl_kernel.h"
FLK_DEF2_F(l_add, const T alpha = FLK_PARAM(T, 0);, FLK_FMA(T, alpha, b, a))
FLK_DEF2_I(l_add, FLK_NOSETUP, FLK_IADD(a, b))
FLK_EW_BINARY_KERNEL(k_add, "add.Tensor", FLK_LOOPS_FI(l_add), 0)
FLK_REGISTER("add.Tensor", FLK_REAL_TYPES, k_add);
"""

CXX_CALLER = """#include "fl_kernel.h"
int main() { fl_tensor t = fl_tensor(); return flk_is_floating(FL_FLOAT32) && flk_data(&t) == nullptr ? 0 : 1; }
"""


def test_kernel_library_header_compiles_as_strict_c11_and_cxx(tmp_path):
    """fl_kernel.h (the SDK kernel library next to the ABI): a kernel file using its
    registration and loop templates is strict C11; C++ can include it for the functions."""
    kernel, caller = tmp_path / "kernel.c", tmp_path / "caller.cpp"
    kernel.write_text(KERNEL_FILE)
    caller.write_text(CXX_CALLER)
    for cmd in ([compiler(), "-x", "c", "-std=c11", str(kernel), "-fsyntax-only"],
                ["g++", "-x", "c++", "-std=c++17", str(caller), "-o", str(tmp_path / "a.out")]):
        result = subprocess.run([*cmd, "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{ABI_HEADER.parent}"],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    assert subprocess.run([str(tmp_path / "a.out")]).returncode == 0
