"""Checkpoint and resume for a data-parallel job (docs/users/checkpoints.md).

A resumed run must continue as if it had never stopped, so a checkpoint holds
everything the next step reads: the model and optimizer (the same on every rank
under DDP: rank 0 writes them once; sharded by FSDP2, every rank takes part in
gathering them whole for rank 0 to write, and each rank takes its own shards back
when loading), and per rank its random state (the CPU's,
every fl device's, Python's `random`), its `ThroughputSplit` and the caller's
data position.  Layout, one directory per step:

    <directory>/step-00000040/state.pt        model, optimizer, step, world size (rank 0)
    <directory>/step-00000040/rank-<r>.pt     rank r's random state, split, data position
    <directory>/step-00000040/COMPLETE        written last, after every rank's files

Files are written to a temporary name and renamed, and `COMPLETE` only after a
barrier, so a rank killed while saving leaves a directory without `COMPLETE`,
which `latest_checkpoint` skips: a restart resumes from the previous one.
Tensors are saved as CPU tensors (the files load without Torch-FL) and loaded
with `weights_only=True`, so a data position must be plain data (numbers,
strings, lists, dicts, tensors).
"""
from __future__ import annotations

import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from fl_runtime.integration.distributed.mixed_speed import ThroughputSplit

COMPLETE = "COMPLETE"
_STEP_DIR = re.compile(r"^step-(\d{8})$")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be resumed here (another number of ranks or devices, a missing file)."""


@dataclass(frozen=True)
class Resumed:
    """Where a loaded checkpoint leaves the job: the next step to run and the caller's data position."""
    step: int
    data_position: Any
    path: Path


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint under `directory`, or None."""
    complete = [p for p in _step_dirs(Path(directory)) if (p / COMPLETE).exists()]
    return complete[-1] if complete else None


def save_checkpoint(directory: str | os.PathLike, step: int, *, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer | None = None, split: ThroughputSplit | None = None,
                    data_position: Any = None, group: dist.ProcessGroup | None = None, keep: int = 2) -> Path:
    """Save the job after `step` steps (a collective: every rank calls it); keeps the newest `keep`."""
    if keep < 1:
        raise ValueError(f"save_checkpoint: keep={keep}; keep at least the checkpoint being saved (keep >= 1)")
    rank, world = _rank_and_world(group)
    path = Path(directory) / f"step-{step:08d}"
    path.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        # Saving over a complete checkpoint (a run restarted from an older one): unmark it before
        # any rank replaces a file, so a crash in between cannot leave a mixed one marked complete.
        (path / COMPLETE).unlink(missing_ok=True)
    _barrier(group)
    _atomic_save({"rng": _rng_state(), "split": split.state_dict() if split is not None else None,
                  "data_position": data_position}, path / f"rank-{rank}.pt")
    sharded = _is_sharded(model)
    if sharded or rank == 0:            # gathering a sharded model's state is a collective
        model_state, optimizer_state = _whole_states(model, optimizer, sharded)
    if rank == 0:
        _atomic_save({"step": step, "world": world, "model": model_state, "optimizer": optimizer_state},
                     path / "state.pt")
    _barrier(group)                     # every rank's files are on disk before the checkpoint counts
    if rank == 0:
        (path / COMPLETE).write_text(f"{step}\n")
        _prune(Path(directory), keep, path)
    _barrier(group)
    return path


def load_checkpoint(directory: str | os.PathLike, *, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer | None = None, split: ThroughputSplit | None = None,
                    group: dist.ProcessGroup | None = None) -> Resumed | None:
    """Restore the newest complete checkpoint (a collective); None when there is none yet."""
    rank, world = _rank_and_world(group)
    path = _agreed_latest(Path(directory), rank, world, group)
    if path is None:
        return None
    state = _load(path / "state.pt")
    if state["world"] != world:
        raise CheckpointError(f"checkpoint {path} was saved by {state['world']} ranks and this job has {world}; "
                              f"resume it with the same number of ranks (each rank's random state and split "
                              f"are its own)")
    if optimizer is not None and state["optimizer"] is None:
        raise CheckpointError(f"checkpoint {path} holds no optimizer state; save it with optimizer=...")
    _load_whole_states(model, optimizer, state)
    mine = _load(path / f"rank-{rank}.pt")
    if split is not None:
        if mine["split"] is None:
            raise CheckpointError(f"checkpoint {path} holds no batch split; save it with split=...")
        split.load_state_dict(mine["split"])
    _set_rng_state(mine["rng"], path)
    return Resumed(step=state["step"], data_position=mine["data_position"], path=path)


def _is_sharded(model: torch.nn.Module) -> bool:
    """FSDP2 (`fully_shard`) holds each parameter as a DTensor: a rank has only its shard."""
    from torch.distributed.tensor import DTensor
    return any(isinstance(p, DTensor) for p in model.parameters())


def _whole_states(model: torch.nn.Module, optimizer, sharded: bool) -> tuple[dict, dict | None]:
    """The model's and optimizer's whole state on the CPU (rank 0's copy is the one written).
    A sharded model's is gathered by every rank (torch.distributed.checkpoint.state_dict);
    its state_dict() alone would give each rank's shard, which loading would then put on
    every rank: silently wrong weights where shards have one shape, an error where not."""
    if not sharded:
        return (_to_cpu(_unwrap(model).state_dict()),
                _to_cpu(optimizer.state_dict()) if optimizer is not None else None)
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict)
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return (get_model_state_dict(model, options=options),
            get_optimizer_state_dict(model, optimizer, options=options) if optimizer is not None else None)


def _load_whole_states(model: torch.nn.Module, optimizer, state: dict) -> None:
    """Each rank loads the whole state and keeps what it holds: all of it, or its shards."""
    if not _is_sharded(model):
        _unwrap(model).load_state_dict(state["model"])
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])      # moves each state tensor to its parameter's device
        return
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                         set_optimizer_state_dict)
    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, state["model"], options=options)
    if optimizer is not None:
        set_optimizer_state_dict(model, optimizer, state["optimizer"], options=options)


def _step_dirs(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_dir() and _STEP_DIR.match(p.name))


def _agreed_latest(directory: Path, rank: int, world: int, group) -> Path | None:
    # Rank 0 chooses, so every rank resumes from the same step even if a save is racing the scan.
    choice = [str(latest_checkpoint(directory) or "")] if rank == 0 else [None]
    if world > 1:
        dist.broadcast_object_list(choice, src=dist.get_global_rank(group, 0) if group is not None else 0,
                                   group=group)
    return Path(choice[0]) if choice[0] else None


def _prune(directory: Path, keep: int, newest: Path) -> None:
    # Below the checkpoint just completed: keep the newest `keep` complete ones; a directory
    # without COMPLETE there is a save cut short, never to be resumed from.
    steps = _step_dirs(directory)
    kept = [p for p in steps if (p / COMPLETE).exists()][-keep:]
    for p in steps:
        if p < newest and p not in kept:
            shutil.rmtree(p, ignore_errors=True)


def _rank_and_world(group) -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def _barrier(group) -> None:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1:
        dist.barrier(group=group)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    # DDP's state_dict prefixes every key with "module."; save the plain model's.
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def _fl_module():
    return getattr(torch, "fl", None)


def _rng_state() -> dict:
    fl = _fl_module()
    return {"cpu": torch.get_rng_state(), "python": random.getstate(),
            "fl": fl.get_rng_state_all() if fl is not None else []}


def _set_rng_state(state: dict, path: Path) -> None:
    fl = _fl_module()
    devices = fl.device_count() if fl is not None else 0
    if len(state["fl"]) != devices:
        raise CheckpointError(f"checkpoint {path} holds the random state of {len(state['fl'])} fl devices and "
                              f"this process has {devices}; resume on the same devices")
    torch.set_rng_state(state["cpu"])
    random.setstate(state["python"])
    if devices:
        fl.set_rng_state_all(state["fl"])


def _atomic_save(obj: Any, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, target)


def _load(file: Path) -> dict:
    if not file.exists():
        raise CheckpointError(f"checkpoint file {file} is missing; the checkpoint is damaged, delete "
                              f"{file.parent} to resume from the one before")
    return torch.load(file, map_location="cpu", weights_only=True)
