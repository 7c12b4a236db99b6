"""The seven measurements. Each returns plain data (JSON-ready); ``report`` turns it into tables.

Every figure is a ratio or a count against a reference taken in the same run: the bare floor
client, the naive delta policy, or the fake server's own write times.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import json
import math
import os
import pstats
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from runner_kit.http import POOL_LIMITS, close_shared_client
from runner_kit.results import ResultBuilder, StreamPolicy
from runner_kit.usage import UsageTotals
from runners_cli.host import Identity

from .common import answer, median, pct, prefix_lengths, rtype, tokens, tokens_in, wire_bytes
from .drive import Turn, floor_turn, load_runner, runner_turn
from .params import Params
from .registry import CODING_AGENTS, IN_PROCESS_AGENTS, HttpPlugin, InProcessAgent
from .report import SCALE_CPU_RATIO, rss_target
from .server import ROOT, FakeServer


def _check(turn: Turn, expected: str) -> bool:
    return turn.terminal == "run.completed" and turn.text == expected


async def _closing(coro: Any) -> Any:
    try:
        return await coro
    finally:
        await close_shared_client()


def run_section(coro: Any) -> Any:
    """Each section gets a fresh event loop and so a fresh shared HTTP client."""
    return asyncio.run(_closing(coro))


# --- 1. time to first visible text ------------------------------------------------------------


async def ttft(entry: HttpPlugin, srv: FakeServer, p: Params) -> dict[str, Any]:
    runner, host = load_runner(entry.plugin)
    config = entry.config(srv.base_url)
    srv.stream(p.ttft_tokens, p.ttft_delay, prefix="ttft")
    expected = answer(p.ttft_tokens)
    for i in range(3):  # warm-up: imports, first connection
        await runner_turn(runner, host, config, f"ttft-warm-r{i}", keep=False)
        await floor_turn(entry, srv.base_url, f"ttft-warm-f{i}")
    runs: list[Turn] = []
    floors: list[Turn] = []
    for i in range(p.ttft_runs):
        if i % 2:
            floors.append(await floor_turn(entry, srv.base_url, f"ttft-f{i}"))
            runs.append(await runner_turn(runner, host, config, f"ttft-r{i}", keep=False))
        else:
            runs.append(await runner_turn(runner, host, config, f"ttft-r{i}", keep=False))
            floors.append(await floor_turn(entry, srv.base_url, f"ttft-f{i}"))
    marks = srv.marks()

    def added(turns: list[Turn]) -> list[float]:
        return [
            (t.first_text_ns - marks[t.key][0]) / 1e6
            for t in turns
            if t.first_text_ns is not None and marks.get(t.key)
        ]

    r, f = added(runs), added(floors)
    return {
        "plugin": entry.plugin,
        "runs": p.ttft_runs,
        "tokens": p.ttft_tokens,
        "token_delay_s": p.ttft_delay,
        "correct": sum(_check(t, expected) for t in runs),
        "runner_ms": {"median": median(r), "p95": pct(r, 95), "max": max(r)},
        "floor_ms": {"median": median(f), "p95": pct(f, 95), "max": max(f)},
        "kit_share_median_ms": median(r) - median(f),
    }


# --- 2. host traffic --------------------------------------------------------------------------


def _bytes(results: list[Any]) -> int:
    return sum(wire_bytes(r, i + 1) for i, r in enumerate(results))


def naive_results(run_id: str, toks: list[str], others: list[Any]) -> list[Any]:
    """The reference: one cumulative delta per token (built by the kit's own ResultBuilder, so
    the shape is identical), then the same non-delta results the real run sent."""
    b = ResultBuilder(run_id)
    out = []
    for tok in toks:
        b.add_text(tok)
        if (r := b.flush()) is not None:
            out.append(r)
    return out + others


async def traffic(entry: HttpPlugin, srv: FakeServer, p: Params) -> dict[str, Any]:
    runner, host = load_runner(entry.plugin)
    config = entry.config(srv.base_url)
    rows = []

    def row(pace: str, delay: float, n: int, t: Turn) -> dict[str, Any]:
        toks = tokens(n)
        size = len(answer(n).encode("utf-8"))
        deltas = [r for r in t.results if rtype(r) == "message.delta"]
        others = [r for r in t.results if rtype(r) != "message.delta"]
        host_bytes = _bytes(t.results)
        naive = _bytes(naive_results(t.results[0].run_id, toks, others))
        return {
            "plugin": entry.plugin,
            "pace": pace,
            "token_delay_s": delay,
            "tokens": n,
            "answer_bytes": size,
            "correct": _check(t, answer(n)),
            "deltas": len(deltas),
            "results": len(t.results),
            "host_bytes": host_bytes,
            "ratio": host_bytes / size,
            "naive_deltas": n,
            "naive_bytes": naive,
            "naive_ratio": naive / size,
        }

    for n in p.traffic_sizes:  # burst: one at a time, nothing else competing
        srv.stream(n, 0.0, prefix=f"tr-burst-{n}-")
        t = await runner_turn(runner, host, config, f"tr-burst-{n}-0")
        rows.append(row("burst", 0.0, n, t))
    for n in p.paced_sizes:
        srv.stream(n, p.paced_delay, prefix=f"tr-paced-{n}-")
    paced = await asyncio.gather(
        *(runner_turn(runner, host, config, f"tr-paced-{n}-0") for n in p.paced_sizes)
    )
    rows += [row("paced", p.paced_delay, n, t) for n, t in zip(p.paced_sizes, paced, strict=True)]
    srv.marks()
    return {"plugin": entry.plugin, "rows": rows}


def simulate(n: int, rate: float, policy: StreamPolicy) -> dict[str, Any]:
    """The kit's ResultBuilder on a virtual clock, fed ``n`` tokens at ``rate`` tokens/s (0: all
    at once), with max-delay ticks scheduled exactly as ``runner_kit.runner._pump`` does."""
    clock = [0.0]
    b = ResultBuilder("00000000-0000-4000-8000-000000000000", policy=policy, clock=lambda: clock[0])
    out: list[Any] = [b.state("dify.conversation_id", "00000000-0000-4000-8000-000000000001")]
    times: list[float] = []
    tick_at: float | None = None
    for i, tok in enumerate(tokens(n)):
        t = i / rate if rate else 0.0
        if tick_at is not None and tick_at <= t:
            clock[0] = tick_at
            tick_at = None
            if (r := b.flush()) is not None:
                out.append(r)
                times.append(clock[0])
        clock[0] = t
        if (r := b.add_text(tok)) is not None:
            out.append(r)
            times.append(t)
        if tick_at is None and (due := b.due_in()) is not None:
            tick_at = clock[0] + due
    end = (n - 1) / rate if rate else 0.0
    out += [b.final_message(), b.completed(UsageTotals())]
    times.append(end)
    gaps = [b_ - a for a, b_ in zip(times, times[1:], strict=False)]
    size = len(answer(n).encode("utf-8"))
    total = _bytes(out)
    return {
        "tokens": n,
        "rate_tps": rate,
        "growth": policy.growth,
        "max_delay_s": policy.max_delay,
        "deltas": len(times) - 1,
        "host_bytes": total,
        "ratio": total / size,
        "longest_gap_s": max(gaps) if gaps else 0.0,
    }


def sweep(p: Params) -> list[dict[str, Any]]:
    size = max(p.traffic_sizes)
    default = StreamPolicy()
    policies: list[StreamPolicy] = []
    for pol in (default, StreamPolicy(growth=0.5), StreamPolicy(growth=1.0), StreamPolicy(max_delay=2.0)):
        if all((pol.growth, pol.max_delay) != (q.growth, q.max_delay) for q in policies):
            policies.append(pol)
    return [simulate(size, rate, pol) for pol in policies for rate in p.sweep_rates]


# --- 3. CPU per upstream event ----------------------------------------------------------------


async def _timed(fn: Any, k: int) -> tuple[float, list[Turn]]:
    gc.collect()
    c0 = time.process_time()
    turns = [await fn(i) for i in range(k)]
    return time.process_time() - c0, turns


def _turns(entry: HttpPlugin, srv: FakeServer, runner: Any, host: Any, config: dict[str, Any],
           prefix: str) -> tuple[Any, Any]:
    """One runner turn and one floor turn on the streams under ``prefix``, each on a key of its own."""
    seq = iter(range(10**9))

    async def run_r(i: int) -> Turn:
        return await runner_turn(runner, host, config, f"{prefix}r{next(seq)}", keep=False)

    async def run_f(i: int) -> Turn:
        return await floor_turn(entry, srv.base_url, f"{prefix}f{next(seq)}", timed=False)

    return run_r, run_f


@dataclass
class _Rounds:
    runner_s: list[float]  # CPU seconds of each round's runner batch
    floor_s: list[float]  # and of its floor batch
    events: int  # upstream events in one batch (the floor counts them; the same bytes reach both)
    correct: bool  # every turn of every batch gave the expected answer


async def _alternate(run_r: Any, run_f: Any, runs: int, rounds: int, expected: str) -> _Rounds:
    """``rounds`` pairs of ``runs``-turn batches, runner first in even rounds and floor first in odd ones."""
    out = _Rounds([], [], 0, True)
    for rnd in range(rounds):
        for fn in (run_f, run_r) if rnd % 2 else (run_r, run_f):
            spent, turns = await _timed(fn, runs)
            out.correct = out.correct and all(_check(t, expected) for t in turns)
            if fn is run_f:
                out.floor_s.append(spent)
                out.events = sum(t.events for t in turns)
            else:
                out.runner_s.append(spent)
    return out


_GROUPS = (
    ("runner_kit/", "runner_kit (kit)"),
    ("_agent/", "plugin adapter"),  # every plugin's own package (coze_agent/, n8n_agent/, ...)
    ("/bench/", "benchmark loop"),
    ("langbot_plugin/", "langbot_plugin SDK"),
    ("pydantic", "pydantic"),
    ("/httpx/", "httpx"),
    ("/httpcore/", "httpcore"),
    ("/h11/", "h11"),
    ("/anyio/", "anyio"),
    ("/asyncio/", "asyncio event loop"),
    ("/selectors.py", "asyncio event loop"),
    ("/json/", "json"),
)


IDLE = "idle"


def _group(filename: str, name: str) -> str:
    if filename == "~":  # C functions: sort the big ones by what they are
        if "poll" in name and "epoll" in name:
            return IDLE  # the loop waiting for the next event: wall time, not CPU
        if any(k in name for k in ("socket", "recv", "send", "select")):
            return "socket / epoll calls"
        if "json" in name or "scanner" in name:
            return "json"
        return "other C functions"
    for needle, group in _GROUPS:
        if needle in filename:
            return group
    if "/python3" in filename or filename.startswith("<frozen"):
        return "other stdlib"
    return "other"


def _profile_groups(prof: cProfile.Profile, events: int) -> dict[str, float]:
    """Own CPU time per package, in microseconds per upstream event."""
    st = pstats.Stats(prof)
    out: dict[str, float] = {}
    for (filename, _line, name), (_cc, _nc, tt, _ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        g = _group(filename, name)
        if g != IDLE:
            out[g] = out.get(g, 0.0) + tt
    return {k: v / events * 1e6 for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


async def cpu(entry: HttpPlugin, srv: FakeServer, p: Params, profile: bool = True) -> dict[str, Any]:
    runner, host = load_runner(entry.plugin)
    config = entry.config(srv.base_url)
    rows = []
    for pat in p.cpu_patterns:
        srv.stream(pat.tokens, pat.delay, prefix=f"cpu-{pat.name}-")
        run_r, run_f = _turns(entry, srv, runner, host, config, f"cpu-{pat.name}-")
        await run_r(0)
        await run_f(0)
        rounds = await _alternate(run_r, run_f, pat.runs, p.cpu_rounds, answer(pat.tokens))
        events, correct = rounds.events, rounds.correct
        ratios = [rc / fc for rc, fc in zip(rounds.runner_s, rounds.floor_s, strict=True)]
        r_us = [rc / events * 1e6 for rc in rounds.runner_s]
        f_us = [fc / events * 1e6 for fc in rounds.floor_s]
        row: dict[str, Any] = {
            "plugin": entry.plugin,
            "pattern": pat.name,
            "tokens_per_run": pat.tokens,
            "token_delay_s": pat.delay,
            "runs_per_batch": pat.runs,
            "rounds": p.cpu_rounds,
            "events_per_run": events // pat.runs,
            "correct": correct,
            "runner_us_per_event": median(r_us),
            "floor_us_per_event": median(f_us),
            "ratio": median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
        if profile:
            prof = {}
            for label, fn in (("runner", run_r), ("floor", run_f)):
                pr = cProfile.Profile()  # wall clock; the time blocked in epoll is dropped below
                gc.collect()
                pr.enable()
                turns = [await fn(i) for i in range(pat.runs)]
                pr.disable()
                prof[label] = _profile_groups(pr, events)
                del turns
            row["profile_us_per_event"] = prof
        rows.append(row)
        srv.marks()
    split = await run_split(entry, srv, p, runner, host, config)
    srv.stream(p.cpu_patterns[0].tokens, 0.0, prefix="cpu-probe-")
    probe = await sniffio_probe(
        lambda i: runner_turn(runner, host, config, f"cpu-probe-r{i}", keep=False),
        lambda i: floor_turn(entry, srv.base_url, f"cpu-probe-f{i}"),
    )
    srv.marks()
    return {"plugin": entry.plugin, "rows": rows, "split": split, "sniffio_probe": probe}


async def run_split(entry: HttpPlugin, srv: FakeServer, p: Params, runner: Any, host: Any,
                    config: dict[str, Any]) -> dict[str, Any]:
    """CPU per run, one run at a time, for a 1-token answer and for the concurrency section's answer
    (``conc_tokens``, sent at once), runner and floor alternating: the two points give each side's
    fixed cost per run and its cost per upstream event. At a few dozen events per run the fixed
    part (context, config, invoke, request, results) weighs as much as the stream itself."""
    points = []
    for n_tok in (1, p.conc_tokens):
        prefix = f"cpu-split{n_tok}-"
        srv.stream(n_tok, 0.0, prefix=prefix)
        run_r, run_f = _turns(entry, srv, runner, host, config, prefix)
        await _timed(run_r, 5)
        await _timed(run_f, 5)
        rounds = await _alternate(run_r, run_f, p.split_runs, p.cpu_rounds, answer(n_tok))
        points.append({"tokens": n_tok, "events_per_run": rounds.events // p.split_runs,
                       "correct": rounds.correct,
                       "runner_us_per_run": median(rounds.runner_s) / p.split_runs * 1e6,
                       "floor_us_per_run": median(rounds.floor_s) / p.split_runs * 1e6})
        srv.marks()
    one, full = points
    span = full["events_per_run"] - one["events_per_run"]
    fit = {}
    for side in ("runner", "floor"):
        per_event = (full[f"{side}_us_per_run"] - one[f"{side}_us_per_run"]) / span if span > 0 else math.nan
        fit[side] = {"per_event_us": per_event,
                     "fixed_us": one[f"{side}_us_per_run"] - per_event * one["events_per_run"]}
    return {"points": points, "runs": p.split_runs, "rounds": p.cpu_rounds, **fit}


async def sniffio_probe(run_r: Any, run_f: Any, k: int = 5) -> dict[str, Any]:
    """httpcore asks ``current_async_library()`` for every lock, event and cancel shield it makes;
    that tries ``import sniffio`` and, when sniffio is not installed, the failed import searches
    sys.path each time. Count the calls per run and time one call, in this process."""
    import importlib.util

    import httpcore._backends.auto as auto
    import httpcore._synchronization as sync

    original = sync.current_async_library
    calls = [0]

    def counting() -> str:
        calls[0] += 1
        return original()

    per_run = {}
    sync.current_async_library = auto.current_async_library = counting  # type: ignore[assignment]
    try:
        for label, fn in (("runner", run_r), ("floor", run_f)):
            calls[0] = 0
            for i in range(k):
                await fn(i)
            per_run[label] = calls[0] / k
    finally:
        sync.current_async_library = auto.current_async_library = original  # type: ignore[assignment]
    n = 200
    t0 = time.process_time()
    for _ in range(n):
        original()
    us = (time.process_time() - t0) / n * 1e6
    return {
        "sniffio_installed": importlib.util.find_spec("sniffio") is not None,
        "us_per_call": us,
        "calls_per_run": per_run,
        "ms_per_run": {k_: v * us / 1000 for k_, v in per_run.items()},
    }


# --- 4. concurrency ---------------------------------------------------------------------------


def stream_policy(plugin: str, config: dict[str, Any]) -> StreamPolicy:
    """The delta policy the plugin's runner applies with this config."""
    from runners_cli.plugins import find, load_runner_class

    return StreamPolicy.from_config(load_runner_class(find(plugin)).schema.load(config))


