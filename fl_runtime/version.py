"""Torch-FL's version (pyproject reads it from here)."""
__version__ = "0.1.0"

# The conformance suite shipped with this release.  A certificate records the suite
# version that produced it; the runtime accepts certificates from this suite's
# major.minor (README, "Certifying a plugin").  Defined here, below both the runtime
# and the suite, so the runtime never imports the suite.
CONFORMANCE_SUITE_VERSION = "0.1.0"
