"""The vendor template and `fl-sdk new` / `update` (docs/vendors/quick-start.md).

End to end through the command line, as a vendor would: scaffold, build, load
next to the reference vendor, run the conformance categories the template
must pass out of the box, fill in one kernel and check its numerics, lift a
reference vendor kernel file into a scaffolded plugin unchanged (both are
written against the SDK kernel library, fl_kernel.h), and update a project
with vendor edits to a changed template and from the previous template
version.  The runtime runs in fresh processes (TORCH_FL_PLUGINS differs from
the test process's).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from conformance.report import LOAD_REFUSED
from fl_runtime import abi

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_DIR = ROOT / "vendor_template"
STARTING_OPS = "neg,add.Tensor,fill_.Scalar"

# neg for float32, written with the SDK kernel library (fl_kernel.h): any strides, misaligned data.
NEG_SKELETON_TAIL = "    (void)self;\n    (void)out;\n    return flk_unwritten(ctx);"
NEG_BODY = """    int64_t n = flk_numel(out);
    for (int64_t i = 0; i < n; i++)
        *(flk_f32 *)flk_element(out, out, i) = -*(const flk_f32 *)flk_element(self, out, i);
    return FL_SUCCESS;"""
NEG_REGISTRATION = 'FLK_REGISTER("neg", FLK_DT(FL_FLOAT32), kernel_neg);'


def fill_in_neg(project: Path) -> None:
    source = project / "src" / "kernels" / "unary.c"
    text = source.read_text()
    # The skeleton is already registered for float32; writing the body is all it takes.
    assert NEG_SKELETON_TAIL in text and NEG_REGISTRATION in text
    source.write_text(text.replace(NEG_SKELETON_TAIL, NEG_BODY))


def kernel_sources(project: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in (project / "src" / "kernels").glob("*.c")}


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
    spec = yaml.safe_load((acme / "plugin.yaml").read_text())
    assert spec["cflags"] == ["-O2", "-g"] and spec["sdk_libraries"] == ["kernel", "driver"]
    kernels = kernel_sources(acme)
    registered = "".join(kernels.values())
    for op in STARTING_OPS.split(","):    # each skeleton registers itself next to its code
        assert re.search(rf'FLK_REGISTER\("{re.escape(op)}", FLK_DT\(FL_FLOAT32\), kernel_\w+\);', registered), \
            f"{op} is not registered"
    assert "kernel_mm" not in registered and "matmul.c" not in kernels
    assert not (acme / "src" / "kernel_table.c").exists()     # no central table to edit
    sources = {p.name: p.read_text() for p in (acme / "src").glob("*.c")}
    assert "TODO(vendor)" in kernels["unary.c"] and "return flk_unwritten(ctx);" in kernels["unary.c"]
    assert '.device_type = "acme-npu"' in sources["plugin.c"]
    assert "#define DEVICE_ALIGNMENT 512u" in sources["host_driver.c"]     # the host stand-in, one file
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
    # fl-sdk test needs the SDK's extras (pytest, hypothesis, ...): plain torch-fl lacks them.
    installs = [line for line in commands.splitlines() if "pip install" in line and "torch-fl" in line]
    assert installs and all(re.search(r"""pip install ["']?torch-fl\[sdk\]""", line) for line in installs), installs
    test_command = next(line for line in commands.replace("\\\n", " ").splitlines() if "fl-sdk test" in line)
    for flag in ("fl-sdk test . ", "--profile ci", "--junit", "--json", "--html"):
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
    # Each skeleton reads exactly the arguments launch_kernel gets for its op, in order.
    signatures = {}
    for text in kernel_sources(tmp_path / "allops").values():
        for body in re.split(r"\nFLK_KERNEL_FN\(", text)[1:]:
            op, count = re.search(r'flk_args_init\(&a, "([^"]+)", args, nargs, (\d+), ctx\)', body).groups()
            getters = re.findall(r"flk_get_(tensor|operand|scalar)\(&a, (\d+),", body)
            assert [int(i) for _, i in getters] == list(range(int(count))), op
            signatures[op] = "".join("S" if kind == "scalar" else "T" for kind, _ in getters)
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
    result = ok(fl_sdk(sdk_env, "test", str(library(acme)), "--profile", "ci", "--json", str(report),
                       "-k", "test_numerics and float32"))
    # Declined explicit cases are passed over without hypothesis' reject() (deprecated outside a test).
    assert "HypothesisDeprecationWarning" not in result.stdout + result.stderr
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