def delta_latencies(
    deltas: list[list[int]], writes: list[int], pre: list[int], policy: StreamPolicy
) -> list[float]:
    """Per delta: ms from when a zero-cost client applying the same policy would have sent it
    to when the host got it. A delta whose growth rule holds at its newest token is due when that
    token was written; any other delta is a max-delay flush, due ``max_delay`` after the first
    token it adds was written. So coalescing by design is not counted as latency."""
    out = []
    sent = 0
    for t_recv, chars in deltas:
        k = tokens_in(pre, chars)  # tokens the delta holds
        first_new = tokens_in(pre, sent)  # index of the first token the previous delta lacked
        pending = chars - sent
        if not 0 < k <= len(writes) or first_new >= len(writes):
            sent = chars
            continue
        if sent == 0 or (pending >= policy.min_chars and pending >= policy.growth * sent):
            due = writes[k - 1]
        else:
            due = writes[first_new] + int(policy.max_delay * 1e9)
        out.append((t_recv - due) / 1e6)
        sent = chars
    return out


CONC_MODES = ("runner", "sdk", "kit", "floor")


def _worker(entry: HttpPlugin, srv: FakeServer, p: Params, n: int, mode: str, tag: str,
            profile: bool = False, memprofile: bool = False) -> dict[str, Any]:
    """One batch of ``n`` concurrent runs in a fresh ``bench.worker`` process."""
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "out.json")
        proc = subprocess.run(
            [
                sys.executable, "-m", "bench.worker", "--plugin", entry.plugin,
                "--base-url", srv.base_url, "--mode", mode, "--n", str(n),
                "--tokens", str(p.conc_tokens), "--tag", tag, "--out", out_path,
                *(["--profile"] if profile else []),
                *(["--memprofile"] if memprofile else []),
            ],
            cwd=ROOT, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"bench.worker failed:\n{proc.stderr[-3000:]}")
        with open(out_path, encoding="utf-8") as f:
            return json.load(f)  # type: ignore[no-any-return]


