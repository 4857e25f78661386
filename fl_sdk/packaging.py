"""setup.py for a plugin built beside torch-fl: build its shared library with `fl-sdk build`
before packaging it, and tag the wheel for this platform.

The in-tree OpenCL plugin (plugins/opencl/setup.py, installed with --no-build-isolation) is
these two lines:

    from fl_sdk.packaging import setup_plugin
    setup_plugin(__file__)

A scaffolded plugin keeps its own setup.py (vendor_template/template/setup.py): its release
wheel is built by `pip wheel` in an isolated environment without torch-fl and must ship the
certified library as it is, never rebuilt.
"""
from __future__ import annotations

from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py


class PlatformDistribution(Distribution):
    """The wheel carries a native library: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


def setup_plugin(setup_py: str) -> None:
    """setuptools.setup for the plugin whose setup.py is `setup_py`: build_py first compiles
    the C sources its plugin.yaml lists into the package, then copies as usual."""
    directory = Path(setup_py).resolve().parent

    class BuildPlugin(build_py):
        def run(self) -> None:
            from fl_sdk.build import build
            build(directory, force=True)
            super().run()

    setup(cmdclass={"build_py": BuildPlugin}, distclass=PlatformDistribution)
