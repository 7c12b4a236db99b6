"""Why a figure misses its target: explanations written from this run's own measurements.

Each note appears only while its figure misses. The causes were found by profiling and by
reading the kit (see the issue note); the numbers in them are recomputed on every run.
"""

from __future__ import annotations

import math
from typing import Any

from .loop import slope
from .report import LOOP_OVERHEAD_MS, SCALE_CPU_RATIO, rss_target


def _f(x: float, nd: int = 1) -> str:
    return f"{x:,.{nd}f}"


def _sweep(
    data: dict[str, Any], growth: float | None, max_delay: float, rate: float
) -> dict[str, Any] | None:
    for r in data["sections"].get("sweep", []):
        if growth in (None, r["growth"]) and r["max_delay_s"] == max_delay and r["rate_tps"] == rate:
            return r
    return None


def _bytes_burst(data: dict[str, Any], row: dict[str, Any]) -> str:
    alt = _sweep(data, 1.0, 0.5, 0.0)
    return (
        f"**2. Host bytes, answer all at once ({row['plugin']}: {_f(row['ratio'], 2)}×).** The kit's "
        "geometric delta policy is doing what it was designed to do; the target sits just below its "
        "own floor. Every delta carries the whole text so far (`all_content`) and the new piece "
        "(`content`), and the run ends with the whole answer once more in `message.completed`. With "
        "growth g the successive `all_content` sizes shrink by 1+g from the end, so they sum to "
        "(1+g)/g × the answer, the pieces to 1× and the final message to 1×. That is 3 + 1 + 1 = 5× for "
        "the default g = 0.5, before the JSON fields of each result. "
        + (
            f"With growth 1.0 the sum is 2 + 1 + 1 = 4× (simulated with the kit's ResultBuilder: "
            f"{_f(alt['ratio'], 2)}×, {alt['deltas']} deltas instead of "
            f"{(_sweep(data, 0.5, 0.5, 0.0) or {}).get('deltas', '?')}). "
            if alt
            else ""
        )
        + "Fix in the kit: default `StreamPolicy.growth` 0.5 → 1.0 (`runner_kit/results.py`, and the "
        "`stream-growth` default in each runner YAML). This only changes fast streams: a slow stream "
        "is paced by `stream-max-delay` either way."
    )


def _bytes_paced(data: dict[str, Any], row: dict[str, Any]) -> str:
    rate = 1 / row["token_delay_s"]
    seconds = row["tokens"] * row["token_delay_s"]
    longer = _sweep(data, None, 2.0, rate)
    return (
        f"**2. Host bytes, {row['tokens']:,} tokens at {rate:g} tokens/s ({row['plugin']}: {_f(row['ratio'])}×, "
        f"{row['deltas']} deltas).** The target cannot hold for a slow stream while updates stay at "
        "most `stream-max-delay` (0.5 s) apart. The max-delay rule sends the whole text so far at least "
        "that often while text is pending. So a stream that lasts T seconds sends about T/max-delay "
        "deltas averaging half the answer, about T/(2 × max-delay) × the answer on top of the geometric "
        f"part. This answer streamed for {seconds:g} s, which predicts about {_f(seconds / (2 * 0.5) + 5, 0)}×. "
        "To get to 5× the pause between updates would have to grow with the text shown; simulated "
        "with the kit's ResultBuilder, that means pauses of about 20 s near the end of a 4,000-token "
        "answer at 50 tokens/s: the reply would look frozen. The sweep above shows the trade-off. "
        + (
            f"For example `stream-max-delay` 2 s gives {_f(longer['ratio'])}× with "
            f"{_f(longer['longest_gap_s'])} s gaps. "
            if longer
            else ""
        )
        + "**The target is wrong for paced streams.** It holds for the geometric part (the "
        "all-at-once row). For a stream lasting T seconds it should read ≤ 5× + T/(2 × "
        "max-delay), or be stated per update gap. Cumulative deltas are the host contract "
        "(`all_content`), so no runner-side change can remove the T/max-delay term without slower "
        "updates."
    )


