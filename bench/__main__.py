"""``uv run python -m bench [--quick] [--out DIR]``: run every benchmark, print the report, write
``RESULTS.md``, ``results.json`` and ``results.png`` (default: into ``bench/``; with ``--quick``
into a temporary directory unless ``--out`` is given)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runners_cli.plugins import discover

from . import report, sections
from .notes import notes
from .params import Params
from .registry import CODING_AGENTS, HTTP_PLUGINS, IN_PROCESS_AGENTS
from .server import FakeServer

HERE = Path(__file__).resolve().parent
SECTIONS = ("ttft", "traffic", "cpu", "concurrency", "connections", "coding", "local")


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (about four minutes)")
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest sizes that run every path once, to check the benchmarks work "
                         "(the test suite's; figures meaningless)")
    ap.add_argument("--out", help="directory for RESULTS.md, results.json, results.png")
    ap.add_argument("--plugins", help="comma-separated plugin directory names (default: every entry)")
    ap.add_argument("--only", help=f"comma-separated sections to run: {', '.join(SECTIONS)}")
    ap.add_argument("--ttft-tokens", type=int, help="tokens per answer in the time-to-first-text runs")
    ap.add_argument("--ttft-delay", type=float, help="seconds between tokens in the time-to-first-text runs")
    ap.add_argument("--paced-delay", type=float, help="seconds between tokens in the paced host-traffic runs")
    ap.add_argument("--no-profile", action="store_true", help="skip the cProfile breakdowns (sections 3 and 4)")
    ap.add_argument("--reuse", help="with --only: take the sections not run from this earlier results.json "
                    "(RESULTS.md names their run)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # everything here talks to 127.0.0.1; the kit's client honours proxy settings, so keep
    # loopback off any configured proxy (the worker and server processes inherit this)
    no_proxy = os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or ""
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = ",".join(
        x for x in (no_proxy, "127.0.0.1", "localhost") if x
    )
    p = Params.smoke_run() if args.smoke else Params.quick_run() if args.quick else Params()
    if args.ttft_tokens:
        p.ttft_tokens = args.ttft_tokens
    if args.ttft_delay is not None:
        p.ttft_delay = args.ttft_delay
    if args.paced_delay:
        p.paced_delay = args.paced_delay
    only = set(args.only.split(",")) if args.only else set(SECTIONS)
    unknown = only - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown section(s): {', '.join(sorted(unknown))}")
    out = Path(args.out) if args.out else (Path(tempfile.mkdtemp(prefix="bench-")) if args.quick or args.smoke else HERE)
    out.mkdir(parents=True, exist_ok=True)

    entries = HTTP_PLUGINS
    if args.plugins:
        wanted = set(args.plugins.split(","))
        entries = [e for e in HTTP_PLUGINS if e.plugin in wanted]
    benched = {e.plugin for e in (*HTTP_PLUGINS, *CODING_AGENTS, *IN_PROCESS_AGENTS)}
    missing = [pl.dirname for pl in discover() if pl.dirname not in benched]

    # read before this run writes its own results.json, which may be the same file
    earlier = json.loads(Path(args.reuse).read_text(encoding="utf-8")) if args.reuse else None
    t_start = time.perf_counter()
    s: dict[str, Any] = {k: [] for k in ("ttft", "traffic", "cpu", "concurrency", "connections")}
    for entry in entries:
        with FakeServer(entry.plugin) as srv:
            if "ttft" in only:
                _log(f"{entry.plugin}: 1. time to first text")
                s["ttft"].append(sections.run_section(sections.ttft(entry, srv, p)))
            if "traffic" in only:
                _log(f"{entry.plugin}: 2. host traffic")
                s["traffic"].append(sections.run_section(sections.traffic(entry, srv, p)))
            if "cpu" in only:
                _log(f"{entry.plugin}: 3. CPU per event")
                s["cpu"].append(
                    sections.run_section(sections.cpu(entry, srv, p, profile=not args.no_profile))
                )
            if "concurrency" in only:
                _log(f"{entry.plugin}: 4. concurrency")
                s["concurrency"].append(sections.concurrency(entry, srv, p, profile=not args.no_profile))
            if "connections" in only:
                _log(f"{entry.plugin}: 5. connections")
                s["connections"].append(sections.run_section(sections.connections(entry, srv, p)))
            errors = srv.stats()["handler_errors"]
            if errors:
                _log(f"{entry.plugin}: the fake server recorded handler errors: {errors}")
    if "traffic" in only:
        s["sweep"] = sections.sweep(p)
    if "coding" in only:
        _log("6. coding-agent runners")
        s["coding_agents"] = sections.run_section(sections.coding_agents(p))
    if "local" in only:
        _log("7. in-process agent loops")
        s["in_process_agents"] = sections.run_section(sections.in_process_agents(p))

    cmd = "uv run python -m bench" + (" --smoke" if args.smoke else " --quick" if args.quick else "") + (f" --only {args.only}" if args.only else "")
    data: dict[str, Any] = {
        "meta": {
            "command": cmd,
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "machine": f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}",
            "quick": p.quick,
            "duration_s": time.perf_counter() - t_start,
            "plugins": [e.plugin for e in entries],
        },
        "params": _params(p),
        "sections": s,
        "missing_entries": missing,
    }
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")  # kept if the report fails
    if earlier is not None:
        _reuse(data, earlier, only)
    data["targets"] = report.targets(data)
    md = report.markdown(data, notes(data))
    print(md)
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    (out / "RESULTS.md").write_text(md, encoding="utf-8")
    try:
        report.chart(data, str(out / "results.png"))
    except ImportError:
        _log("matplotlib is not installed (uv sync installs the dev group): no chart written")
    _log(f"wrote {out / 'RESULTS.md'}, {out / 'results.json'}, {out / 'results.png'}")
    return 0


# which sections each --only name fills in results.json
_KEYS = {"ttft": ("ttft",), "traffic": ("traffic", "sweep"), "cpu": ("cpu",), "concurrency": ("concurrency",),
         "connections": ("connections",), "coding": ("coding_agents",), "local": ("in_process_agents",)}


def _reuse(data: dict[str, Any], old: dict[str, Any], only: set[str]) -> None:
    """Fill the sections this run skipped from an earlier run's results, and say so in the report."""
    prior = old["meta"].get("reused") or {}

    def measured(key: str) -> str:  # a section the earlier run itself kept names its own run
        when = prior.get("from")
        if isinstance(when, dict):
            return str(when.get(key, old["meta"]["date"]))
        return str(when) if when and key in prior.get("sections", ()) else str(old["meta"]["date"])

    reused: dict[str, str] = {}
    for name, keys in _KEYS.items():
        if name in only:
            continue
        for key in keys:
            if old["sections"].get(key):
                data["sections"][key] = old["sections"][key]
                reused[key] = measured(key)
    data["meta"]["reused"] = {"from": reused, "sections": list(reused)}


def _params(p: Params) -> dict[str, Any]:
    d = dict(vars(p))
    d["cpu_patterns"] = [vars(c) for c in p.cpu_patterns]
    return d


if __name__ == "__main__":
    raise SystemExit(main())
