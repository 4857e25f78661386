"""The human report: a per-kernel table (one row per kernel-table entry, one column per
dtype, plus robustness) as Markdown for the terminal and as a standalone HTML page.

Both are built from the JSON report's document (conformance.report), so the three
reports never disagree.
"""
from __future__ import annotations

import html
from collections import defaultdict
from dataclasses import dataclass, field

from . import statuses
from .recipes import DTYPES

# What a cell shows for each status (ASCII: terminals and CI logs of any encoding).
MARK = {statuses.PASS: "ok", statuses.FAIL: "FAIL", statuses.NOT_SUPPORTED: "-",
        statuses.KNOWN_FAILURE: "known", statuses.UNTESTED: "?"}
_COLOURS = {statuses.PASS: "#d7f5d7", statuses.FAIL: "#f8c8c8", statuses.NOT_SUPPORTED: "#eeeeee",
            statuses.KNOWN_FAILURE: "#fbe7b5", statuses.UNTESTED: "#fff6c8"}
LEGEND = ("ok pass (worst error as a fraction of the tolerance), FAIL fail, - not supported, "
          "known known failure, ? untested")


@dataclass
class KernelRow:
    op: str
    variant: str
    cells: dict = field(default_factory=dict)   # dtype or "robustness" -> record

    @property
    def worst(self) -> str:
        found = {r["status"] for r in self.cells.values()}
        return next((s for s in (statuses.FAIL, statuses.KNOWN_FAILURE, statuses.UNTESTED, statuses.PASS)
                     if s in found), statuses.NOT_SUPPORTED)


# Categories with one test per kernel-table entry (not per dtype): a column each.
_ENTRY_COLUMNS = ("robustness", "concurrency")


def kernel_rows(document: dict) -> list[KernelRow]:
    """One row per (op, variant) in the order the kernel table lists them."""
    rows: dict[tuple, KernelRow] = {}
    for record in document["tests"]:
        if record.get("category") not in ("kernels",) + _ENTRY_COLUMNS or not record.get("op"):
            continue
        row = rows.setdefault((record["op"], record["variant"]), KernelRow(record["op"], record["variant"]))
        row.cells[record["dtype"] if record["category"] == "kernels" else record["category"]] = record
    return list(rows.values())


def _columns(rows: list[KernelRow]) -> list[str]:
    used = {column for row in rows for column in row.cells}
    return [name for name in DTYPES if name in used] + [name for name in _ENTRY_COLUMNS if name in used]


def cell_text(record: dict | None) -> str:
    if record is None:
        return ""
    text = MARK[record["status"]]
    ratio = record.get("error_ratio")
    if record["status"] == statuses.PASS and isinstance(ratio, (int, float)) and ratio > 0:
        text += f" {ratio:.2g}"
    return text


def _summary_line(document: dict) -> str:
    summary = document["summary"]
    plugin = document["plugin"]
    return (f"Torch-FL conformance {document['suite_version']}: plugin {plugin['name']} "
            f"{plugin.get('version', '')} (ABI {plugin['abi_version']}), profile {document['profile']['name']}, "
            f"seed {document['seed']}: " + ", ".join(f"{summary[s]} {s}" for s in statuses.ALL))


def markdown(document: dict) -> str:
    """The per-kernel table as Markdown."""
    rows = kernel_rows(document)
    columns = _columns(rows)
    lines = [_summary_line(document), "", "| kernel | variant | " + " | ".join(columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    lines += [f"| {row.op} | {row.variant} | " + " | ".join(cell_text(row.cells.get(c)) for c in columns) + " |"
              for row in rows]
    return "\n".join(lines + ["", LEGEND])


def _html_cell(record: dict | None) -> str:
    if record is None:
        return "<td></td>"
    title = html.escape(record.get("message") or record.get("tolerance") or "", quote=True)
    return (f'<td style="background:{_COLOURS[record["status"]]}" title="{title}">'
            f"{html.escape(cell_text(record))}</td>")


def _failures_html(document: dict) -> str:
    failed = [r for r in document["tests"] if r["status"] == statuses.FAIL]
    if not failed:
        return "<p>No failures.</p>"
    items = [f"<h3>{html.escape(r['nodeid'])}</h3><pre>{html.escape(r['message'])}</pre>"
             + (f"<p>Reproducer:</p><pre>{html.escape(r['reproducer'])}</pre>" if r.get("reproducer") else "")
             for r in failed]
    return "\n".join(items)


def html_page(document: dict) -> str:
    """A standalone HTML page: summary, the per-kernel table, other categories, failures."""
    rows = kernel_rows(document)
    columns = _columns(rows)
    by_category: dict[str, dict] = defaultdict(dict, document["summary"]["categories"])
    header = "".join(f"<th>{html.escape(c)}</th>" for c in ["kernel", "variant", *columns])
    body = "\n".join(f'<tr><th style="text-align:left;background:{_COLOURS[row.worst]}">{html.escape(row.op)}</th>'
                     f"<td>{html.escape(row.variant)}</td>" + "".join(_html_cell(row.cells.get(c)) for c in columns)
                     + "</tr>" for row in rows)
    categories = "".join(f"<tr><th>{html.escape(name)}</th>" + "".join(f"<td>{counts.get(s, 0)}</td>"
                                                                         for s in statuses.ALL) + "</tr>"
                         for name, counts in by_category.items())
    status_header = "".join(f"<th>{s}</th>" for s in statuses.ALL)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Torch-FL conformance: {html.escape(document['plugin']['name'])}</title>
<style>body{{font-family:sans-serif}} table{{border-collapse:collapse}} td,th{{border:1px solid #bbb;padding:2px 6px;font-size:13px}}</style>
</head><body>
<h1>Torch-FL conformance report</h1>
<p>{html.escape(_summary_line(document))}</p>
<p>Library: <code>{html.escape(document['plugin']['path'])}</code>; generated {html.escape(document['generated_at'])} in {document['duration_s']} s.</p>
<h2>Categories</h2>
<table><tr><th>category</th>{status_header}</tr>{categories}</table>
<h2>Kernels</h2>
<p>{html.escape(LEGEND)}. Hover a cell for the tolerance or the failure.</p>
<table><tr>{header}</tr>
{body}
</table>
<h2>Failures</h2>
{_failures_html(document)}
{_todo_html(document)}
</body></html>
"""


def _todo_html(document: dict) -> str:
    """"What to implement next" (`fl-sdk test --todo`, conformance.todo): the ops reference
    workloads call that the plugin runs through a fallback, most urgent first."""
    todo = document.get("todo")
    if todo is None:
        return ""
    rows = "".join(f"<tr><td>{rank}</td><td><code>{html.escape(op['op'])}</code></td><td>{op['calls']}</td>"
                   f"<td>{html.escape(op['status'])}</td><td>"
                   + html.escape(", ".join(f"{name} {count}" for name, count in op["workloads"].items()))
                   + "</td></tr>" for rank, op in enumerate(todo["ops"], 1))
    skipped = "".join(f"<li>{html.escape(name)}: {html.escape(why)}</li>" for name, why in todo["skipped"].items())
    return (f"<h2>What to implement next</h2><p>ATen ops that {html.escape(', '.join(todo['traced']))} call and "
            "this plugin runs through a fallback (cpu: a host round trip per call; generic: decomposed into its "
            "kernels), most urgent first.</p><table><tr><th>rank</th><th>op</th><th>calls</th><th>now runs as</th>"
            f"<th>called by</th></tr>{rows}</table>" + (f"<p>Not traced:</p><ul>{skipped}</ul>" if skipped else ""))