def _connections(data: dict[str, Any], c: dict[str, Any]) -> str:
    return (
        f"**5. Connections ({c['plugin']}: {c['runner_connections']} for {c['runs']} runs, floor "
        f"{c['floor_connections']}).** Every run opened a new TCP connection. The adapter stops "
        "reading at its final event (`message_end`), so the end of the chunked body (`0\\r\\n\\r\\n`, "
        "already on the wire) is never read. httpcore only returns a connection to the pool once the "
        "response has been read to its end, so `open_stream`'s `resp.aclose()` closes it instead. "
        "The floor reads every body to its end and reuses one connection. Fix: after the final event, "
        "drain the rest of the body from the same event iterator with a short bound (a kit helper "
        "`runner_kit.http.finish_body(events, timeout=0.25)`, called by the adapter in place of a bare "
        "`break`). Measured with that change in a local copy: 1 connection for 100 runs, contract "
        "suite green. A new iterator over `resp.stream` would race the abandoned one's finaliser."
    )


def _concurrency(data: dict[str, Any], r: dict[str, Any]) -> str:
    run = r["runner"]
    pool = next((c for c in data["sections"].get("connections", []) if c["plugin"] == r["plugin"]), None)
    cap = pool["pool_max_connections"] if pool else None
    fails = ", ".join(f"{v} × {k}" for k, v in run["failures"].items()) or "none"
    text = (
        f"**4. {r['n']} concurrent runs ({r['plugin']}: {run['ok']}/{r['n']} complete; failures: {fails}).** "
    )
    if "upstream.timeout" in run["failures"]:
        answer_s = r["tokens"] * r["token_delay_s"]
        text += (
            f"The shared client allows {cap or 'a limited number of'} connections (`POOL_LIMITS.max_connections`). "
            f"An HTTP/1.1 stream holds its connection for the whole answer (here about {answer_s:g} s). "
            "`timeout_for` lets a run wait for a free connection only `pool=min(5.0, budget)`, so every "
            'run beyond the cap failed with `upstream.timeout` ("timed out waiting for a free '
            f'connection"); the runner opened {run["connections"]} connections. The queue also stalls '
            "the runs that do have a connection. While requests wait in httpcore's pool, every pool "
            "event re-scans waiting requests × connections (`AsyncConnectionPool."
            "_assign_requests_to_connections`). A cProfile of this batch found 18 M `can_handle_request` "
            "calls taking most of the process's CPU, so the event loop freezes for seconds: p99 "
            f"latency here was {_f(run['latency_ms']['p99'], 0)} ms. The floor waits up to 60 s and "
            "completes, slowly. Fix in `runner_kit/http.py`: `max_connections=None` (one "
            "connection per concurrent stream is inherent to HTTP/1.1 streaming; keep-alive stays at "
            "50) and `pool=budget` in `timeout_for`, so a run that does have to queue waits within its "
            "own deadline. Measured in a local copy: 500/500 complete, wall ≈ one answer, peak RSS "
            "≈ 90 MB. With `pool=budget` alone also 500/500, but queued runs wait a whole answer for "
            "their first text, and the pool scan still stalls the loop (p99 ≈ 3 s)."
        )
    if "upstream.unavailable" in run["failures"]:
        modes = ", ".join(
            f"{m} {r[m]['ok']}/{r['n']} ({r[m]['connections']} connections accepted)"
            for m in ("runner", "sdk", "kit", "floor") if r.get(m)
        )
        text += (
            f"The failed runs are `upstream.unavailable` (a connection refused, reset or closed before the "
            f"answer finished); the fake accepted fewer connections than there were runs: {modes}. The "
            "fake listens with a backlog of 1,024 since 2026-12-02 (uvicorn's default is 2,048); before, it "
            "had asyncio's default of 100, which a burst of a thousand connects can overflow. Five batches of "
            "1,000 on a quiet machine at backlog 100 all completed, so that overflow is the likely cause of "
            "failures measured before that date, not a proven one. If they recur with the larger backlog, a "
            "kit-side remedy would be "
            "one retry of a request whose connection failed before any response byte arrived."
        )
    if run["rss_peak_mb"] >= rss_target(r["n"]):
        text = text.rstrip() + (
            f" Peak RSS {_f(run['rss_peak_mb'], 0)} MB exceeds the target ({rss_target(r['n']):g} MB; the floor "
            f"{_f(r['floor']['rss_peak_mb'], 0)} MB, both from {_f(run['rss_start_mb'], 0)} MB at the start). "
        )
        text += _memory(r)
        more = _requests(r)
        if more:
            text += more + (
                f"Each of those requests needs a connection: the runner opened {run['connections']} against the "
                f"floor's {r['floor']['connections']} (the pool keeps 50 idle ones, so the first request's "
                "connection is mostly closed before the stream asks for one), and the sockets, buffers and "
                "requests in flight are the likely difference in memory; not measured apart in this run."
            )
    return text


