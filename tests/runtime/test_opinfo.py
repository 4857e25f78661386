"""PyTorch's OpInfo samples (op_db), float32, on fl:0 against the CPU.

A deterministic subset: every 8th float32 OpInfo by name (about 85 ops spread
over the alphabet), up to 4 samples each.  The full sweep is
benchmarks/opinfo_report.py (figures in docs/benchmarks/index.md "OpInfo sweep"); both count a sample as
passing when fl:0's result matches the CPU's within rtol 1e-4 / atol 1e-5 with
the default config (fallbacks on).
"""
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import opinfo_report

EVERY, SAMPLES, TARGET = 8, 4, 0.95


def test_subset_pass_rate_meets_target(fl):
    result = opinfo_report.sweep(opinfo_report.subset(opinfo_report.float32_opinfos(), EVERY), SAMPLES)
    print(f"\nOpInfo subset: {result.ops} ops, {result.counted} samples, pass {result.rate():.1%}, "
          f"native {result.native_rate():.1%}, skipped {result.skipped}")
    for reason, count in result.failures.most_common():
        print(f"  {count:4d}  {reason}  {result.examples[reason]}")
    assert result.ops >= 80 and result.counted >= 200
    assert result.rate() >= TARGET, dict(result.failures)
    assert 0 < result.native <= result.passed      # natively passing samples are counted apart