def concurrency(entry: HttpPlugin, srv: FakeServer, p: Params, profile: bool = True) -> dict[str, Any]:
    """N runs at once per mode: the runner (``KitRunner.invoke``), the same through the SDK's
    ``Runner.invoke``, the kit without any invoke wrapper, and the floor. Each batch also reports
    its process CPU time; at the largest N, a CPU ratio above the target gets a cProfile of a
    runner and a floor batch."""
    srv.stream(p.conc_tokens, p.conc_delay, prefix="cc")
    pre = prefix_lengths(tokens(p.conc_tokens))
    policy = stream_policy(entry.plugin, entry.config(srv.base_url))
    rows = []
    for n in p.conc_ns:
        row: dict[str, Any] = {
            "plugin": entry.plugin,
            "n": n,
            "tokens": p.conc_tokens,
            "token_delay_s": p.conc_delay,
        }
        for mode in CONC_MODES:
            if mode in ("sdk", "kit") and n != max(p.conc_ns):
                continue  # the comparisons that explain the figures: at the largest N only
            s0 = srv.stats()
            c0 = s0["connections_accepted"]
            out = _worker(entry, srv, p, n, mode, f"cc{n}{mode}")
            marks = srv.marks()
            stats = srv.stats()
            before, after = s0.get("requests", {}), stats.get("requests", {})
            lat: list[float] = []
            for key, deltas in out["deltas"].items():
                m = marks.get(key) or []
                if mode != "floor":
                    lat += delta_latencies(deltas, m, pre, policy)
                else:  # the floor sees every token: from its write to its parse
                    lat += [(t - w) / 1e6 for (t, _), w in zip(deltas, m, strict=False)]
            row[mode] = {
                "ok": out["ok"],
                "failures": out["failures"],
                "wall_s": out["wall_s"],
                "cpu_s": out["cpu_s"],
                "gc_s": out.get("gc_s"),
                "gc_collections": out.get("gc_collections"),
                "rss_start_mb": out["rss_start_kb"] / 1024,
                "rss_peak_mb": out["rss_peak_kb"] / 1024,
                "latency_ms": {"p50": pct(lat, 50), "p99": pct(lat, 99), "samples": len(lat)},
                "connections": stats["connections_accepted"] - c0,
                # what each run asked of the platform, by route: a runner that must open a session
                # before it streams does two requests where a stream alone is one
                "requests_per_run": {k: (v - before.get(k, 0)) / n for k, v in after.items() if v > before.get(k, 0)},
            }
            if mode == "floor":
                row["events"] = out["events"]  # the same streams reach every mode
        events = row.get("events") or 0
        flo_cpu = row["floor"]["cpu_s"]
        for mode in (m for m in CONC_MODES if m in row):
            row[mode]["cpu_us_per_event"] = row[mode]["cpu_s"] / events * 1e6 if events else None
            row[mode]["cpu_ratio"] = row[mode]["cpu_s"] / flo_cpu if flo_cpu else None
        row["added_p99_ms"] = row["runner"]["latency_ms"]["p99"] - row["floor"]["latency_ms"]["p99"]
        if profile and n == max(p.conc_ns) and (row["runner"]["cpu_ratio"] or 0) > SCALE_CPU_RATIO and events:
            row["profile_us_per_event"] = {
                mode: {k: v / events for k, v in
                       (_worker(entry, srv, p, n, mode, f"ccp{n}{mode}", profile=True)["profile_us"] or {}).items()}
                for mode in ("runner", "floor")
            }  # fmt: skip
            srv.marks()
        if profile and n == max(p.conc_ns) and row["runner"]["rss_peak_mb"] >= rss_target(n):
            # where the memory goes: a batch of each side that samples what is in use (slower)
            row["memory"] = {mode: _worker(entry, srv, p, n, mode, f"ccm{n}{mode}", memprofile=True)["memory"]
                             for mode in ("runner", "floor")}  # fmt: skip
            srv.marks()
        rows.append(row)
    return {"plugin": entry.plugin, "rows": rows}