def _memory(r: dict[str, Any]) -> str:
    """Where the runner's peak memory goes, from the memory-sampling batches (when taken)."""
    mem = r.get("memory") or {}
    run, flo = mem.get("runner") or {}, mem.get("floor") or {}
    if not (run and flo):
        return ""
    n = r["n"]
    over_kb = (r["runner"]["rss_peak_mb"] - rss_target(n)) * 1024 / n
    grown_kb = (r["runner"]["rss_peak_mb"] - r["runner"]["rss_start_mb"]) * 1024 / n
    flo_kb = (r["floor"]["rss_peak_mb"] - r["floor"]["rss_start_mb"]) * 1024 / n
    rt, ft = run.get("types_per_run") or {}, flo.get("types_per_run") or {}
    diffs = sorted(((k, rt.get(k, 0.0) - ft.get(k, 0.0)) for k in set(rt) | set(ft)), key=lambda kv: -kv[1])
    top = ", ".join(f"{k} +{_f(d, 1)}" for k, d in diffs[:6] if d >= 0.5)
    return (
        f"Per run that is {_f(grown_kb, 1)} KB of RSS against the floor's {_f(flo_kb, 1)} KB. A batch of each "
        "side that samples memory in use (every 0.5 s, at the moment Python had the most blocks allocated) "
        f"counts, per run in flight, {_f(run['blocks_per_run'], 0)} allocated memory blocks and "
        f"{_f(run['objects_per_run'], 0)} objects the cycle collector tracks for the runner, against "
        f"{_f(flo['blocks_per_run'], 0)} and {_f(flo['objects_per_run'], 0)} for the floor; the largest "
        f"differences per run, by type: {top or 'none above half an object'}. Those are the host's run "
        "context (its pydantic models and their dicts), the SDK's per-invocation API with its deep copy of "
        "the run's resources, and the run's chain of tasks, coroutines and async generators with their "
        "frames and context managers; RSS above what is in use is what the allocator keeps after freeing "
        f"(its high-water mark). Under the target needs about {_f(max(over_kb, 0.0), 1)} KB less per run in "
        "flight, from those objects. "
    )


def _latency(r: dict[str, Any]) -> str:
    run, kit, flo = (r[k]["latency_ms"] for k in ("runner", "kit", "floor"))
    sdk = (r.get("sdk") or {}).get("latency_ms")
    added = (sdk or run)["p50"] - flo["p50"]
    wrapper = min(max(((sdk or run)["p50"] - kit["p50"]) / added, 0.0), 1.0) if added > 0 else 0.0
    text = (
        f"**Also measured ({r['plugin']}): where the added latency at N = {r['n']:,} comes from.** "
        f"p50 / p99 per delta: runner (`KitRunner.invoke`) {_f(run['p50'])} / {_f(run['p99'])} ms"
    )
    if sdk:
        text += f", the same runner through the SDK's own `Runner.invoke` {_f(sdk['p50'])} / {_f(sdk['p99'])} ms"
    text += (
        f", without any invoke wrapper {_f(kit['p50'])} / {_f(kit['p99'])} ms, floor "
        f"{_f(flo['p50'])} / {_f(flo['p99'])} ms. Through the SDK's wrapper, {_f(100 * wrapper, 0)} % of "
        "the added median is the wrapper: it passes each result through an `asyncio.Queue` read by a "
        "new `asyncio.create_task(results.get())` raced with `asyncio.wait`, three event-loop hops per "
        "result, each waiting out a loop cycle that a thousand busy streams make long. The kit's "
        "`KitRunner.invoke` (`runner_kit/invoke.py`, used on the SDK versions it was compared with) "
        "keeps the same guarantees with one hop per result, and the kit's reading task (which reads "
        "each event and translates it) puts each result straight into the host's queue when nothing "
        "is ahead of it (`runner_kit.invoke.outlet`); otherwise, and without an invoke wrapper, results "
        "pass the kit's `_pump` queue to the run's task. Most text events only grow the pending delta "
        "and cross nothing. What remains over the floor is the host's own read of each result and the "
        "CPU per event (below)."
    )
    return text


