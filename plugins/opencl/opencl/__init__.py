"""The opencl Torch-FL plugin (OpenCL).

Installed, it is found by the Torch-FL runtime through the entry point group
`torch_fl.plugins` and its devices appear as fl:N.
"""
from pathlib import Path

PLUGIN_DIR = Path(__file__).resolve().parent


def library_path() -> str:
    """The plugin library (entry point of group 'torch_fl.plugins'); built by `fl-sdk build`."""
    return str(PLUGIN_DIR / "libfl_opencl.so")
