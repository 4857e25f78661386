"""`fl-sdk test --coverage`: which branches of the plugin's own C code the suite reached.

The plugin is rebuilt from its plugin.yaml with gcov instrumentation (gcc
--coverage, one object per source so that two `copy.c` files keep separate
counters), the chosen profile runs on that build, and gcov's JSON gives, per
source file, the branches taken and the lines whose branches were never taken.
Kernel workers leave with _exit (conformance.forkserver), which skips gcov's
exit handler, so the build adds `fl_coverage_flush` (coverage_flush.c) and the
worker calls it first (FL_COVERAGE_LIBRARY names the instrumented library).

The result goes into the JSON report as `branch_coverage` and into the HTML
page as a table; a vendor sees where the certificate is thin.
"""
from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

FLUSH_SOURCE = Path(__file__).resolve().parent / "coverage_flush.c"
ENV = "FL_COVERAGE_LIBRARY"
COVERAGE_FLAGS = ["--coverage", "-O1", "-fprofile-update=atomic"]   # -O1: branches map to source lines
MAX_LINES_LISTED = 40


class CoverageError(RuntimeError):
    """The instrumented build or gcov failed; the message says what to install or pass."""


def plugin_directory(library: str) -> Path:
    """The plugin's source directory (plugin.yaml beside the library)."""
    directory = Path(library).resolve().parent
    if not (directory / "plugin.yaml").is_file():
        raise CoverageError(f"--coverage rebuilds the plugin from its sources, but {directory} has no plugin.yaml: "
                            "pass the library inside its plugin directory (where `fl-sdk build` wrote it)")
    return directory


def instrumented_build(directory: Path, work: Path) -> Path:
    """Compile every source of the plugin with gcov instrumentation into `work`; returns the library."""
    from fl_sdk.build import build_command, read_spec   # fl_sdk imports conformance; only --coverage needs it
    from fl_sdk.plugin_meta import write_metadata

    if shutil.which("gcov") is None:
        raise CoverageError("--coverage needs gcov (it comes with gcc: apt-get install gcc)")
    spec = read_spec(directory)
    spec = dataclasses.replace(spec, sources=[*spec.sources, str(FLUSH_SOURCE)], cflags=[*spec.cflags, *COVERAGE_FLAGS])
    library = work / Path(spec.library).name
    command = build_command(spec, library)
    sources = [c for c in command if c.endswith(".c")]
    out = command.index("-o")
    compile_flags = [c for c in command[:out] if not c.endswith(".c") and c != "-shared"]
    link_flags = command[out + 2:]
    compile_flags += [flag for flag in link_flags if flag.startswith("-I")]   # a linked library's headers
    objects = []
    jobs = []
    for source in sources:
        name = os.path.relpath(source, directory) if source.startswith(str(directory)) else Path(source).name
        obj = work / "obj" / (name.replace("/", "__").removesuffix(".c") + ".o")
        objects.append(obj)
        jobs.append([*compile_flags, "-c", source, "-o", str(obj)])
    (work / "obj").mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for result in pool.map(lambda job: subprocess.run(job, capture_output=True, text=True), jobs):
            if result.returncode != 0:
                raise CoverageError(f"instrumented build of {directory} failed:\n{result.stderr.strip()[-3000:]}")
    linked = subprocess.run([command[0], "-shared", "-pthread", "--coverage", *map(str, objects), "-o", str(library),
                             *link_flags], capture_output=True, text=True)
    if linked.returncode != 0:
        raise CoverageError(f"linking the instrumented {library.name} failed:\n{linked.stderr.strip()[-3000:]}")
    write_metadata(directory / "plugin.yaml", library)
    return library


def flush() -> None:
    """Write this process's counters now (no-op without --coverage): a kernel worker about to
    _exit, and the suite's own process before the counters are read.  gcov writes a process's
    counters once, so its exit handler adds nothing afterwards."""
    library = os.environ.get(ENV)
    if library:
        handle = ctypes.CDLL(library)
        if hasattr(handle, "fl_coverage_flush"):
            handle.fl_coverage_flush()


def collect(directory: Path, work: Path) -> dict:
    """Per source file: branches, branches taken, and the lines with a branch never taken."""
    files: dict[str, dict] = {}
    objects = sorted((work / "obj").glob("*.gcda"))
    for gcda in objects:
        result = subprocess.run(["gcov", "-j", "-b", "-t", "-o", str(work / "obj"), str(gcda)],
                                capture_output=True, text=True, cwd=work)
        if result.returncode != 0:
            raise CoverageError(f"gcov failed on {gcda.name}: {result.stderr.strip()[-2000:]}")
        for line in result.stdout.splitlines():
            if line.strip():
                _add(files, json.loads(line), directory)
    if not objects:
        raise CoverageError("the instrumented plugin wrote no counters: did the run load it?")
    return summarize(files)