def _scale_latency(r: dict[str, Any]) -> str:
    run, flo = r["runner"]["latency_ms"], r["floor"]["latency_ms"]
    kit = (r.get("kit") or {}).get("latency_ms")
    text = (
        f"**4. Added p99 per delta at N = {r['n']:,} ({r['plugin']}: {_f(run['p99'], 0)} ms against the "
        f"floor's {_f(flo['p99'], 0)} ms, {_f(run['p99'] / flo['p99'] if flo['p99'] else math.nan)}×).** "
        "At this load one Python process is saturated even for the floor (its own p99 is the loop "
        "falling behind), so a delay is counted in loop cycles, and every task hop between the socket "
        "and the host waits out one. The floor has one hop per event (its read). The runner has two per "
        "delta it sends: the reading task, which reads the event, translates it and puts the result "
        "straight into the host's queue, and the host's read of that queue; a result that would overtake "
        "one still on its way (the host's queue full, or the run's task busy with an earlier one) goes "
        "through the kit's `_pump` and the run's task instead, one hop more"
    )
    if r["runner"].get("cpu_ratio") is not None:
        text += f"; its CPU per event is {_f(r['runner']['cpu_ratio'])}× the floor's"
    text += "."
    if kit:
        text += (
            f" Without any invoke wrapper (results through `_pump` to the host's task) the same runner "
            f"measures p99 {_f(kit['p99'], 0)} ms "
            f"({_f(kit['p99'] / flo['p99'] if flo['p99'] else math.nan)}× the floor)."
        )
    text += (
        " No hop is left to remove between the reading task and the host; what would be needed for ≤ 2× "
        "is a per-event CPU cost nearer the floor's, so each loop cycle is shorter: see the CPU note."
    )
    return text


def _requests(r: dict[str, Any]) -> str:
    """What the runner asks of the platform per run beyond the floor's requests, when it does."""
    run, flo = (r[m].get("requests_per_run") or {} for m in ("runner", "floor"))
    n_run, n_flo = sum(run.values()), sum(flo.values())
    if n_run <= n_flo + 0.01:
        return ""
    extra = ", ".join(f"`{k}` {_f(v, 2)}" for k, v in sorted(run.items()) if v - flo.get(k, 0.0) > 0.01)
    return (
        f"The runner makes {_f(n_run, 2)} requests per run where the floor makes {_f(n_flo, 2)} ({extra}): "
        "it opens the conversation with the platform's own call before streaming, which the floor "
        "can skip (its stream creates what it needs). In a real chat that happens once per "
        "conversation; here every run is a new one. Opening it with the first run instead, where the "
        "platform allows that (LangGraph's `if_not_exists: \"create\"` on a thread id the runner "
        "chooses), would save the request. "
    )


