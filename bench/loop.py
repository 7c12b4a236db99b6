"""Section 7's tool loop: an in-process agent runner (LocalAgent) running a long tool loop in one
run, against a bare loop making the same model and tool calls through the same host actions.

Both sides run on a :class:`MeteredHost`, the local host with every action the runner asks of it
recorded: its data (what the plugin runtime serialises and sends to LangBot), when it started and
how long the host spent in it (wall and this thread's CPU; for the streamed model call only the
time inside the stream's own steps, not the consumer's time between them). Splitting a run by its
model calls (:func:`split_rounds`) gives, per tool round, the bytes sent to the host and the time
spent outside the host's model and tool work, which is the runner's (or the bare loop's) own.
"""

from __future__ import annotations

import gc
import json
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, cast

from runners_cli.host import Identity, LocalHost

from .common import median, rtype, wire_bytes

MODEL_ACTIONS = frozenset({"invoke_llm", "invoke_llm_stream"})
COUNT_ACTION = "count_tokens"
TOOL_ACTION = "call_tool"
#: LocalAgent's prompt when neither LangBot nor the config gives one (local_agent.context.DEFAULT_PROMPT)
SYSTEM_PROMPT = "You are a helpful assistant."


@dataclass
class Action:
    """One action request a run made of the host."""

    name: str
    data: dict[str, Any]
    start: float  # perf_counter when the request was made
    cpu_start: float  # this thread's CPU time then
    wall: float = 0.0  # seconds inside the host
    cpu: float = 0.0

    def size(self) -> int:
        """Bytes of the request's data as the plugin runtime sends it (``json.dumps`` of the action
        request's payload; the fixed envelope around it is not counted)."""
        return len(json.dumps(self.data).encode("utf-8"))


@dataclass
class MeteredHost(LocalHost):
    """``LocalHost`` recording every action request (:class:`Action`) and each result it applied
    (start, wall, CPU, bytes on the wire)."""

    actions: list[Action] = field(default_factory=list)
    applied: list[tuple[float, float, float, int]] = field(default_factory=list)

    def reset_meter(self) -> None:
        self.actions.clear()
        self.applied.clear()
        self.calls.clear()

    async def call_action(self, action: Any, data: dict[str, Any], timeout: float = 15.0) -> dict[str, Any]:
        rec = Action(str(getattr(action, "value", action)), data, time.perf_counter(), time.thread_time())
        self.actions.append(rec)
        try:
            return await super().call_action(action, data, timeout)
        finally:
            rec.wall = time.perf_counter() - rec.start
            rec.cpu = time.thread_time() - rec.cpu_start

    async def call_action_generator(
        self, action: Any, data: dict[str, Any], timeout: float = 15.0
    ) -> AsyncIterator[dict[str, Any]]:
        rec = Action(str(getattr(action, "value", action)), data, time.perf_counter(), time.thread_time())
        self.actions.append(rec)
        stream = cast(AsyncGenerator[dict[str, Any], None], super().call_action_generator(action, data, timeout))
        async with aclosing(stream) as items:
            while True:
                t, c = time.perf_counter(), time.thread_time()
                try:
                    item = await anext(items)
                except StopAsyncIteration:
                    return
                finally:
                    rec.wall += time.perf_counter() - t
                    rec.cpu += time.thread_time() - c
                yield item

    def apply_timed(self, run_id: str, result: Any, sequence: int) -> None:
        t, c = time.perf_counter(), time.thread_time()
        self.apply_result(run_id, result)
        wall, cpu = time.perf_counter() - t, time.thread_time() - c
        self.applied.append((t, wall, cpu, wire_bytes(result, sequence)))


def load_metered(plugin: str) -> tuple[Any, MeteredHost]:
    """The plugin's runner bound to a :class:`MeteredHost` (as ``bench.drive.load_runner`` binds it
    to a ``LocalHost``)."""
    from runners_cli.plugins import find, load_runner_class

    info = find(plugin)
    host = MeteredHost(runner_id=info.runner_id)
    runner = load_runner_class(info)()
    runner.bind_runtime(plugin_runtime_handler=host, plugin_identity=f"{info.author}/{info.name}")
    return runner, host


