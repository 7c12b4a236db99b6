"""The lean ``KitRunner.invoke`` (runner_kit.invoke) against the SDK's own ``Runner.invoke``: the
same runs give the same result sequence, the same errors and the same cleanup."""

from __future__ import annotations

import asyncio
import re
import time
from itertools import pairwise
from typing import Any

import pytest
from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.runner.result import RunnerResult
from langbot_plugin.api.proxies.invocation import current_api
from langbot_plugin.cli.run.handler import _iter_runner_results_with_deadline

from runner_kit import events as ev
from runner_kit import invoke as lean
from runner_kit.config import ConfigSchema
from runner_kit.errors import RunnerError
from runner_kit.runner import Adapter, KitRunner
from runners_cli.host import LocalHost
from runners_cli.host_models import LocalTool
from tests.helpers import scripted_runner

SCHEMA = ConfigSchema.from_items([
    {"name": "timeout", "type": "float", "default": 60},
    {"name": "stream-growth", "type": "float", "default": 0.2},
    {"name": "stream-min-chars", "type": "integer", "default": 1},
])
PATHS = {"sdk": Runner.invoke, "lean": lean.lean_invoke}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _echo(params: dict[str, Any]) -> dict[str, Any]:
    if params.get("fail"):
        raise RuntimeError("the tool broke")
    return {"echo": params.get("q")}


class Streaming(Adapter):
    """Plays ``script``: strings are text, ("tool", params) a traced host tool call, ("log", text)
    a ``ctx.log`` line, numbers a pause, exceptions are raised."""

    platform = "Scripted"
    script: list[Any] = []
    cancelled: list[bool] = []

    async def stream(self):
        for step in type(self).script:
            if isinstance(step, str):
                yield ev.Text(step)
            elif isinstance(step, (int, float)):
                await asyncio.sleep(step)
            elif isinstance(step, BaseException):
                raise step
            elif step[0] == "tool":
                try:
                    out = await self.env.ctx.api.call_tool("echo", step[1])
                except Exception as exc:  # noqa: BLE001 - the traced failure is what is compared
                    yield ev.Text(f"[tool failed: {type(exc).__name__}]")
                else:
                    yield ev.Text(f"[{out}]")
            elif step[0] == "log":
                await self.env.ctx.log(step[1])

    async def cancel(self):
        type(self).cancelled.append(True)


def normalise(results: list[Any]) -> list[dict[str, Any]]:
    """Results as the host gets them, without what differs between any two runs (times, run and
    tool-call ids), ids numbered by first appearance."""
    ids: dict[str, str] = {}
    out = []
    for r in results:
        d = r.model_dump(mode="json")
        d.pop("timestamp", None)
        d.pop("sequence", None)
        text = UUID.sub(lambda m: ids.setdefault(m.group(0), f"id{len(ids)}"), repr(d))
        out.append(text)
    return out


async def play(path: str, script: list[Any], *, take: int | None = None, timeout: float = 60,
               slow: float = 0.0, **ctx_kwargs: Any) -> dict[str, Any]:
    """One run of ``script`` through ``path``; with ``take``, the host closes the run after that
    many results (a cancel); with ``slow``, the host takes that long over each result."""
    runner, host, cls = scripted_runner(Streaming, SCHEMA, script=script, cancelled=[])
    host.add_tool(LocalTool("echo", "echo", {"type": "object"}, _echo))
    ctx = host.make_context("hi", config={"timeout": timeout}, **ctx_kwargs)
    tasks_before = asyncio.all_tasks()
    got: list[Any] = []
    error: BaseException | None = None
    gen = PATHS[path](runner, ctx)
    try:
        async for r in gen:
            host.apply_result(ctx.run_id, r)
            got.append(r)
            if take is not None and len(got) >= take:
                break
            if slow:
                await asyncio.sleep(slow)
    except Exception as exc:  # noqa: BLE001 - compared below
        error = exc
    finally:
        await gen.aclose()
    await asyncio.sleep(0)
    return {
        "results": normalise(got),
        "error": (type(error).__name__, str(error)) if error else None,
        "cancelled": list(cls.cancelled),
        "active": ctx._api is not None or ctx._results is not None,
        "left": {t for t in asyncio.all_tasks() - tasks_before if not t.done()},
    }


async def both(script: list[Any], **kw: Any) -> dict[str, Any]:
    sdk = await play("sdk", script, **kw)
    fast = await play("lean", script, **kw)
    assert fast["results"] == sdk["results"]
    assert fast["error"] == sdk["error"]
    assert fast["cancelled"] == sdk["cancelled"]
    assert not fast["active"] and not sdk["active"]
    assert not fast["left"] and not sdk["left"]
    return fast


