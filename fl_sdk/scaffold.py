"""Render and update vendor plugin projects from the packaged template.

The template (`vendor_template/`, a copier template) ships inside the torch-fl
package, where it is plain files.  copier's three-way `update` needs every
template version as a tagged git commit, so the SDK keeps a *template store*:
a git repository (``$TORCH_FL_TEMPLATE_STORE``, default
``~/.cache/torch-fl/vendor-template``) into which each template version it
meets is published as a commit tagged ``v<VERSION>``.  A project records the
store and the tag it was rendered from (`.copier-answers.yml`); a newer
torch-fl ships a newer VERSION, which `update` publishes next to the old one so
copier can diff old template -> new template and replay that on the vendor's
files.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

# vendor_template/ is installed next to fl_sdk/ (a top-level package of the
# same distribution), in a checkout and in site-packages alike.
TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "vendor_template"

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")
ANSWERS_FILE = ".copier-answers.yml"
STORE_ENV = "TORCH_FL_TEMPLATE_STORE"
# Commits in the store (and a new project's first commit when the user has no
# git identity) need an author; these name the SDK.
_SDK_IDENTITY = {"GIT_AUTHOR_NAME": "fl-sdk", "GIT_AUTHOR_EMAIL": "fl-sdk@torch-fl.invalid",
                 "GIT_COMMITTER_NAME": "fl-sdk", "GIT_COMMITTER_EMAIL": "fl-sdk@torch-fl.invalid"}


class ScaffoldError(RuntimeError):
    """A project could not be created or updated; the message says why and what to do."""


class InvalidNameError(ScaffoldError):
    """The plugin name is not usable as a C and Python identifier."""


class DestinationNotEmptyError(ScaffoldError):
    """`fl-sdk new` would write into a directory that already has files."""


class CompilerMissingError(ScaffoldError):
    """No C compiler: the generated plugin could not be built."""


class UpdateError(ScaffoldError):
    """`fl-sdk update` cannot run on this directory (not a generated project, dirty, ...)."""


# ---- the template and its store ------------------------------------------------

def template_version(template_dir: Path = TEMPLATE_DIR) -> str:
    version_file = template_dir / "VERSION"
    if not version_file.is_file():
        raise ScaffoldError(f"{template_dir} has no VERSION file: it is not a Torch-FL vendor template")
    return version_file.read_text().strip()


def template_store() -> Path:
    return Path(os.environ.get(STORE_ENV) or Path.home() / ".cache" / "torch-fl" / "vendor-template")


def _recorded(store: Path) -> str:
    """The store as a project records it (copier's _src_path): under the user's home
    as ~/..., so a committed .copier-answers.yml names no one machine's home directory
    (copier expands ~ when it reads the store back)."""
    try:
        return "~/" + store.resolve().relative_to(Path.home().resolve()).as_posix()
    except ValueError:
        return str(store)


def _store_of(answers: dict[str, Any]) -> Path | None:
    source = answers.get("_src_path")
    return Path(source).expanduser() if source else None


def _git(args: list[str], cwd: Path, sdk_identity: bool = False) -> str:
    env = {**os.environ, **(_SDK_IDENTITY if sdk_identity else {})}
    result = subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", *args], cwd=cwd,
                            env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise ScaffoldError(f"git {' '.join(args)} failed in {cwd}: {result.stderr.strip()}")
    return result.stdout


def _has_git_identity(cwd: Path) -> bool:
    return subprocess.run(["git", "config", "user.email"], cwd=cwd, capture_output=True).returncode == 0


@contextmanager
def _locked(store: Path) -> Iterator[None]:
    """One publisher at a time (parallel `fl-sdk new` runs share the store)."""
    store.parent.mkdir(parents=True, exist_ok=True)
    with open(store.parent / f".{store.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _stage_template(store: Path, template_dir: Path) -> None:
    """Make the store's work tree and index exactly `template_dir`'s files."""
    if not (store / ".git").is_dir():
        store.mkdir(parents=True, exist_ok=True)
        _git(["init", "-q"], store)
    for child in store.iterdir():
        if child.is_dir() and child.name != ".git":
            shutil.rmtree(child)
        elif not child.is_dir():
            child.unlink()
    shutil.copytree(template_dir, store, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    _git(["add", "-A"], store)


def publish_template(template_dir: Path = TEMPLATE_DIR, store: Path | None = None) -> tuple[Path, str]:
    """Make `template_dir`'s version a tagged commit of the store; returns (store, tag).

    Publishing a version that is already there checks that it has the same
    files: two different templates under one version would break updates.
    """
    if shutil.which("git") is None:
        raise ScaffoldError("git is not installed: fl-sdk keeps template versions in a git repository "
                            "(copier needs it for `fl-sdk update`); install git")
    template_dir, store = Path(template_dir).resolve(), (store or template_store()).resolve()
    tag = f"v{template_version(template_dir)}"
    with _locked(store):
        _stage_template(store, template_dir)
        if not _git(["tag", "--list", tag], store).strip():
            _git(["commit", "-q", "--allow-empty", "-m", f"vendor template {tag}"], store, sdk_identity=True)
            _git(["tag", tag], store, sdk_identity=True)
        elif subprocess.run(["git", "diff", "--cached", "--quiet", tag], cwd=store).returncode != 0:
            raise ScaffoldError(f"template {template_dir} says version {tag[1:]} but differs from the {tag} "
                                f"already in {store}: give a changed template a new VERSION (or, while "
                                f"developing the template, point {STORE_ENV} at another directory)")
    return store, tag


# ---- fl-sdk new -------------------------------------------------------------------

def validate_name(name: str) -> None:
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidNameError(f"'{name}' is not a valid plugin name: use 1-40 lowercase letters, digits and "
                               "'_', starting with a letter (it becomes a C prefix and a Python package name)")


def _check_destination(destination: Path) -> None:
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise DestinationNotEmptyError(f"{destination} already exists and is not an empty directory: choose "
                                       "another NAME or --output, or use `fl-sdk update` on an existing plugin")


def _check_compiler() -> None:
    from .build import BuildError, compiler
    try:
        compiler()
    except BuildError as exc:
        raise CompilerMissingError(f"{exc} (the new plugin is C and `fl-sdk build` compiles it)") from None


def _copier_errors() -> tuple[type[BaseException], ...]:
    from copier.errors import CopierError
    return (CopierError, ValueError)


def new_project(name: str, destination: Path, answers: dict[str, Any] | None = None, defaults: bool = True,
                git_init: bool = True, template_dir: Path = TEMPLATE_DIR) -> Path:
    """Render the template for plugin `name` into `destination`; returns it.

    `answers` are copier answers (vendor_name, device_type, alignment,
    device_count, extra_cflags, ops); the rest take the template's defaults
    when `defaults`, else copier asks.  With `git_init` the project becomes a
    git repository with one commit, ready for `fl-sdk update`.
    """
    import copier

    validate_name(name)
    destination = Path(destination).resolve()
    _check_destination(destination)
    _check_compiler()
    store, tag = publish_template(template_dir)
    data = {**(answers or {}), "project_name": name}
    try:
        copier.run_copy(_recorded(store), destination, data=data, vcs_ref=tag, defaults=defaults, unsafe=False,
                        quiet=True, cleanup_on_error=True)
    except _copier_errors() as exc:
        raise ScaffoldError(f"rendering the template into {destination} failed: {exc}") from None
    if git_init:
        _commit_all(destination, f"Torch-FL plugin {name} generated by fl-sdk new (template {tag})")
    return destination


def _commit_all(directory: Path, message: str) -> None:
    if not (directory / ".git").exists():
        _git(["init", "-q"], directory)
    _git(["add", "-A"], directory)
    _git(["commit", "-q", "-m", message], directory, sdk_identity=not _has_git_identity(directory))


# ---- fl-sdk update ----------------------------------------------------------------

def read_answers(directory: Path) -> dict[str, Any]:
    answers_file = directory / ANSWERS_FILE
    if not answers_file.is_file():
        raise UpdateError(f"{directory} has no {ANSWERS_FILE}: it was not generated by `fl-sdk new`, so there "
                          "is nothing to update from")
    return yaml.safe_load(answers_file.read_text()) or {}


def _check_updatable(directory: Path, answers: dict[str, Any]) -> None:
    if subprocess.run(["git", "rev-parse", "--git-dir"], cwd=directory, capture_output=True).returncode != 0:
        raise UpdateError(f"{directory} is not a git repository: `fl-sdk update` merges three-way through git; "
                          "run `git init && git add -A && git commit -m plugin` there first")
    # Only the plugin's own folder must be clean: a plugin may live in a larger repository
    # (a monorepo), whose other uncommitted work the update never touches.
    if _git(["status", "--porcelain", "--", "."], directory).strip():
        raise UpdateError(f"{directory} has uncommitted changes: commit (or stash) them, then update, so the "
                          "update's changes can be reviewed with `git diff`")
    source, commit = _store_of(answers), answers.get("_commit")
    if not source or not commit:
        raise UpdateError(f"{directory / ANSWERS_FILE} does not record the template it came from "
                          "(_src_path, _commit)")
    if subprocess.run(["git", "rev-parse", "--verify", "-q", f"refs/tags/{commit}"], cwd=source,
                      capture_output=True).returncode != 0:
        raise UpdateError(f"template {commit}, which rendered {directory}, is not in the template store {source}: "
                          f"publish it first (run any fl-sdk new/update of a torch-fl that ships it, or "
                          f"`fl-sdk update --template DIR` with that template version's directory)")


def update_project(directory: Path, template_dir: Path = TEMPLATE_DIR, conflict: str = "inline") -> str:
    """Re-render `directory` on `template_dir`'s version, keeping the vendor's edits
    (copier's three-way merge; conflicts inline or as .rej files).  Returns the new tag."""
    from copier import Worker

    directory = Path(directory).resolve()
    answers = read_answers(directory)
    store, tag = publish_template(template_dir, _store_of(answers))
    _check_updatable(directory, answers)
    try:
        with Worker(dst_path=directory, src_path=_recorded(store), vcs_ref=tag, defaults=True, overwrite=True,
                    conflict=conflict, quiet=True, unsafe=False) as worker:
            worker.run_update()
    except _copier_errors() as exc:
        raise UpdateError(f"updating {directory} to template {tag} failed: {exc}") from None
    return tag
