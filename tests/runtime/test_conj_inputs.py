"""Vendor kernels never receive a conjugate view as if it held physical values.

PyTorch's Conjugate dispatch key lets mm, addmm, bmm, ..., and their out= forms
through to the backend with the conjugate bit still set (ConjugateFallback.cpp's
fallthrough list); fl_abi.h's fl_tensor has no such bit, so the launcher must
resolve conjugate inputs and send a conjugate written argument to the CPU
fallback.  The reference vendor declares no complex kernels, so these tests
rebuild it with a complex64 `mm` and `mm.out` (tests/complex_vendor/) and run
against PyTorch CPU in a subprocess, TORCH_FL_STRICT=1 where the vendor kernel
must run.
"""
from __future__ import annotations

import pytest
import yaml
from conftest import ROOT

from fl_runtime.ops.schema import compile_plan
from fl_sdk.build import build, read_spec

REFERENCE = ROOT / "reference_vendor"
MM_REGISTRATION = 'FLK_REGISTER("mm", FLK_FLOAT_TYPES, k_mm_any);'
# The patched registration: complex64 joins mm's dtype mask and goes to complex_mm.c.
MM_WITH_COMPLEX = """
fl_status complex_mm_c64(const fl_arg *args, uint32_t nargs, flk_ctx *ctx);
FLK_KERNEL_FN(k_mm_with_complex) {
    if (nargs == 3 && args[0].kind == FL_ARG_TENSOR && args[0].value.tensor->dtype == FL_COMPLEX64)
        return complex_mm_c64(args, nargs, ctx);
    return k_mm_any(args, nargs, ctx);
}
FLK_REGISTER("mm", FLK_FLOAT_TYPES | FLK_DT(FL_COMPLEX64), k_mm_with_complex);
"""


# The driver declines every complex64 launch (launch.c: "the chip stores only real
# tensors"); the rebuild lets through kernels that declare complex64.
DRIVER_DECLINE = "const char *complex = complex_argument(args, nargs);"
DRIVER_LETS_COMPLEX_KERNELS_RUN = ("const char *complex = (def->dtypes & FLK_DT(FL_COMPLEX64)) ? NULL : "
                                   "complex_argument(args, nargs);")
PATCHES = {"kernels/matmul.c": (MM_REGISTRATION, MM_WITH_COMPLEX),
           "driver/launch.c": (DRIVER_DECLINE, DRIVER_LETS_COMPLEX_KERNELS_RUN)}


@pytest.fixture(scope="module")
def complex_vendor(tmp_path_factory) -> dict:
    """Environment for a subprocess on the reference vendor rebuilt with complex64 mm / mm.out:
    the reference sources, two of them patched (PATCHES), plus tests/complex_vendor/."""
    directory = tmp_path_factory.mktemp("complex_vendor")
    (directory / "src").symlink_to(REFERENCE / "src")     # the build's -I<plugin>/src
    sources = ["complex_mm.c"]
    (directory / "complex_mm.c").write_text((ROOT / "tests" / "complex_vendor" / "complex_mm.c").read_text())
    for relative, (old, new) in PATCHES.items():
        text = (REFERENCE / "src" / relative).read_text()
        assert text.count(old) == 1, f"{relative} changed: update the patch in {__file__}"
        patched = directory / relative.replace("/", "_")
        patched.write_text(text.replace(old, new))
        sources.append(patched.name)
    spec = read_spec(REFERENCE)
    # The copies include their neighbours' headers ("driver.h") from their own directory.
    cflags = [*spec.cflags, *sorted({f"-I{(REFERENCE / 'src' / r).parent}" for r in PATCHES})]
    for pattern in spec.sources:
        if pattern.startswith("src/"):
            sources += sorted(str(p.relative_to(REFERENCE)) for p in REFERENCE.glob(pattern)
                              if str(p.relative_to(REFERENCE / "src")) not in PATCHES)
        else:
            sources.append(pattern)
    (directory / "plugin.yaml").write_text(yaml.safe_dump({
        "library": "libfl_reference_complex.so", "sources": sources, "cflags": cflags, "link": spec.links}))
    return {"TORCH_FL_DISABLE_ENTRY_POINTS": "1", "FL_REFERENCE_DEVICES": "1",
            "TORCH_FL_PLUGINS": str(build(directory))}


PROLOGUE = """
import os
import torch, torch_fl
from fl_runtime.errors import UnsupportedOpError

torch.manual_seed(0)
def c(*shape):
    return torch.randn(*shape, dtype=torch.complex64)
a, b, c34 = c(3, 4), c(4, 5), c(3, 5)
fa, fb = a.to("fl:0"), b.to("fl:0")

def check(name, got, want):
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    print("OK", name, flush=True)
"""


