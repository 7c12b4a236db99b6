"""``runners list``: the plugins in this repository and what their runners declare."""

from __future__ import annotations

import json
from typing import Any, TextIO

from .plugins import PluginInfo


def describe(info: PluginInfo) -> dict[str, Any]:
    """The machine-readable row for one plugin."""
    return {
        "directory": info.dirname,
        "name": info.name,
        "runner_id": info.runner_id,
        "version": info.version,
        "capabilities": sorted(k for k, v in info.capabilities.items() if v is True),
        "package": info.package_name,
    }


def render_table(rows: list[dict[str, Any]]) -> str:
    headers = ("DIRECTORY", "RUNNER ID", "VERSION", "CAPABILITIES")
    cells = [(r["directory"], r["runner_id"], r["version"], ", ".join(r["capabilities"]) or "-") for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def print_list(infos: list[PluginInfo], out: TextIO, *, as_json: bool = False) -> None:
    rows = [describe(i) for i in infos]
    if as_json:
        out.write(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
    elif not rows:
        out.write("no plugins found\n")
    else:
        out.write(render_table(rows) + "\n")
