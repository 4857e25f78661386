"""Refuse, at import, a PyTorch outside the range pyproject.toml declares.

The range lives once, in pyproject's dependency on torch; installed, it is read
from the package metadata, in a source checkout from pyproject.toml itself.
"""
from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import torch
from packaging.requirements import Requirement
from packaging.version import Version

from fl_runtime.errors import TorchVersionError

_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def supported_torch_range() -> str:
    """The torch version specifier this build of Torch-FL declares, e.g. '<2.14,>=2.13'."""
    try:
        requirements = importlib.metadata.requires("torch-fl") or []
    except importlib.metadata.PackageNotFoundError:
        requirements = re.findall(r'"(torch[<>=!~ ][^"]*)"', _PYPROJECT.read_text())
    for text in requirements:
        req = Requirement(text)
        if req.name == "torch" and not req.marker:
            return str(req.specifier)
    raise TorchVersionError("Torch-FL's metadata declares no torch requirement; reinstall torch-fl")


def check_torch_version(version: str | None = None) -> None:
    """Raise TorchVersionError naming both versions when torch is unsupported."""
    found = Version((version or torch.__version__).split("+")[0])
    spec = supported_torch_range()
    if not Requirement(f"torch{spec}").specifier.contains(found, prereleases=True):
        raise TorchVersionError(
            f"Torch-FL supports torch{spec}, but torch {found} is installed: "
            f"install a supported PyTorch (pip install 'torch{spec}') or a Torch-FL release built for {found}")
