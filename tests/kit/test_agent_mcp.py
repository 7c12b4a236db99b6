"""runner_kit.agent_mcp: the SDK's run-scoped MCP bridge, served over real HTTP on 127.0.0.1 to
what the local host granted the run, and gone when the block exits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from typing import Any

import httpx
import pytest
from langbot_plugin.api.proxies.runner import RunnerAPIProxy

from runner_kit import approvals as ap
from runner_kit import events as ev
from runner_kit.agent_mcp import NO_RUN, LangBotMCP, hand_over, langbot_mcp, release
from runner_kit.config import ConfigSchema
from runner_kit.errors import Redactor
from runner_kit.runner import Adapter, KitRunner, RunEnv
from runners_cli.host import Identity, LocalHost
from tests.helpers import dump, final_text, messages, rtype, run, scripted_runner, terminal

SCHEMA = ConfigSchema.from_items([{"name": "timeout", "type": "float", "default": 60}])
NO_CONVERSATION = Identity(conversation_id=None)  # the local host grants history_page to every conversation
WEATHER = {"tools": [{"tool_name": "weather", "tool_type": "plugin", "description": "forecast", "operations": ["call"]}]}


def make_env(host: LocalHost, **ctx_kwargs: Any) -> RunEnv:
    """A run's environment as the driver builds it, with the host API bound as ``invoke`` does."""
    ctx = host.make_context("hi", **ctx_kwargs)
    ctx._api = RunnerAPIProxy(ctx=ctx, plugin_runtime_handler=host)
    return RunEnv(ctx, SCHEMA.load({}), Redactor(), None)


def weather_host() -> LocalHost:
    host = LocalHost()
    host.tool_results = {"weather": {"temp": 21}, "admin_shell": {"pwned": True}}
    return host


_ids = iter(range(1, 10_000))


async def rpc(client: httpx.AsyncClient, server: LangBotMCP, method: str, params: dict | None = None,
              headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params or {}}
    hdrs = {"Accept": "application/json, text/event-stream"}
    hdrs.update(server.headers if headers is None else headers)
    return await client.post(server.url, json=body, headers=hdrs)


async def call(client: httpx.AsyncClient, server: LangBotMCP, tool: str, arguments: dict) -> dict:
    resp = await rpc(client, server, "tools/call", {"name": tool, "arguments": arguments})
    assert resp.status_code == 200, resp.text
    return resp.json()["result"]


def port_of(server: LangBotMCP) -> int:
    return httpx.URL(server.url).port or 0


async def assert_refused(url: str) -> None:
    async with httpx.AsyncClient(timeout=2) as client:
        with pytest.raises(httpx.ConnectError):
            await client.post(url, json={})


def bridge_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "langbot-agent-mcp-bridge"]


async def test_initialize_list_and_call_the_granted_tool_over_http():
    host = weather_host()
    env = make_env(host, identity=NO_CONVERSATION, resources=WEATHER)
    async with langbot_mcp(env, True) as server, httpx.AsyncClient(timeout=10) as client:
        assert server is not None
        assert server.url == f"http://127.0.0.1:{port_of(server)}/mcp/http" and port_of(server) > 0

        init = await rpc(client, server, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                         "clientInfo": {"name": "test", "version": "0"}})
        assert init.status_code == 200
        assert init.json()["result"]["protocolVersion"] == "2025-06-18"
        assert "tools" in init.json()["result"]["capabilities"]
        note = await client.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                 headers=server.headers)
        assert note.status_code == 202

        listed = (await rpc(client, server, "tools/list")).json()["result"]["tools"]
        names = {t["name"] for t in listed}
        # a granted tool is reached through langbot_call_tool; nothing the run was not granted is
        # listed (only "call" was granted, so not langbot_get_tool_detail either)
        assert names == {"langbot_call_tool", "langbot_list_assets", "langbot_get_current_event"}
        assert set(server.tool_names) == names
        assets = await call(client, server, "langbot_list_assets", {"asset_types": ["tools"]})
        assert [t["tool_name"] for t in assets["structuredContent"]["tools"]] == ["weather"]

        result = await call(client, server, "langbot_call_tool", {"tool_name": "weather", "parameters": {"city": "Oslo"}})
        assert not result.get("isError"), result
        assert result["structuredContent"] == {"temp": 21}
        assert json.loads(result["content"][0]["text"]) == {"temp": 21}
        tool_calls = [c.data for c in host.calls if c.action == "call_tool"]
        assert tool_calls == [{"run_id": env.ctx.run_id, "tool_name": "weather", "parameters": {"city": "Oslo"}}]

        # a tool the host has but did not grant this run never reaches the host
        denied = await call(client, server, "langbot_call_tool", {"tool_name": "admin_shell", "parameters": {}})
        assert denied["isError"] is True and "not authorized" in denied["content"][0]["text"]
        ungranted = await call(client, server, "langbot_retrieve_knowledge", {"kb_id": "kb", "query_text": "x"})
        assert ungranted["isError"] is True
        assert [c.data["tool_name"] for c in host.calls if c.action == "call_tool"] == ["weather"]


