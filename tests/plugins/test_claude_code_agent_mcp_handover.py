"""claude-code-agent: the LangBot MCP bridge serves the run that holds claude (issue 29).

Claude asks to run a command; the chat allows it with a button, which LangBot delivers as a new run.
The command is the agent calling a LangBot tool through the bridge (the ``--mcp-config`` it was
started with): that call must go out under the new run's id (LangBot forgets the asking run at its
end), and once claude stops, the bridge's port is closed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest

from tests.contract import cases as _cases  # noqa: F401 - loads the case modules in their order
from tests.contract.case_claude_code_agent import KEY, ClaudeModelAPI, config
from tests.helpers import make_runner, rtype, terminal
from tests.helpers import run_answering as drive
from tests.kit.test_agent_mcp import NO_CONVERSATION, make_env, weather_host
from tests.plugins.test_claude_code_agent import no_children

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "claude-code-agent"))
from claude_code_agent.adapter import ClaudeCodeAdapter  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_parked")  # tests/conftest.py: nothing left parked

PLUGIN = "claude-code-agent"
WEATHER = {"tools": [{"tool_name": "weather", "tool_type": "plugin", "description": "forecast", "operations": ["call"]}]}

# run by the command claude asks to run: finds the --mcp-config claude (its parent) was started
# with and calls langbot_call_tool through it, printing the url and the MCP result
CALL_BRIDGE = """
import json, sys, urllib.request
argv = open(f"/proc/{sys.argv[1]}/cmdline", "rb").read().split(b"\\0")
conf = json.load(open(argv[argv.index(b"--mcp-config") + 1]))["mcpServers"]["langbot"]
body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "langbot_call_tool", "arguments": {"tool_name": "weather", "parameters": {}}}}
req = urllib.request.Request(conf["url"], data=json.dumps(body).encode(),
                             headers={**conf["headers"], "Content-Type": "application/json"})
print(json.dumps({"url": conf["url"], "result": json.load(urllib.request.urlopen(req, timeout=5))["result"]}))
"""


@pytest.fixture
def api():
    srv = ClaudeModelAPI(api_keys={KEY})
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))


async def test_a_langbot_tool_call_after_a_button_approval_goes_out_under_the_new_run(api, host, tmp_path):
    script = tmp_path / "call_bridge.py"
    script.write_text(CALL_BRIDGE)
    api.tool_command = f"{sys.executable} {script} $PPID"  # not read-only: claude asks first
    host.tool_results = {"weather": {"temp": 21}}
    cfg = {**config(api), "workspace": str(tmp_path / "ws"), "permission-mode": "ask"}
    runner = make_runner(PLUGIN, host)

    asking = host.make_context("what is the weather?", interactions=True, config=cfg, resources=WEATHER)
    out1 = await drive(runner, host, asking)
    assert rtype(terminal(out1)) == "run.completed"
    (req,) = host.interactions
    assert "call_bridge.py" in req["description"]
    assert not [c for c in host.calls if c.action == "call_tool"], "nothing runs before the click"

    click = host.make_context("", interactions=True, config=cfg, resources=WEATHER,
                              interaction={"interaction_id": req["interaction_id"], "action_id": "allow"})
    out2 = await drive(runner, host, click)
    assert rtype(terminal(out2)) == "run.completed"
    # the chat sees the LangBot tool call, then claude's command that made it
    weather, done = [r.data for r in out2 if rtype(r) == "tool.call.completed"]
    assert (weather["tool_name"], weather["result"], weather["error"]) == ("weather", {"temp": 21}, None)
    assert done["tool_name"] == "Bash" and not done["error"], done
    printed = json.loads((done.get("result") or {}).get("output") or "{}")
    assert printed["result"]["structuredContent"] == {"temp": 21}, printed
    calls = [c.data["run_id"] for c in host.calls if c.action == "call_tool"]
    assert calls == [click.run_id], "the tool call goes out under the run that holds claude now"

    # claude is stopped at the end of the second run, and its bridge with it
    async with httpx.AsyncClient(timeout=2) as client:
        with pytest.raises(httpx.ConnectError):
            await client.post(printed["url"], json={})
    assert not await no_children()


async def test_a_restarted_claude_gets_a_new_bridge_and_the_old_one_closes(tmp_path):
    """claude started again in the same session (it crashed, or refused a resume): one bridge per
    process, so the stopped process's port and token do not outlive it."""
    adapter = ClaudeCodeAdapter(make_env(weather_host(), identity=NO_CONVERSATION, resources=WEATHER))
    first = await adapter._langbot_mcp()
    second = await adapter._langbot_mcp()
    assert first is not None and second is not None
    old, new = (c["mcpServers"]["langbot"] for c in (first, second))
    assert old["url"] != new["url"] and old["headers"] != new["headers"]
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with httpx.AsyncClient(timeout=2) as client:
        assert not await _answers(client, old["url"], ping, old["headers"]), "the old bridge is closed"
        assert (await client.post(new["url"], json=ping, headers=new["headers"])).status_code == 200
        await adapter.close()
        assert not await _answers(client, new["url"], ping, new["headers"])


async def _answers(client: httpx.AsyncClient, url: str, body: dict, headers: dict) -> bool:
    """Whether a bridge still answers at ``url`` with its token. A closed one refuses the connection;
    under a parallel test run another test's server may have taken the freed port meanwhile, and it
    never answers this token."""
    try:
        return (await client.post(url, json=body, headers=headers)).status_code == 200
    except httpx.TransportError:
        return False
