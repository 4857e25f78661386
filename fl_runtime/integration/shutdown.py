"""Process exit: the order in which Torch-FL lets go of its devices.

Root cause of the crash this module prevents (docs/users/limits.md):
a script that ended holding fl tensors in module globals died at exit with
SIGSEGV or SIGILL.  During `Py_FinalizeEx`, `finalize_modules` drops the modules
and lets the garbage collector clear what they held, in no particular order.
When it cleared `fl_runtime.devices.storage` before a global holding an fl
tensor, the cffi callback object `_deleter` was freed, and with it the libffi
trampoline every DLManagedTensor's `deleter` field pointed at; the tensor died
next (`THPVariable_clear` -> `~TensorImpl` -> `deleteInefficientStdFunctionContext`)
and PyTorch jumped into freed memory.  Two more things were one reordering away
from the same fault: the DLManagedTensor slots were cffi-owned memory (freed
with the storage module), and the plugin libraries are `ffi.dlopen` handles,
unmapped when their Plugin object is collected, while stream destructors
(`ffi.gc`) and deleters can still call into them.

The order is now correct by construction:
1. Whatever a deleter needs outlives every tensor: the slots are C memory that
   nothing frees, the callback is kept until exit (devices.storage), and the
   Runtime - hence its plugins' libraries, streams and allocators - is kept
   until exit by `install`.
2. At exit, before any module is torn down (`atexit` runs first in
   `Py_FinalizeEx`, and ours after the handlers of code imported later), the
   handler collects cyclic garbage (tensors in dead cycles go back the normal
   way), waits for every device (pending work on any stream finishes before
   memory goes back), sets every live deleter to NULL (nothing enters Python
   from PyTorch after this point, however far finalization has gone), and
   returns the cached blocks to the vendor.  Blocks still held by live
   tensors stay allocated until the process ends: a finalizer may still read
   such a tensor, and freeing its memory first would turn that read into a
   use-after-free on the device.
In a forked child (the vendor's threads did not survive the fork) the handler
only detaches the deleters and makes no vendor call.
"""
from __future__ import annotations

import atexit
import gc
import os

from fl_runtime.devices.storage import detach_deleters, keep_until_exit, release_held
from fl_runtime.errors import FLError
from fl_runtime.logs import logger


def install(runtime) -> None:
    """Keep `runtime` for the life of the process and register its exit handler."""
    keep_until_exit(runtime)
    atexit.register(release_at_exit, runtime, os.getpid())


def release_at_exit(runtime, pid: int) -> None:
    """The exit sequence described in the module docstring (idempotent)."""
    release_held()      # a failed op's inputs go back the normal way, as does cyclic garbage
    gc.collect()
    same_process = os.getpid() == pid
    if same_process:
        _synchronize_all(runtime)
    still_live = detach_deleters()
    if not same_process:
        return
    for allocator in runtime.allocators:
        try:
            allocator.empty_cache()
        except FLError as exc:   # a failure here must not hide the others or the exit status
            logger.error("at exit, returning fl:%d's cached memory failed: %s", allocator.device.index, exc)
    held = sum(allocator.stats.allocated for allocator in runtime.allocators)
    logger.debug("exit: %d fl tensor(s) still alive holding %d bytes; the driver reclaims them "
                 "with the process", still_live, held)


def _synchronize_all(runtime) -> None:
    for index in range(len(runtime.devices)):
        try:
            runtime.synchronize(index)
        except FLError as exc:   # an asynchronous kernel failure the program never waited for
            logger.error("at exit, fl:%d reported an error from work still pending: %s", index, exc)
