"""The Hugging Face Trainer follows accelerate onto fl when nothing else names a device.

With fl devices present, fl is PyTorch's current accelerator, and accelerate (1.16 and
later) puts the model on it.  transformers' `TrainingArguments.device` (4.57) keeps its
own rule: CUDA, a device it knows by name, `ACCELERATE_TORCH_DEVICE`, else the CPU.  The
two disagree, and the Trainer's first forward fails with the model on fl:0 and the batch
on the CPU.  docs/users/do-no-harm.md decides what such "auto" code gets: fl, as accelerate
chose.  So, once `transformers.training_args` is imported (never importing it ourselves),
the arguments' device is the one accelerate chose whenever accelerate chose fl and the
Trainer picked another device by default.

One process only: accelerate has no distributed type for fl, so several ranks launched
without `use_cpu=True` would each train alone on fl while the Trainer believes it runs DDP
(a silent wrong result).  That case raises, naming the recipe of docs/users/lightning-and-hf.md
"Hugging Face Trainer" (`use_cpu=True` with `ACCELERATE_TORCH_DEVICE` per rank).
"""
from __future__ import annotations

import functools
import os

import torch

from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.errors import FLIntegrationError
from fl_runtime.integration.lightning.hook import call_after_import
from fl_runtime.logs import logger


def install() -> None:
    call_after_import("transformers.training_args", _follow_accelerate)


def _follow_accelerate() -> None:
    from transformers import training_args
    cls = training_args.TrainingArguments
    setup = cls.__dict__.get("_setup_devices")
    if not isinstance(setup, functools.cached_property):
        logger.info("transformers %s: TrainingArguments._setup_devices is not a cached_property; "
                    "the Trainer keeps its own device rule", getattr(training_args, "__version__", "?"))
        return
    wrapped = functools.cached_property(functools.wraps(setup.func)(lambda args: agreed_device(args, setup.func(args))))
    wrapped.__set_name__(cls, "_setup_devices")
    cls._setup_devices = wrapped


def agreed_device(args, device: torch.device) -> torch.device:
    """The Trainer's device: accelerate's fl device where the Trainer fell back to its own."""
    state = getattr(args, "distributed_state", None)
    chosen = getattr(state, "device", None)
    if chosen is None or chosen.type != DEVICE_TYPE or device.type == DEVICE_TYPE:
        return device
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise FLIntegrationError(
            f"transformers.Trainer with {os.environ['WORLD_SIZE']} processes on fl: accelerate has no "
            "distributed mode for fl, so each rank would train alone. Pass use_cpu=True to "
            "TrainingArguments and set ACCELERATE_TORCH_DEVICE=fl:<LOCAL_RANK> in each rank "
            "(docs/users/lightning-and-hf.md \"Hugging Face Trainer\"), or run one process")
    chosen = torch.device(DEVICE_TYPE, torch.fl.current_device()) if chosen.index is None else chosen
    logger.info("transformers.Trainer: accelerate chose %s (the current accelerator); the Trainer uses it "
                "instead of %s", chosen, device)
    return chosen
