"""The reference vendor: a complete Torch-FL plugin in C that runs on the host
CPU and stands in for a chip (device memory the host cannot touch, streams on
worker threads, kernels).  Installed as the plugin named `reference`."""
from pathlib import Path

PLUGIN_DIR = Path(__file__).resolve().parent


def library_path() -> str:
    """The plugin library (entry point of group 'torch_fl.plugins'); built by `make` / fl-sdk build."""
    return str(PLUGIN_DIR / "libfl_reference.so")
