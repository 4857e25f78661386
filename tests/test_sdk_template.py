"""The vendor template and `fl-sdk new` / `update` (README "Writing a plugin").

End to end through the command line, as a vendor would: scaffold, build, load
next to the reference vendor, run the conformance categories the template
must pass out of the box, fill in one kernel and check its numerics, and update
a project with vendor edits to a changed template.  The runtime runs in fresh
processes (TORCH_FL_PLUGINS differs from the test process's).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DIR = ROOT / "vendor_template"
STARTING_OPS = "neg,add.Tensor,fill_.Scalar"

# neg for float32, written with the template's helpers: any strides, misaligned data.
NEG_SKELETON_TAIL = "    (void)self;\n    (void)out;\n    return kt_not_supported(call);"
NEG_BODY = """    int64_t n = kt_numel(out);
    for (int64_t i = 0; i < n; i++)
        kt_store_f32(kt_element(out, out, i), -kt_load_f32(kt_element(self, out, i)));
    return FL_SUCCESS;"""


def fill_in_neg(project: Path) -> None:
    source = project / "src" / "kernels_unary.c"
    text = source.read_text()
    # The skeleton already declares float32; writing the body is all it takes.
    assert NEG_SKELETON_TAIL in text and "const uint64_t kernel_neg_dtypes = KT_DTYPE(FL_FLOAT32);" in text
    source.write_text(text.replace(NEG_SKELETON_TAIL, NEG_BODY))


@pytest.fixture(scope="module")
def sdk_env(tmp_path_factory) -> dict:
    """Environment for fl-sdk subprocesses: this checkout, a private template store."""
    store = tmp_path_factory.mktemp("template-store") / "store"
    return {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_FL_TEMPLATE_STORE": str(store)}


def fl_sdk(env: dict, *args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fl_sdk", *args], env=env, cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout)


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"rc={result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def new_plugin(env: dict, parent: Path, name: str, *options: str) -> Path:
    ok(fl_sdk(env, "new", name, "--output", str(parent / name), "--defaults", *options))
    return parent / name


def library(project: Path) -> Path:
    return project / project.name / f"libfl_{project.name}.so"


@pytest.fixture(scope="module")
def acme(sdk_env, tmp_path_factory) -> Path:
    """A generated, built plugin: 2 devices, alignment 512, three starting ops."""
    project = new_plugin(sdk_env, tmp_path_factory.mktemp("plugins"), "acme", "--vendor", "Acme Chips",
                         "--device-type", "acme-npu", "--alignment", "512", "--devices", "2",
                         "--cflags=-O2 -g", "--ops", STARTING_OPS)
    ok(fl_sdk(sdk_env, "build", str(project)))
    return project


# ---- what `new` renders ------------------------------------------------------------

def test_new_renders_the_answers_and_a_registered_skeleton_per_op(acme):
    answers = yaml.safe_load((acme / ".copier-answers.yml").read_text())
    assert answers["project_name"] == "acme" and answers["alignment"] == 512 and answers["device_count"] == 2
    assert answers["_commit"] == "v" + (TEMPLATE_DIR / "VERSION").read_text().strip()
    assert yaml.safe_load((acme / "plugin.yaml").read_text())["cflags"] == ["-O2", "-g"]
    table = (acme / "src" / "kernel_table.c").read_text()
    for op in STARTING_OPS.split(","):
        assert re.search(rf'\{{"{re.escape(op)}", "[TS]+", &kernel_\w+_dtypes, FL_VARIANT_PRECISE, kernel_\w+\}}',
                         table), f"{op} is not registered in kt_kernel_defs"
    assert "kernel_mm" not in table and not (acme / "src" / "kernels_matmul.c").exists()
    sources = {p.name: p.read_text() for p in (acme / "src").glob("*.c")}
    assert "TODO(vendor)" in sources["kernels_unary.c"] and "FL_ERROR_NOT_SUPPORTED" in sources["kernel_util.c"]
    assert '.device_type = "acme-npu"' in sources["plugin.c"]
    assert "#define DEVICE_ALIGNMENT 512u" in sources["device.c"]
    assert subprocess.run(["git", "log", "--oneline"], cwd=acme, capture_output=True, text=True).stdout.strip()


def test_generated_workflow_is_a_well_formed_conformance_job(acme):
    workflow = yaml.safe_load((acme / ".github" / "workflows" / "conformance.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))      # YAML 1.1 reads a bare `on` as true
    assert {"push", "pull_request"} <= set(triggers)
    steps = workflow["jobs"]["conformance"]["steps"]
    uses = [step.get("uses", "") for step in steps]
    assert any(u.startswith("actions/checkout@") for u in uses)
    assert any(u.startswith("actions/setup-python@") for u in uses)
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["path"] == "conformance-reports/" and upload["if"] == "always()"
    commands = "\n".join(step.get("run", "") for step in steps)
    assert "pip install" in commands and "fl-sdk build ." in commands
    test_command = next(line for line in commands.replace("\\\n", " ").splitlines() if "fl-sdk test" in line)
    for flag in ("acme/libfl_acme.so", "--profile ci", "--junit", "--json", "--html"):
        assert flag in test_command


def launcher_signature(op: str) -> str:
    """What launch_kernel must receive for `op`: T per tensor, S per scalar, then T per output."""
    from fl_runtime.ops.schema import compile_plan
    plan = compile_plan(op)
    return "".join("T" if arg.is_tensor else "S" for arg in plan.args) + "T" * len(plan.returns_alias)


def test_every_starting_op_and_none_compile_with_werror(sdk_env, tmp_path):
    ops = yaml.safe_load((TEMPLATE_DIR / "copier.yml").read_text())["ops"]["choices"]
    for name, selection in (("allops", ",".join(ops)), ("noops", "")):
        project = new_plugin(sdk_env, tmp_path, name, "--ops", selection, "--no-git")
        ok(fl_sdk(sdk_env, "build", str(project)))
        assert library(project).is_file()
    table = (tmp_path / "allops" / "src" / "kernel_table.c").read_text()
    signatures = dict(re.findall(r'\{"([^"]+)", "([TS]+)"', table))
    assert signatures == {op: launcher_signature(op) for op in ops}


@pytest.mark.parametrize("option, complaint", [(("--alignment", "3"), "alignment 3 is not a power of two"),
                                               (("--ops", "neg,bogus"), "'bogus' is not in")])
def test_new_refuses_bad_answers(sdk_env, tmp_path, option, complaint):
    result = fl_sdk(sdk_env, "new", "acme", "--defaults", *option, cwd=tmp_path)
    assert result.returncode == 2 and complaint in result.stderr
    assert not (tmp_path / "acme").exists()


# ---- clear errors ----------------------------------------------------------------

@pytest.mark.parametrize("name", ["9lives", "Acme", "acme-npu", "a" * 41])
def test_new_refuses_a_bad_name(sdk_env, tmp_path, name):
    result = fl_sdk(sdk_env, "new", name, "--defaults", cwd=tmp_path)
    assert result.returncode == 2 and f"'{name}' is not a valid plugin name" in result.stderr
    assert not any(tmp_path.iterdir())


def test_new_refuses_a_non_empty_directory(sdk_env, tmp_path):
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "notes.txt").write_text("mine")
    result = fl_sdk(sdk_env, "new", "acme", "--defaults", cwd=tmp_path)
    assert result.returncode == 2 and "already exists and is not an empty directory" in result.stderr
    assert [p.name for p in (tmp_path / "acme").iterdir()] == ["notes.txt"]


def test_new_without_a_compiler_says_so(sdk_env, tmp_path):
    env = {k: v for k, v in sdk_env.items() if k != "CC"}
    env["PATH"] = str(tmp_path / "empty-bin")       # no cc, gcc or clang to find
    result = fl_sdk(env, "new", "acme", "--defaults", cwd=tmp_path)
    assert result.returncode == 2 and "no C compiler found" in result.stderr
    assert not (tmp_path / "acme").exists()


def test_update_refuses_a_directory_it_did_not_generate(sdk_env, tmp_path):
    result = fl_sdk(sdk_env, "update", str(tmp_path))
    assert result.returncode == 2 and "has no .copier-answers.yml" in result.stderr


# ---- end to end ----------------------------------------------------------------

RUNTIME_CHECK = """
import os, warnings, torch, torch_fl
devices = torch_fl.list_devices()
new = [d["device"] for d in devices if d["type"] == "acme-npu"]
ref = [d["device"] for d in devices if d["type"] == "reference"]
assert len(new) == 2 and ref, devices
assert {d["alignment"] for d in devices if d["type"] == "acme-npu"} == {512}
for dev in (new[0], new[1], ref[0]):                  # both plugins usable
    x = torch.arange(6, dtype=torch.float32).to(dev)
    assert ((x * 2 + 1).cpu() == torch.arange(6) * 2.0 + 1).all(), dev
    assert x.to(ref[0]).cpu().tolist() == list(range(6))
