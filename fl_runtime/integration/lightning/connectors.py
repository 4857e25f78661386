"""Where Lightning 2.6 hard-codes CUDA, and what `accelerator="fl"` needs instead.

Lightning has no extension point for these three places, so each is wrapped
(the original still runs; the wrapper only changes the answer for fl):

1. Auto strategy with one device: `_choose_strategy` gives any accelerator that
   is not CUDA/MPS a `SingleDeviceStrategy("cpu")`, which moves the model back
   to the CPU and trains there silently.  For fl: the chosen fl device.
2. Mixed precision: `_check_and_init_precision` builds `MixedPrecision(device="cuda")`
   for every accelerator but cpu/mps, i.e. autocast and GradScaler for CUDA.
   For fl: `MixedPrecision(device="fl")` (torch.autocast("fl"), GradScaler("fl")).
3. DDP set-up: the Trainer's and Fabric's DDP strategies build the
   DistributedDataParallel wrapper inside `torch.cuda.stream(torch.cuda.Stream())`
   whenever there are device ids, which raises on a machine without CUDA.
   For fl: the same construction on the current stream (the side stream is a
   CUDA/NCCL matter; fl collectives order themselves after the tensors' writers).

Both Lightning's Trainer connector and Fabric's connector get 1 and 2, in
each Lightning distribution (`lightning.*`, and the standalone
`pytorch_lightning` / `lightning_fabric`).
"""
from __future__ import annotations

import functools
import importlib

from fl_runtime.integration.lightning.accelerator import NAME, is_fl

_MARK = "_torch_fl_wrapped"


def install(fabric: str, trainer: str) -> None:
    """Wrap the places listed in the module docstring (once) in one Lightning distribution:
    `fabric`/`trainer` are its packages ("lightning.fabric"/"lightning.pytorch" or
    "lightning_fabric"/"pytorch_lightning")."""
    def load(module: str, name: str):
        return getattr(importlib.import_module(module), name)
    connectors = ((load(f"{trainer}.trainer.connectors.accelerator_connector", "_AcceleratorConnector"),
                   load(f"{trainer}.strategies.single_device", "SingleDeviceStrategy"),
                   load(f"{trainer}.plugins.precision.amp", "MixedPrecision")),
                  (load(f"{fabric}.connector", "_Connector"),
                   load(f"{fabric}.strategies.single_device", "SingleDeviceStrategy"),
                   load(f"{fabric}.plugins.precision.amp", "MixedPrecision")))
    for connector, single, mixed in connectors:
        _wrap(connector, "_choose_strategy", _single_device_on_fl(single))
        _wrap(connector, "_check_and_init_precision", _mixed_precision_on_fl(mixed))
    _wrap(load(f"{trainer}.strategies.ddp", "DDPStrategy"), "_setup_model", _ddp_without_cuda_stream)
    _wrap(load(f"{fabric}.strategies.ddp", "DDPStrategy"), "setup_module", _ddp_without_cuda_stream)


def _wrap(owner: type, name: str, make) -> None:
    original = getattr(owner, name)
    if getattr(original, _MARK, False):
        return
    wrapped = functools.wraps(original)(make(original))
    setattr(wrapped, _MARK, True)
    setattr(owner, name, wrapped)


def _single_device_on_fl(single_device: type):
    def make(original):
        def _choose_strategy(self):
            choice = original(self)
            if is_fl(self.accelerator) and isinstance(choice, single_device) and choice.root_device.type != NAME:
                return single_device(device=self._parallel_devices[0])
            return choice
        return _choose_strategy
    return make


def _mixed_precision_on_fl(mixed_precision: type):
    def make(original):
        def _check_and_init_precision(self):
            plugin = original(self)
            if is_fl(self.accelerator) and type(plugin) is mixed_precision and plugin.device != NAME:
                return mixed_precision(plugin.precision, device=NAME)
            return plugin
        return _check_and_init_precision
    return make


def _ddp_without_cuda_stream(original):
    def setup(self, module):
        if self.root_device.type != NAME:
            return original(self, module)
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(module=module, device_ids=[self.root_device.index], **self._ddp_kwargs)
    return setup
