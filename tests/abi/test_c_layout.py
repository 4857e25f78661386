"""C-level checks of the plugin sources' layout: the SDK kernel and driver libraries (fl_kernel.h,
fl_sdk/kernel_lib/; fl_driver.h, fl_sdk/driver_lib/) build warning-free on their own and behave as
their headers say, and the reference vendor's driver calls only downward through the layers its
driver.h lists."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fl_sdk import INCLUDE_DIR
from fl_sdk.build import BASE_FLAGS, SDK_LIBRARIES, compiler

ROOT = Path(__file__).resolve().parents[2]
KERNEL_LIB = sorted(SDK_LIBRARIES["kernel"].glob("*.c"))
DRIVER_LIB = sorted(SDK_LIBRARIES["driver"].glob("*.c"))
DRIVER = ROOT / "reference_vendor" / "src" / "driver"
STRICT = [flag for flag in BASE_FLAGS if flag not in ("-shared", "-fPIC")]


def compilers() -> list[str]:
    found = [compiler()]
    clang = shutil.which("clang")
    if clang and Path(clang).resolve() != Path(shutil.which(found[0]) or found[0]).resolve():
        found.append(clang)
    return found


@pytest.mark.parametrize("optimise", ["-O0", "-O3"])
@pytest.mark.parametrize("cc", compilers())
def test_sdk_libraries_compile_warning_free(cc, optimise, tmp_path):
    for source in KERNEL_LIB + DRIVER_LIB:
        result = subprocess.run([cc, *STRICT, optimise, "-fPIC", "-c", f"-I{INCLUDE_DIR}", str(source),
                                 "-o", str(tmp_path / f"{source.stem}.o")], capture_output=True, text=True)
        assert result.returncode == 0, f"{cc} {optimise} {source.name}:\n{result.stderr}"


# A program built from the kernel library and three kernel files of its own: the registry,
# the error and decline helpers, conversions and iteration, as fl_kernel.h describes them.
UNIT = r"""
#include <stdio.h>
#include "fl_kernel.h"

FLK_KERNEL_FN(k_ok) { (void)args; (void)nargs; (void)ctx; return FL_SUCCESS; }
FLK_KERNEL_FN(k_skeleton) { (void)args; (void)nargs; return flk_unwritten(ctx); }
FLK_REGISTER("zeta", FLK_FLOAT_TYPES, k_ok);
FLK_REGISTER_ENTRY("alpha", FLK_DT(FL_FLOAT32), FL_VARIANT_FAST, k_ok, NULL);
FLK_REGISTER("alpha", FLK_REAL_TYPES, k_ok);
FLK_REGISTER("hidden", 0, k_ok);                      /* no dtype: left out of the table */
FLK_REGISTER("mid", FLK_DT(FL_FLOAT32), k_skeleton);
#ifdef TWICE
FLK_REGISTER("mid", FLK_DT(FL_FLOAT64), k_ok);        /* (op, variant) registered twice */
#endif

static int failures;
#define CHECK(cond) do { if (!(cond)) { printf("FAILED line %d: %s\n", __LINE__, #cond); failures++; } } while (0)

static void count_row(char **p, const int64_t *st, int64_t n, void *c) { (void)p; (void)st; *(int64_t *)c += n; }