# --- 5. connections ---------------------------------------------------------------------------


async def connections(entry: HttpPlugin, srv: FakeServer, p: Params) -> dict[str, Any]:
    runner, host = load_runner(entry.plugin)
    config = entry.config(srv.base_url)
    srv.stream(5, 0.0, prefix="conn")
    expected = answer(5)
    await close_shared_client()
    c0 = srv.stats()["connections_accepted"]
    correct = 0
    for i in range(p.conn_runs):
        correct += _check(await runner_turn(runner, host, config, f"conn-r{i}", keep=False), expected)
    await close_shared_client()  # the floor starts with an empty pool too
    await asyncio.sleep(0.05)
    c1 = srv.stats()["connections_accepted"]
    for i in range(p.conn_runs):
        await floor_turn(entry, srv.base_url, f"conn-f{i}")
    await asyncio.sleep(0.05)
    c2 = srv.stats()["connections_accepted"]
    srv.marks()
    return {
        "plugin": entry.plugin,
        "runs": p.conn_runs,
        "correct": correct,
        "runner_connections": c1 - c0,
        "floor_connections": c2 - c1,
        "pool_max_connections": POOL_LIMITS.max_connections,
        "pool_keepalive": POOL_LIMITS.max_keepalive_connections,
    }


# --- 6. coding-agent runners ------------------------------------------------------------------


