"""Torch-FL's version (pyproject reads it from here)."""
__version__ = "0.1.0"

# The conformance suite shipped with this release.  A certificate records the suite
# version that produced it; the runtime accepts certificates from this suite's
# major.minor (docs/operators/certificates.md).  Defined here, below both the runtime
# and the suite, so the runtime never imports the suite.
CONFORMANCE_SUITE_VERSION = "0.1.0"

# The PyTorch minors this release is tested with (docs/operators/torch-versions.md):
# `import torch_fl` refuses a torch outside it.  pyproject.toml's dependency states only the
# lower bound, so that `pip install torch-fl` never replaces a newer torch the user already
# has (a multi-GB download of another build); the upper bound is enforced here, at import,
# where TORCH_FL_ALLOW_UNTESTED_TORCH=1 lets a user go past it at their own risk.
TORCH_WINDOW = ">=2.13,<2.16"