def readme_example(project: Path) -> tuple[str, str]:
    """The scaffold README's section Add a kernel: its example body and registration line, as copied."""
    section = (project / "README.md").read_text().split("## Add a kernel", 1)[1]
    body = re.search(r"```c\n(.*?)```", section, re.S).group(1)
    registration = re.search(r"`(FLK_REGISTER\(.*?\);)`", section).group(1)
    return body, registration


def test_the_readme_example_passes_for_every_dtype_it_registers(acme, sdk_env, tmp_path):
    """Followed literally, "Add a kernel" gives a neg that passes for each dtype its registration lists."""
    project = tmp_path / "acme"
    shutil.copytree(acme, project, ignore=shutil.ignore_patterns(".git", "*.so"))
    body, registration = readme_example(project)
    source = project / "src" / "kernels" / "unary.c"
    text = source.read_text().replace(NEG_SKELETON_TAIL, textwrap.indent(textwrap.dedent(body).rstrip(), "    "))
    source.write_text(text.replace(NEG_REGISTRATION, registration))
    ok(fl_sdk(sdk_env, "build", str(project)))
    report = tmp_path / "neg.json"
    ok(fl_sdk(sdk_env, "test", str(project), "--json", str(report), "-k", "test_numerics and neg and precise"))
    statuses = {t["dtype"]: t["status"] for t in json.loads(report.read_text())["tests"]}
    passed = {dtype for dtype, status in statuses.items() if status == "pass"}
    assert passed == {"float32", "float16"} and "fail" not in statuses.values(), statuses


def test_test_and_verify_take_the_project_directory(acme, sdk_env):
    """From the folder holding the project, `fl-sdk test acme` means the library its plugin.yaml names."""
    result = ok(fl_sdk(sdk_env, "test", "acme", "-k", "test_entry_symbol", cwd=acme.parent))
    assert "1 pass" in result.stdout, result.stdout
    result = fl_sdk(sdk_env, "verify", "acme", "--trusted-key", "acme/no-such.pub", cwd=acme.parent)
    assert result.returncode == 2 and "no such library" not in result.stderr
    assert "no-such.pub" in result.stderr, result.stderr
    result = fl_sdk(sdk_env, "test", "src", cwd=acme)
    assert result.returncode == 2 and "without plugin.yaml" in result.stderr, result.stderr


def test_a_kernel_registered_twice_is_a_load_failure_with_its_reports(acme, sdk_env, tmp_path):
    """Not a pytest INTERNALERROR: its own exit status, the loader's reason, JSON and JUnit."""
    project = tmp_path / "acme"
    shutil.copytree(acme, project, ignore=shutil.ignore_patterns(".git", "*.so"))
    source = project / "src" / "kernels" / "unary.c"
    source.write_text(source.read_text().replace(NEG_REGISTRATION, NEG_REGISTRATION + "\n" + NEG_REGISTRATION))
    ok(fl_sdk(sdk_env, "build", str(project)))
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    result = fl_sdk(sdk_env, "test", str(project), "--json", str(report), "--junit", str(junit))
    assert result.returncode == LOAD_REFUSED and "INTERNALERROR" not in result.stdout + result.stderr
    assert "registered twice" in result.stdout + result.stderr
    data = json.loads(report.read_text())
    assert data["exit_status"] == LOAD_REFUSED and data["summary"]["fail"] == 1
    assert "registered twice" in data["tests"][0]["message"]
    assert "registered twice" in junit.read_text()


def test_k_naming_an_op_the_plugin_lacks_says_so(acme, sdk_env):
    result = fl_sdk(sdk_env, "test", str(acme), "-k", "gelu")
    assert result.returncode == 5            # pytest's "nothing selected", now with the reason
    assert "plugin 'acme' has no kernel for gelu" in result.stdout and "fl-sdk todo" in result.stdout, result.stdout


