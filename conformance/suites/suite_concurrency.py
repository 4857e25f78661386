"""Concurrency: every kernel launched at once with itself and a neighbour in the table,
on two streams of a device and from one thread per device (conformance.concurrency);
each result must equal the same call run alone.

Each entry's check runs in its kernel worker process (conformance.isolation), after its
numerics and robustness units, so a crash or hang fails that kernel's test.
"""
from conformance.kernel_plan import verdict
from conformance.pytest_plugin import parametrize_kernels

CATEGORY = "concurrency"


def pytest_generate_tests(metafunc):
    parametrize_kernels(metafunc, "concurrency")


def test_launched_at_once(conformance, target, details):
    verdict(target, conformance.device, conformance.workers, details)