async def coding_agents(p: Params) -> dict[str, Any]:
    """Steering latency and follow-up cost for each coding-agent runner in the registry, each turn
    measured with ``isolation: sandbox`` and ``isolation: none`` in alternating rounds, and what the
    boundary is made of (the bwrap probe, starting a program inside bwrap, the secret proxy's hop)."""
    if not CODING_AGENTS:
        return {"status": "not applicable", "reason": "no coding-agent runner has landed", "rows": []}
    from runner_kit import sandbox

    why = await sandbox.probe(sandbox.find_bwrap())
    modes = ISOLATIONS if why is None else ("none",)  # without bwrap, only the unconfined turns
    rows = []
    for entry in CODING_AGENTS:
        srv = entry.start()
        try:
            rows.append(await _coding_agent(entry, srv, p, modes))
        finally:
            entry.stop(srv)
    return {"status": "measured", "rows": rows, "boundary": await _boundary_parts(p)}


ISOLATIONS = ("sandbox", "none")


async def _coding_round(entry: Any, srv: Any, runner: Any, host: Any, config: dict[str, Any], tag: str) -> dict[str, float]:
    """One conversation: a turn in a new agent process with a follow-up queued while it streams
    (answered by the same process), then the follow-up again as a run of its own (a new agent
    process resuming the stored session). Times as the host sees them."""
    entry.answer(srv, ["word "] * 8, 0.02)
    conversation = Identity(conversation_id=f"bench-coding-{tag}")
    ctx = host.make_context(f"start {tag}", config=config, steering=True, identity=conversation)
    follow = f"follow-up {tag}."
    queued = False
    completed: list[float] = []
    t0 = time.time()
    async for result in runner.invoke(ctx):
        host.apply_result(ctx.run_id, result)
        kind = rtype(result)
        if kind == "message.delta" and not queued:
            host.queue_steering(ctx, follow)
            queued = True
        elif kind == "message.completed":
            completed.append(time.time())
        elif kind == "run.failed":
            raise RuntimeError(f"{entry.plugin} ({tag}): the run failed: {result.data}")
    if len(completed) != 2:
        raise RuntimeError(f"{entry.plugin} ({tag}): expected two replies in one run, got {len(completed)}")
    got = next(r.received_at for r in list(srv.requests) if follow.encode() in r.body)
    resumed: list[float] = []
    t1 = time.time()
    ctx2 = host.make_context(follow, config=config, identity=conversation)
    async for result in runner.invoke(ctx2):
        host.apply_result(ctx2.run_id, result)
        if rtype(result) == "message.completed":
            resumed.append(time.time() - t1)
    if not resumed:
        raise RuntimeError(f"{entry.plugin} ({tag}): the resumed run gave no reply")
    return {"pickup_ms": (got - completed[0]) * 1000, "new_process_turn_s": completed[0] - t0,
            "live_turn_s": completed[1] - completed[0], "resumed_run_s": resumed[0]}