def test_todo_ranks_the_ops_reference_workloads_need_that_the_plugin_lacks(acme, sdk_env, tmp_path):
    """`fl-sdk todo`: traced with the runtime's coverage tool; a kernel the plugin has is not on it."""
    out = tmp_path / "todo.json"
    result = ok(fl_sdk(sdk_env, "todo", str(acme), "--json", str(out), "--top", "5", timeout=900))
    document = json.loads(out.read_text())
    assert {"CNN", "AdamW step"} <= set(document["traced"])
    if importlib.util.find_spec("transformers"):
        assert {"GPT-2", "BERT", "Llama", "T5", "ViT"} <= set(document["traced"]), document["skipped"]
    todo = {op["op"]: op for op in document["todo"]}
    assert "aten::add.Tensor" not in todo                       # acme registers it
    mm = todo["aten::mm"]
    assert mm["status"] == "cpu" and mm["calls"] == sum(mm["workloads"].values()) > 0
    calls = [op["calls"] for op in document["todo"] if op["status"] == "cpu"]
    assert calls == sorted(calls, reverse=True)                 # the most called first
    table = result.stdout.splitlines()
    assert len([line for line in table if re.match(r"\s+\d+\s+aten::", line)]) == 5
    assert "aten::mm" in result.stdout


def test_the_human_report_has_what_to_implement_next(acme, sdk_env, tmp_path):
    report, page = tmp_path / "report.json", tmp_path / "report.html"
    ok(fl_sdk(sdk_env, "test", str(acme), "-k", "test_entry_symbol", "--todo", "--json", str(report),
              "--html", str(page), timeout=900))
    todo = json.loads(report.read_text())["todo"]
    assert todo["ops"] and todo["ops"][0]["status"] == "cpu"
    assert "<h2>What to implement next</h2>" in page.read_text() and todo["ops"][0]["op"] in page.read_text()


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


def test_a_plugin_inside_a_larger_repository_updates_beside_its_unrelated_work(sdk_env, tmp_path):
    """A plugin in a monorepo (`fl-sdk new --no-git` in a subfolder): only its own folder must
    be clean; other uncommitted work of the repository neither blocks the update nor changes."""
    repo = tmp_path / "mono"
    git = ["git", "-c", "user.name=Vendor", "-c", "user.email=vendor@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "plugins").mkdir()
    project = new_plugin(sdk_env, repo / "plugins", "sub", "--ops", "neg", "--no-git")
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "the plugin"], cwd=repo, check=True)
    (repo / "notes.txt").write_text("someone else's work in progress\n")
    version = changed_template(tmp_path / "template-next")

    ok(fl_sdk(sdk_env, "update", str(project), "--template", str(tmp_path / "template-next")))

    assert (project / "CHANGES.md").read_text() == "# sub: template changes\n"
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == f"v{version}"
    assert (repo / "notes.txt").read_text() == "someone else's work in progress\n"
    (project / "README.md").write_text("edited, not committed\n")       # the plugin's own folder: refused
    dirty = fl_sdk(sdk_env, "update", str(project), "--template", str(tmp_path / "template-next"))
    assert dirty.returncode == 2 and "uncommitted changes" in dirty.stderr


def test_the_answers_file_names_a_store_under_home_by_tilde_and_updates_from_it(tmp_path):
    """.copier-answers.yml is committed with the plugin: the default template store, under the
    user's home, is recorded as ~/... rather than one machine's absolute home path (the OpenCL
    plugin's KIT_NOTES 10), and `update` finds the store through it."""
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "TORCH_FL_TEMPLATE_STORE"}
    env.update(PYTHONPATH=str(ROOT), HOME=str(home))
    project = new_plugin(env, tmp_path, "tilde", "--ops", "neg")
    recorded = "~/.cache/torch-fl/vendor-template"
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_src_path"] == recorded
    version = changed_template(tmp_path / "template-next")

    ok(fl_sdk(env, "update", str(project), "--template", str(tmp_path / "template-next")))

    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert answers["_src_path"] == recorded and answers["_commit"] == f"v{version}"
    assert (project / "CHANGES.md").read_text() == "# tilde: template changes\n"


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
    unary = (project / "src" / "kernels" / "unary.c").read_text()
    assert NEG_BODY in unary and NEG_REGISTRATION in unary
    assert (project / "CHANGES.md").read_text() == "# upd: template changes\n"
    assert "streams (template 1.1 wording)" in (project / "src" / "stream.c").read_text()
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == f"v{version}"
    ok(fl_sdk(sdk_env, "build", str(project)))           # the merged project still compiles