def types(out: dict[str, Any]) -> list[str]:
    return [re.search(r"'type': '([a-z_.]+)'", r).group(1) for r in out["results"]]  # type: ignore[union-attr]


async def test_plain_streaming_is_the_same():
    out = await both(["Hel", 0.01, "lo ", 0.01, "wor", 0.01, "ld", 0.01, "!"])
    t = types(out)
    assert t.count("message.delta") >= 3 and t[-2:] == ["message.completed", "run.completed"]


async def test_a_host_slower_than_the_run_gets_the_same_order(monkeypatch):
    """The reading task hands results to the host's queue directly while that keeps the order; with
    a host too slow for the run the queue fills up, results go the long way round through ``run``,
    and once the host catches up the direct way again. The host sees the SDK's sequence, every
    delta growing the one before it."""
    offered: list[bool] = []
    real_offer = lean._Results.offer

    def offer(self: Any, item: Any) -> bool:
        ok = real_offer(self, item)
        offered.append(ok)
        return ok

    monkeypatch.setattr(lean._Results, "offer", offer)
    monkeypatch.setattr(lean, "QUEUE_SIZE", 3)
    script: list[Any] = []
    for i in range(60):
        script += [f"w{i} ", 0.001 if i % 3 else 0]
    script[60:60] = [0.3]  # the host catches up here
    sdk = await play("sdk", script, slow=0.003)
    fast = await play("lean", script, slow=0.003)
    assert fast["results"] == sdk["results"]
    assert not fast["left"] and not fast["active"]
    assert True in offered and False in offered  # both ways were taken
    deltas = [re.search(r"'all_content': '([^']*)'", r).group(1) for r in fast["results"]  # type: ignore[union-attr]
              if "'message.delta'" in r]
    assert len(deltas) >= 10
    assert all(b.startswith(a) and len(b) > len(a) for a, b in pairwise(deltas))


async def test_traced_tool_calls_interleave_the_same():
    script = ["Looking", 0.01, ("tool", {"q": "a"}), 0.01, ("log", "between"), " up", ("tool", {"fail": True}),
              0.01, " done"]
    out = await both(script)
    t = types(out)
    assert t.count("tool.call.started") == 2 and t.count("tool.call.completed") == 2
    assert "processor.log" in t
    assert t.index("tool.call.started") < t.index("tool.call.completed")


async def test_cancel_mid_stream_is_the_same():
    out = await both(["one ", 0.02, "two ", 0.02, "three ", 5.0, "never"], take=2)
    assert types(out) == ["message.delta", "message.delta"]
    assert out["cancelled"] == [True]  # the upstream was told to stop, after the host closed the run


async def test_kit_deadline_is_the_same():
    out = await both(["partial ", 0.01, 30.0, "never"], timeout=1.0)
    assert "upstream.timeout" in out["results"][-1] or "upstream.timeout" in " ".join(out["results"])
    assert out["cancelled"] == [True]


async def test_failure_mid_stream_is_the_same():
    out = await both(["so far ", 0.01, RunnerError("upstream.unavailable", "the upstream answered 503")])
    assert "upstream.unavailable" in " ".join(out["results"])
    assert types(out)[-1] in ("run.failed", "run.completed")


async def test_internal_error_is_the_same():
    out = await both(["x", 0.01, KeyError("boom")])
    assert "runner.internal" in " ".join(out["results"])


# --- the SDK's own rules, on bare Runners ---------------------------------------------------------


class Bare(Runner):  # type: ignore[misc]
    """A plain SDK Runner whose ``run`` is ``behaviour``."""

    behaviour: Any = None

    def run(self, ctx):  # noqa: D102
        return type(self).behaviour(self, ctx)


async def bare(path: str, behaviour: Any, deadline: float | None = None, host_side: bool = False) -> dict[str, Any]:
    host = LocalHost()
    runner = type("B", (Bare,), {"behaviour": behaviour})()
    runner.bind_runtime(plugin_runtime_handler=host, plugin_config={"k": "v"})
    ctx = host.make_context("hi", deadline_at=time.time() + deadline if deadline else None)
    before = asyncio.all_tasks()
    got: list[Any] = []
    error = None
    if host_side:  # the plugin runtime's own loop, which cuts the run off at its deadline
        runner.invoke = lambda c: PATHS[path](runner, c)  # type: ignore[method-assign]
        source = _iter_runner_results_with_deadline(runner, ctx)
    else:
        source = PATHS[path](runner, ctx)
    try:
        async for r in source:
            got.append(r)
    except Exception as exc:  # noqa: BLE001 - compared
        error = (type(exc).__name__, str(exc))
    await asyncio.sleep(0)
    return {"results": normalise(got), "error": error, "active": ctx._api is not None,
            "left": {t for t in asyncio.all_tasks() - before if not t.done()}}


