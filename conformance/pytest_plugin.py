"""Glue between pytest and the suite: options, the run's context, fixtures,
known-failure waivers, kernel-worker planning and the JSON report.

Loaded by conformance.runner with `-p conformance.pytest_plugin`; inert in a
pytest run that does not pass --fl-plugin.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from fl_runtime.errors import VendorError
from fl_runtime.plugins.loader import Plugin

from . import human_report
from . import waivers as waiver_file
from .harness import Device, KernelEntry, kernel_entries
from .isolation import KernelWorkers, LoadCrash
from .kernel_plan import KernelTarget, jobs, precheck, targets
from .profiles import PROFILES, Profile
from .progress import ProgressBar
from .report import DETAILS, IDENTITY, LOAD_REFUSED, JsonReport, load_failure_document, load_failure_junit
from .target import TargetError, describe, device_properties, load

CONTEXT = pytest.StashKey["Context"]()


@dataclass
class Context:
    """Everything one run shares: the plugin under test and how to test it."""
    plugin: Plugin
    library: str
    profile: Profile
    seed: int
    run_known_failures: bool
    waiver_path: Path
    waivers: list
    device: dict                      # device 0's raw properties
    entries: list[KernelEntry]
    description: dict
    workers: KernelWorkers

    def property_settings(self, **overrides) -> settings:
        """Hypothesis settings for in-process property tests (seeded by --hypothesis-seed)."""
        base = dict(max_examples=self.profile.property_examples, deadline=None, database=None, derandomize=False,
                    suppress_health_check=list(HealthCheck), print_blob=False)
        return settings(**{**base, **overrides})


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torch-fl conformance")
    group.addoption("--fl-plugin", help="the plugin library under test")
    group.addoption("--fl-profile", default="ci", choices=sorted(PROFILES))
    group.addoption("--fl-seed", type=int, default=0)
    group.addoption("--fl-json", default=None, help="write the JSON report here")
    group.addoption("--fl-html", default=None, help="write the HTML report (per-kernel table) here")
    group.addoption("--fl-run-known-failures", action="store_true")
    group.addoption("--fl-unit-timeout", type=float, default=None,
                    help="seconds a kernel worker may stay silent on one unit (default: the profile's)")


def pytest_configure(config: pytest.Config) -> None:
    library = config.getoption("fl_plugin", default=None)
    if not library:
        return
    profile = PROFILES[config.getoption("fl_profile")]
    if config.getoption("fl_unit_timeout") is not None:
        if profile.fixed:
            raise pytest.UsageError(f"the {profile.name} profile runs with fixed settings; remove --fl-unit-timeout")
        profile = replace(profile, unit_timeout_s=config.getoption("fl_unit_timeout"))
    seed = config.getoption("fl_seed")
    started = time.time()
    workers = KernelWorkers(library, profile, seed)
    crash = workers.check_loading(profile.unit_timeout_s)   # before this process loads it
    if crash is not None:
        workers.close()
        _stop_before_tests(config, library, profile, seed, crash, int(pytest.ExitCode.TESTS_FAILED), started)
    try:
        waiver_path = waiver_file.waiver_file(library)
        waivers = waiver_file.load(waiver_path)
    except waiver_file.WaiverError as exc:
        workers.close()
        raise pytest.UsageError(str(exc)) from exc
    try:
        plugin = load(library)
        context = Context(plugin, plugin.source.path, profile, seed, config.getoption("fl_run_known_failures"),
                          waiver_path, waivers, device_properties(plugin, 0), kernel_entries(plugin),
                          describe(plugin), workers)
    except (TargetError, VendorError) as exc:
        # The loader refused the plugin, or it cannot give its tables (a kernel registered
        # twice): no test can run, and the vendor's CI still gets a report saying why.
        workers.close()
        _stop_before_tests(config, library, profile, seed, LoadCrash(f"the plugin was refused at load: {exc}"),
                           LOAD_REFUSED, started)
    config.stash[CONTEXT] = context
    config.pluginmanager.register(JsonReport(context, config.getoption("fl_json"), config.getoption("fl_html")),
                                  "torch-fl-json-report")
    config.pluginmanager.register(ProgressBar(), "torch-fl-progress")


def _stop_before_tests(config: pytest.Config, library: str, profile: Profile, seed: int, crash: LoadCrash,
                       exit_status: int, started: float) -> None:
    """Loading the plugin killed its worker (pytest's 'tests failed' status) or the loader
    refused it (LOAD_REFUSED): write the reports (one abi failure naming why) and end the
    run; no test can run."""
    document = load_failure_document(library, profile, seed, config.getoption("fl_run_known_failures"),
                                     waiver_file.waiver_file(library), crash.message, crash.signal, exit_status, started)
    if config.getoption("fl_json"):
        Path(config.getoption("fl_json")).write_text(json.dumps(document, indent=1))
    if config.getoption("fl_html"):
        Path(config.getoption("fl_html")).write_text(human_report.html_page(document))
    if getattr(config.option, "xmlpath", None):      # pytest's --junitxml
        load_failure_junit(config.option.xmlpath, document)
    pytest.exit(f"Torch-FL conformance: {crash.message}; no test could run (abi: 1 fail)", exit_status)


def pytest_unconfigure(config: pytest.Config) -> None:
    if CONTEXT in config.stash:
        config.stash[CONTEXT].workers.close()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """A -k that selects nothing: say whether the plugin has a kernel of that name at all."""
    keyword = config.getoption("keyword", default="")
    if exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED or not keyword or CONTEXT not in config.stash:
        return
    context = config.stash[CONTEXT]
    terminalreporter.write_line(unmatched_keyword(keyword, sorted({e.op for e in context.entries}),
                                                  context.plugin.name, context.library))


def unmatched_keyword(keyword: str, ops: list[str], plugin: str, library: str) -> str:
    kernels = f"its kernels: {', '.join(ops) or 'none'}"
    todo = f"`fl-sdk todo {library}` ranks the ops reference workloads call that it lacks"
    if keyword.isidentifier() and not any(keyword in op for op in ops):
        return (f"-k {keyword}: plugin '{plugin}' has no kernel for {keyword} ({kernels}), so the suite has nothing "
                f"of it to test; write and register one (the section Add a kernel of the plugin's README). {todo}.")
    return f"-k {keyword} selects none of plugin '{plugin}''s tests ({kernels}). {todo}."


def _identity(item: pytest.Item) -> dict:
    target = getattr(item, "callspec", None) and item.callspec.params.get("target")
    entry = target.entry if isinstance(target, KernelTarget) else None
    return {"category": getattr(item.module, "CATEGORY", "?"), "op": entry.op if entry else None,
            "dtype": target.dtype if entry else None, "variant": entry.variant_name if entry else None,
            "test": item.name}


@pytest.hookimpl(tryfirst=True)   # before -k deselects, so waivers match the whole suite
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if CONTEXT not in config.stash:
        return
    context = config.stash[CONTEXT]
    for item in items:
        identity = item.stash[IDENTITY] = _identity(item)
        waiver = waiver_file.find(context.waivers, identity)
        if waiver is None:
            continue
        reason = f"[known_failure] {waiver.reason}"
        item.add_marker(pytest.mark.xfail(reason=reason, strict=False) if context.run_known_failures
                        else pytest.mark.skip(reason=reason))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start kernel workers for exactly the kernel tests that will run, in test order."""
    if CONTEXT not in session.config.stash:
        return
    context = session.config.stash[CONTEXT]
    runnable = []
    for item in session.items:
        target = getattr(item, "callspec", None) and item.callspec.params.get("target")
        skipped = any(m.name == "skip" for m in item.iter_markers())
        if isinstance(target, KernelTarget) and not skipped and precheck(target, context.device) is None:
            runnable.append(target)
    context.workers.submit(jobs(runnable))


@pytest.fixture(scope="session")
def conformance(request: pytest.FixtureRequest) -> Context:
    if CONTEXT not in request.config.stash:
        pytest.skip("run through `fl-sdk test PLUGIN` (no --fl-plugin given)")
    return request.config.stash[CONTEXT]


@pytest.fixture
def device(conformance: Context) -> Device:
    return Device(conformance.plugin, 0)


@pytest.fixture
def details(request: pytest.FixtureRequest) -> dict:
    """What a test wants in its JSON record (max_error, tolerance, reproducer ...)."""
    return request.node.stash.setdefault(DETAILS, {})


def parametrize_kernels(metafunc: pytest.Metafunc, kind: str) -> None:
    """A suite module's pytest_generate_tests: one test per kernel target of `kind`."""
    if "target" not in metafunc.fixturenames:
        return
    context = metafunc.config.stash.get(CONTEXT, None)
    found = targets(context.entries, kind) if context else []
    metafunc.parametrize("target", found, ids=[t.id for t in found])
