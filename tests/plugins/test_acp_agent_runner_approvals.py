"""acp-agent-runner in ``permission-mode: ask``: the codex-acp-shaped test agent asks
``session/request_permission`` before a command (options ``approved`` / ``approved-execpolicy-amendment``
/ ``abort``, as in fixtures/real-peers/codex-acp/tool-approval.jsonl) and the chat answers it —
typed inside the run, or by a button through a new run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tests.contract.cases  # noqa: F401  (the case module imports from it)
from runner_kit import approvals as ap
from runner_kit.process import alive
from runners_cli.host import Identity
from tests.contract.case_acp_agent_runner import _Server, config
from tests.helpers import agent_pids, make_runner, messages, rtype, terminal
from tests.helpers import run_answering as drive
from tests.plugins.test_acp_agent_runner import _no_children

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "acp-agent-runner"))
from acp_agent_runner import const, policy  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_parked")  # tests/conftest.py: nothing left parked


@pytest.fixture
def srv():
    s = _Server().start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))



def ask_config(srv, ws, **extra):
    return {**config(srv), "workspace": str(ws), "permission-mode": "ask", **extra}


def questions(out):
    return [m for m in messages(out) if "wants to" in m]


def tool_done(out):
    return [r.data for r in out if rtype(r) == "tool.call.completed"]


# --- pieces -------------------------------------------------------------------------------------


def test_ask_uses_the_agents_asking_mode_and_maps_answers_to_its_options():
    assert const.SESSION_MODES["ask"] == ("default",), "claude-code-acp's asking mode; codex-acp: none"
    from acp.schema import PermissionOption as O

    codex = [O(option_id="approved", name="Yes", kind="allow_once"),
             O(option_id="approved-execpolicy-amendment", name="Always", kind="allow_always"),
             O(option_id="abort", name="No", kind="reject_once")]
    assert policy.choose_answer(codex, True, False) == "approved"
    # "always" is kept by the kit (cleared on reset); the agent's own allow-always could outlive it
    assert policy.choose_answer(codex, True, True) == "approved"
    assert policy.choose_answer(codex, False, False) == "abort"
    assert policy.choose_answer(codex[:1] + codex[2:], True, True) == "approved"  # no allow_always: once
    ws = Path("/tmp/ws-x")
    # (these once expected "shell:git", "shell:rm", "edit" for an edit and a delete alike, "fetch"
    # for any fetch. Now: this command, this file and what is done to it, this call.)
    assert policy.scope("execute", "git push origin main") == "cmd:git push origin main"
    assert policy.scope("execute", ["/bin/bash", "-lc", "git status; rm x"]) == "cmd:git status; rm x"
    assert policy.scope("execute", "bash -c 'rm -rf ~'") == "cmd:bash -c 'rm -rf ~'", "a wrapper the agent wrote stays"
    assert policy.scope("execute", None) == "", "no command named: allowed once at most"
    assert policy.scope("edit", None, ["/tmp/ws-x/a.py"], ws) == ("edit:a.py",)
    assert policy.scope("delete", None, ["/tmp/ws-x/a.py"], ws) == ("delete:a.py",)
    assert policy.scope("move", None, ["/tmp/ws-x/a.py", "/tmp/ws-x/b.py"], ws) == 'move:["a.py", "b.py"]'
    assert policy.scope("edit", None, ["/tmp/ws-x/a.py", "/etc/passwd"], ws) == ""
    assert policy.scope("edit", None, [], ws) == ""
    fetch = policy.scope("fetch", None, [], ws, "Fetch https://x", {"url": "https://x", "call_id": "c1"})
    assert fetch == policy.scope("fetch", None, [], ws, "Fetch https://x", {"url": "https://x", "call_id": "c2"})
    assert fetch != policy.scope("fetch", None, [], ws, "Fetch http://127.0.0.1", {"url": "http://127.0.0.1"})
    assert not policy.ask_first("read", ["/tmp/ws-x/a.py"], ws)
    assert policy.ask_first("read", ["/etc/passwd"], ws)
    assert policy.ask_first("execute", [], ws) and policy.ask_first("edit", ["/tmp/ws-x/a"], ws)


# --- typed answers inside the run -------------------------------------------------------------------


async def test_typed_allow_once_runs_the_command(srv, host, tmp_path):
    srv.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner("acp-agent-runner", host)
    ctx = host.make_context("make a file", steering=True, config=ask_config(srv, ws))
    out = await drive(runner, host, ctx, ["allow"])
    assert rtype(terminal(out)) == "run.completed"
    (q,) = questions(out)
    assert "run a command: touch made.txt" in q and f"in {ws}" in q
    assert (ws / "made.txt").exists()
    assert [e["option"] for e in srv.events("permission")] == ["approved"]
    assert not srv.events("set_mode"), "codex-acp keeps approval_policy untrusted from its launch"
    assert not tool_done(out)[0]["error"]
    assert not await _no_children()


async def test_deny_with_a_reason_reaches_the_agent(srv, host, tmp_path):
    srv.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner("acp-agent-runner", host)
    ctx = host.make_context("make a file", steering=True, config=ask_config(srv, ws))
    # (this once answered only the first question. The reason now also comes as the next prompt, on
    # which the scripted model runs the tool again: tests/plugins/test_acp_agent_runner_deny_reason.py.)
    out = await drive(runner, host, ctx, ["deny: not in this repo", "deny"])
    assert rtype(terminal(out)) == "run.completed"
    assert not (ws / "made.txt").exists()
    e = srv.events("permission")[0]
    assert e["option"] == "abort" and e["reason"] == "not in this repo"
    outputs = [i for i in srv.model_requests()[-1].body["input"] if i.get("type") == "function_call_output"]
    assert outputs[0]["output"] == "rejected by user: not in this repo"


async def test_allow_for_session_is_kept_by_the_runner_and_not_asked_again(srv, host, tmp_path):
    srv.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner("acp-agent-runner", host)
    cfg = ask_config(srv, ws)
    out1 = await drive(runner, host, host.make_context("make a file", steering=True, config=cfg), ["always"])
    assert rtype(terminal(out1)) == "run.completed" and len(questions(out1)) == 1
    # the next run: a new agent process asks again; the kit remembers "touch made.txt" for this session
    out2 = await drive(runner, host, host.make_context("once more", steering=True, config=cfg), ["deny"])
    assert rtype(terminal(out2)) == "run.completed"
    assert not questions(out2), "the same kind of request is not asked again"
    assert [e["option"] for e in srv.events("permission")] == ["approved"] * 2, \
        "allowed once each time: the kit remembers, so a reset forgets it"
    sessions = {e["session"] for e in srv.events("permission")}
    assert len(sessions) == 1


async def test_no_answer_within_the_approval_timeout_is_a_denial(srv, host, tmp_path):
    srv.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner("acp-agent-runner", host)
    ctx = host.make_context("make a file", steering=True, config=ask_config(srv, ws, **{"approval-timeout": 1.2}))
    out = await drive(runner, host, ctx)
    assert rtype(terminal(out)) == "run.completed"
    assert not (ws / "made.txt").exists()
    (e,) = srv.events("permission")
    assert e["option"] == "abort" and e["reason"]
    assert any("No answer within" in m for m in messages(out)), messages(out)


async def test_someone_else_cannot_answer_and_the_question_stays_open(srv, host, tmp_path):
    srv.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner("acp-agent-runner", host)
    other = Identity(actor_id="u-2", actor_name="Mallory")
    ctx = host.make_context("make a file", steering=True, config=ask_config(srv, ws))
    # one shared session (user-id-source conversation, the default): Mallory's "allow" is no answer
    # to Tester's question; it is her message, the session's next turn (where the agent asks her)
    out = await drive(runner, host, ctx, [("allow", other), "allow", ("deny", other)])
    assert rtype(terminal(out)) == "run.completed"
    assert (ws / "made.txt").exists()
    options = [e["option"] for e in srv.events("permission")]
    assert options[0] == "approved" and len(options) == 2 and options[1] != "approved"
    assert any("Only" in m for m in messages(out))
    assert any("your message comes after it" in m for m in messages(out))


# --- "allow for this session" covers exactly what was approved (issue 29) ---------------------------


async def _always_then(srv, host, ws, first, second, answer):
    """Run 1: the agent runs ``first``, the chat answers "always"; run 2: it runs ``second`` and the
    chat (if asked) answers ``answer``. The second run's results."""
    runner = make_runner("acp-agent-runner", host)
    cfg = ask_config(srv, ws)
    srv.tool_command = first
    out1 = await drive(runner, host, host.make_context("first", steering=True, config=cfg), ["always"])
    assert rtype(terminal(out1)) == "run.completed" and len(questions(out1)) == 1
    srv.tool_command = second
    out2 = await drive(runner, host, host.make_context("second", steering=True, config=cfg), [answer])
    assert rtype(terminal(out2)) == "run.completed"
    return out2