async def test_history_alone_is_offered_and_served():
    host = LocalHost()
    env = make_env(host)  # a conversation: the host grants history_page, nothing else
    async with langbot_mcp(env, True) as server, httpx.AsyncClient(timeout=10) as client:
        assert server is not None
        assert "langbot_history_page" in server.tool_names and "langbot_call_tool" not in server.tool_names
        page = await call(client, server, "langbot_history_page", {"limit": 5})
        assert [item["content"] for item in page["structuredContent"]["items"]] == ["hi"]


async def test_the_bearer_token_is_required():
    env = make_env(weather_host(), identity=NO_CONVERSATION, resources=WEATHER)
    async with langbot_mcp(env, True) as server, httpx.AsyncClient(timeout=10) as client:
        assert server is not None
        assert (await rpc(client, server, "tools/list", headers={})).status_code == 401
        wrong = {"Authorization": "Bearer " + "x" * len(server.token)}
        assert (await rpc(client, server, "tools/list", headers=wrong)).status_code == 401
        assert (await rpc(client, server, "tools/list")).status_code == 200


async def test_the_port_refuses_and_no_thread_is_left_after_the_block():
    before = len(bridge_threads())
    env = make_env(weather_host(), identity=NO_CONVERSATION, resources=WEATHER)
    async with langbot_mcp(env, True) as server:
        assert server is not None
        url = server.url
        assert len(bridge_threads()) == before + 1
    await assert_refused(url)
    assert len(bridge_threads()) == before


