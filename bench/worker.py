"""``python -m bench.worker``: N concurrent turns in a fresh process (so peak RSS is this batch's
own), written as JSON to ``--out``. ``--mode runner`` drives the plugin's runner through the local
host (``KitRunner.invoke``: the kit's lean invoke where the SDK version allows it); ``--mode sdk``
the same runner through the SDK's own ``Runner.invoke``; ``--mode kit`` the same without any
``invoke`` wrapper; ``--mode floor`` runs the bare floor client for the same answers. Process CPU
time of the batch is reported with it; ``--profile`` adds a cProfile breakdown by package."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import resource
import sys
import time
from collections import Counter
from contextlib import suppress
from typing import Any

from runner_kit.http import close_shared_client

from .common import answer
from .drive import floor_turn, load_runner, runner_turn
from .registry import http_plugin
from .sections import _profile_groups

RUNNER_MODES = ("runner", "sdk", "kit")


async def batch(args: argparse.Namespace) -> dict:
    entry = http_plugin(args.plugin)
    expected = answer(args.tokens)
    runner = host = None
    if args.mode in RUNNER_MODES:
        runner, host = load_runner(args.plugin)
        config = entry.config(args.base_url)
    gc.collect()
    rss_start = peak_rss_kb()

    async def one(i: int):
        key = f"{args.tag}-{i}"
        try:
            if args.mode in RUNNER_MODES:
                return await runner_turn(runner, host, config, key, keep=False, via=args.mode)
            return await floor_turn(entry, args.base_url, key)
        except Exception as exc:  # noqa: BLE001 - the floor has no error mapping; count it
            return exc

    # CPU time, not wall time: at this load the loop is never idle long enough to separate waiting
    prof = cProfile.Profile(time.process_time) if args.profile else None
    mem = asyncio.get_running_loop().create_task(_memory_samples(args.n, _in_use())) if args.memprofile else None
    collector = _Collector()
    gc.callbacks.append(collector)
    t0 = time.perf_counter()
    c0 = cpu_s()
    if prof is not None:
        prof.enable()
    turns = await asyncio.gather(*(one(i) for i in range(args.n)))
    if prof is not None:
        prof.disable()
    cpu = cpu_s() - c0
    wall = time.perf_counter() - t0
    gc.callbacks.remove(collector)
    rss_peak = peak_rss_kb()
    memory = None
    if mem is not None:
        mem.cancel()
        with suppress(asyncio.CancelledError):
            memory = await mem
    await close_shared_client()
    failures: Counter[str] = Counter()
    ok = 0
    for t in turns:
        if isinstance(t, Exception):
            failures[type(t).__name__] += 1
        elif t.terminal != "run.completed":
            failures[t.code or t.terminal or "no terminal result"] += 1
        elif t.text != expected:
            failures["wrong text"] += 1
        else:
            ok += 1
    return {
        "n": args.n,
        "mode": args.mode,
        "ok": ok,
        "failures": dict(failures),
        "wall_s": wall,
        "cpu_s": cpu,
        "gc_s": collector.seconds,  # CPU time in the cycle collector, by generation
        "gc_collections": collector.count,
        "events": sum(t.events for t in turns if not isinstance(t, Exception)),  # the floor counts them
        "profile_us": _profile_groups(prof, 1) if prof is not None else None,  # whole batch, by package
        "memory": memory,
        "rss_start_kb": rss_start,
        "rss_peak_kb": rss_peak,
        "deltas": {t.key: t.deltas for t in turns if not isinstance(t, Exception)},
    }


def _in_use() -> tuple[int, Counter[str]]:
    """Memory blocks Python has allocated, and the objects the cycle collector tracks by type."""
    return sys.getallocatedblocks(), Counter(type(o).__name__ for o in gc.get_objects())


async def _memory_samples(n: int, base: tuple[int, Counter[str]]) -> dict[str, Any]:
    """Every 0.5 s until cancelled, :func:`_in_use`; at the sample with the most blocks, blocks and
    objects by type per run over ``base`` (taken before the runs exist). Walks every object per
    sample, so only in a batch of its own (``--memprofile``)."""
    best: tuple[int, Counter[str]] | None = None
    try:
        while True:
            await asyncio.sleep(0.5)
            if best is None or sys.getallocatedblocks() > best[0]:
                best = _in_use()
    except asyncio.CancelledError:
        pass
    if best is None:
        return {}
    diff = {k: (v - base[1].get(k, 0)) / n for k, v in best[1].items()}
    return {
        "blocks_per_run": (best[0] - base[0]) / n,
        "objects_per_run": sum(diff.values()),
        "types_per_run": {k: round(v, 2) for k, v in sorted(diff.items(), key=lambda kv: -kv[1])[:25] if v > 0},
    }


class _Collector:
    """CPU time the cycle collector takes during the batch, by generation. A full (generation 2)
    collection walks every container object alive, so its cost grows with what each run keeps."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.process_time()
        else:
            g = info["generation"]
            self.seconds[g] += time.process_time() - self._t0
            self.count[g] += 1


def cpu_s() -> float:
    """User + system CPU time of this process so far (the fake server is another process)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def peak_rss_kb() -> int:
    """This process's own peak RSS. ``VmHWM`` belongs to the address space exec() created; Linux
    ``ru_maxrss`` would also report the parent's RSS at fork time when that was larger."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--mode", choices=(*RUNNER_MODES, "floor"), required=True)
    ap.add_argument("--profile", action="store_true", help="cProfile the batch (own time by package)")
    ap.add_argument("--memprofile", action="store_true", help="sample memory in use, by object type per run")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = asyncio.run(batch(args))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
