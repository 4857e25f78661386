"""Builds the plugin's shared library with the Torch-FL SDK before packaging it."""
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPlugin(build_py):
    """Compile the C sources (plugin.yaml) into the package, then copy as usual."""

    def run(self) -> None:
        from fl_sdk.build import build   # torch-fl is a build requirement
        build(HERE, force=True)
        super().run()


class PlatformDistribution(Distribution):
    """The wheel carries a native library: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPlugin}, distclass=PlatformDistribution)
