"""The documentation (docs/, mkdocs.yml, README.md): it builds, every citation of it resolves, it renders.

- The site builds with `mkdocs build --strict` (what `make docs` runs): a broken link, a link
  to a missing heading or a page left out of the nav fails it.
- Every citation of a docs section anywhere in the repository resolves: `docs/<dir>/<page>.md
  "Heading"` (comments and messages cite so), `docs/<dir>/<page>.md#anchor`, `README "Heading"`, and
  Markdown links in the Markdown files outside docs/ (README.md, conformance/README.md).
  A failure lists each unresolved citation as file:line.
- No page runs longer than a screenful of prose without a heading, and no list is glued to the
  paragraph before it (GitHub renders that, Python-Markdown does not).
- Every page renders in headless Chromium and every image on it is drawn (naturalWidth > 0);
  the home page's screenshot is written for a person to look at.
"""
from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import headless_browser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# A screenful: about 40 lines of 80-90 characters of prose (tables and code blocks not counted).
SCREENFUL_CHARS = 3000
# README citations inside the vendor template mean the generated project's README.
TEMPLATE_README = ROOT / "vendor_template" / "template" / "README.md.jinja"
SKIP_SUFFIXES = {".png", ".json", ".so", ".o", ".pyc", ".whl", ".gz", ".svg", ".ico"}
SKIP_FILES = {".ci/constraints.txt", "tests/house/test_docs.py"}     # this file: its samples are meant to fail
# Frozen copies of earlier releases (the 1.0 to 1.3 headers, the 1.1 template): their text is
# what those releases shipped, citations of the README they had included.
FROZEN = ("tests/fixtures/abi_1_0/", "tests/fixtures/abi_1_1/", "tests/fixtures/abi_1_2/", "tests/fixtures/abi_1_3/",
          "tests/fixtures/template_abi_1_1/")

# `docs/users/x.md "Heading"` or `docs/users/x.md, "Heading"`; the heading may wrap onto a
# comment line (# or // or * in front) and may be written \"...\" inside a string literal.
_WRAP = r"(?:\n[ \t]*(?:#|//|\*|--)?[ \t]*)"
_QUOTED = rf'\\?"((?:[^"\\\n]|{_WRAP}){{1,80}}?)\\?"'
# A space (or a comma) before the heading's opening quote: `"README.md")` closes a string.
_BEFORE = r"(?:,[ \t]*|[ \t]+)"
DOCS_CITATION = re.compile(rf"\b(docs/[\w./-]+?\.md)(#[\w-]+)?(?:{_BEFORE}{_QUOTED})?")
README_CITATION = re.compile(rf"\bREADME(?:\.md)?(?:'s)?{_BEFORE}{_QUOTED}")
# A README section named without quotes ("README, Checkpoints", "README (Architecture)").
README_UNQUOTED = re.compile(r"\bREADME(?:'s)?(?:,| \()[ \t]*([A-Z][\w-]+)")
# Top-level documents that moved into the site: a mention of one is a stale citation.
MOVED = {"BENCHMARKS.md": "docs/benchmarks/index.md"}
TOP_LEVEL_DOC = re.compile(r"(?<![\w/.-])(" + "|".join(re.escape(name) for name in MOVED) + r")\b")
MARKDOWN_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*$")


# -- headings and anchors, as mkdocs computes them ---------------------------------------------

def _plain(heading: str) -> str:
    """A heading as read: code spans and emphasis unwrapped, link text kept, spaces collapsed."""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return " ".join(heading.replace("`", "").replace("**", "").split())


def _key(text: str) -> str:
    return _plain(text).casefold()