async def bare_both(behaviour: Any, **kw: Any) -> dict[str, Any]:
    sdk = await bare("sdk", behaviour, **kw)
    fast = await bare("lean", behaviour, **kw)
    assert fast == sdk
    assert not fast["active"] and not fast["left"]
    return fast


async def test_no_terminal_result_gets_run_completed():
    async def run(self, ctx):
        yield RunnerResult.message_delta(ctx.run_id, {"role": "assistant", "content": "a", "all_content": "a"})

    out = await bare_both(run)
    assert "run.completed" in out["results"][-1]


async def test_nothing_after_the_terminal_result():
    async def run(self, ctx):
        yield RunnerResult.run_failed(ctx.run_id, "no", code="x.y")
        yield RunnerResult.run_completed(ctx.run_id)

    out = await bare_both(run)
    assert len(out["results"]) == 1


async def test_wrong_objects_raise_the_same():
    async def wrong_id(self, ctx):
        yield RunnerResult.run_completed("another-run")

    async def not_result(self, ctx):
        yield {"type": "run.completed"}

    assert (await bare_both(wrong_id))["error"][0] == "ValueError"
    assert (await bare_both(not_result))["error"][0] == "TypeError"


async def test_coroutine_run_with_traced_api_and_binding():
    seen: list[Any] = []

    async def run(self, ctx):
        seen.append((current_api(self._plugin_runtime_handler) is ctx.api, dict(self.get_plugin_config())))
        await ctx.log("from a coroutine run")
        try:
            await ctx.api.call_tool("missing", {})
        except Exception:  # noqa: BLE001 - traced as a failed tool call
            pass

    out = await bare_both(run)
    assert seen == [(True, {"k": "v"})] * 2  # the invocation binding, in both paths
    assert [r.split("'type': '")[1].split("'")[0] for r in out["results"]] == [
        "processor.log", "tool.call.started", "tool.call.completed", "run.completed"]


async def test_coroutine_returning_a_value_and_sync_run_raise_the_same():
    async def returns(self, ctx):
        return 1

    def sync(self, ctx):
        return None

    assert (await bare_both(returns))["error"][0] == "TypeError"
    assert (await bare_both(sync))["error"][0] == "TypeError"


async def test_an_exception_comes_after_what_was_queued():
    async def run(self, ctx):
        await ctx.log("first")
        yield RunnerResult.message_delta(ctx.run_id, {"role": "assistant", "content": "a", "all_content": "a"})
        raise RuntimeError("late")

    out = await bare_both(run)
    assert len(out["results"]) == 2 and out["error"] == ("RuntimeError", "late")


async def test_host_deadline_closes_the_run_the_same():
    closed: list[str] = []

    async def run(self, ctx):
        try:
            yield RunnerResult.message_delta(ctx.run_id, {"role": "assistant", "content": "a", "all_content": "a"})
            await asyncio.sleep(30)
        finally:
            closed.append("closed")

    out = await bare_both(run, deadline=0.3, host_side=True)
    assert "runner.timeout" in out["results"][-1]
    assert closed == ["closed", "closed"]


async def test_an_active_context_is_refused():
    host = LocalHost()
    runner, _, _ = scripted_runner(Streaming, SCHEMA, script=["a"], cancelled=[])
    runner.bind_runtime(plugin_runtime_handler=host)
    ctx = host.make_context("hi")
    ctx._api = object()
    for path in PATHS.values():
        with pytest.raises(RuntimeError, match="already active"):
            await anext(path(runner, ctx))


def test_kit_runner_uses_the_lean_path_only_on_tested_sdks(monkeypatch):
    runner, host, _ = scripted_runner(Streaming, SCHEMA, script=["a"], cancelled=[])
    ctx = host.make_context("hi")
    assert lean.sdk_version() in lean.TESTED_SDK_VERSIONS
    gen = runner.invoke(ctx)
    assert gen.ag_code is lean.lean_invoke.__code__
    monkeypatch.setattr("runner_kit.runner.LEAN_SUPPORTED", False)
    gen2 = KitRunner.invoke(runner, ctx)
    assert gen2.ag_code is Runner.invoke.__code__
    for g in (gen, gen2):
        asyncio.run(g.aclose())
