"""The Torch-FL conformance suite: checks a vendor plugin against the C ABI's
contract and every kernel against PyTorch's CPU results.

Run it with `fl-sdk test PLUGIN` (see conformance.runner).  Modules, one job each:
target (find and load the plugin), harness (the only code that calls the
plugin's kernels), recipes/strategies/opspecs (what inputs to generate),
tolerances/compare (how close is close enough), numerics (one kernel case,
end to end), isolation (kernel checks in worker processes), statuses/waivers
(pass, fail, not_supported, known_failure, untested), profiles, report (JSON),
pytest_plugin (glue to pytest) and suites/ (one module per category).
"""
from fl_runtime.version import CONFORMANCE_SUITE_VERSION as SUITE_VERSION  # noqa: F401 (one place)

# The report's categories, one suite module each (conformance/suites/suite_<name>.py).
CATEGORIES = ("abi", "memory", "streams", "kernels", "robustness", "concurrency", "collectives")