# ---- the SDK kernel library: one kernel interface for the reference and scaffolded plugins ----

LIFTED_FILE = ROOT / "reference_vendor" / "src" / "kernels" / "activation.c"

LIFTED_CHECK = """
import torch, torch_fl
F = torch.nn.functional
assert [d["type"] for d in torch_fl.list_devices()] == ["lifted"], torch_fl.list_devices()
x = torch.linspace(-6, 6, 240, dtype=torch.float32).reshape(3, 80)[:, ::2]   # strided
cases = {"aten::gelu": lambda t: F.gelu(t, approximate="tanh"), "aten::silu": F.silu,
         "aten::relu": torch.relu, "aten::sigmoid": torch.sigmoid, "aten::tanh": torch.tanh,
         "aten::leaky_relu": lambda t: F.leaky_relu(t, 0.1), "aten::elu": F.elu,
         "aten::softplus": F.softplus, "aten::hardtanh": F.hardtanh}
with torch_fl.profile() as prof:
    for op, fn in cases.items():
        torch.testing.assert_close(fn(x.to("fl:0")).cpu(), fn(x), rtol=1e-5, atol=1e-6, msg=op)
paths = prof.paths()
assert all(paths[op] == {"native"} for op in cases), paths     # the lifted kernels ran, no fallback
print("OK")
"""


def test_a_reference_kernel_file_compiles_unchanged_in_a_scaffolded_plugin(sdk_env, python, tmp_path):
    """reference_vendor/src/kernels/activation.c, copied as it is into a plugin `fl-sdk new`
    scaffolded: it builds against the same SDK kernel library, registers its kernels in
    the plugin's table (no table or header to edit), and computes what PyTorch's CPU does."""
    project = new_plugin(sdk_env, tmp_path, "lifted", "--ops", "neg", "--no-git")
    shutil.copy(LIFTED_FILE, project / "src" / "kernels" / LIFTED_FILE.name)
    ok(fl_sdk(sdk_env, "build", str(project)))
    env = {"TORCH_FL_PLUGINS": str(library(project)), "TORCH_FL_DISABLE_ENTRY_POINTS": "1"}
    result = python(LIFTED_CHECK, env=env)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]
    # ... the conformance suite's numerics pass for gelu's two variants, and the skeleton next to
    # them still declines
    report = tmp_path / "lifted.json"
    ok(fl_sdk(sdk_env, "test", str(library(project)), "--profile", "ci", "--json", str(report),
              "-k", "test_numerics and float32 and (gelu- or neg-)"))
    results = {(t["op"], t["variant"]): t["status"] for t in json.loads(report.read_text())["tests"]}
    assert results == {("gelu", "precise"): "pass", ("gelu", "fast"): "pass",
                       ("neg", "precise"): "not_supported"}, results


# The template as it shipped at VERSION 1.2.0 (ABI 1.1), frozen: projects vendors scaffolded then.
TEMPLATE_ABI_1_1 = ROOT / "tests" / "fixtures" / "template_abi_1_1"


def scaffold_from_abi_1_1_template(sdk_env: dict, project: Path, ops: list[str]) -> None:
    """A project as `fl-sdk new` of the ABI 1.1 torch-fl made it (template 1.2.0), committed."""
    generate = (f"from pathlib import Path\nfrom fl_sdk.scaffold import new_project\n"
                f"new_project({project.name!r}, Path({str(project)!r}), {{'ops': {ops!r}}}, "
                f"template_dir=Path({str(TEMPLATE_ABI_1_1)!r}))\n")
    subprocess.run([sys.executable, "-c", generate], env=sdk_env, check=True, capture_output=True)
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == "v1.2.0"


def commit_vendor_edits(project: Path) -> None:
    git = ["git", "-c", "user.name=Vendor", "-c", "user.email=vendor@example.com"]
    subprocess.run([*git, "commit", "-qam", "vendor edits"], cwd=project, check=True)


