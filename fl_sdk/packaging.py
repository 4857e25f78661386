"""A plugin project's setup.py: build its shared library with `fl-sdk build` before
packaging it, and tag the wheel for this platform.

Every plugin's setup.py is the same two lines (the template renders them; torch-fl is
a build requirement in its pyproject.toml):

    from fl_sdk.packaging import setup_plugin
    setup_plugin(__file__)
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
