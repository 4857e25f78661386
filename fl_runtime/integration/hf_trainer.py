"""The Hugging Face Trainer follows accelerate onto fl, in one process or as several ranks.

With fl devices present, fl is PyTorch's current accelerator, and accelerate (1.16 and
later) puts the model on it.  transformers' `TrainingArguments.device` (4.57) keeps its
own rule: CUDA, a device it knows by name, `ACCELERATE_TORCH_DEVICE`, else the CPU.  The
two disagree, and the Trainer's first forward fails with the model on fl:0 and the batch
on the CPU.  docs/users/do-no-harm.md decides what such "auto" code gets: fl, as accelerate
chose.  So, once `transformers.training_args` is imported (never importing it ourselves),
the arguments' device is the one accelerate chose whenever accelerate chose fl and the
Trainer picked another device by default.

Several ranks (torchrun): accelerate starts a process group only for the CPU or a device
on its own list, which fl is not, so each rank would train alone on fl while the Trainer
believes it runs DDP (a silent wrong result).  Instead, when the ranks' device is fl
(`ACCELERATE_TORCH_DEVICE=fl...`, or no device named and fl the current accelerator),
the arguments are set up through accelerate's CPU path (`MULTI_CPU`:
`init_process_group("gloo")`, which registration.py routes to the fl backend, and a
plain DistributedDataParallel) with rank i on fl:i: the recipe of
docs/users/lightning-and-hf.md "Hugging Face Trainer", applied for the user.  Should
accelerate still come out undistributed (another version), the Trainer raises.
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

    @functools.wraps(setup.func)
    def _setup_devices(args) -> torch.device:
        rank_device = ranks_device(args)
        if rank_device is not None:
            return data_parallel_on_fl(args, setup.func, rank_device)
        return agreed_device(args, setup.func(args))

    wrapped = functools.cached_property(_setup_devices)
    wrapped.__set_name__(cls, "_setup_devices")
    cls._setup_devices = wrapped


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def ranks_device(args) -> torch.device | None:
    """This rank's fl device when the Trainer runs as several ranks on fl through accelerate's
    default path (no `use_cpu`, no DeepSpeed), else None."""
    if _world_size() <= 1 or "LOCAL_RANK" not in os.environ or args.use_cpu or args.deepspeed:
        return None
    if os.environ.get("ACCELERATE_USE_CPU", "false").lower() in ("1", "true", "yes", "on"):
        return None
    named = os.environ.get("ACCELERATE_TORCH_DEVICE")
    if named is not None:
        device = torch.device(named)
    else:
        accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        if accelerator is None or accelerator.type != DEVICE_TYPE:
            return None
        device = torch.device(DEVICE_TYPE)
    if device.type != DEVICE_TYPE:
        return None
    local_rank = int(os.environ["LOCAL_RANK"])
    return device if device.index is not None else torch.device(DEVICE_TYPE, local_rank % torch.fl.device_count())


def data_parallel_on_fl(args, setup, device: torch.device) -> torch.device:
    """Set the arguments up as accelerate's CPU data-parallel job (`use_cpu` for the length of
    the call: the rest of the Trainer never reads it), then put this rank on `device`."""
    torch.fl.set_device(device)
    args.use_cpu = True
    try:
        setup(args)
    finally:
        args.use_cpu = False
    state = args.distributed_state
    if _undistributed(state):
        _refuse_ranks_training_alone()
    state.device = device                 # accelerate's shared state: the Accelerator reads it
    logger.info("transformers.Trainer: rank %d of %d trains on %s in one data-parallel job (%s backend)",
                state.process_index, state.num_processes, device, state.backend)
    return device


def _undistributed(state) -> bool:
    """Whether accelerate's state runs no process group (DistributedType.NO)."""
    return getattr(getattr(state, "distributed_type", None), "value", None) == "NO"


def _refuse_ranks_training_alone() -> None:
    raise FLIntegrationError(
        f"transformers.Trainer with {_world_size()} processes on fl: accelerate set up no process group, "
        "so each rank would train alone. Pass use_cpu=True to TrainingArguments and set "
        "ACCELERATE_TORCH_DEVICE=fl:<LOCAL_RANK> in each rank (the section \"Hugging Face Trainer\" "
        "of docs/users/lightning-and-hf.md), or run one process")


def agreed_device(args, device: torch.device) -> torch.device:
    """The Trainer's device: accelerate's fl device where the Trainer fell back to its own."""
    state = getattr(args, "distributed_state", None)
    chosen = getattr(state, "device", None)
    if _world_size() > 1 and DEVICE_TYPE in (device.type, getattr(chosen, "type", None)) and _undistributed(state):
        _refuse_ranks_training_alone()
    if chosen is None or chosen.type != DEVICE_TYPE or device.type == DEVICE_TYPE:
        return device
    chosen = torch.device(DEVICE_TYPE, torch.fl.current_device()) if chosen.index is None else chosen
    logger.info("transformers.Trainer: accelerate chose %s (the current accelerator); the Trainer uses it "
                "instead of %s", chosen, device)
    return chosen
