"""acp-agent-runner: a denial's reason reaches the agent (issue 31 item 5). The
``session/request_permission`` outcome is an option id; the reason rides in ``_meta`` too, which few
agents read, so the agent is also told after its turn, as the next prompt in the same session:
"<who> denied “<what>”: <reason>". A denial without a reason adds no prompt.

The scripted agent's model runs the tool again on every new prompt (tests/fakes/model_api.py), so the
told prompt asks once more, and the chat denies that one without a reason."""

from __future__ import annotations

import pytest

import tests.contract.cases  # noqa: F401  (the case module imports from it)
from tests.contract.case_acp_agent_runner import _Server
from tests.contract.case_acp_agent_runner import config as acp_config
from tests.helpers import make_runner, rtype, terminal
from tests.helpers import run_answering as drive
from tests.plugins.test_acp_agent_runner import _no_children

pytestmark = pytest.mark.usefixtures("no_parked")  # tests/conftest.py: nothing left parked

PLUGIN = "acp-agent-runner"
TOLD = "Tester denied “run a command: touch made.txt”: not in this repo"


# --- ACP ------------------------------------------------------------------------------------------


@pytest.fixture
def srv(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))
    s = _Server().start()
    try:
        yield s
    finally:
        s.stop()


def prompts(srv):
    """The user messages the ACP agent was prompted with (its whole history, as sent to the model)."""
    items = srv.model_requests()[-1].body["input"]
    return ["".join(c.get("text") or "" for c in i["content"])
            for i in items if i.get("type") == "message" and i.get("role") == "user"]


async def test_an_acp_agent_is_told_the_reason_as_its_next_prompt(srv, host, tmp_path):
    srv.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("make a file", steering=True,
                            config={**acp_config(srv), "workspace": str(ws), "permission-mode": "ask"})
    out = await drive(runner, host, ctx, ["NO, not in this repo", "deny"])
    assert rtype(terminal(out)) == "run.completed", out[-1].data
    assert not (ws / "made.txt").exists()
    first, second = srv.events("permission")
    assert first["option"] == "abort" and first["reason"] == "not in this repo", "_meta is still sent"
    assert second["option"] == "abort"
    said = prompts(srv)
    assert len(said) == 2 and said[0].endswith("make a file"), said
    assert said[1] == TOLD, "the next prompt in the same session carries who denied what, and why"
    assert first["session"] == second["session"]
    assert not await _no_children()


async def test_an_acp_agent_gets_no_extra_prompt_for_a_denial_without_a_reason(srv, host, tmp_path):
    srv.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("make a file", steering=True,
                            config={**acp_config(srv), "workspace": str(ws), "permission-mode": "ask"})
    out = await drive(runner, host, ctx, ["不行"])
    assert rtype(terminal(out)) == "run.completed", out[-1].data
    assert [e["option"] for e in srv.events("permission")] == ["abort"]
    assert len(prompts(srv)) == 1
    assert not await _no_children()
