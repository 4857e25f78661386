"""`torch_fl`: the name users import; the runtime lives in `fl_runtime`.

Importing torch_fl starts the runtime and raises any start-up error at once
(PyTorch's autoload, which must never fail, only warns).
"""
import fl_runtime as _fl_runtime
from fl_runtime import __all__, __version__  # noqa: F401

# fl_runtime's public names; the LAZY_NAMES ones (profile, coverage ...) at first use, through
# __getattr__ below, as `from fl_runtime import *` would import their modules now.
globals().update((name, getattr(_fl_runtime, name)) for name in __all__ if name not in _fl_runtime.LAZY_NAMES)


def __getattr__(name: str):
    """fl_runtime's names imported at first use (profile, coverage ...) and startup_error."""
    return getattr(_fl_runtime, name)


_fl_runtime.init()
