"""plugin.yaml is input a vendor may have copied from anywhere: `fl-sdk build` never writes
outside the plugin folder, and an absolute `sources:` glob is a glob, not a traceback."""
from __future__ import annotations

import pytest

from fl_sdk.build import BuildError, build_command, read_spec


def _plugin(tmp_path, library: str, sources: str = "src/*.c"):
    folder = tmp_path / "acme"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "plugin.c").write_text("int x;\n")
    (folder / "plugin.yaml").write_text(f"library: {library!r}\nsources: [{sources!r}]\n")
    return folder


@pytest.mark.parametrize("library", ["../../x.so", "../acme2/libx.so", "/tmp/libx.so", "sub/../../libx.so", ""])
def test_a_library_outside_the_plugin_folder_is_refused(tmp_path, library):
    with pytest.raises(BuildError, match="library") as error:
        read_spec(_plugin(tmp_path, library))
    assert "plugin.yaml" in str(error.value)
    assert not (tmp_path / "x.so").exists()


@pytest.mark.parametrize("library", ["libfl_acme.so", "build/libfl_acme.so", "./libfl_acme.so"])
def test_a_library_inside_the_plugin_folder_is_accepted(tmp_path, library):
    folder = _plugin(tmp_path, library)
    assert read_spec(folder).library_path.resolve().parent.is_relative_to(folder.resolve())


def test_an_absolute_sources_glob_is_matched_not_a_traceback(tmp_path):
    elsewhere = tmp_path / "shared"
    elsewhere.mkdir()
    (elsewhere / "common.c").write_text("int y;\n")
    folder = _plugin(tmp_path, "libfl_acme.so", str(elsewhere / "*.c"))
    spec = read_spec(folder)
    command = build_command(spec, spec.library_path, ())
    assert str(elsewhere / "common.c") in command