async def test_a_cancelled_run_stops_the_bridge_and_its_running_tool_call():
    host = weather_host()
    started, cancelled = asyncio.Event(), []
    answer = host.call_action

    async def slow_tools(action: Any, data: dict, timeout: float = 15.0) -> dict:
        if getattr(action, "value", action) == "call_tool":
            started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(data["tool_name"])
                raise
        return await answer(action, data, timeout)

    host.call_action = slow_tools  # type: ignore[method-assign]
    env = make_env(host, identity=NO_CONVERSATION, resources=WEATHER)
    served: list[LangBotMCP] = []
    up = asyncio.Event()

    async def agent_run() -> None:
        async with langbot_mcp(env, True) as server:
            assert server is not None
            served.append(server)
            up.set()
            await asyncio.sleep(3600)

    before = len(bridge_threads())
    task = asyncio.create_task(agent_run())
    await asyncio.wait_for(up.wait(), 5)
    server = served[0]
    async with httpx.AsyncClient(timeout=10) as client:
        pending = asyncio.create_task(call_raw(client, server))
        await asyncio.wait_for(started.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        resp = await asyncio.wait_for(pending, 5)
    assert cancelled == ["weather"], "the host call the agent was waiting on is cancelled"
    assert resp.status_code == 500 and "error" in resp.json()
    await assert_refused(server.url)
    assert len(bridge_threads()) == before


async def call_raw(client: httpx.AsyncClient, server: LangBotMCP) -> httpx.Response:
    return await rpc(client, server, "tools/call",
                     {"name": "langbot_call_tool", "arguments": {"tool_name": "weather", "parameters": {}}})


async def test_none_when_disabled_or_nothing_is_granted(caplog):
    caplog.set_level(logging.INFO, logger="runner_kit.agent_mcp")
    env = make_env(weather_host(), identity=NO_CONVERSATION, resources=WEATHER)
    async with langbot_mcp(env, False) as server:
        assert server is None
    bare = make_env(weather_host(), identity=NO_CONVERSATION)
    async with langbot_mcp(bare, True) as server:
        assert server is None
    lines = [r.getMessage() for r in caplog.records if r.name == "runner_kit.agent_mcp"]
    assert len(lines) == 2
    assert "disabled" in lines[0] and "grants no tools" in lines[1]
    assert not bridge_threads()
    with pytest.raises(ValueError):
        async with langbot_mcp(env, True, name="lang bot"):
            pass


async def test_none_when_the_sdk_lacks_the_bridge(monkeypatch, caplog):
    import runner_kit.agent_mcp as agent_mcp

    caplog.set_level(logging.INFO, logger="runner_kit.agent_mcp")
    monkeypatch.setattr(agent_mcp, "_sdk", lambda: None)
    async with langbot_mcp(make_env(weather_host(), resources=WEATHER), True) as server:
        assert server is None
    assert any("no agent_tools bridge" in r.getMessage() for r in caplog.records)


async def test_formats_for_each_agent_cli():
    env = make_env(weather_host(), identity=NO_CONVERSATION, resources=WEATHER)
    async with langbot_mcp(env, True, name="lb") as server:
        assert server is not None
        bearer = {"Authorization": f"Bearer {server.token}"}
        assert server.headers == bearer
        assert server.as_acp() == {"type": "http", "name": "lb", "url": server.url,
                                   "headers": [{"name": "Authorization", "value": f"Bearer {server.token}"}]}
        assert server.as_claude_config() == {"mcpServers": {"lb": {"type": "http", "url": server.url, "headers": bearer}}}
        assert server.as_codex_config() == {"url": server.url, "http_headers": bearer}
        assert server.as_codex_config(token_env_var="LANGBOT_MCP_TOKEN") == {
            "url": server.url, "bearer_token_env_var": "LANGBOT_MCP_TOKEN"}
        stdio = server.as_acp_stdio()
        assert stdio["name"] == "lb" and stdio["args"] == ["-m", "langbot_plugin.api.agent_tools.mcp_stdio"]
        assert {e["name"]: e["value"] for e in stdio["env"]} == {
            "LANGBOT_AGENT_MCP_ENDPOINT": f"http://127.0.0.1:{port_of(server)}", "LANGBOT_AGENT_MCP_TOKEN": server.token}
        # the ACP SDK's own schema accepts both entries
        from acp.schema import HttpMcpServer, McpServerStdio

        HttpMcpServer.model_validate(server.as_acp())
        McpServerStdio.model_validate(stdio)
        assert server.token not in repr(server)


async def test_the_acp_stdio_form_reaches_the_bridge():
    """The agent starts the SDK's stdio proxy from the entry; it answers MCP over stdin/stdout."""
    host = weather_host()
    env = make_env(host, identity=NO_CONVERSATION, resources=WEATHER)
    async with langbot_mcp(env, True) as server:
        assert server is not None
        entry = server.as_acp_stdio()
        proc = await asyncio.create_subprocess_exec(
            entry["command"], *entry["args"], env={e["name"]: e["value"] for e in entry["env"]},
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        assert proc.stdin and proc.stdout
        try:
            messages = [
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                 "params": {"name": "langbot_call_tool", "arguments": {"tool_name": "weather", "parameters": {}}}},
            ]
            proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
            await proc.stdin.drain()
            replies = [json.loads(await asyncio.wait_for(proc.stdout.readline(), 20)) for _ in range(3)]
        finally:
            proc.stdin.close()
            await asyncio.wait_for(proc.wait(), 10)
        assert [r["id"] for r in replies] == [1, 2, 3]
        assert {t["name"] for t in replies[1]["result"]["tools"]} == set(server.tool_names)
        assert replies[2]["result"]["structuredContent"] == {"temp": 21}


class McpAgent(Adapter):
    """An agent that is handed the bridge, calls a tool through it and echoes its config."""

    platform = "McpAgent"

    async def stream(self):
        async with langbot_mcp(self.env, True) as server:
            assert server is not None
            type(self).seen.append(server)
            async with httpx.AsyncClient(timeout=10) as client:
                result = await call(client, server, "langbot_call_tool", {"tool_name": "weather", "parameters": {}})
            yield ev.Log(f"agent config: {json.dumps(server.as_claude_config())}")
            logging.getLogger("runner_kit.run").warning("agent echoed %s", server.headers)
            yield ev.Text(json.dumps(result["structuredContent"]))

    seen: list[LangBotMCP] = []


async def test_inside_a_real_run_the_token_never_shows_in_results_or_logs(caplog):
    caplog.set_level(logging.INFO)
    host = weather_host()
    runner_cls = type("R", (KitRunner,), {"adapter": McpAgent, "schema": SCHEMA})
    runner = runner_cls()
    runner.bind_runtime(plugin_runtime_handler=host)
    McpAgent.seen = []
    results = await run(runner, host, identity=NO_CONVERSATION, resources=WEATHER)
    assert final_text(results) == '{"temp": 21}'
    kinds = [rtype(r) for r in results]
    assert "tool.call.started" in kinds and "tool.call.completed" in kinds, kinds
    logged = [r.data["text"] for r in results if rtype(r) == "processor.log"]
    assert any("agent config" in t and "Bearer ***" in t for t in logged), logged
    token = McpAgent.seen[0].token
    logs = "\n".join(r.getMessage() for r in caplog.records)
    assert "agent echoed" in logs and "Bearer ***" in logs
    assert token not in dump(results) and token not in logs
    await assert_refused(McpAgent.seen[0].url)


# --- the bridge serves the run that holds the agent (issue 29) ------------------------------------

CALENDAR = {"tools": [{"tool_name": "calendar", "tool_type": "plugin", "description": "dates", "operations": ["call"]}]}
BOTH = {"tools": WEATHER["tools"] + CALENDAR["tools"]}


def host_calls(host: LocalHost) -> list[tuple[str, str]]:
    """``(run id, tool)`` of every tool call that reached the host."""
    return [(c.data["run_id"], c.data["tool_name"]) for c in host.calls if c.action == "call_tool"]


def refusal(result: dict) -> str:
    assert result.get("isError") is True, result
    return result["content"][0]["text"]


async def test_a_later_run_that_takes_the_agent_is_served_under_its_own_id_and_grants():
    host = weather_host()
    host.tool_results["calendar"] = {"today": "Monday"}
    first = make_env(host, identity=NO_CONVERSATION, resources=BOTH)
    later = make_env(host, identity=NO_CONVERSATION, resources=CALENDAR)
    async with langbot_mcp(first, True) as server, httpx.AsyncClient(timeout=10) as client:
        assert server is not None
        weather = {"tool_name": "weather", "parameters": {}}
        calendar = {"tool_name": "calendar", "parameters": {}}
        assert (await call(client, server, "langbot_call_tool", weather))["structuredContent"] == {"temp": 21}

        release(first)  # the agent is parked on a question: the first run is over
        assert refusal(await call(client, server, "langbot_call_tool", weather)) == NO_RUN
        assert refusal(await call(client, server, "langbot_list_assets", {})) == NO_RUN
        assert (await rpc(client, server, "tools/list")).json()["result"]["tools"] == []

        hand_over(first, later)  # a button click: a new run attaches to the agent
        assert (await call(client, server, "langbot_call_tool", calendar))["structuredContent"] == {"today": "Monday"}
        denied = await call(client, server, "langbot_call_tool", weather)
        assert "not authorized" in refusal(denied), "the later run does not grant weather"
        assets = await call(client, server, "langbot_list_assets", {"asset_types": ["tools"]})
        assert assets["structuredContent"]["run_id"] == later.ctx.run_id
        assert [t["tool_name"] for t in assets["structuredContent"]["tools"]] == ["calendar"]
        assert host_calls(host) == [(first.ctx.run_id, "weather"), (later.ctx.run_id, "calendar")]
        # same port and token; the later run's results and logs hide the token too
        assert later.redact(f"Bearer {server.token}") == "Bearer ***"
        assert first.mcp_bridges == [] and len(later.mcp_bridges) == 1
    assert later.mcp_bridges == [], "a closed bridge is nobody's"
    await assert_refused(server.url)


async def test_a_call_still_running_when_the_agent_is_parked_is_stopped_and_refused():
    host = weather_host()
    started, cancelled = asyncio.Event(), []
    answer = host.call_action

    async def slow_tools(action: Any, data: dict, timeout: float = 15.0) -> dict:
        if getattr(action, "value", action) == "call_tool":
            started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(data["run_id"])
                raise
        return await answer(action, data, timeout)

    host.call_action = slow_tools  # type: ignore[method-assign]
    env = make_env(host, identity=NO_CONVERSATION, resources=WEATHER)
    async with langbot_mcp(env, True) as server, httpx.AsyncClient(timeout=10) as client:
        assert server is not None
        pending = asyncio.create_task(call_raw(client, server))
        await asyncio.wait_for(started.wait(), 5)
        release(env)
        resp = await asyncio.wait_for(pending, 5)
        assert resp.status_code == 200
        assert refusal(resp.json()["result"]) == NO_RUN, "the agent hears why, not a broken request"
        assert cancelled == [env.ctx.run_id], "the host call of the ended run is not left running"
        ping = await rpc(client, server, "ping")
        assert ping.status_code == 200, "the bridge itself goes on serving"


async def test_the_agents_port_and_token_are_gone_once_it_stops():
    env = make_env(weather_host(), identity=NO_CONVERSATION, resources=WEATHER)
    async with langbot_mcp(env, True) as server:
        assert server is not None
        release(env)  # parked, then stopped without a later run taking it
        token, url = server.token, server.url
        private = url.removesuffix("/http")  # the stdio proxy's endpoint
    await assert_refused(url)
    await assert_refused(private)
    later = make_env(weather_host(), identity=NO_CONVERSATION, resources=WEATHER)
    async with langbot_mcp(later, True) as fresh, httpx.AsyncClient(timeout=10) as client:
        assert fresh is not None and fresh.token != token
        stale = await rpc(client, fresh, "tools/list", headers={"Authorization": f"Bearer {token}"})
        assert stale.status_code == 401, "an agent's token opens no other agent's bridge"


class ParkingAgent(Adapter):
    """A coding agent with a bridge for the life of its process: calls a LangBot tool, asks the
    chat, and once answered calls it again; ``seen`` records the server and each result."""

    platform = "ParkingAgent"
    session_key = "parking.session"
    multi_turn = True
    seen: list[Any] = []

    def __init__(self, env: RunEnv):
        super().__init__(env)
        self._stack = contextlib.AsyncExitStack()
        self.server: LangBotMCP | None = None

    async def turn(self, inp, index):
        if self.server is None:
            self.server = await self._stack.enter_async_context(langbot_mcp(self.env, True))
            type(self).seen.append(self.server)
        assert self.server is not None
        weather = {"tool_name": "weather", "parameters": {}}
        async with httpx.AsyncClient(timeout=10) as client:
            type(self).seen.append(await call(client, self.server, "langbot_call_tool", weather))
            yield ev.Text("Checking.")
            decision = await self.env.ask(ap.Question(title="look outside", scope="look"))
            type(self).seen.append(await call(client, self.server, "langbot_call_tool", weather))
        yield ev.Text(f" {decision.word}: {json.dumps(type(self).seen[-1].get('structuredContent'))}")

    async def close(self):
        await self._stack.aclose()


def parking_runner() -> tuple[Any, LocalHost, list[Any]]:
    """A runner over a fresh ParkingAgent class: ``(runner, host, what its agents saw)``."""
    schema = ConfigSchema.from_items([{"name": "timeout", "type": "float", "default": 60},
                                      {"name": "approval-timeout", "type": "float", "default": 600}])
    runner, host, cls = scripted_runner(ParkingAgent, schema, seen=[])
    host.tool_results = {"weather": {"temp": 21}}
    return runner, host, cls.seen


@pytest.mark.usefixtures("no_parked")
async def test_a_button_answer_hands_the_agents_bridge_to_the_new_run():
    runner, host, seen = parking_runner()
    first = host.make_context("weather?", interactions=True, resources=WEATHER)
    out1 = await run_ctx(runner, host, first)
    assert rtype(terminal(out1)) == "run.completed"
    server = seen[0]
    (req,) = host.interactions

    async with httpx.AsyncClient(timeout=10) as client:  # while the agent waits for the click
        parked = await call(client, server, "langbot_call_tool", {"tool_name": "weather", "parameters": {}})
    assert refusal(parked) == NO_RUN

    click = host.make_context(interactions=True, resources=WEATHER,
                              interaction={"interaction_id": req["interaction_id"], "action_id": "allow"})
    out2 = await run_ctx(runner, host, click)
    assert rtype(terminal(out2)) == "run.completed"
    assert messages(out2)[-1].endswith('allow: {"temp": 21}'), messages(out2)
    assert host_calls(host) == [(first.run_id, "weather"), (click.run_id, "weather")]
    assert server.token not in dump(out1 + out2)
    await assert_refused(server.url)  # the agent stopped at the end of the second run


@pytest.mark.usefixtures("no_parked")
async def test_a_parked_agent_that_is_stopped_closes_its_port():
    runner, host, seen = parking_runner()
    await run_ctx(runner, host, host.make_context("weather?", interactions=True, resources=WEATHER))
    server = seen[0]
    async with httpx.AsyncClient(timeout=10) as client:
        assert (await client.get(server.url.removesuffix("/mcp/http") + "/healthz")).status_code == 200
    await ap.close_all()  # the plugin shuts down: the parked agent is stopped
    await assert_refused(server.url)
    assert host_calls(host) == [(host_calls(host)[0][0], "weather")], "nothing went out after the run"


async def run_ctx(runner: Any, host: LocalHost, ctx: Any) -> list[Any]:
    out = []
    async for r in runner.invoke(ctx):
        host.apply_result(ctx.run_id, r)
        out.append(r)
    return out
