"""C-level checks of the plugin sources' layout: the SDK kernel library (fl_kernel.h,
fl_sdk/kernel_lib/) builds warning-free on its own and behaves as its header says, and the
reference vendor's driver calls only downward through the layers its driver.h lists."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fl_sdk import INCLUDE_DIR
from fl_sdk.build import BASE_FLAGS, SDK_LIBRARIES, compiler

ROOT = Path(__file__).resolve().parent.parent
KERNEL_LIB = sorted(SDK_LIBRARIES["kernel"].glob("*.c"))
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
def test_kernel_library_compiles_warning_free(cc, optimise, tmp_path):
    for source in KERNEL_LIB:
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
