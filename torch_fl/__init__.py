"""`torch_fl`: the name users import; the runtime lives in `fl_runtime`.

Importing torch_fl starts the runtime and raises any start-up error at once
(PyTorch's autoload, which must never fail, only warns).
"""
import fl_runtime as _fl_runtime
from fl_runtime import *  # noqa: F401,F403
from fl_runtime import __all__, __version__  # noqa: F401

_fl_runtime.init()
