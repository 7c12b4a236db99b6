"""codex-agent: a denial's reason reaches Codex (issue 31 item 5). Its approval decision (``accept``
/ ``decline``) has no field for one, so Codex is told after its turn, as the next turn's text in the
same thread: "<who> denied “<what>”: <reason>". A denial without a reason adds no turn. (Claude
Code's ``can_use_tool`` answer has a ``message``: tests/plugins/test_claude_code_agent_approvals.py;
ACP: tests/plugins/test_acp_agent_runner_deny_reason.py.)

The scripted model runs the tool again on every new prompt (tests/fakes/model_api.py), so the told
turn asks once more, and the chat denies that one without a reason."""

from __future__ import annotations

import pytest

from tests.helpers import make_runner, messages, rtype, terminal
from tests.helpers import run_answering as drive
from tests.plugins.test_codex_agent import env  # noqa: F401 - a fixture (host and runner: tests/plugins/conftest.py)

pytestmark = pytest.mark.usefixtures("no_parked")  # tests/conftest.py: nothing left parked

PLUGIN = "codex-agent"
TOLD = "Tester denied “run a command: touch created-by-tool.txt”: not in this repo"


def questions(out):
    return [m for m in messages(out) if "wants to" in m]


# --- Codex (app-server) -------------------------------------------------------------------------


def codex_config(env, **extra):  # noqa: F811
    return env.config("toolw", **{"permission-mode": "ask", **extra})


def turn_texts(env):  # noqa: F811
    """The text of each turn Codex was given, in order."""
    return ["".join(i.get("text") or "" for i in p["input"] if i.get("type") == "text")
            for p in env.requests("turn/start")]


async def test_codex_is_told_the_reason_as_its_next_turn(env, host):  # noqa: F811
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("make a file", steering=True, config=codex_config(env))
    out = await drive(runner, host, ctx, ["deny: not in this repo", "deny"])
    assert rtype(terminal(out)) == "run.completed", out[-1].data
    assert [e["answer"] for e in env.events("approval")] == [{"decision": "decline"}] * 2
    texts = turn_texts(env)
    assert len(texts) == 2 and texts[0].endswith("make a file"), texts
    assert texts[1] == TOLD, "the next turn in the same thread carries who denied what, and why"
    assert len({p["threadId"] for p in env.requests("turn/start")}) == 1
    assert TOLD in str(env.api.model_requests()[-1].body["input"]), "the model reads it"
    assert len(questions(out)) == 2


async def test_codex_gets_no_extra_turn_for_a_denial_without_a_reason(env, host):  # noqa: F811
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("make a file", steering=True, config=codex_config(env))
    out = await drive(runner, host, ctx, ["no"])
    assert rtype(terminal(out)) == "run.completed", out[-1].data
    assert [e["answer"] for e in env.events("approval")] == [{"decision": "decline"}]
    assert len(turn_texts(env)) == 1


async def test_codex_is_told_the_reason_typed_in_a_later_run(env, host):  # noqa: F811
    runner = make_runner(PLUGIN, host)
    cfg = codex_config(env)
    out1 = await drive(runner, host, host.make_context("make a file", config=cfg))  # no steering: parked
    assert rtype(terminal(out1)) == "run.completed" and len(questions(out1)) == 1
    out2 = await drive(runner, host, host.make_context("拒绝，not in this repo", config=cfg))
    assert rtype(terminal(out2)) == "run.completed", out2[-1].data
    texts = turn_texts(env)
    assert texts[1:] == [TOLD], "told in the run that took the answer"
    assert len(questions(out2)) == 1, "the told turn asked again, parked like the first"
    out3 = await drive(runner, host, host.make_context("deny", config=cfg))
    assert rtype(terminal(out3)) == "run.completed"
    assert len(turn_texts(env)) == 2, "a denial without a reason: no extra turn"
    assert [e["answer"]["decision"] for e in env.events("approval")] == ["decline", "decline"]
