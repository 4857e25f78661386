"""Kernels, numerics: every kernel-table entry, every dtype, against PyTorch CPU.

Cases (shapes, layouts, values, scalars) come from conformance.opspecs and
run in worker processes (conformance.isolation); the tolerance table is
conformance.tolerances.  A failure carries a reproducer script.
"""
from conformance.kernel_plan import verdict
from conformance.pytest_plugin import parametrize_kernels

CATEGORY = "kernels"


def pytest_generate_tests(metafunc):
    parametrize_kernels(metafunc, "numerics")


def test_numerics(conformance, target, details):
    verdict(target, conformance.device, conformance.workers, details)