x = torch.linspace(-1, 1, 5).to(new[0])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = torch.exp(x)                                  # no kernel on the new device: CPU fallback
assert y.device == x.device and torch.allclose(y.cpu(), torch.linspace(-1, 1, 5).exp())
assert any("aten::exp" in str(w.message) for w in caught), [str(w.message) for w in caught]
# neg is a skeleton: its kernel declines the call (FL_ERROR_NOT_SUPPORTED) and the op falls back.
with torch_fl.profile() as prof:
    z = torch.neg(x)
assert torch.equal(z.cpu(), -torch.linspace(-1, 1, 5))
assert prof.paths()["aten::neg"] == {"cpu"}, prof.summary()
os.environ["TORCH_FL_STRICT"] = "1"                   # read at every fallback
try:
    torch.exp(x)
except torch_fl.UnsupportedOpError as exc:
    assert "aten::exp" in str(exc) and new[0] in str(exc), exc
else:
    raise AssertionError("TORCH_FL_STRICT=1 did not make the fallback an error")
print("OK")
"""


def test_e2e_runtime_loads_it_next_to_the_reference_vendor(acme, python, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("fallback:\n  enable_cpu_fallback: true\n")
    result = python(RUNTIME_CHECK, env={"TORCH_FL_PLUGINS": str(library(acme)), "TORCH_FL_CONFIG": str(config)})
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_e2e_abi_memory_and_streams_pass_before_any_kernel(acme, sdk_env, tmp_path):
    report = tmp_path / "report.json"
    ok(fl_sdk(sdk_env, "test", str(library(acme)), "--profile", "ci", "--json", str(report),
              "-k", "suite_abi or suite_memory or suite_streams"))
    data = json.loads(report.read_text())
    categories = data["summary"]["categories"]
    assert set(categories) == {"abi", "memory", "streams"} and data["summary"]["fail"] == 0
    for name in ("abi", "memory", "streams"):
        assert categories[name]["pass"] > 0, categories
    # fill_.Scalar is still a skeleton: reported as not supported, not as a crash or failure.
    with_kernels = next(t for t in data["tests"] if "with-kernels" in t["test"])
    assert with_kernels["status"] == "not_supported" and "fill_.Scalar" in with_kernels["message"]



def test_e2e_unwritten_kernels_are_reported_not_supported(acme, sdk_env, tmp_path):
    report = tmp_path / "kernels.json"
    ok(fl_sdk(sdk_env, "test", str(library(acme)), "--profile", "ci", "--json", str(report),
              "-k", "test_numerics and float32"))
    numerics = [t for t in json.loads(report.read_text())["tests"] if t["test"].startswith("test_numerics")]
    assert {t["op"] for t in numerics} == set(STARTING_OPS.split(","))
    for t in numerics:      # each skeleton declined its calls: not a crash, not a failure
        assert t["status"] == "not_supported" and "skeleton" in t["message"], t


def test_filled_in_skeleton_passes_its_numerics(acme, sdk_env, tmp_path):
    project = tmp_path / "acme"
    shutil.copytree(acme, project, ignore=shutil.ignore_patterns(".git", "*.so"))
    fill_in_neg(project)
    ok(fl_sdk(sdk_env, "build", str(project)))
    report = tmp_path / "neg.json"
    ok(fl_sdk(sdk_env, "test", str(library(project)), "--json", str(report), "-k", "neg and precise"))
    results = {t["test"]: t for t in json.loads(report.read_text())["tests"]}
    numerics = results["test_numerics[neg-float32-precise]"]
    assert numerics["status"] == "pass" and numerics["examples"] > 0
    assert results["test_malformed_launches[neg-precise]"]["status"] == "pass"
    assert results["test_numerics[neg-float16-precise]"]["status"] == "not_supported"


# ---- update -------------------------------------------------------------------------

def changed_template(destination: Path) -> str:
    """A copy of the template one minor version on: a new file and a changed comment."""
    shutil.copytree(TEMPLATE_DIR, destination, ignore=shutil.ignore_patterns("__pycache__"))
    major, minor, *_ = (TEMPLATE_DIR / "VERSION").read_text().strip().split(".")
    version = f"{major}.{int(minor) + 1}.0"
    (destination / "VERSION").write_text(version + "\n")
    (destination / "template" / "CHANGES.md.jinja").write_text("# {{ project_name }}: template changes\n")
    stream = destination / "template" / "src" / "stream.c"
    text = stream.read_text()
    assert " * stream.c -- streams.\n" in text
    stream.write_text(text.replace(" * stream.c -- streams.\n", " * stream.c -- streams (template 1.1 wording).\n"))
    return version


def test_update_keeps_vendor_edits_and_brings_the_template_change(sdk_env, tmp_path):
    project = new_plugin(sdk_env, tmp_path, "upd", "--ops", "neg")
    fill_in_neg(project)
    with (project / "README.md").open("a") as readme:
        readme.write("\n## Our chip notes\nKeep this.\n")
    version = changed_template(tmp_path / "template-next")
    dirty = fl_sdk(sdk_env, "update", str(project), "--template", str(tmp_path / "template-next"))
    assert dirty.returncode == 2 and "uncommitted changes" in dirty.stderr
    git = ["git", "-c", "user.name=Vendor", "-c", "user.email=vendor@example.com"]
    subprocess.run([*git, "commit", "-qam", "vendor edits"], cwd=project, check=True)

    ok(fl_sdk(sdk_env, "update", str(project), "--template", str(tmp_path / "template-next")))

    assert "## Our chip notes\nKeep this." in (project / "README.md").read_text()
    assert "KT_DTYPE(FL_FLOAT32)" in (project / "src" / "kernels_unary.c").read_text()
    assert (project / "CHANGES.md").read_text() == "# upd: template changes\n"
    assert "streams (template 1.1 wording)" in (project / "src" / "stream.c").read_text()
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == f"v{version}"
    ok(fl_sdk(sdk_env, "build", str(project)))           # the merged project still compiles