def _add(files: dict, document: dict, directory: Path) -> None:
    for entry in document.get("files", []):
        path = Path(entry["file"])
        if not path.is_absolute():
            path = (directory / path).resolve()
        try:
            name = str(path.relative_to(directory))
        except ValueError:
            continue   # SDK libraries and the flush helper: not the vendor's code
        record = files.setdefault(name, {"branches": 0, "taken": 0, "never": {}})
        for line in entry.get("lines", []):
            branches = line.get("branches", [])
            if not branches:
                continue
            record["branches"] += len(branches)
            missed = sum(1 for b in branches if b["count"] == 0)
            record["taken"] += len(branches) - missed
            if missed:
                record["never"][line["line_number"]] = missed


def summarize(files: dict) -> dict:
    """The report's `branch_coverage`: totals, and per file its lines with untaken branches."""
    per_file = {}
    for name, record in sorted(files.items()):
        never = sorted(record["never"].items())
        per_file[name] = {"branches": record["branches"], "taken": record["taken"],
                          "percent": _percent(record["taken"], record["branches"]),
                          "lines_with_untaken_branches": [{"line": ln, "untaken": n} for ln, n in never]}
    branches = sum(r["branches"] for r in files.values())
    taken = sum(r["taken"] for r in files.values())
    kernels = {n: r for n, r in files.items() if "/kernels/" in f"/{n}"}
    k_branches = sum(r["branches"] for r in kernels.values())
    k_taken = sum(r["taken"] for r in kernels.values())
    return {"tool": "gcov", "branches": branches, "taken": taken, "percent": _percent(taken, branches),
            "kernel_sources": {"branches": k_branches, "taken": k_taken, "percent": _percent(k_taken, k_branches)},
            "files": per_file}


def _percent(taken: int, branches: int) -> float | None:
    return round(100.0 * taken / branches, 1) if branches else None


def markdown(coverage: dict) -> str:
    rows = ["| source | branches | taken | % | lines with a branch never taken |", "|---|---|---|---|---|"]
    for name, record in coverage["files"].items():
        lines = [str(x["line"]) for x in record["lines_with_untaken_branches"]]
        shown = ", ".join(lines[:MAX_LINES_LISTED])
        if len(lines) > MAX_LINES_LISTED:
            shown += f" ... ({len(lines)} lines)"
        rows.append(f"| {name} | {record['branches']} | {record['taken']} | {record['percent']} | {shown} |")
    rows.append(f"| **all** | {coverage['branches']} | {coverage['taken']} | {coverage['percent']} | |")
    k = coverage["kernel_sources"]
    rows.append(f"| **kernel sources** | {k['branches']} | {k['taken']} | {k['percent']} | |")
    return "\n".join(rows)


def html(coverage: dict) -> str:
    import html as escape
    rows = []
    for name, record in coverage["files"].items():
        lines = ", ".join(str(x["line"]) for x in record["lines_with_untaken_branches"])
        rows.append(f"<tr><td>{escape.escape(name)}</td><td>{record['branches']}</td><td>{record['taken']}</td>"
                    f"<td>{record['percent']}</td><td>{escape.escape(lines)}</td></tr>")
    k = coverage["kernel_sources"]
    return ("<h2>Branch coverage of the plugin's sources (gcov)</h2>"
            f"<p>{coverage['taken']} of {coverage['branches']} branches taken ({coverage['percent']}%); "
            f"kernel sources {k['taken']} of {k['branches']} ({k['percent']}%).</p>"
            "<table><tr><th>source</th><th>branches</th><th>taken</th><th>%</th>"
            "<th>lines with a branch never taken</th></tr>" + "".join(rows) + "</table>")


def add_to_reports(coverage: dict, json_path: str | None, html_path: str | None) -> None:
    """Put the coverage into the JSON report and the HTML page the run wrote."""
    if json_path and Path(json_path).is_file():
        document = json.loads(Path(json_path).read_text())
        document["branch_coverage"] = coverage
        Path(json_path).write_text(json.dumps(document, indent=1))
    if html_path and Path(html_path).is_file():
        page = Path(html_path).read_text()
        section = html(coverage)
        page = page.replace("</body>", section + "</body>") if "</body>" in page else page + section
        Path(html_path).write_text(page)


def run(library: str, run_suite, json_path: str | None, html_path: str | None) -> int:
    """Build the instrumented plugin, run `run_suite(instrumented library)` on it, report."""
    directory = plugin_directory(library)
    work = Path(tempfile.mkdtemp(prefix="fl-coverage-"))
    try:
        print(f"fl-sdk test --coverage: building {directory.name} with gcov instrumentation in {work}", flush=True)
        built = instrumented_build(directory, work)
        os.environ[ENV] = str(built)   # kernel workers inherit it (flush)
        try:
            status = run_suite(str(built))
            flush()   # this process ran the abi, memory and streams tests; gcov would write only at exit
        finally:
            os.environ.pop(ENV, None)
        coverage = collect(directory, work)
        add_to_reports(coverage, json_path, html_path)
        print(f"\nbranch coverage of {directory.name} (gcov):\n{markdown(coverage)}")
        return status
    finally:
        shutil.rmtree(work, ignore_errors=True)
