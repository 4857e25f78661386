"""`torch_fl`: the name users import; the runtime lives in `fl_runtime`.

Unlike a bare `import fl_runtime` (which PyTorch's autoload does and which
must not fail), importing torch_fl raises any start-up error at once.
"""
import fl_runtime as _fl_runtime
from fl_runtime import *  # noqa: F401,F403
from fl_runtime import __all__, __version__  # noqa: F401

_fl_runtime.init()
