"""Every Python snippet in docs/users/ marked runnable runs as written, so the docs cannot drift.

The marker is an HTML comment on the line before the fence (Markdown renders nothing for
it, and `mkdocs build --strict` accepts it):

    <!-- runnable -->
    ```python
    ...
    ```

Each marked snippet runs alone in a fresh process on the reference vendor (from an empty
directory, with nothing defined beforehand) and must exit 0; an `assert` in the snippet is
how a page states a result that must hold.  A marker not followed by a Python fence fails.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER_DOCS = ROOT / "docs" / "users"
MARKER = "<!-- runnable -->"


def runnable_snippets() -> list[tuple[str, str]]:
    """(page:line of the fence, code) for each marked snippet."""
    found = []
    for page in sorted(USER_DOCS.glob("*.md")):
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.strip() != MARKER:
                continue
            where = f"{page.relative_to(ROOT)}:{number + 2}"
            fence = lines[number + 1].strip() if number + 1 < len(lines) else ""
            if fence != "```python":
                found.append((where, f"raise SystemExit('{MARKER} is not followed by a ```python fence')"))
                continue
            end = next(i for i in range(number + 2, len(lines)) if lines[i].strip() == "```")
            found.append((where, "\n".join(lines[number + 2:end])))
    return found


SNIPPETS = runnable_snippets()


def test_the_user_docs_mark_snippets_runnable():
    pages = {where.split(":")[0] for where, _ in SNIPPETS}
    assert len(SNIPPETS) >= 4 and len(pages) >= 3, SNIPPETS


@pytest.mark.parametrize("where,code", SNIPPETS, ids=[where for where, _ in SNIPPETS])
def test_runnable_snippet_runs(where, code, tmp_path):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, f"{where}:\n{code}\n--- stdout\n{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-4000:]}"