def _spread(xs: list[float]) -> dict[str, float]:
    return {"median": median(xs), "p95": pct(xs, 95)}


async def _coding_agent(entry: Any, srv: Any, p: Params, modes: tuple[str, ...] = ISOLATIONS) -> dict[str, Any]:
    """Per isolation mode and round: a new-process turn (spawn + answer), the follow-up picked up by
    the live process (pickup: the turn's reply reached the host -> the follow-up's model call
    reached the model API; turn: reply to reply) and the same follow-up as a run of its own (a new
    process resuming the session). Rounds alternate which mode goes first, so load on a shared
    machine falls on both alike. The first figures (steering, follow-up, resumed run) are the
    default isolation's (sandbox), or none's where no sandbox can be built (``modes``)."""
    runner, host = load_runner(entry.plugin)
    base = entry.config(srv)
    configs = {mode: {**base, "isolation": mode} for mode in modes}
    for mode in modes if p.coding_warmup else ():  # warm-up: imports, the probe, first connections
        await _coding_round(entry, srv, runner, host, configs[mode], f"warm-{mode}")
    got: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for i in range(p.coding_rounds):
        for mode in (modes if i % 2 == 0 else modes[::-1]):
            got[mode].append(await _coding_round(entry, srv, runner, host, configs[mode], f"{i}-{mode}"))
    first = modes[0]
    if len(modes) == 1:
        spread = {key: _spread([r[key] for r in got[first]]) for key in ("live_turn_s", "resumed_run_s", "pickup_ms")}
        live, fresh = spread["live_turn_s"]["median"], spread["resumed_run_s"]["median"]
        return {"plugin": entry.plugin, "steering_ms": spread["pickup_ms"], "same_process_turn_s": live,
                "new_process_turn_s": fresh, "ratio": live / fresh, "isolation_measured": first}

    def col(mode: str, key: str) -> list[float]:
        return [r[key] for r in got[mode]]

    figures = ("new_process_turn_s", "live_turn_s", "resumed_run_s")
    iso: dict[str, Any] = {"rounds": p.coding_rounds}
    for mode in ISOLATIONS:
        iso[mode] = {key: _spread(col(mode, key)) for key in (*figures, "pickup_ms")}
    iso["ratio"] = {key: iso["sandbox"][key]["median"] / iso["none"][key]["median"] for key in figures}
    # the paired difference per round (same round, back to back): less noisy than a difference of medians
    iso["added_ms"] = {key: _spread([(a[key] - b[key]) * 1000 for a, b in zip(got["sandbox"], got["none"], strict=True)])
                       for key in figures}
    live, fresh = iso["sandbox"]["live_turn_s"]["median"], iso["sandbox"]["resumed_run_s"]["median"]
    return {
        "plugin": entry.plugin,
        "steering_ms": iso["sandbox"]["pickup_ms"],
        "same_process_turn_s": live,
        "new_process_turn_s": fresh,
        "ratio": live / fresh,
        "isolation": iso,
    }