def test_update_from_the_abi_1_1_template_builds_on_the_driver_library_and_keeps_driver_edits(
        sdk_env, python, tmp_path):
    """A plugin scaffolded by the ABI 1.1 torch-fl (template 1.2.0), with vendor edits in its
    driver, updates to this template (ABI 1.2): the edits stay, the ABI rules it carried in
    src/error.c and src/registry.c give way to the SDK driver library, the project builds and
    speaks ABI 1.2 (lifecycle, host-memory skeletons), refuses the overflowing tensor, and its
    kernel skeletons are registered and decline as before."""
    project = tmp_path / "upd"
    scaffold_from_abi_1_1_template(sdk_env, project, ["neg", "add.Tensor"])
    with (project / "src" / "device.c").open("a") as device:
        device.write("\n/* Upd: our driver notes, kept across updates. */\n")
    commit_vendor_edits(project)

    ok(fl_sdk(sdk_env, "update", str(project)))

    assert "/* Upd: our driver notes, kept across updates. */" in (project / "src" / "device.c").read_text()
    version = (TEMPLATE_DIR / "VERSION").read_text().strip()
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == f"v{version}"
    assert not (project / "src" / "error.c").exists() and not (project / "src" / "registry.c").exists()
    assert yaml.safe_load((project / "plugin.yaml").read_text())["sdk_libraries"] == ["kernel", "driver"]
    ok(fl_sdk(sdk_env, "build", str(project)))
    report = tmp_path / "upd.json"
    ok(fl_sdk(sdk_env, "test", str(library(project)), "--profile", "ci", "--json", str(report),
              "-k", "test_numerics and float32 or overflows"))
    document = json.loads(report.read_text())
    results = {t["op"] or t["test"]: t["status"] for t in document["tests"]}
    assert results == {"neg": "not_supported", "add.Tensor": "not_supported",
                       "test_launch_refuses_a_tensor_whose_extent_overflows": "pass"}, results
    assert document["plugin"]["abi_version"] == f"1.{abi.ABI_MINOR}"    # the ABI 1.1 project now speaks today's
    assert "PLG_HOST_MEMORY_READY" in (project / "src" / "internal.h").read_text()
    assert "plugin_initialize" in (project / "src" / "plugin.c").read_text()


TEMPLATE_COLLECTIVES_CHECK = r"""
import json, torch_fl
from fl_runtime.abi import ffi
from fl_runtime.integration.process import start
from fl_runtime.integration.distributed.vendor import _usable
from fl_runtime.plugins.extensions import collectives_of
device = start().devices[0]
ext = collectives_of(device.plugin)
result = {"offered": ext is not None, "usable": _usable(device)}
if ext is not None:
    uid = ffi.new("fl_comm_unique_id*")
    args = ffi.new("fl_comm_get_unique_id_args*", {"struct_size": ffi.sizeof("fl_comm_get_unique_id_args"),
                                                  "device": 0, "unique_id": uid})
    result["status"] = int(ext.table.comm_get_unique_id(args))
    result["message"] = ffi.string(device.plugin.api.last_error_message()).decode()
    result["calls"] = sorted(ext.offered)
print(json.dumps(result))
"""


