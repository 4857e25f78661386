"""`torch-fl devices [--json]`: the fl devices this machine offers.

Exit status 0 when the runtime started (even with no device: the table is
then empty and the reason printed), 1 when it failed to start.  The --json
schema ("torch-fl.devices/1"):
    {"schema": "torch-fl.devices/1", "devices": [{"index": int, "device": "fl:N", "name": str,
      "vendor": str, "type": str, "uuid": str, "memory_total": int, "memory_free": int | null,
      "driver_version": str, "plugin": str, "plugin_path": str,
      "certified": true | false | null, "certification": str,
      "certified_stack": {"state": "covered" | "not_covered" | "stack_unknown" | "not_certified",
                          "text": str, "differences": [{"field": str, "certified": any, "running": any}]}}],
     "reason": str, "error": str | null}
"""
from __future__ import annotations

import argparse
import json

SCHEMA = "torch-fl.devices/1"
_COLUMNS = (("index", "#"), ("name", "NAME"), ("vendor", "VENDOR"), ("type", "TYPE"),
            ("memory", "MEMORY total/free"), ("driver_version", "DRIVER"), ("certified_text", "CERTIFIED"),
            ("stack_text", "CERTIFIED STACK"),
            ("plugin_path", "PLUGIN"))


def register(subparsers) -> None:
    parser = subparsers.add_parser("devices", help="list the fl devices (vendor, memory, driver, plugin)")
    parser.add_argument("--json", action="store_true", help="machine-readable list (schema torch-fl.devices/1)")
    parser.set_defaults(handler=run)


def _certification(plugin) -> tuple[bool | None, str]:
    status = getattr(plugin, "certification", None)
    if status is None:
        return None, "unknown (this Torch-FL does not check certification)"
    return bool(status.certified), str(status.reason)


def _free_memory(rt, index: int) -> int | None:
    from fl_runtime.devices.allocator import device_memory_info
    try:
        return device_memory_info(rt.allocators[index])[0]
    except Exception:  # noqa: BLE001 - a driver without memory_info still gets listed
        return None


def collect() -> dict:
    """The --json document (also what the table shows)."""
    from fl_runtime.integration import process
    try:
        rt = process.start()
    except Exception as exc:  # noqa: BLE001 - any start-up failure is reported, never raised
        return {"schema": SCHEMA, "devices": [], "reason": "", "error": f"{type(exc).__name__}: {exc}"}
    from fl_runtime.plugins.stack import stack_coverage
    rows, coverage = [], {}
    for dev in rt.devices:
        certified, why = _certification(dev.plugin)
        if dev.plugin.name not in coverage:        # per plugin: it hashes nothing, but compares a few fields
            coverage[dev.plugin.name] = stack_coverage(dev.plugin).as_dict()
        rows.append({"index": dev.index, "device": f"fl:{dev.index}", "name": dev.name, "vendor": dev.vendor,
                     "type": dev.device_type, "uuid": dev.uuid, "memory_total": dev.total_memory,
                     "memory_free": _free_memory(rt, dev.index), "driver_version": dev.driver_version,
                     "plugin": dev.plugin.name, "plugin_path": dev.plugin.source.path,
                     "certified": certified, "certification": why,
                     "certified_stack": coverage[dev.plugin.name]})
    return {"schema": SCHEMA, "devices": rows, "reason": "" if rows else rt.empty_reason(), "error": None}


def _mib(nbytes: int | None) -> str:
    return "?" if nbytes is None else f"{nbytes >> 20} MiB"


def _stack_text(coverage: dict) -> str:
    """The column's short form: covered / unknown / n/a, or the differing fields."""
    if coverage["state"] == "not_covered":
        return "differs: " + ",".join(d["field"] for d in coverage["differences"])
    return {"covered": "covered", "stack_unknown": "unknown"}.get(coverage["state"], "n/a")


def render(doc: dict) -> str:
    if doc["error"]:
        return f"Torch-FL failed to start: {doc['error']}\nrun `torch-fl doctor` for the next step"
    if not doc["devices"]:
        return f"no fl devices: {doc['reason']}"
    cells = []
    for row in doc["devices"]:
        text = {"yes": True, "no": False, "unknown": None}
        row = dict(row, memory=f"{_mib(row['memory_total'])}/{_mib(row['memory_free'])}",
                   certified_text=next(k for k, v in text.items() if v is row["certified"]),
                   stack_text=_stack_text(row["certified_stack"]))
        cells.append([str(row[key]) for key, _ in _COLUMNS])
    headers = [title for _, title in _COLUMNS]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    stacks = {row["plugin"]: row["certified_stack"] for row in doc["devices"]}
    lines += [f"plugin {name}: certified stack {cov['text']}" for name, cov in stacks.items()
              if cov["state"] == "not_covered"]
    return "\n".join(line.rstrip() for line in lines)


def run(args: argparse.Namespace) -> int:
    doc = collect()
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 1 if doc["error"] else 0