async def _boundary_parts(p: Params) -> dict[str, Any]:
    """What the boundary is made of, measured alone in this process, each side alternating with its
    reference: the one-time bwrap probe (first call per process, then cached), starting a program
    (``/bin/true``) inside an agent's bwrap sandbox against starting it directly, and one streamed
    model request through the agent's secret proxy against the same request sent directly."""
    import shutil as _shutil
    from pathlib import Path

    import httpx

    from runner_kit import sandbox
    from runner_kit.secret_proxy import SecretProxy
    from tests.fakes.model_api import FakeModelAPI

    out: dict[str, Any] = {}
    bwrap = sandbox.find_bwrap()
    why = await sandbox.probe(bwrap)
    if bwrap is None or why is not None:
        out["sandbox"] = f"not available here: {why}"
    else:
        first: list[float] = []
        cached: list[float] = []
        for _ in range(p.boundary_reps):
            sandbox.forget_probes()
            t0 = time.perf_counter()
            await sandbox.probe(bwrap)
            t1 = time.perf_counter()
            await sandbox.probe(bwrap)
            cached.append((time.perf_counter() - t1) * 1e6)
            first.append((t1 - t0) * 1000)
        out["probe_first_ms"] = _spread(first)
        out["probe_cached_us"] = _spread(cached)
        folder = Path(tempfile.mkdtemp(prefix="bench-boundary-"))
        try:
            (folder / "ws").mkdir()
            (folder / "home").mkdir()
            box = sandbox.Boundary(bwrap=bwrap, workspace=folder / "ws", home=folder / "home",
                                   read_only=tuple(sandbox.program_paths([sys.executable], os.environ)))
            argv = ["/bin/true"]
            boxed, _ = box.wrap(argv, os.environ)

            async def spawn(cmd: list[str]) -> float:
                t0 = time.perf_counter()
                proc = await asyncio.create_subprocess_exec(*cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                            stderr=subprocess.DEVNULL)
                if await proc.wait() != 0:
                    raise RuntimeError(f"{cmd[0]} exited {proc.returncode}")
                return (time.perf_counter() - t0) * 1000

            async def pair(plain: list[str], sandboxed: list[str], name: str) -> None:
                inside: list[float] = []
                direct: list[float] = []
                for i in range(p.boundary_reps):
                    if i % 2:
                        direct.append(await spawn(plain))
                        inside.append(await spawn(sandboxed))
                    else:
                        inside.append(await spawn(sandboxed))
                        direct.append(await spawn(plain))
                out[f"{name}_sandbox_ms"], out[f"{name}_direct_ms"] = _spread(inside), _spread(direct)
                out[f"{name}_added_ms"] = _spread([a - b for a, b in zip(inside, direct, strict=True)])

            await pair(argv, boxed, "spawn")
            # a scripted CLI's own start (Python and its imports) inside the same kind of sandbox
            from .registry import FAKE_CLI_DIR

            cli = [str(FAKE_CLI_DIR / "fake_claude.py"), "--version"]
            cli_box = sandbox.Boundary(bwrap=bwrap, workspace=folder / "ws", home=folder / "home",
                                       read_only=tuple(sandbox.program_paths(cli, os.environ)))
            await pair(cli, cli_box.wrap(cli, os.environ)[0], "cli")
        finally:
            _shutil.rmtree(folder, ignore_errors=True)
    key = "sk-bench-proxy-key"
    api = FakeModelAPI(api_keys={key}).start()
    api.record_requests = False
    api.answer_tokens, api.token_delay = ["word "] * 8, 0.0
    body = {"model": "claude-fake", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    try:
        async with SecretProxy.open() as proxy, httpx.AsyncClient(
            limits=httpx.Limits(max_keepalive_connections=0), trust_env=False, timeout=30
        ) as client:  # a new connection per request on both sides, as the CLIs' own clients mostly do
            routed, stand_in = proxy.route(api.anthropic_base_url()), proxy.stand_in(key)

            async def call(base: str, k: str) -> float:
                t0 = time.perf_counter()
                resp = await client.post(base + "/v1/messages", json=body, headers={"x-api-key": k})
                if resp.status_code != 200 or b"message_stop" not in resp.content:
                    raise RuntimeError(f"model request failed: {resp.status_code}")
                return (time.perf_counter() - t0) * 1000

            for _ in range(3):
                await call(routed, stand_in)
                await call(api.anthropic_base_url(), key)
            via: list[float] = []
            direct_calls: list[float] = []
            for i in range(p.boundary_reps):
                if i % 2:
                    direct_calls.append(await call(api.anthropic_base_url(), key))
                    via.append(await call(routed, stand_in))
                else:
                    via.append(await call(routed, stand_in))
                    direct_calls.append(await call(api.anthropic_base_url(), key))
        out["request_proxy_ms"], out["request_direct_ms"] = _spread(via), _spread(direct_calls)
        out["request_added_ms"] = _spread([a - b for a, b in zip(via, direct_calls, strict=True)])
    finally:
        api.stop()
    return out


# --- 7. in-process agent loops (LocalAgent) ----------------------------------------------------


async def in_process_agents(p: Params) -> dict[str, Any]:
    """Each in-process agent runner's 30-round tool loop (its own time and the bytes of its host
    action requests per round, against a bare loop making the same model and tool calls through the
    same host actions: ``bench/loop.py``) and its compaction cost (against the summary call made
    directly)."""
    if not IN_PROCESS_AGENTS:
        return {"status": "not applicable", "reason": "no in-process agent runner has landed", "rows": []}
    rows = []
    for entry in IN_PROCESS_AGENTS:
        srv = entry.start()
        try:
            rows.append(await _in_process_agent(entry, srv, p))
        finally:
            entry.stop(srv)
    return {"status": "measured", "rows": rows}


async def _agent_run(runner: Any, host: Any, text: str, config: dict[str, Any], ident: Identity) -> tuple[float, list[Any]]:
    ctx = host.make_context(text, config=config, identity=ident)
    results = []
    t0 = time.perf_counter()
    async for result in runner.invoke(ctx):
        host.apply_result(ctx.run_id, result)
        results.append(result)
    elapsed = time.perf_counter() - t0
    end = results[-1] if results else None
    if end is None or rtype(end) != "run.completed":
        raise RuntimeError(f"bench run did not complete: {end and end.data}")
    return elapsed, results


async def _in_process_agent(entry: InProcessAgent, srv: Any, p: Params) -> dict[str, Any]:
    from tests.fakes.openai import Say, ToolCalls

    from .loop import bare_loop, load_metered, plugin_loop, summarise

    runner, host = load_metered(entry.plugin)
    entry.prepare(srv, host)
    config = entry.config(srv)
    model = next(iter(host.models.values()))
    tool = next(iter(host.tools.values()))
    rounds = p.local_rounds
    answer_text = "The loop is done and this is the answer. " * 4

    def script() -> list[Any]:
        # fresh tool-call ids per run (call_1, call_2, ...), so both sides send the same bytes
        if hasattr(srv, "_call_counter"):
            srv._call_counter = 0
        getattr(srv, "chat_requests", []).clear()
        return [ToolCalls([(tool.name, {"n": k})]) for k in range(rounds)] + [Say(answer_text)]

    async def agent(key: str) -> dict[str, Any]:
        srv.script = script()
        got = await plugin_loop(runner, host, config, f"loop {key}", f"bench-loop-{key}")
        if got["tool_calls"] != rounds or len(got["rounds"]) != rounds + 1:
            raise RuntimeError(f"{entry.plugin}: expected {rounds} tool rounds and the answer, saw "
                               f"{got['tool_calls']} tool calls in {len(got['rounds'])} model calls")
        return got

    async def bare(key: str) -> dict[str, Any]:
        srv.script = script()
        got = await bare_loop(runner, host, config, model.model_id, tool, f"loop {key}", f"bench-bare-{key}")
        if got["tool_calls"] != rounds or len(got["rounds"]) != rounds + 1:
            raise RuntimeError(f"bare loop: expected {rounds} tool rounds and the answer, saw {got['tool_calls']}")
        return got

    await agent("warm")  # imports, pydantic schemas, the first connections
    await bare("warm")
    agent_runs: list[dict[str, Any]] = []
    bare_runs: list[dict[str, Any]] = []
    for i in range(p.local_reps):  # alternating which side goes first, so load falls on both alike
        if i % 2:
            bare_runs.append(await bare(str(i)))
            agent_runs.append(await agent(str(i)))
        else:
            agent_runs.append(await agent(str(i)))
            bare_runs.append(await bare(str(i)))
    loop = summarise(agent_runs, bare_runs, rounds)
    ov = loop["overhead"]

    # compaction: a long earlier conversation that does not fit the configured window
    small = {**config, "advanced-settings": True, "context-window-tokens": 6000, "context-reserve-tokens": 1000,
             "context-keep-recent-tokens": 1500, "context-summary-tokens": 400,
             "context-history-fetch-limit": 100}
    compact_s: list[float] = []
    reuse_s: list[float] = []
    summary_s: list[float] = []
    counted: list[int] = []
    summary_text = "Earlier: the user planned a trip and compared three hotels. "
    for i in range(p.local_reps):
        conv = Identity(conversation_id=f"bench-compact-{i}")
        host.store.reset_transcript(conv.conversation_id)
        for k in range(40):
            host.store.append_transcript({"conversation_id": conv.conversation_id, "bot_id": conv.bot_id,
                                          "workspace_id": conv.workspace_id, "role": "user" if k % 2 == 0 else "assistant",
                                          "content": f"message {k}: " + "details about the trip plan " * 28})
        srv.script = [Say(summary_text), Say("Answer after compaction.")]
        before = len(host.calls)
        t1, r1 = await _agent_run(runner, host, "what did we decide?", small, conv)
        counted.append(sum(1 for c in host.calls[before:] if c.action == "count_tokens"))
        if not any(rtype(r) == "state.updated" and "checkpoint" in str(r.data.get("key")) for r in r1):
            raise RuntimeError(f"{entry.plugin}: the long conversation was not compacted")
        srv.script = [Say("Answer from the checkpoint.")]
        t2, r2 = await _agent_run(runner, host, "and the hotel?", small, conv)
        if any(rtype(r) == "state.updated" and "checkpoint" in str(r.data.get("key")) for r in r2):
            raise RuntimeError(f"{entry.plugin}: the second run summarised again instead of reusing the checkpoint")
        compact_s.append(t1)
        reuse_s.append(t2)
        history = [{"role": "user", "content": "message: " + "details about the trip plan " * 28}] * 30
        srv.script = [Say(summary_text)]
        t0 = time.perf_counter()
        await model.invoke(history + [{"role": "user", "content": "Summarise the conversation above."}],
                           extra_args={"max_tokens": 400})
        summary_s.append(time.perf_counter() - t0)
    return {
        "plugin": entry.plugin,
        "rounds": rounds,
        "runs": p.local_reps,
        "agent_run_s": ov["plugin_run_s"],
        "direct_loop_s": ov["bare_run_s"],
        "added_per_model_call_ms": ov["added_ms"],
        "loop": loop,
        "compacting_run_s": median(compact_s),
        "checkpoint_run_s": median(reuse_s),
        "direct_summary_call_s": median(summary_s),
        "compaction_cost_s": median(compact_s) - median(reuse_s),
        "token_counts_per_compacting_run": median(counted),
    }