int main(void) {
    const fl_kernel_entry *e;
    uint32_t n;
    const char *problem = "";
    fl_status st = flk_table(&e, &n, &problem);
#ifdef TWICE
    CHECK(st == FL_ERROR_INTERNAL && strstr(problem, "\"mid\"") && strstr(problem, "twice"));
    CHECK(flk_table_kernel(NULL) == NULL);
    (void)count_row;
#else
    CHECK(st == FL_SUCCESS && n == 4);
    const char *order[] = {"alpha", "alpha", "mid", "zeta"};
    for (uint32_t i = 0; i < n && i < 4; i++) {
        CHECK(strcmp(e[i].op, order[i]) == 0);
        CHECK(e[i].struct_size == sizeof(fl_kernel_entry));
        CHECK(flk_table_kernel(&e[i]) == e[i].impl);
    }
    CHECK(e[0].variant == FL_VARIANT_PRECISE && e[1].variant == FL_VARIANT_FAST);
    fl_kernel_entry copy = e[2];
    CHECK(flk_table_kernel(&copy) == NULL);              /* a copy of an entry is not ours */
    CHECK(flk_table_kernel((const fl_kernel_entry *)((const char *)&e[1] + 1)) == NULL);
    flk_ctx ctx = {.device = 0, .op = "mid", .message = ""};
    CHECK(flk_table_kernel(&e[2])->fn(NULL, 0, &ctx) == FL_ERROR_NOT_SUPPORTED);
    CHECK(strstr(ctx.message, "mid: ") == ctx.message && strstr(ctx.message, "skeleton"));
    flk_args a;
    CHECK(flk_args_init(&a, "op", NULL, 0, 2, &ctx) == FL_ERROR_KERNEL_FAILED);
    CHECK(strstr(ctx.message, "op: expected 2 arguments") == ctx.message);
    CHECK(flk_decline(&a, "no %s", "3-d") == FL_ERROR_NOT_SUPPORTED && strcmp(ctx.message, "op: no 3-d") == 0);
    /* dtypes: float16/bfloat16 round to nearest even, PyTorch's promotion */
    CHECK(flk_float_to_half(1.0f) == 0x3C00 && flk_half_to_float(0x3C00) == 1.0f);
    CHECK(flk_float_to_half(65520.0f) == 0x7C00);        /* rounds to inf */
    CHECK(flk_float_to_bf16(1.00390625f) == 0x3F80);     /* tie to even */
    CHECK(flk_promote_types(FL_UINT8, FL_INT8) == FL_INT16);
    CHECK(flk_promote_types(FL_FLOAT16, FL_BFLOAT16) == FL_FLOAT32);
    CHECK(flk_promote_types(FL_BOOL, FL_INT32) == FL_INT32 && flk_promote_types(FL_COMPLEX64, FL_INT8) == -1);
    CHECK(!flk_can_cast(FL_FLOAT32, FL_INT64) && flk_can_cast(FL_INT64, FL_FLOAT32));
    double src[4] = {1.5, -2.5, 300.0, 0.0};
    int8_t i8[4];
    flk_convert(i8, FL_INT8, 1, src, FL_FLOAT64, 8, 4);
    CHECK(i8[0] == 1 && i8[1] == -2 && i8[2] == 44 && i8[3] == 0);   /* through int64, wrapping */
    /* iteration: a transposed 2x3 view coalesces into rows that cover every element once */
    int64_t sizes[2] = {3, 2}, strides[1][FLK_MAX_DIMS] = {{4, 12}}, seen = 0;
    char buf[24], *p = buf;
    flk_for_each_row(2, sizes, 1, &p, strides, 0, count_row, &seen);
    CHECK(seen == 6);
    void *m = flk_alloc(100);
    CHECK(m && ((uintptr_t)m & 63) == 0);
    flk_free(m);
#endif
    printf(failures ? "FAILED\n" : "OK\n");
    return failures != 0;
}
"""


@pytest.mark.parametrize("twice", [False, True], ids=["registry", "duplicate-registration"])
def test_kernel_library_unit(twice, tmp_path):
    source = tmp_path / "unit.c"
    source.write_text(UNIT)
    program = tmp_path / "unit"
    flags = ["-DTWICE"] if twice else []
    built = subprocess.run([compiler(), *STRICT, "-O2", *flags, f"-I{INCLUDE_DIR}", str(source),
                            *map(str, KERNEL_LIB), "-o", str(program), "-lm"], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and "OK" in ran.stdout, ran.stdout


def driver_layers() -> list[str]:
    """The driver's files from the bottom layer up, as driver.h's LAYERS comment lists them."""
    header = (DRIVER / "driver.h").read_text()
    listed = re.findall(r"^ \*   (\w+\.c)\s", header[:header.index("*/")], re.MULTILINE)
    return list(reversed(listed))


def test_reference_driver_calls_only_downward(tmp_path):
    layers = driver_layers()
    assert sorted(layers) == sorted(p.name for p in DRIVER.glob("*.c")), "driver.h must list every driver file"
    defined, undefined = {}, {}
    for name in layers:
        obj = tmp_path / f"{name}.o"
        subprocess.run([compiler(), *STRICT, "-O1", "-fPIC", "-c", f"-I{INCLUDE_DIR}",
                        f"-I{DRIVER.parent}", str(DRIVER / name), "-o", str(obj)], check=True)
        symbols = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
        defined.update({s: name for s in re.findall(r"^\S+ [TD] (drv_\w+)$", symbols, re.MULTILINE)})
        undefined[name] = set(re.findall(r"^\s+U (drv_\w+)$", symbols, re.MULTILINE))
    for name in layers:
        for symbol in undefined[name]:
            assert symbol in defined, f"{name} calls {symbol}, which no driver file defines"
            assert layers.index(defined[symbol]) < layers.index(name), \
                f"{name} calls {symbol} of {defined[symbol]}, a layer above it (driver.h lists the layers)"


# The driver library's ABI rules, one check each (fl_driver.h): what a driver built on it does
# for every plugin, the reference's and every scaffolded one alike.
DRIVER_UNIT = r"""
#include <stdio.h>
#include <stdlib.h>
#include "fl_driver.h"

static int failures;
#define CHECK(cond) do { if (!(cond)) { printf("FAILED line %d: %s\n", __LINE__, #cond); failures++; } } while (0)

static char g_block[256];
static int find(void *ctx, int32_t device, fl_devptr address, fld_block *block) {
    (void)ctx;
    fl_devptr start = (fl_devptr)(uintptr_t)g_block;
    if (device != 0 || address < start || address >= start + sizeof g_block)
        return 0;
    *block = (fld_block){start, sizeof g_block};
    return 1;
}

static fl_tensor tensor(const int64_t *sizes, const int64_t *strides, int32_t ndim, uint64_t offset) {
    return (fl_tensor){sizeof(fl_tensor), (fl_devptr)(uintptr_t)g_block, offset, FL_FLOAT32, ndim, sizes, strides};
}

