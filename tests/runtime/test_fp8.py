"""float8 (ABI 1.2) end to end: PyTorch's four float8 dtypes on fl devices, bit for bit against
PyTorch's CPU (docs/vendors/fp8.md).

The runtime hands float8 tensors to PyTorch through DLPack (fl_runtime/devices/storage.py); the
reference vendor casts with the SDK kernel library's float8 conversions (fl_sdk/kernel_lib/fp8.c)
and multiplies with _scaled_mm.  In a fresh process, as a user's script: the dtypes round-trip,
casts in both directions equal the CPU's on every 8- and 16-bit pattern (saturation, infinity and
NaN rules included), and _scaled_mm runs natively and matches the CPU.  Then the conformance
suite's cert-profile sweeps, exhaustive, pass on the reference vendor.
"""
from __future__ import annotations

import pytest
import torch

SCRIPT = r"""
import torch, torch_fl
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)

def bits(t):
    return t.cpu().contiguous().view(torch.uint8)

def same(a, b):     # values, NaN matching NaN
    torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0, equal_nan=True)

x = torch.ones(2, device="fl").to(torch.float8_e4m3fn)       # the issue's example
assert x.device.type == "fl" and x.dtype == torch.float8_e4m3fn and bits(x).tolist() == [0x38, 0x38]

every16 = {dt: torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).view(dt)
           for dt in (torch.float16, torch.bfloat16)}
for fp8 in FP8:
    patterns = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fp8)
    on_device = patterns.to("fl:1")                              # host -> device -> host, untouched
    assert on_device.dtype == fp8 and torch.equal(bits(on_device), bits(patterns)), fp8
    assert torch.equal(bits(on_device.clone()), bits(patterns)), fp8
    assert torch.equal(bits(on_device[1::3]), bits(patterns[1::3])), fp8
    assert torch.equal(bits(torch.zeros(5, dtype=fp8, device="fl:0")), torch.zeros(5, dtype=torch.uint8)), fp8
    for wide, source in every16.items():                         # into float8: rounding, overflow, NaN
        assert torch.equal(bits(source.to("fl:0").to(fp8)), bits(source.to(fp8))), (wide, fp8)
    values = torch.randn(4096, dtype=torch.float64) * 300
    assert torch.equal(bits(values.to("fl:0").to(fp8)), bits(values.to(fp8))), (torch.float64, fp8)
    for wide in (torch.float32, torch.float64, torch.float16, torch.bfloat16):   # out of float8
        same(on_device.to(wide), patterns.to(wide))
    finite = patterns[~patterns.float().isnan() & patterns.float().isfinite()]
    for integral in (torch.int32, torch.uint8, torch.bool):
        assert torch.equal(finite.to("fl:0").to(integral).cpu(), finite.to(integral)), (fp8, integral)
    for other in FP8:                                             # float8 to float8
        assert torch.equal(bits(on_device.to(other)), bits(patterns.to(other))), (fp8, other)

torch.manual_seed(0)
a = (torch.randn(32, 64) * 4).to(torch.float8_e4m3fn)
b = (torch.randn(48, 64) * 4).to(torch.float8_e5m2).t()          # column-major, as _scaled_mm wants
one, two = torch.tensor(0.5), torch.tensor(3.0)
calls = [dict(scale_a=one, scale_b=two, out_dtype=torch.float32),
         dict(scale_a=one, scale_b=two, out_dtype=torch.bfloat16, bias=torch.randn(48).bfloat16()),
         dict(scale_a=torch.rand(32, 1) + 0.5, scale_b=torch.rand(1, 48) + 0.5, out_dtype=torch.bfloat16),
         dict(scale_a=one, scale_b=two),                                              # float8 out
         dict(scale_a=one, scale_b=two, out_dtype=torch.float8_e5m2)]

def scaled_mm_on_fl(kwargs):
    want = torch._scaled_mm(a, b, **kwargs)
    got = torch._scaled_mm(a.to("fl:0"), b.to("fl:0"), **{k: v.to("fl:0") if isinstance(v, torch.Tensor) else v
                                                           for k, v in kwargs.items()})
    assert got.dtype == want.dtype and got.device.type == "fl", kwargs
    return got.cpu(), want

with torch_fl.profile() as prof:
    for kwargs in calls:
        got, want = scaled_mm_on_fl(kwargs)
        # float32 sums in another order: the rounding of the output dtype, one step at most
        step = 1e-5 if want.dtype == torch.float32 else torch.finfo(want.dtype).eps
        torch.testing.assert_close(got.float(), want.float(), rtol=step, atol=step, msg=str(kwargs))
assert prof.paths()["aten::_scaled_mm"] == {"native"}, prof.summary()
import warnings
with warnings.catch_warnings(record=True) as caught, torch_fl.profile() as prof:   # the reference declines it
    warnings.simplefilter("always")
    got, want = scaled_mm_on_fl(dict(scale_a=one, scale_b=two, bias=torch.ones(48), scale_result=torch.tensor(4.0)))
assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
assert prof.paths()["aten::_scaled_mm"] == {"cpu"} and any("scale_result" in str(w.message) for w in caught)
print("OK")
"""


def test_float8_round_trips_casts_and_scaled_mm_match_pytorch_cpu(python):
    result = python(SCRIPT, {"TORCH_FL_DISABLE_ENTRY_POINTS": "0"})
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), result.stderr[-4000:]


@pytest.fixture(scope="module")
def reference_device():
    from conformance.harness import Device
    from conformance.target import load, resolve
    dev = Device(load(resolve("reference").path), 0)
    stream = dev.new_stream()
    yield dev, stream
    dev.destroy_stream(stream)


@pytest.mark.parametrize("op", ["copy_", "abs"])
@pytest.mark.parametrize("dtype_name", ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"])
def test_the_cert_profiles_exhaustive_8_bit_sweeps_pass_on_the_reference(reference_device, op, dtype_name):
    """The cert profile's sweeps (all 256 patterns; for copy_ into float8 also all 65,536 float16
    and bfloat16 ones), run as the cert profile runs them, with one drawn example."""
    from dataclasses import replace

    from conformance import fp8_specs, kernel_checks, statuses
    from conformance.harness import kernel_entries
    from conformance.opspecs import elementwise_unary
    from conformance.profiles import PROFILES
    from conformance.recipes import DTYPES

    dev, stream = reference_device
    entry = next(e for e in kernel_entries(dev.plugin) if e.op == op and e.variant_name == "precise")
    sweeps = fp8_specs.sweep_cases(op, DTYPES[dtype_name], entry.dtypes, exhaustive=True,
                                   elementwise=elementwise_unary(op))
    sizes = sorted(case["args"][-1]["tensor"]["shape"][0] for case in sweeps)
    assert sizes.count(256) >= (3 if op == "copy_" else 1) and (op != "copy_" or sizes.count(1 << 16) == 2), sizes
    cert = replace(PROFILES["cert"], kernel_examples=1)
    outcome = kernel_checks.numerics(dev, stream, entry, dtype_name, cert, 0, lambda case: None)
    assert outcome["status"] == statuses.PASS, outcome["message"][:2000]
    assert outcome["examples"] >= len(sweeps) + 1