def split_rounds(actions: Sequence[Action]) -> tuple[list[Action], list[list[Action]]]:
    """(setup, rounds): one round per model call. A round holds its model call, the token counts
    made just before it (they measure its request) and what follows it until the next count or model
    call (the tool calls). Setup is what came before the first count or model call."""
    setup: list[Action] = []
    rounds: list[list[Action]] = []
    counts: list[Action] = []
    for a in actions:
        if a.name in MODEL_ACTIONS:
            rounds.append([*counts, a])
            counts = []
        elif a.name == COUNT_ACTION:
            counts.append(a)
        elif not rounds:
            setup += counts + [a]
            counts = []
        else:
            rounds[-1] += [*counts, a]
            counts = []
    if counts:
        (rounds[-1] if rounds else setup).extend(counts)
    return setup, rounds


def _kind(name: str) -> str:
    if name in MODEL_ACTIONS:
        return "model"
    if name == COUNT_ACTION:
        return "count"
    if name == TOOL_ACTION:
        return "tool"
    return "other"


def analyse(host: MeteredHost, t0: float, t1: float, c0: float, c1: float) -> dict[str, Any]:
    """One run's figures from its recorded actions: per round the bytes of its action requests by
    kind, and the wall and CPU time outside the host's model and tool work (and outside the host
    applying results), of which how much the host spent counting tokens."""
    setup, rounds = split_rounds(host.actions)
    starts = [min(a.start for a in r) for r in rounds] + [t1]
    cpu_starts = [min(a.cpu_start for a in r) for r in rounds] + [c1]
    applied = host.applied
    out_rounds = []
    for k, r in enumerate(rounds):
        by_kind = {"count": 0, "model": 0, "tool": 0, "other": 0}
        work = work_cpu = count = count_cpu = 0.0
        for a in r:
            kind = _kind(a.name)
            by_kind[kind] += a.size()
            if kind in ("model", "tool"):
                work, work_cpu = work + a.wall, work_cpu + a.cpu
            elif kind == "count":
                count, count_cpu = count + a.wall, count_cpu + a.cpu
        mine = [x for x in applied if starts[k] <= x[0] < starts[k + 1]]
        host_wall = sum(x[1] for x in mine)
        host_cpu = sum(x[2] for x in mine)
        out_rounds.append({
            "bytes": by_kind,
            "actions": [a.name for a in r],
            "result_bytes": sum(x[3] for x in mine),
            "wall_ms": (starts[k + 1] - starts[k] - work - host_wall) * 1000,
            "cpu_ms": (cpu_starts[k + 1] - cpu_starts[k] - work_cpu - host_cpu) * 1000,
            "count_ms": count * 1000,
            "count_cpu_ms": count_cpu * 1000,
            "model_tool_ms": work * 1000,
        })  # fmt: skip
    first = starts[0] if rounds else t1
    first_cpu = cpu_starts[0] if rounds else c1
    early = [x for x in applied if x[0] < first]
    return {
        "run_s": t1 - t0,
        "cpu_s": c1 - c0,
        "setup": {
            "wall_ms": (first - t0 - sum(a.wall for a in setup) - sum(x[1] for x in early)) * 1000,
            "cpu_ms": (first_cpu - c0 - sum(a.cpu for a in setup) - sum(x[2] for x in early)) * 1000,
            "bytes": sum(a.size() for a in setup),
            "actions": [a.name for a in setup],
        },
        "rounds": out_rounds,
        "result_bytes": sum(x[3] for x in applied),
    }


# --- the two loops ----------------------------------------------------------------------------


async def plugin_loop(runner: Any, host: MeteredHost, config: dict[str, Any], text: str, conv: str) -> dict[str, Any]:
    """One run of the runner (its ``invoke``, results applied to the host as LangBot does)."""
    host.reset_meter()
    ctx = host.make_context(text, config=config, identity=Identity(conversation_id=conv))
    results: list[Any] = []
    gc.collect()
    t0, c0 = time.perf_counter(), time.thread_time()
    async for result in runner.invoke(ctx):
        results.append(result)
        host.apply_timed(ctx.run_id, result, len(results))
    t1, c1 = time.perf_counter(), time.thread_time()
    end = results[-1] if results else None
    if end is None or rtype(end) != "run.completed" or end.data.get("finish_reason") not in (None, "stop"):
        raise RuntimeError(f"the loop run did not complete: {end and end.data}")
    out = analyse(host, t0, t1, c0, c1)
    out["tool_calls"] = sum(1 for r in results if rtype(r) == "tool.call.completed")
    return out