int main(void) {
    uint64_t bytes;
    /* extents: ((2-1)*2^62 + (2-1)*2^62 + 1) * 4 wraps to 4 without the overflow check */
    int64_t big[2] = {1ll << 62, 1ll << 62}, two[2] = {2, 2}, empty[2] = {0, 5}, row[2] = {5, 1};
    fl_tensor t = tensor(two, big, 2, 0);
    CHECK(!fld_tensor_extent(&t, &bytes));
    t = tensor(empty, big, 2, 0);
    CHECK(fld_tensor_extent(&t, &bytes) && bytes == 0);          /* empty: no memory, whatever the strides */
    t = tensor(two, row, 2, 0);
    CHECK(fld_tensor_extent(&t, &bytes) && bytes == 28);         /* (5 + 1 + 1) * 4 */
    fld_memory memory = {find, NULL};
    fl_tensor overflow = tensor(two, big, 2, 0), inside = tensor(two, row, 2, 0), past = tensor(two, row, 2, 240);
    fl_arg args[1] = {{FL_ARG_TENSOR, 0, {.tensor = &overflow}}};
    fld_arg_plan plan;
    CHECK(fld_check_args(&memory, 0, "op", args, 1, &plan) == FL_ERROR_INVALID_VALUE);
    CHECK(strstr(fld_last_error_message(), "overflows") != NULL);
    args[0].value.tensor = &past;
    CHECK(fld_check_args(&memory, 0, "op", args, 1, &plan) == FL_ERROR_INVALID_VALUE);
    args[0].value.tensor = &inside;
    CHECK(fld_check_args(&memory, 0, "op", args, 1, &plan) == FL_SUCCESS && plan.bytes == 28 && plan.words == 4);
    fl_arg *copy = fld_copy_args(&plan, args, 1, NULL, NULL);
    CHECK(copy && copy[0].value.tensor != &inside && copy[0].value.tensor->sizes[0] == 2 &&
          copy[0].value.tensor->strides[0] == 5);
    free(copy);
    CHECK(fld_check_args(&memory, 1, "op", args, 1, &plan) == FL_ERROR_INVALID_POINTER);   /* another device's */
    /* negotiation */
    fl_api table = {.struct_size = sizeof table, .abi_version = {sizeof(fl_abi_version), 1, FL_ABI_VERSION_MINOR}};
    const fl_api *out;
    fl_abi_version want = {sizeof want, 1, 0};
    CHECK(fld_negotiate(&want, &out, &table, 0, "p") == FL_SUCCESS && out == &table);
    CHECK(fld_negotiate(&want, &out, &table, 2, "p") == FL_ERROR_INCOMPATIBLE_ABI && out == &table);
    CHECK(strstr(fld_last_error_message(), "upgrade Torch-FL") != NULL);
    want.major = 2;
    CHECK(fld_negotiate(&want, &out, &table, 0, "p") == FL_ERROR_INCOMPATIBLE_ABI);
    CHECK(fld_negotiate(NULL, &out, &table, 0, "p") == FL_ERROR_INVALID_POINTER);
    /* an older caller's smaller struct gets whole fields only */
    fl_device_properties full = {.struct_size = sizeof full, .total_memory = 7, .alignment = 256}, older;
    memset(&older, 0xEE, sizeof older);
    older.struct_size = FL_STRUCT_SIZE(fl_device_properties, total_memory) + 3;
    CHECK(fld_device_properties_out(&older, &full, 0) == FL_SUCCESS);
    CHECK(older.struct_size == FL_STRUCT_SIZE(fl_device_properties, total_memory) && older.total_memory == 7);
    CHECK(((unsigned char *)&older)[offsetof(fl_device_properties, alignment)] == 0xEE);
    /* handle tables: a destroyed or foreign handle is refused, never dereferenced */
    fld_handles handles = FLD_HANDLES_INIT;
    int a, b;
    CHECK(fld_handle_add(&handles, &a, "create") == FL_SUCCESS);
    CHECK(fld_handle_check(&handles, &a, "stream", "use") == FL_SUCCESS);
    CHECK(fld_handle_check(&handles, &b, "stream", "use") == FL_ERROR_INVALID_HANDLE);
    CHECK(fld_handle_check(&handles, NULL, "stream", "use") == FL_ERROR_INVALID_HANDLE);
    CHECK(fld_handle_remove(&handles, &a, "stream", "destroy") == FL_SUCCESS);
    CHECK(fld_handle_remove(&handles, &a, "stream", "destroy") == FL_ERROR_INVALID_HANDLE);
    printf(failures ? "FAILED\n" : "OK\n");
    return failures != 0;
}
"""


def test_driver_library_unit(tmp_path):
    source = tmp_path / "driver_unit.c"
    source.write_text(DRIVER_UNIT)
    program = tmp_path / "driver_unit"
    built = subprocess.run([compiler(), *STRICT, "-O2", f"-I{INCLUDE_DIR}", str(source), *map(str, DRIVER_LIB),
                            *map(str, KERNEL_LIB), "-o", str(program), "-lm"], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and "OK" in ran.stdout, ran.stdout
