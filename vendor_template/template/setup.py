"""Packages the plugin: its library, the certificate `fl-sdk certify` wrote beside it, and
its metadata, as one wheel per platform (README.md "Release").

A certified library is shipped as it is, never rebuilt: a rebuild would change its bytes
and void the certificate.  Otherwise the library is built with the Torch-FL SDK
(`fl-sdk build`) when torch-fl is importable here (`pip install --no-build-isolation .`
beside torch-fl), or shipped as already built.  The library is a C shared object that
does not link Python or PyTorch, so the wheel is tagged py3-none-<platform>.
"""
import hashlib
import json
from pathlib import Path

import yaml
from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:                  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
CERTIFICATE_SUFFIX = ".flcert"       # where the runtime looks: <library>.flcert beside it


class PackagingError(RuntimeError):
    """The plugin cannot be packaged as it stands; the message says what to do."""


def _library() -> Path:
    return HERE / yaml.safe_load((HERE / "plugin.yaml").read_text())["library"]


def _certified_sha256(certificate: Path) -> str:
    return str(json.loads(certificate.read_text()).get("payload", {}).get("plugin", {}).get("sha256"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def prepare_library() -> None:
    library = _library()
    certificate = library.with_name(library.name + CERTIFICATE_SUFFIX)
    if certificate.is_file():
        if library.is_file() and _certified_sha256(certificate) == _sha256(library):
            print(f"packaging the certified {library.name} as it is ({certificate.name})")
            return
        raise PackagingError(f"{certificate} was issued for another build of {library.name}: certify this build "
                             f"(fl-sdk certify {HERE} --key KEY) or delete the certificate to ship it uncertified")
    try:
        from fl_sdk.build import build
    except ImportError:
        if library.is_file():
            print(f"torch-fl is not importable here: packaging {library.name} as built")
            return
        raise PackagingError(f"{library} is not built and torch-fl is not importable here: run `fl-sdk build "
                             f"{HERE}` first, or `pip install --no-build-isolation` beside torch-fl[sdk]") from None
    build(HERE)


class BuildPlugin(build_py):
    """Prepare the library (above), then copy the package and its data as usual."""

    def run(self) -> None:
        prepare_library()
        super().run()


class PlatformDistribution(Distribution):
    """The wheel carries a native library: it is a platform wheel, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """py3-none-<platform>: the library links neither Python nor PyTorch, so one wheel
    serves every Python on the platform."""

    def get_tag(self) -> tuple[str, str, str]:
        return "py3", "none", super().get_tag()[2]


setup(cmdclass={"build_py": BuildPlugin, "bdist_wheel": PlatformWheel}, distclass=PlatformDistribution)