async def _never(*_: Any, **__: Any) -> Any:
    raise RuntimeError("the bare loop calls tools through call_tool")


async def bare_loop(runner: Any, host: MeteredHost, config: dict[str, Any], model_id: str, tool: Any, text: str,
                    conv: str) -> dict[str, Any]:
    """The least any loop on LangBot's model API must send: the same model calls through the same
    host actions (the SDK's run API bound to the same host: ``invoke_llm_stream_events``,
    ``call_tool``), the growing message list once per round, no token counting, no runner."""
    from langbot_plugin.api.entities.builtin.provider.message import Message
    from langbot_plugin.api.entities.builtin.resource.tool import LLMTool

    host.reset_meter()
    ctx = host.make_context(text, config=config, identity=Identity(conversation_id=conv))
    gc.collect()
    t0, c0 = time.perf_counter(), time.thread_time()
    api = runner.get_run_api(ctx)
    funcs = [LLMTool(name=tool.name, human_desc=tool.description, description=tool.description,
                     parameters=tool.parameters, func=_never)]
    messages = [Message(role="system", content=SYSTEM_PROMPT), Message(role="user", content=text)]
    tool_calls = 0
    while True:
        said = ""
        calls: dict[str, dict[str, str]] = {}
        async with aclosing(api.invoke_llm_stream_events(model_id, messages, funcs, remove_think=False)) as events:
            async for event in events:
                chunk = event.chunk
                if chunk is None:
                    continue
                if isinstance(chunk.content, str):
                    said += chunk.content
                for tc in chunk.tool_calls or []:
                    key = tc.id or (next(reversed(calls)) if calls else "call_0")
                    got = calls.setdefault(key, {"name": "", "arguments": ""})
                    got["name"] = got["name"] or tc.function.name or ""
                    got["arguments"] += tc.function.arguments or ""
        if not calls:
            break
        messages.append(Message(role="assistant", content=said, tool_calls=[
            {"id": cid, "type": "function", "function": {"name": c["name"], "arguments": c["arguments"] or "{}"}}
            for cid, c in calls.items()]))
        for cid, c in calls.items():
            result = await api.call_tool(c["name"], json.loads(c["arguments"] or "{}"))
            tool_calls += 1
            messages.append(Message(role="tool", tool_call_id=cid, content=json.dumps(result, ensure_ascii=False)))
    t1, c1 = time.perf_counter(), time.thread_time()
    out = analyse(host, t0, t1, c0, c1)
    out["tool_calls"] = tool_calls
    return out


# --- the figures ------------------------------------------------------------------------------


def fit_through_origin(ns: Sequence[float], ys: Sequence[float], f: Callable[[float], float]) -> tuple[float, float]:
    """Least squares of ``y = a·f(n)``: (a, RMS error relative to the mean of y)."""
    fs = [f(n) for n in ns]
    den = sum(v * v for v in fs)
    a = sum(y * v for y, v in zip(ys, fs, strict=True)) / den if den else math.nan
    rms = math.sqrt(sum((y - a * v) ** 2 for y, v in zip(ys, fs, strict=True)) / len(ys)) if ys else math.nan
    mean = sum(ys) / len(ys) if ys else math.nan
    return a, (rms / abs(mean) if mean else math.nan)


def slope(ys: Sequence[float]) -> float:
    """Least-squares growth per round of ``ys`` (rounds 1, 2, …)."""
    n = len(ys)
    if n < 2:
        return math.nan
    mx, my = (n + 1) / 2, sum(ys) / n
    return sum((k + 1 - mx) * (y - my) for k, y in enumerate(ys)) / sum((k + 1 - mx) ** 2 for k in range(n))


def growth(per_round: Sequence[float]) -> dict[str, Any]:
    """How a per-round figure's total over the first n rounds grows: the fits a·n and a·n²."""
    totals: list[float] = []
    acc = 0.0
    for v in per_round:
        acc += v
        totals.append(acc)
    ns = list(range(1, len(totals) + 1))
    a1, e1 = fit_through_origin(ns, totals, lambda n: n)
    a2, e2 = fit_through_origin(ns, totals, lambda n: n * n)
    return {"linear": {"a": a1, "rel_error": e1}, "quadratic": {"a": a2, "rel_error": e2},
            "grows": "linear" if e1 <= e2 else "quadratic"}