@functools.cache
def headings(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(heading texts as _key gives them, their anchors) of a Markdown file."""
    from markdown.extensions.toc import slugify
    texts, anchors, fenced = set(), set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            texts.add(_key(m.group(2)))
            anchors.add(slugify(_plain(m.group(2)), "-"))
    return frozenset(texts), frozenset(anchors)


# -- what the repository cites -------------------------------------------------------------------

def _repository_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    files = []
    for name in filter(None, listed):
        path = ROOT / name
        if name in SKIP_FILES or name.startswith(FROZEN) or path.suffix in SKIP_SUFFIXES or not path.is_file():
            continue
        files.append(path)
    return files


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _check_section(target: Path, heading: str | None, anchor: str | None) -> str | None:
    """Why a citation of `target` (and a heading or anchor in it) does not resolve, or None."""
    if not target.is_file():
        return "no such file"
    texts, anchors = headings(target)
    if anchor and anchor not in anchors:
        return f"no heading with anchor #{anchor}"
    if heading is not None:
        heading = re.sub(_WRAP, " ", heading)
        if _key(heading) not in texts:
            return f'no heading "{_plain(heading)}"'
    return None


def unresolved_citations() -> list[str]:
    problems = []
    for path in _repository_files():
        text = _text(path)
        if text is None:
            continue
        rel = path.relative_to(ROOT)
        for m in DOCS_CITATION.finditer(text):
            why = _check_section(ROOT / m.group(1), m.group(3), (m.group(2) or "")[1:] or None)
            if why:
                problems.append(f"{rel}:{_line(text, m.start())}: {m.group(0)!r}: {why}")
        readme = TEMPLATE_README if rel.parts[0] == "vendor_template" else ROOT / "README.md"
        for m in README_CITATION.finditer(text):
            why = _check_section(readme, m.group(1), None)
            if why:
                problems.append(f"{rel}:{_line(text, m.start())}: {m.group(0)!r}: {why} in "
                                f"{readme.relative_to(ROOT)} (cite the docs page that holds it)")
        for m in TOP_LEVEL_DOC.finditer(text):
            problems.append(f"{rel}:{_line(text, m.start())}: {m.group(1)} moved to {MOVED[m.group(1)]}")
        for m in README_UNQUOTED.finditer(text):
            problems.append(f"{rel}:{_line(text, m.start())}: {m.group(0)!r}: an unquoted README section "
                            "(cite the docs page and its heading: docs/<dir>/<page>.md \"Heading\")")
        if path.suffix == ".md" and DOCS not in path.parents:
            for m in MARKDOWN_LINK.finditer(text):
                link = m.group(1)
                if re.match(r"[a-z]+:", link) or link.startswith("#"):
                    continue
                file_part, _, anchor = link.partition("#")
                target = (path.parent / file_part).resolve()
                why = (_check_section(target, None, anchor or None) if target.suffix == ".md"
                       else None if target.exists() else "no such file")
                if why:
                    problems.append(f"{rel}:{_line(text, m.start())}: link {link!r}: {why}")
    return problems


def test_every_citation_of_the_docs_resolves():
    problems = unresolved_citations()
    assert not problems, f"{len(problems)} citations do not resolve:\n" + "\n".join(problems)


def test_the_checker_catches_what_it_must(tmp_path):
    """The citation patterns match the forms the code uses, and refuse missing headings."""
    page = DOCS / "users" / "devices.md"
    cited = 'x = 1  # the allocator (docs/users/devices.md "Memory"); see docs/users/devices.md#memory'
    wrapped = '# a reason (docs/users/graph-path.md "How it\n# works")'
    found = [(m.group(1), m.group(2), m.group(3)) for m in DOCS_CITATION.finditer(cited + "\n" + wrapped)]
    assert found == [("docs/users/devices.md", None, "Memory"), ("docs/users/devices.md", "#memory", None),
                     ("docs/users/graph-path.md", None, "How it\n# works")]
    assert _check_section(page, "Memory", None) is None
    assert _check_section(DOCS / "users" / "graph-path.md", "How it\n# works", None) is None
    assert _check_section(page, "Memory", "memory") is None
    assert "no heading" in _check_section(page, "No such heading", None)
    assert "anchor" in _check_section(page, None, "no-such-anchor")
    assert _check_section(DOCS / "users" / "nope.md", None, None) == "no such file"
    message = '"... (README \\"Graph path\\")"'
    assert [m.group(1) for m in README_CITATION.finditer(message)] == ["Graph path"]
    assert [m.group(1) for m in README_UNQUOTED.finditer("(README, Checkpoints)")] == ["Checkpoints"]
    assert [m.group(1) for m in TOP_LEVEL_DOC.finditer("see BENCHMARKS.md, not docs/BENCHMARKS.md")] == ["BENCHMARKS.md"]
    assert not list(README_CITATION.finditer('readme = "README.md"\nrequires-python = ">=3.10"'))


# -- layout ---------------------------------------------------------------------------------------

def _long_sections(path: Path) -> list[str]:
    long, fenced, chars, start, title = [], False, 0, 1, "(top of the page)"
    lines = path.read_text(encoding="utf-8").splitlines() + ["# (end)"]
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        heading = not fenced and HEADING.match(line)
        if heading:
            if chars > SCREENFUL_CHARS:
                long.append(f"{path.relative_to(ROOT)}:{start}: {title!r}: {chars} characters of prose")
            chars, start, title = 0, number, line
        elif not fenced and line.strip() and not line.lstrip().startswith("|"):
            chars += len(line) + 1
    return long


def test_no_page_runs_a_screenful_without_a_heading():
    pages = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]
    long = [problem for page in pages for problem in _long_sections(page)]
    assert not long, "sections longer than a screenful of prose; add headings:\n" + "\n".join(long)


LIST_ITEM = re.compile(r"^(?:[-*]|\d+\.) ")


def _lists_glued_to_paragraphs(path: Path) -> list[str]:
    """Lists that directly follow a paragraph line: GitHub renders them, Python-Markdown runs
    them into the paragraph."""
    glued, fenced, previous = [], False, ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif (not fenced and LIST_ITEM.match(line) and previous.strip() and not LIST_ITEM.match(previous)
              and not previous.startswith((" ", "\t", "#", "|"))):
            glued.append(f"{path.relative_to(ROOT)}:{number}: {line[:60]!r}")
        previous = line
    return glued


def test_lists_are_set_apart_from_paragraphs():
    glued = [problem for page in sorted(DOCS.rglob("*.md")) for problem in _lists_glued_to_paragraphs(page)]
    assert not glued, "put a blank line before these lists:\n" + "\n".join(glued)


def test_readme_stays_short():
    assert len((ROOT / "README.md").read_bytes()) <= 10_500, "README.md is for the overview; put the rest in docs/"


# -- the site -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


def test_site_builds_strict(site):
    assert (site / "index.html").is_file()
    assert (site / "users" / "devices" / "index.html").is_file()


def _pages(site: Path) -> list[str]:
    """The site's pages, as URL paths relative to its root."""
    return sorted(str(p.parent.relative_to(site)) + "/" if p.parent != site else ""
                  for p in site.rglob("index.html") if not p.relative_to(site).parts[0].startswith(("assets", "search")))


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


IMAGES = "JSON.stringify([...document.images].map(i => [i.getAttribute('src'), i.complete, i.naturalWidth]))"
TITLE = "document.querySelector('article h1') ? document.querySelector('article h1').textContent : ''"


def test_every_page_renders_with_its_images(site, served, tmp_path):
    binary, why = headless_browser.find_or_install()
    if binary is None:
        pytest.skip(f"no headless Chromium: {why}")
    import json
    pages, broken = _pages(site), []
    assert len(pages) >= 30, pages
    with headless_browser.Browser(binary) as browser:
        for page in pages:
            browser.open(served + page)
            if not browser.evaluate(TITLE).strip():
                broken.append(f"{page or '/'}: no page title rendered")
            for src, complete, width in json.loads(browser.evaluate(IMAGES)):
                if not complete or width == 0:
                    broken.append(f"{page or '/'}: image {src} not drawn")
        browser.open(served)
        shot = Path(os.environ.get("TORCH_FL_DOCS_SCREENSHOT", tmp_path / "docs-home.png"))
        browser.screenshot(shot)
    print(f"screenshot of the home page: {shot}")
    assert not broken, "\n".join(broken)
    assert shot.stat().st_size > 10_000
