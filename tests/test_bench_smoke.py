"""``python -m bench --smoke`` (every path of every section once, at the smallest sizes) runs, and its JSON has every section and a row for every landed plugin."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runners_cli.plugins import ROOT, discover


@pytest.mark.first  # about 2 minutes: started first, while the other workers run the rest
@pytest.mark.timeout(600)  # about 8 s per plugin on two cores
def test_bench_quick_writes_every_section(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--no-profile", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=540, cwd=str(ROOT),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "| Figure | Plugin | Measured |" in proc.stdout  # the table is printed
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    s = data["sections"]
    for key in ("ttft", "traffic", "sweep", "cpu", "concurrency", "connections", "coding_agents", "in_process_agents"):
        assert s.get(key), key
    assert data["missing_entries"] == []
    landed = {p.dirname for p in discover()}
    coding = {r["plugin"] for r in s["coding_agents"]["rows"]} | {r["plugin"] for r in s["in_process_agents"]["rows"]}
    for key in ("ttft", "traffic", "cpu", "concurrency", "connections"):
        assert {row["plugin"] for row in s[key]} | coding >= landed, key
    assert "dify-agent" in {row["plugin"] for row in s["ttft"]}
    # every run through the runner produced the right answer
    assert all(t["correct"] == t["runs"] for t in s["ttft"])
    assert all(r["correct"] for tr in s["traffic"] for r in tr["rows"])
    assert all(r["correct"] for c in s["cpu"] for r in c["rows"])
    assert all(c["correct"] == c["runs"] for c in s["connections"])
    assert all(r["floor"]["ok"] == r["n"] for c in s["concurrency"] for r in c["rows"])
    for r in s["in_process_agents"]["rows"]:  # the loop really ran its rounds and compacted
        assert r["agent_run_s"] > 0 and r["direct_loop_s"] > 0 and r["compacting_run_s"] > 0, r
        assert len(r["loop"]["bytes"]["plugin"]) == len(r["loop"]["bytes"]["bare"]) == r["loop"]["rounds"] == 30, r
    if not s["coding_agents"]["rows"]:
        assert s["coding_agents"]["status"] == "not applicable"
    for r in s["coding_agents"]["rows"]:  # each turn with and without the sandbox (where bwrap works here)
        assert "isolation" in r or r.get("isolation_measured") == "none", r
    assert {t["id"] for t in data["targets"]} >= {"ttft", "bytes-burst", "cpu-paced", "concurrency", "connections"}
    assert (tmp_path / "RESULTS.md").read_text(encoding="utf-8").startswith("# Benchmark results")
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cpu_note_splits_out_the_cycle_collector() -> None:
    from bench.notes import _collector

    row = {
        "runner": {"cpu_s": 12.0, "gc_s": [0.5, 0.2, 1.5], "gc_collections": [800, 70, 8]},
        "floor": {"cpu_s": 10.0, "gc_s": [0.4, 0.1, 0.5], "gc_collections": [450, 40, 4]},
    }
    text = _collector(row)
    assert "2.00 s more CPU, 1.20 s is the cycle collector" in text
    assert "full collections 8 taking 1.50 s against 4 taking 0.50 s" in text
    # results measured before the collector was timed say nothing about it
    assert _collector({"runner": {"cpu_s": 12.0}, "floor": {"cpu_s": 10.0}}) == ""


def test_cpu_note_says_how_far_the_extra_per_run_is_from_the_target() -> None:
    from bench.notes import _split

    row = {
        "plugin": "dify-agent", "n": 1000, "events": 41_000,
        "runner": {"cpu_s": 7.3, "cpu_ratio": 1.35, "gc_s": [0.5, 0.3, 0.6]},
        "floor": {"cpu_s": 5.4, "gc_s": [0.4, 0.1, 0.2]},
    }  # fmt: skip
    split = {"runner": {"fixed_us": 1400.0, "per_event_us": 23.0}, "floor": {"fixed_us": 700.0, "per_event_us": 15.0}}
    data = {"sections": {"cpu": [{"plugin": "dify-agent", "split": split}]}}
    text = _split(data, row)
    # (7.3 - 5.4) s over 1,000 runs; 0.2 × 5.4 ms allowed; the collector's (1.4 - 0.7) s
    assert "spends 1.90 ms more CPU than the floor; ≤ 1.2× allows 1.08 ms" in text
    assert "excess alone is 0.70 ms" in text
    # one at a time: 700 µs fixed, 41 × 8 µs per event, (1400 + 943) / (700 + 615)
    assert "700 µs is fixed per run" in text and "328 µs is per event" in text
    assert "the ratio is 1.8×" in text
    # without the one-at-a-time split (an older results.json) the load figures stand alone
    assert "One run at a time" not in _split({"sections": {}}, row)


def test_rss_note_says_where_the_memory_per_run_goes() -> None:
    from bench.notes import _concurrency

    row = {
        "plugin": "deerflow-agent", "n": 1000,
        "runner": {"ok": 1000, "failures": {}, "rss_start_mb": 52.0, "rss_peak_mb": 153.0, "connections": 1950},
        "floor": {"ok": 1000, "failures": {}, "rss_start_mb": 52.0, "rss_peak_mb": 98.0, "connections": 2000},
        "memory": {
            "runner": {"blocks_per_run": 900.0, "objects_per_run": 400.0, "types_per_run": {"dict": 60.0, "deque": 14.0}},
            "floor": {"blocks_per_run": 300.0, "objects_per_run": 130.0, "types_per_run": {"dict": 20.0, "deque": 6.0}},
        },
    }  # fmt: skip
    text = _concurrency({"sections": {}}, row)
    assert "Peak RSS 153 MB exceeds the target (150 MB; the floor 98 MB" in text
    # (153 - 52) MB and (98 - 52) MB over 1,000 runs; 3 MB over the target
    assert "103.4 KB of RSS against the floor's 47.1 KB" in text
    assert "900 allocated memory blocks and 400 objects" in text and "300 and 130 for the floor" in text
    assert "dict +40.0, deque +8.0" in text
    assert "about 3.1 KB less per run" in text
    # without the sampling batches (an older results.json) the note still names the miss
    del row["memory"]
    assert "exceeds the target" in _concurrency({"sections": {}}, row)
    assert "allocated memory blocks" not in _concurrency({"sections": {}}, row)


async def test_memory_sampler_counts_objects_per_run_at_the_peak() -> None:
    import asyncio
    import gc

    from bench import worker

    gc.collect()
    sampler = asyncio.ensure_future(worker._memory_samples(10, worker._in_use()))

    class Held:
        pass

    held = [Held() for _ in range(500)]  # 50 per "run"
    await asyncio.sleep(0.7)
    sampler.cancel()
    out = await sampler
    assert 49 <= out["types_per_run"]["Held"] <= 51
    assert out["objects_per_run"] >= 49 and out["blocks_per_run"] >= 49
    del held


def test_coding_section_reports_the_sandbox_cost_side_by_side() -> None:
    from bench.report import _isolation_part

    def spread(m: float) -> dict[str, float]:
        return {"median": m, "p95": m * 1.5}

    iso = {
        "rounds": 3,
        "sandbox": {"new_process_turn_s": spread(0.36), "live_turn_s": spread(0.16), "resumed_run_s": spread(0.35)},
        "none": {"new_process_turn_s": spread(0.30), "live_turn_s": spread(0.16), "resumed_run_s": spread(0.35)},
        "ratio": {"new_process_turn_s": 1.2, "live_turn_s": 1.0, "resumed_run_s": 1.0},
        "added_ms": {"new_process_turn_s": spread(60.0), "live_turn_s": spread(0.0), "resumed_run_s": spread(1.0)},
    }
    boundary = {"probe_first_ms": spread(11.0), "probe_cached_us": spread(2.0), "spawn_sandbox_ms": spread(12.0),
                "spawn_direct_ms": spread(2.0), "spawn_added_ms": spread(10.0), "request_proxy_ms": spread(15.0),
                "request_direct_ms": spread(10.0), "request_added_ms": spread(5.0)}
    text = "\n".join(_isolation_part({"rows": [{"plugin": "claude-code-agent", "isolation": iso}],
                                       "boundary": boundary}))
    assert "| claude-code-agent | new-process turn | 360 (540) | 300 (450) | 1.20× | 60 (90) |" in text
    assert "in 3 rounds that alternate which mode goes first" in text
    assert "10.0 (15.0) ms added once per agent process" in text
    assert "5.0 (7.5) ms added per model request (in both isolation modes)" in text
    # where no sandbox can be built, the turns ran unconfined and the report says so
    none_only = _isolation_part({"rows": [{"plugin": "codex-agent", "isolation_measured": "none"}],
                                 "boundary": {"sandbox": "not available here: no bwrap"}})
    assert "no sandbox can be built on this machine" in "\n".join(none_only)
