"""Robustness: malformed launches of every kernel come back as error statuses.

Each kernel's probes run in a worker process like its numerics, so a crash
or a hang in any kernel (here or in suite_kernels) fails that kernel's test
with its name instead of killing the run.
"""
from conformance.kernel_plan import verdict
from conformance.pytest_plugin import parametrize_kernels

CATEGORY = "robustness"


def pytest_generate_tests(metafunc):
    parametrize_kernels(metafunc, "robustness")


def test_malformed_launches(conformance, target, details):
    verdict(target, conformance.device, conformance.workers, details)
