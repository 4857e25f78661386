"""plugin.yaml `link:` and `link_dirs:`: a plugin links its vendor's driver library
(fl_sdk/build.py).  A chip's runtime often ships only a shared library to link against
(libacme_driver.so in /opt/acme/lib); the plugin must build against it and find it again
when it loads, wherever the user's process starts."""
from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import pytest

from fl_sdk.build import BuildError, build, compiler

DRIVER = "int acme_driver_version(void) { return 4207; }\n"
PLUGIN = "int acme_driver_version(void);\nint answer(void) { return acme_driver_version() + 1; }\n"


def make_driver(directory: Path) -> Path:
    # The vendor's own driver library, not a plugin: built as its vendor would, without fl_sdk's flags.
    directory.mkdir(parents=True)
    (directory / "driver.c").write_text(DRIVER)
    library = directory / "libacme_driver.so"
    subprocess.run([compiler(), "-shared", "-fPIC", str(directory / "driver.c"), "-o", str(library)], check=True)
    return library


def make_plugin(root: Path, yaml_extra: str) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "plugin.yaml").write_text(f"library: libuses_driver.so\nsources: [src/*.c]\n{yaml_extra}")
    (root / "src" / "plugin.c").write_text(PLUGIN)
    return root


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_SDK_BUILD_CACHE", str(tmp_path / "objects"))


def test_a_vendor_library_in_link_dirs_links_and_is_found_at_load(tmp_path):
    make_driver(tmp_path / "opt" / "acme" / "lib")
    plugin = make_plugin(tmp_path / "plugin", "link: [acme_driver]\nlink_dirs: [../opt/acme/lib]\n")
    library = build(plugin)
    # A fresh process with no LD_LIBRARY_PATH: the run path alone finds the driver.
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    result = subprocess.run(["python3", "-c", f"import ctypes; print(ctypes.CDLL({str(library)!r}).answer())"],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0 and result.stdout.strip() == "4208", result.stderr


def test_a_system_library_links_by_its_name(tmp_path):
    plugin = make_plugin(tmp_path / "plugin", "link: [pthread, m]\n")
    (plugin / "src" / "plugin.c").write_text("#include <math.h>\nint answer(double x) { return (int)sqrt(x); }\n")
    library = build(plugin)
    answer = ctypes.CDLL(str(library)).answer
    answer.argtypes = [ctypes.c_double]
    assert answer(49.0) == 7


def test_a_missing_library_is_a_build_error_that_names_it(tmp_path):
    plugin = make_plugin(tmp_path / "plugin", "link: [acme_driver]\n")
    with pytest.raises(BuildError, match=r"linking libuses_driver\.so failed:(.|\n)*acme_driver"):
        build(plugin)
    assert not (plugin / "libuses_driver.so").exists()


@pytest.mark.parametrize("name", ["-Wl,--wrap=malloc", "acme driver", "/opt/acme/lib/libacme.so", ""])
def test_a_link_entry_that_is_not_a_library_name_is_refused(tmp_path, name):
    plugin = make_plugin(tmp_path / "plugin", f"link: [{name!r}]\n")
    with pytest.raises(BuildError, match="is not a library name"):
        build(plugin)


def test_a_link_dir_that_does_not_exist_is_refused(tmp_path):
    plugin = make_plugin(tmp_path / "plugin", "link: [acme_driver]\nlink_dirs: [/nonexistent/acme/lib]\n")
    with pytest.raises(BuildError, match="link_dirs: '/nonexistent/acme/lib' is not a directory"):
        build(plugin)


def test_a_vendor_header_that_warns_builds_when_included_with_isystem(tmp_path, monkeypatch):
    """-Wall -Wextra -Werror hold for the plugin's code in CI (FL_WERROR=1); a vendor's header
    that warns goes in with -isystem (docs/vendors/quick-start.md "Building"), never by turning
    -Werror off."""
    monkeypatch.setenv("FL_WERROR", "1")
    include = tmp_path / "opt" / "acme" / "include"
    include.mkdir(parents=True)
    (include / "acme.h").write_text("static int acme_unused(int x) { int y; return x; }\n")
    source = '#include <acme.h>\nint answer(void) { return 4208; }\n'
    warned = make_plugin(tmp_path / "with_I", f"cflags: [-I, {include}]\n")
    (warned / "src" / "plugin.c").write_text(source)
    with pytest.raises(BuildError, match="acme.h"):
        build(warned)
    quiet = make_plugin(tmp_path / "with_isystem", f"cflags: [-isystem, {include}]\n")
    (quiet / "src" / "plugin.c").write_text(source)
    assert ctypes.CDLL(str(build(quiet))).answer() == 4208


def test_warnings_fail_a_build_only_where_asked(tmp_path, monkeypatch):
    """A user's compiler may warn where the vendor's did not: without FL_WERROR (or
    `fl-sdk build --werror`) a warning never fails the build; with it, it does."""
    warns = 'int answer(void) { int unused; return 4208; }\n'
    plugin = make_plugin(tmp_path / "warns", "")
    (plugin / "src" / "plugin.c").write_text(warns)
    monkeypatch.delenv("FL_WERROR", raising=False)
    assert ctypes.CDLL(str(build(plugin))).answer() == 4208
    monkeypatch.setenv("FL_WERROR", "1")
    with pytest.raises(BuildError, match="unused"):
        build(plugin, force=True)