def test_collective_skeletons_stay_off_until_turned_on_and_then_decline(sdk_env, python, tmp_path):
    """A project from the ABI 1.1 template, updated to this one, with an edit in its entry point:
    the edit stays, and it offers no collectives until the vendor turns them on; turned on, each
    skeleton declines with FL_ERROR_NOT_SUPPORTED and the runtime keeps the plugin's distributed
    jobs host-staged."""
    project = tmp_path / "coll"
    scaffold_from_abi_1_1_template(sdk_env, project, ["neg"])
    with (project / "src" / "plugin.c").open("a") as plugin:
        plugin.write("\n/* Coll: our entry-point notes, kept across updates. */\n")
    commit_vendor_edits(project)

    ok(fl_sdk(sdk_env, "update", str(project)))

    assert "/* Coll: our entry-point notes, kept across updates. */" in (project / "src" / "plugin.c").read_text()
    assert "plg_collectives" in (project / "src" / "plugin.c").read_text()
    assert "FL_ERROR_NOT_SUPPORTED" in (project / "src" / "collective.c").read_text()
    env = {"TORCH_FL_PLUGINS": str(library(project)), "TORCH_FL_DISABLE_ENTRY_POINTS": "1"}
    ok(fl_sdk(sdk_env, "build", str(project)))
    result = python(TEMPLATE_COLLECTIVES_CHECK, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"offered": False, "usable": False}

    internal = project / "src" / "internal.h"          # what the vendor does once they are written
    internal.write_text(internal.read_text().replace("#define PLG_COLLECTIVES_READY 0",
                                                     "#define PLG_COLLECTIVES_READY 1"))
    ok(fl_sdk(sdk_env, "build", str(project)))
    result = python(TEMPLATE_COLLECTIVES_CHECK, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["offered"] and not got["usable"], got
    assert got["status"] == 8 and "not written yet" in got["message"], got      # FL_ERROR_NOT_SUPPORTED
    assert got["calls"] == ["all_gather", "all_reduce", "all_to_all", "broadcast", "recv", "reduce_scatter",
                            "send"], got


# ---- ABI 1.2: the lifecycle, and runtimes too old to drive it ---------------------------

def _refusal_by(checks, levels, lib) -> str:
    from fl_runtime.abi import ffi
    with pytest.raises(checks.TableRefusal) as refused:
        checks.negotiate(ffi, levels, getattr(lib, "fl_plugin_get_api"))
    assert refused.value.kind == checks.ABI_REFUSAL
    return refused.value.message


def test_a_scaffolded_1_2_plugin_is_refused_by_a_1_1_runtime_with_a_clear_message(acme):
    """A scaffolded plugin opens its driver in plugin_initialize (ABI 1.2), which a 1.1 runtime
    never calls: it refuses such a runtime (fl_abi.h "COMPATIBILITY PROMISE").  Negotiated as this
    runtime does but asking for 1.1, the refusal carries the plugin's own reason; this runtime
    (asking for 1.2) loads it and initialises it."""
    from dataclasses import replace

    from fl_runtime.abi import ffi
    from fl_runtime.plugins import table_checks
    from fl_runtime.plugins.loader import _LEVELS
    lib = ffi.dlopen(str(library(acme)))
    message = _refusal_by(table_checks, replace(_LEVELS, minor=1), lib)
    assert message.startswith(f"refuses ABI 1.1; it speaks ABI 1.{_LEVELS.minor}: ") and "acme" in message, message
    assert "needs a runtime that speaks ABI 1.2 or later" in message and "upgrade Torch-FL" in message, message
    api = table_checks.negotiate(ffi, _LEVELS, getattr(lib, "fl_plugin_get_api"))
    table_checks.initialize(ffi, _LEVELS, api)
    assert table_checks.teardown(ffi, api) == 0


def _last_commit_at_abi_1_1() -> str | None:
    git = ["git", "-C", str(ROOT)]
    log = subprocess.run([*git, "log", "--format=%H", "-n", "50", "--", "fl_sdk/include/fl_abi.h"],
                         capture_output=True, text=True)
    for commit in log.stdout.split() if log.returncode == 0 else []:
        header = subprocess.run([*git, "show", f"{commit}:fl_sdk/include/fl_abi.h"], capture_output=True, text=True)
        if "#define FL_ABI_VERSION_MINOR 1\n" in header.stdout:
            return commit
    return None


def test_the_1_1_release_refuses_a_1_2_plugin_by_name(acme, tmp_path):
    """The same plugin against the loader checks torch-fl shipped with ABI 1.1 (from this
    checkout's history): refused as an ABI mismatch, with the message that release printed."""
    commit = _last_commit_at_abi_1_1()
    if commit is None:
        pytest.skip("the 1.1 release's loader needs this checkout's git history")
    old = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:fl_runtime/plugins/table_checks.py"],
                         capture_output=True, text=True, check=True).stdout
    (tmp_path / "old_table_checks.py").write_text(old)
    import importlib.util
    spec = importlib.util.spec_from_file_location("old_table_checks", tmp_path / "old_table_checks.py")
    checks = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = checks
    spec.loader.exec_module(checks)
    from fl_runtime.abi import ffi
    levels = checks.AbiLevels(1, 1, 0, 0, 9, {}, "fl_plugin_get_api")
    message = _refusal_by(checks, levels, ffi.dlopen(str(library(acme))))
    assert message == "refuses ABI 1.1; it needs another Torch-FL release (see `torch-fl doctor`)", message