def _run(python, env: dict, body: str) -> str:
    result = python(PROLOGUE + body, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_rebuilt_vendor_runs_complex_mm_natively(python, complex_vendor):
    """The premise: complex64 mm reaches the vendor kernel (strict: no fallback) and is right."""
    out = _run(python, {**complex_vendor, "TORCH_FL_STRICT": "1"}, """
check("plain", torch.mm(fa, fb), torch.mm(a, b))
check("out", torch.mm(fa, fb, out=torch.empty(3, 5, dtype=torch.complex64, device="fl:0")), torch.mm(a, b))
""")
    assert out.count("OK") == 2


def test_conjugate_inputs_reach_the_vendor_resolved(python, complex_vendor):
    """Conjugate views as mm inputs: the vendor kernel runs (strict) and gets the conjugated values."""
    out = _run(python, {**complex_vendor, "TORCH_FL_STRICT": "1"}, """
fc, d = c(4, 3).to("fl:0"), c(5, 4)
cases = {
    "mm(a.conj(), b)": (lambda: torch.mm(fa.conj(), fb), torch.mm(a.conj(), b)),
    "mm(a, b.conj())": (lambda: torch.mm(fa, fb.conj()), torch.mm(a, b.conj())),
    "mm(a.conj(), b.conj())": (lambda: torch.mm(fa.conj(), fb.conj()), torch.mm(a.conj(), b.conj())),
    "a.conj() @ b": (lambda: fa.conj() @ fb, a.conj() @ b),
    "mm(x.conj().t(), b)": (lambda: torch.mm(fc.conj().t(), fb), torch.mm(fc.cpu().conj().t(), b)),
    "mm(a, x.mH)": (lambda: torch.mm(fa, d.to("fl:0").mH), torch.mm(a, d.mH)),
    "out= plain, conj input": (lambda: torch.mm(fa.conj(), fb, out=torch.empty(3, 5, dtype=torch.complex64,
                                                                                 device="fl:0")),
                               torch.mm(a.conj(), b)),
}
for name, (run, want) in cases.items():
    check(name, run(), want)
    check(name + " (again: a recorded program)", run(), want)
# The inputs themselves are untouched: still conjugate views of the same values.
assert fa.conj().is_conj() and torch.equal(fa.cpu(), a)
""")
    assert out.count("OK") == 14


def test_a_conjugate_written_argument_goes_to_the_cpu_fallback(python, complex_vendor):
    """out= a conjugate view: written through the CPU fallback, right; under strict, refused
    rather than written with un-conjugated values."""
    out = _run(python, complex_vendor, """
for conj_input in (False, True):
    fc34 = c34.to("fl:0")
    view = fc34.conj()
    x = fa.conj() if conj_input else fa
    result = torch.mm(x, fb, out=view)
    want = torch.mm(a.conj() if conj_input else a, b)
    assert result.is_conj()
    check(f"out=conj view (conj input {conj_input})", result, want)
    check(f"storage holds the conjugate (conj input {conj_input})", fc34, want.conj())
os.environ["TORCH_FL_STRICT"] = "1"
try:
    torch.mm(fa, fb, out=c34.to("fl:0").conj())
except UnsupportedOpError as exc:
    print("REFUSED", exc)
""")
    assert out.count("OK") == 4
    assert "REFUSED" in out and "conjugate" in out


def test_the_timed_path_resolves_conjugates_as_launch_does(python, complex_vendor):
    """Phase timing (benchmarks' accounting.PhaseTimes) keeps the full path's behaviour: conjugate
    inputs resolved on the device (strict), a conjugate out= sent to the CPU."""
    out = _run(python, complex_vendor, """
from fl_runtime.ops import accounting
times = accounting.PhaseTimes()
previous = accounting.set_phases(times)
try:
    os.environ["TORCH_FL_STRICT"] = "1"
    check("timed mm(a.conj(), b)", torch.mm(fa.conj(), fb), torch.mm(a.conj(), b))
    check("timed a @ b.conj()", fa @ fb.conj(), a @ b.conj())
    del os.environ["TORCH_FL_STRICT"]
    fc34 = c34.to("fl:0")
    check("timed out=conj view", torch.mm(fa, fb, out=fc34.conj()), torch.mm(a, b))
    check("timed storage holds the conjugate", fc34, torch.mm(a, b).conj())
finally:
    accounting.set_phases(previous)
assert times.calls >= 3, times.calls
""")
    assert out.count("OK") == 4


@pytest.mark.parametrize("name, written", [("mm", set()), ("mm.out", {2}), ("addmm_", {0}),
                                           ("_foreach_add_.List", {0}), ("add.out", {3})])
def test_the_plan_knows_the_arguments_an_op_writes(name, written):
    """What the conjugate check refuses to marshal: the Tensor(a!) arguments, lists included
    (_foreach_add_ returns nothing, so its returns do not name them)."""
    assert compile_plan(name).written_arg_indices == written
