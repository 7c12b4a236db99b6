"""runner_kit.agent_mcp: the SDK's run-scoped MCP bridge, served over real HTTP on 127.0.0.1 to
what the local host granted the run, and gone when the block exits."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

import httpx
import pytest
from langbot_plugin.api.proxies.runner import RunnerAPIProxy

from runner_kit import events as ev
from runner_kit.agent_mcp import LangBotMCP, langbot_mcp
from runner_kit.config import ConfigSchema
from runner_kit.errors import Redactor
from runner_kit.runner import Adapter, KitRunner, RunEnv
from runners_cli.host import Identity, LocalHost
from tests.helpers import dump, final_text, rtype, run

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