def _collector(r: dict[str, Any]) -> str:
    """How much of the runner's extra CPU is the cycle collector, when the batch measured it."""
    run, flo = r["runner"], r["floor"]
    if not (run.get("gc_s") and flo.get("gc_s")):
        return ""
    extra_cpu = run["cpu_s"] - flo["cpu_s"]
    extra_gc = sum(run["gc_s"]) - sum(flo["gc_s"])
    if extra_cpu <= 0 or extra_gc <= 0:
        return ""
    return (
        f"Of the runner's {_f(extra_cpu, 2)} s more CPU, {_f(extra_gc, 2)} s is the cycle collector "
        f"({_f(sum(run['gc_s']), 2)} s against {_f(sum(flo['gc_s']), 2)} s; full collections "
        f"{run['gc_collections'][2]} taking {_f(run['gc_s'][2], 2)} s against {flo['gc_collections'][2]} "
        f"taking {_f(flo['gc_s'][2], 2)} s). A full collection walks every live container object, and "
        "each run in flight keeps more of them than the floor's: the host's run context (its "
        "pydantic models), and the chain of async generators and coroutines a result passes (host "
        "invoke, drive, turn, pump, reading task, adapter stream, answer, SSE reader), each with its "
        "frame, context managers and the loop's weak reference to it. "
    )


def _split(data: dict[str, Any], r: dict[str, Any]) -> str:
    """How far the runner's extra CPU per run at this N is from the target, and where the extra is
    when runs go one at a time (section 3b)."""
    run, flo = r["runner"], r["floor"]
    if not r.get("events") or not flo.get("cpu_s"):
        return ""
    e = r["events"] / r["n"]
    extra_ms = (run["cpu_s"] - flo["cpu_s"]) / r["n"] * 1e3
    allowed_ms = (SCALE_CPU_RATIO - 1) * flo["cpu_s"] / r["n"] * 1e3
    text = (
        f"Per run at this load the runner spends {_f(extra_ms, 2)} ms more CPU than the floor; "
        f"≤ {SCALE_CPU_RATIO:g}× allows {_f(allowed_ms, 2)} ms. "
    )
    if run.get("gc_s") and flo.get("gc_s"):
        gc_ms = (sum(run["gc_s"]) - sum(flo["gc_s"])) / r["n"] * 1e3
        text += f"The cycle collector's excess alone is {_f(gc_ms, 2)} ms of it (below). "
    sp = next((c["split"] for c in data["sections"].get("cpu", []) if c["plugin"] == r["plugin"] and c.get("split")),
              None)
    if sp and not math.isnan(sp["runner"]["per_event_us"]):
        fr, pr = sp["runner"]["fixed_us"], sp["runner"]["per_event_us"]
        ff, pf = sp["floor"]["fixed_us"], sp["floor"]["per_event_us"]
        text += (
            f"One run at a time (section 3b) the runner costs {_f(fr, 0)} µs per run plus {_f(pr, 1)} µs per "
            f"upstream event, the floor {_f(ff, 0)} + {_f(pf, 1)}: of the runner's extra at {_f(e, 0)} events "
            f"per run, {_f(fr - ff, 0)} µs is fixed per run (context, config, the SDK's per-invocation API, the "
            f"invoke and reading tasks, request, results) and {_f(e * (pr - pf), 0)} µs is per event. "
            f"One at a time the ratio is {_f((fr + e * pr) / (ff + e * pf))}×; at this load it is "
            f"{_f(run.get('cpu_ratio'))}×, because both sides then also pay what the load costs everyone "
            "(httpcore's pool scan over a thousand connections, a busier loop). "
        )
    return text


def _scale_cpu(data: dict[str, Any], r: dict[str, Any]) -> str:
    run, flo = r["runner"], r["floor"]
    text = (
        f"**4. CPU per event at N = {r['n']:,} ({r['plugin']}: {_f(run.get('cpu_ratio'))}× the floor, "
        f"{_f(run.get('cpu_us_per_event'), 1)} against {_f(flo.get('cpu_us_per_event'), 1)} µs per upstream "
        "event).** "
    )
    prof = r.get("profile_us_per_event")
    if prof:
        diffs = sorted(
            ((g, prof["runner"].get(g, 0.0) - prof["floor"].get(g, 0.0)) for g in prof["runner"]),
            key=lambda kv: -kv[1],
        )[:4]
        text += "Largest differences in the profile (µs per event, profiled): " + ", ".join(
            f"{g} +{_f(d, 1)}" for g, d in diffs) + (
            "; no single function of the kit stands out, the cost is the layers. " if diffs and
            diffs[0][0] == "runner_kit (kit)" else ". ")
    text += _requests(r)
    text += _split(data, r)
    text += _collector(r)
    text += (
        "The floor only splits lines and `json.loads` each event in one loop; per event the runner "
        "resumes a chain of async generators (the adapter's stream, its SSE-object reader, the kit's "
        "SSE decoder loop), maps the object to a kit event and runs the builder's delta policy. Within "
        f"{SCALE_CPU_RATIO:g}× needs the extra per run down to the allowance above, from the three pieces in "
        "the sizes given: the collector's excess (fewer live objects per run in flight), the fixed part "
        "per run (less per-run setup in the kit, and in the SDK's per-invocation API, which deep-copies "
        "the run's resources for every run) and the per-event part (one loop from the socket to the "
        "builder instead of the generator chain). The host's run context (its pydantic models) is part "
        "of every run and cannot go."
    )
    return text