def _total(r: dict[str, Any]) -> int:
    return sum(r["bytes"].values())


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def summarise(plugin: list[dict[str, Any]], bare: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    """The figures of the loop from each side's runs (paired: run i of each side ran back to back)."""
    last_p, last_b = plugin[-1], bare[-1]
    tool_p, tool_b = last_p["rounds"][:rounds], last_b["rounds"][:rounds]
    pb = [_total(r) for r in tool_p]
    bb = [_total(r) for r in tool_b]
    extra = [p - b for p, b in zip(pb, bb, strict=True)]
    k5 = min(5, rounds)

    def per_round(runs: list[dict[str, Any]], key: str, sl: slice = slice(None)) -> list[float]:
        return [_mean([r[key] for r in run["rounds"][:rounds][sl]]) for run in runs]

    def added(key: str, sl: slice = slice(None)) -> float:
        return median([p - b for p, b in zip(per_round(plugin, key, sl), per_round(bare, key, sl), strict=True)])

    by_kind = {kind: [r["bytes"][kind] for r in tool_p] for kind in ("count", "model", "tool", "other")}
    return {
        "rounds": rounds,
        "runs": len(plugin),
        "overhead": {
            # per tool round, outside the host's model and tool work: the runner's own time
            "plugin_ms": median(per_round(plugin, "wall_ms")),
            "bare_ms": median(per_round(bare, "wall_ms")),
            "added_ms": added("wall_ms"),
            "plugin_cpu_ms": median(per_round(plugin, "cpu_ms")),
            "bare_cpu_ms": median(per_round(bare, "cpu_ms")),
            "added_cpu_ms": added("cpu_ms"),
            "added_first_ms": added("wall_ms", slice(0, k5)),
            "added_last_ms": added("wall_ms", slice(rounds - k5, rounds)),
            "count_ms": median(per_round(plugin, "count_ms")),
            "count_first_ms": median(per_round(plugin, "count_ms", slice(0, k5))),
            "count_last_ms": median(per_round(plugin, "count_ms", slice(rounds - k5, rounds))),
            "model_tool_ms": median(per_round(plugin, "model_tool_ms")),
            "bare_model_tool_ms": median(per_round(bare, "model_tool_ms")),
            "first_rounds": k5,
            # the whole runs, as a cross-check (setup and the final answer included)
            "plugin_run_s": median([r["run_s"] for r in plugin]),
            "bare_run_s": median([r["run_s"] for r in bare]),
            "run_added_per_round_ms": median([(p["run_s"] - b["run_s"]) / rounds * 1000
                                              for p, b in zip(plugin, bare, strict=True)]),
            "plugin_setup_ms": median([r["setup"]["wall_ms"] for r in plugin]),
            "bare_setup_ms": median([r["setup"]["wall_ms"] for r in bare]),
        },
        "bytes": {
            "plugin": pb,
            "bare": bb,
            "plugin_by_kind": by_kind,
            # the action requests of the first and the last tool round, in order
            "plugin_round_actions": [tool_p[0]["actions"], tool_p[-1]["actions"]] if tool_p else [],
            "bare_round_actions": [tool_b[0]["actions"], tool_b[-1]["actions"]] if tool_b else [],
            "plugin_model_vs_bare": (sum(by_kind["model"]) / sum(r["bytes"]["model"] for r in tool_b)
                                     if tool_b else math.nan),
            "plugin_growth_per_round": slope(pb),
            "bare_growth_per_round": slope(bb),
            "plugin_total": sum(pb),
            "bare_total": sum(bb),
            "ratio_total": sum(pb) / sum(bb) if sum(bb) else math.nan,
            "plugin_last_over_first": pb[-1] / pb[0] if pb and pb[0] else math.nan,
            "bare_last_over_first": bb[-1] / bb[0] if bb and bb[0] else math.nan,
            "extra": extra,
            "extra_growth": growth(extra),
            "plugin_growth": growth(pb),
            "bare_growth": growth(bb),
            "plugin_setup": last_p["setup"]["bytes"],
            "plugin_setup_actions": last_p["setup"]["actions"],
            "plugin_final": _total(last_p["rounds"][rounds]) if len(last_p["rounds"]) > rounds else None,
            "bare_final": _total(last_b["rounds"][rounds]) if len(last_b["rounds"]) > rounds else None,
            "result_bytes_per_round": _mean([r["result_bytes"] for r in tool_p]),
        },
    }