async def test_always_on_git_status_does_not_allow_a_command_chained_to_it(srv, host, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "precious.txt").write_text("keep me")
    out = await _always_then(srv, host, ws, "git status", "git status; rm -f precious.txt; touch PWNED.txt", "deny")
    (q,) = questions(out)
    assert "git status; rm -f precious.txt; touch PWNED.txt" in q, "asked again, naming the whole command"
    assert "always (allow this exact command for this session)" in q
    assert (ws / "precious.txt").read_text() == "keep me" and not (ws / "PWNED.txt").exists()
    assert [e["option"] for e in srv.events("permission")] == ["approved", "abort"]
    assert not await _no_children()


async def test_always_on_cd_and_ls_does_not_allow_another_cd_chain(srv, host, tmp_path):
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    out = await _always_then(srv, host, ws, "cd src && ls", "cd .. && touch PWNED.txt", "deny")
    (q,) = questions(out)
    assert "cd .. && touch PWNED.txt" in q
    assert not (tmp_path / "PWNED.txt").exists()
    assert [e["option"] for e in srv.events("permission")] == ["approved", "abort"]


async def test_the_same_exact_command_is_not_asked_again(srv, host, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    out = await _always_then(srv, host, ws, "touch made.txt", "touch  made.txt", "deny")
    assert not questions(out), "the same command (other spacing) is covered"
    assert (ws / "made.txt").exists()
    assert [e["option"] for e in srv.events("permission")] == ["approved", "approved"]


# --- buttons: the answer comes as a new run ---------------------------------------------------------


async def test_button_answer_through_a_new_run_finishes_the_turn_and_stops_the_agent(srv, host, tmp_path):
    srv.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner("acp-agent-runner", host)
    cfg = ask_config(srv, ws)
    out1 = await drive(runner, host, host.make_context("make a file", interactions=True, config=cfg))
    assert rtype(terminal(out1)) == "run.completed"
    (req,) = host.interactions
    assert "touch made.txt" in req["description"] and [a["id"] for a in req["actions"]] == ["allow", "always", "deny"]
    assert req["actions"][1]["label"] == "Allow `touch made.txt` for this session"
    (pid,) = agent_pids("acp_agent.py")  # the host's pid (the agent's own is its sandbox's)
    assert alive(pid), "the agent waits, parked, for the click"
    assert not (ws / "made.txt").exists()
    out2 = await drive(runner, host, host.make_context(
        "", interactions=True, config=cfg,
        interaction={"interaction_id": req["interaction_id"], "action_id": "allow"}))
    assert rtype(terminal(out2)) == "run.completed"
    assert (ws / "made.txt").exists()
    assert [e["option"] for e in srv.events("permission")] == ["approved"]
    assert tool_done(out2) and not tool_done(out2)[0]["error"], "the rest streams in run 2"
    assert "Hello from the fake model." in "".join(messages(out2))
    assert not alive(pid), "the agent is stopped at the end of run 2"
    assert not await _no_children()


# --- the adapter alone: what it asks, files, cancel --------------------------------------------------


def _adapter(tmp_path, answer):
    from types import SimpleNamespace

    from acp_agent_runner.adapter import ACPAdapter, _Turn

    from runner_kit.errors import Redactor

    asked = []

    async def ask(q):
        asked.append(q)
        return await answer(a, q)

    env = SimpleNamespace(config={"permission-mode": "ask"}, redact=Redactor(), session=None, ask=ask)
    a = ACPAdapter(env)
    a.workspace = tmp_path / "ws"
    a.workspace.mkdir(exist_ok=True)
    a._turn = _Turn()
    return a, asked


def _options():
    from acp.schema import PermissionOption as O

    # claude-code-acp's options for a write (real-peers.md): allow_always / allow / reject
    return [O(option_id="allow_always", name="Always Allow", kind="allow_always"),
            O(option_id="allow", name="Allow", kind="allow_once"),
            O(option_id="reject", name="Reject", kind="reject_once")]


async def test_edit_asks_with_the_path_and_its_file_scope_and_reads_in_the_workspace_do_not(tmp_path):
    from acp import update_tool_call
    from acp.schema import ToolCallLocation

    async def always(a, q):
        return ap.Decision(allow=True, always=True, by="Tester")

    a, asked = _adapter(tmp_path, always)
    target = str(a.workspace / "src" / "x.py")
    resp = await a.on_permission(update_tool_call("t1", title="Write src/x.py", kind="edit",
                                                  locations=[ToolCallLocation(path=target)]), _options())
    assert resp.outcome.option_id == "allow"
    (q,) = asked
    assert q.title == f"edit {target}" and q.scope == ("edit:src/x.py",)  # once: "edit", every edit anywhere
    assert q.session_label == "Allow editing src/x.py for this session"
    read = update_tool_call("t2", title="Read x.py", kind="read", locations=[ToolCallLocation(path=target)])
    assert (await a.on_permission(read, _options())).outcome.option_id == "allow"
    outside = update_tool_call("t3", title="Read passwd", kind="read", locations=[ToolCallLocation(path="/etc/passwd")])
    await a.on_permission(outside, _options())
    assert len(asked) == 2, "a read outside the workspace is asked"


async def test_a_cancel_while_the_chat_decides_answers_cancelled(tmp_path):
    from acp import update_tool_call

    async def cancelled_meanwhile(a, q):
        a._cancelling = True  # session/cancel went out while the question was open
        return ap.Decision(allow=True, by="Tester")

    a, _ = _adapter(tmp_path, cancelled_meanwhile)
    call = update_tool_call("t1", title="rm -rf build", kind="execute", raw_input={"command": ["rm", "-rf", "build"]})
    resp = await a.on_permission(call, _options())
    assert resp.outcome.outcome == "cancelled"


async def test_ask_mode_writes_inside_the_workspace_only(tmp_path):
    from acp import RequestError

    async def never(a, q):
        raise AssertionError("files are not asked")

    a, _ = _adapter(tmp_path, never)
    a.write_file(str(a.workspace / "b.txt"), "x")
    assert (a.workspace / "b.txt").read_text() == "x"
    with pytest.raises(RequestError):
        a.write_file(str(tmp_path / "c.txt"), "x")


def test_codex_is_launched_asking_in_ask_mode_only():
    from acp_agent_runner import providers

    ask = providers.launch({"provider": "codex", "permission-mode": "ask"}).argv
    assert 'approval_policy="untrusted"' in ask and 'sandbox_mode="workspace-write"' in ask
    other = providers.launch({"provider": "codex", "permission-mode": "workspace-write"}).argv
    assert not any("approval_policy" in a for a in other)


# --- elicitation: the agent asks the user for input (ACP elicitation/create, form mode) -------------

PLUGIN = "acp-agent-runner"  # tests/plugins/conftest.py: the host and runner fixtures
BRANCH = {"message": "Which branch should I push?",
          "schema": {"type": "object", "properties": {"branch": {"type": "string", "enum": ["main", "dev"]}},
                     "required": ["branch"]}}
RELEASE = {"message": "Release details",
           "schema": {"type": "object", "required": ["version", "notes"],
                      "properties": {"version": {"type": "string", "description": "semver"},
                                     "notes": {"type": "string"}, "draft": {"type": "boolean"}}}}


def elicit(spec):
    import json

    return "elicit " + json.dumps(spec)


async def test_an_elicitation_with_choices_is_answered_by_a_typed_number(srv, host, tmp_path):
    srv.tool_command = elicit(BRANCH)
    runner = make_runner("acp-agent-runner", host)
    ctx = host.make_context("push it", steering=True, config=ask_config(srv, tmp_path / "ws"))
    out = await drive(runner, host, ctx, ["2"], when="asks:")
    assert rtype(terminal(out)) == "run.completed"
    (q,) = [m for m in messages(out) if "asks:" in m]
    assert "Which branch should I push?" in q and "1. main" in q and "2. dev" in q and "3. Decline" in q
    assert [(e["action"], e["content"]) for e in srv.events("elicitation")] == [("accept", {"branch": "dev"})]
    assert "Hello from the fake model." in "".join(messages(out)), "the turn goes on after the answer"


async def test_a_form_answer_missing_a_field_is_asked_again_then_accepted(srv, host, tmp_path):
    srv.tool_command = elicit(RELEASE)
    runner = make_runner("acp-agent-runner", host)
    ctx = host.make_context("release", steering=True, config=ask_config(srv, tmp_path / "ws"))
    out = await drive(runner, host, ctx, ["version: 1.2.0", "version: 1.2.0\nnotes: fixes\ndraft: yes"], when="asks:")
    asked = [m for m in messages(out) if "asks:" in m]
    assert len(asked) == 2 and "notes (text)" in asked[1] and "version: text (required) — semver" in asked[0]
    (e,) = srv.events("elicitation")
    assert e["action"] == "accept" and e["content"] == {"version": "1.2.0", "notes": "fixes", "draft": True}


async def test_an_elicitation_declined_by_a_button_in_a_new_run(srv, host, tmp_path):
    srv.tool_command = elicit(BRANCH)
    runner = make_runner("acp-agent-runner", host)
    cfg = ask_config(srv, tmp_path / "ws")
    await drive(runner, host, host.make_context("push it", interactions=True, config=cfg))
    (req,) = host.interactions
    labels = {a["label"]: a["id"] for a in req["actions"]}
    assert list(labels) == ["main", "dev", "Decline"]
    out = await drive(runner, host, host.make_context(
        "", interactions=True, config=cfg, interaction={"interaction_id": req["interaction_id"],
                                                        "action_id": labels["Decline"]}))
    assert rtype(terminal(out)) == "run.completed"
    assert [(e["action"], e["content"]) for e in srv.events("elicitation")] == [("decline", None)]
    assert not await _no_children()


async def test_elicitation_is_offered_only_when_someone_answers(srv, host, tmp_path):
    srv.tool_command = elicit(BRANCH)
    runner = make_runner("acp-agent-runner", host)
    out = await drive(runner, host, host.make_context("push it", config={**config(srv), "workspace": str(tmp_path)}))
    assert rtype(terminal(out)) == "run.completed"
    assert [e["offered"] for e in srv.events("elicitation")] == [False]