def _cpu(data: dict[str, Any], row: dict[str, Any]) -> str:
    prof = row.get("profile_us_per_event")
    text = (
        f"**3. CPU per event, {row['pattern']} ({row['plugin']}: {_f(row['ratio'], 2)}× the floor).** "
        "The runner spends more CPU per upstream event than reading and parsing the same bytes costs."
    )
    if prof:
        diffs = sorted(
            ((g, prof["runner"].get(g, 0.0) - prof["floor"].get(g, 0.0)) for g in prof["runner"]),
            key=lambda kv: -kv[1],
        )[:3]
        text += (
            " Largest differences in the profile: " + ", ".join(f"{g} +{_f(d)} µs" for g, d in diffs) + "."
        )
    return text


def _ttft(data: dict[str, Any], t: dict[str, Any]) -> str:
    return (
        f"**1. Time to first text ({t['plugin']}: median {_f(t['runner_ms']['median'], 2)} ms, floor "
        f"{_f(t['floor_ms']['median'], 2)} ms).** The kit adds {_f(t['kit_share_median_ms'], 2)} ms "
        "over the floor at the median."
    )


def _loop_bytes(row: dict[str, Any]) -> str:
    """Section 7: why the runner's extra bytes over the bare loop grow faster than the rounds."""
    lp = row["loop"]
    b, n = lp["bytes"], lp["rounds"]
    kinds = b["plugin_by_kind"]
    g = b["extra_growth"]
    count_growth = slope(kinds["count"])
    model_growth = slope(kinds["model"])
    text = (
        f"**7. Host bytes per tool round ({row['plugin']}: the extra over the bare loop grows from "
        f"{b['extra'][0]:,} B in round 1 to {b['extra'][-1]:,} B in round {n}; its total over n rounds fits a·n² "
        f"({_f(g['quadratic']['rel_error'] * 100)} % error) better than a·n ({_f(g['linear']['rel_error'] * 100)} %)).** "
        f"Every round the runner sends the model request once, as the bare loop does ({_f(b['plugin_model_vs_bare'], 2)}× "
        f"its bytes), the tool call, and before the model request it asks the host to count tokens: `count_tokens` "
        f"carried {kinds['count'][0]:,} B in round 1 and {kinds['count'][-1]:,} B in round {n}, growing by "
        f"{_f(count_growth, 0)} B a round while the model request grows by {_f(model_growth, 0)} B. "
    )
    if model_growth and count_growth >= 0.5 * model_growth:
        text += (
            "It counts the whole request again every round, the whole conversation so far, so the runner sends the "
            "conversation twice per round and what it adds grows with the conversation: over n rounds it adds up as "
            f"n². ({n} rounds: {b['plugin_total']:,} B against the bare loop's {b['bare_total']:,} B, "
            f"{_f(b['ratio_total'], 2)}×; the gap widens with every further round.) Counting each message once (the "
            "earlier messages' counts kept from the rounds before, only the new ones sent: the model's reply and the "
            f"tool results, about {_f(b['bare_growth_per_round'], 0)} B a round here) makes the extra constant per "
            "round and its total linear."
        )
    else:
        text += "What grows is the runner's own requests beyond the bare loop's; see the per-round table above."
    return text


def _loop_overhead(row: dict[str, Any]) -> str:
    ov, n = row["loop"]["overhead"], row["loop"]["rounds"]
    return (
        f"**7. Kit overhead per tool round ({row['plugin']}: {_f(ov['added_ms'], 2)} ms).** Outside the host's model "
        f"and tool work the runner spends {_f(ov['plugin_ms'], 2)} ms a round against the bare loop's "
        f"{_f(ov['bare_ms'], 2)} ms ({_f(ov['added_cpu_ms'], 2)} ms more CPU). Of the runner's, "
        f"{_f(ov['count_ms'], 2)} ms is the host counting tokens ({_f(ov['count_first_ms'], 2)} ms a round in the first "
        f"rounds, {_f(ov['count_last_ms'], 2)} ms in the last of {n}); the added time goes from "
        f"{_f(ov['added_first_ms'], 2)} ms to {_f(ov['added_last_ms'], 2)} ms a round over the loop, so what grows "
        "with the conversation (the request rebuilt and validated, and counted, every round) is where it goes."
    )


def notes(data: dict[str, Any]) -> str:
    s = data["sections"]
    missed = {r["id"] for r in data["targets"] if r["status"] != "met" and r["status"] != "n/a"}
    out: list[str] = []
    if "ttft" in missed:
        out += [_ttft(data, t) for t in s.get("ttft", []) if t["runner_ms"]["median"] > 5.0]
    for tr in s.get("traffic", []):
        for r in tr["rows"]:
            if r["tokens"] == 4000 and r["ratio"] > 5.0:
                out.append(_bytes_burst(data, r) if r["pace"] == "burst" else _bytes_paced(data, r))
    for c in s.get("cpu", []):
        out += [_cpu(data, r) for r in c["rows"] if r["ratio"] > 1.5]
    for c in s.get("concurrency", []):
        if c["rows"]:
            r = max(c["rows"], key=lambda x: x["n"])
            if r["runner"]["ok"] < r["n"] or r["runner"]["rss_peak_mb"] >= rss_target(r["n"]):
                out.append(_concurrency(data, r))
    for c in s.get("connections", []):
        if c["runner_connections"] > c["pool_keepalive"]:
            out.append(_connections(data, c))
    for c in s.get("concurrency", []):
        if not c["rows"]:
            continue
        r = max(c["rows"], key=lambda x: x["n"])
        if "concurrency-latency" in missed and r["n"] >= 1000:
            flo_p99 = r["floor"]["latency_ms"]["p99"]
            if r["runner"]["latency_ms"]["p99"] > 2.0 * flo_p99:
                out.append(_scale_latency(r))
        if "concurrency-cpu" in missed and r["n"] >= 1000 and (r["runner"].get("cpu_ratio") or 0) > SCALE_CPU_RATIO:
            out.append(_scale_cpu(data, r))
    for c in s.get("concurrency", []):
        done = [
            r
            for r in c["rows"]
            if r.get("kit") and all(r[m]["ok"] == r["n"] for m in ("runner", "kit", "floor"))
        ]
        if done:
            out.append(_latency(max(done, key=lambda r: r["n"])))
    for c in s.get("cpu", []):
        pr = c.get("sniffio_probe")
        if pr and not pr["sniffio_installed"]:
            out.append(
                f"**Also measured ({c['plugin']}): httpcore's async-library probe.** sniffio is not "
                f"installed, so every lock, event and cancel shield httpcore creates makes a failed "
                f"`import sniffio` that searches sys.path: {_f(pr['us_per_call'])} µs CPU each, "
                f"{_f(pr['calls_per_run']['runner'])} per run ({_f(pr['ms_per_run']['runner'], 2)} ms per "
                "run, on every run). Installing `sniffio` (a runtime dependency) makes it about 1 µs."
            )
    for r in (s.get("in_process_agents") or {}).get("rows", []):
        if not r.get("loop"):
            continue
        if r["loop"]["overhead"]["added_ms"] > LOOP_OVERHEAD_MS:
            out.append(_loop_overhead(r))
        if r["loop"]["bytes"]["extra_growth"]["grows"] != "linear":
            out.append(_loop_bytes(r))
    if not out:
        return ""
    return "## Why a figure misses its target\n\n" + "\n\n".join(out)
