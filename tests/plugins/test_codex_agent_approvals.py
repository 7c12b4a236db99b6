"""codex-agent in ``permission-mode: ask``: Codex runs with sandbox ``workspace-write`` and approval
policy ``untrusted``, so the scripted ``codex app-server`` (tests/fakes/cli/fake_codex.py) asks
``item/commandExecution/requestApproval`` for a write command (``toolw``); the chat answers — typed
inside the run, or by a button through a new run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from runner_kit import approvals as ap
from runner_kit.process import alive
from runners_cli.host import Identity
from tests.helpers import agent_pids, make_runner, messages, rtype, terminal
from tests.helpers import run_answering as drive
from tests.plugins.test_codex_agent import env  # noqa: F401 - a fixture (host and runner: tests/plugins/conftest.py)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "codex-agent"))
from codex_agent.policy import Permissions, question  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_parked")  # tests/conftest.py: nothing left parked

PLUGIN = "codex-agent"
DONE = "The tool ran; done."



def ask_config(env, **extra):  # noqa: F811
    return env.config("toolw", **{"permission-mode": "ask", **extra})


def questions(out):
    return [m for m in messages(out) if "wants to" in m]


def tool_done(out):
    return [r.data for r in out if rtype(r) == "tool.call.completed"]


def made(env):  # noqa: F811
    return [w for w in env.workspaces() if (w / "created-by-tool.txt").exists()]


# --- pieces -------------------------------------------------------------------------------------


def test_ask_presets_workspace_write_and_untrusted(tmp_path):
    p = Permissions.from_config({"permission-mode": "ask"}, tmp_path)
    assert p.thread_params() == {"sandbox": "workspace-write", "approvalPolicy": "untrusted"}
    assert p.asks
    assert p.decision("item/commandExecution/requestApproval", True, True) == {"decision": "acceptForSession"}
    assert p.decision("item/fileChange/requestApproval", True) == {"decision": "accept"}
    assert p.decision("item/fileChange/requestApproval", False) == {"decision": "decline"}
    assert p.decision("execCommandApproval", True, True) == {"decision": "approved_for_session"}
    assert p.decision("applyPatchApproval", False) == {"decision": "denied"}


def test_questions_name_the_command_or_the_files(tmp_path):
    # (these once expected the scopes "shell:git", "shell:rm" and "edit": a first word and every
    # edit anywhere. Now: this command, these files.)
    q = question("item/commandExecution/requestApproval",
                 {"command": "/bin/bash -lc 'git push origin main'", "cwd": "/w/x"}, None, tmp_path)
    assert (q.title, q.detail, q.scope) == ("run a command: git push origin main", "in /w/x", "cmd:git push origin main")
    q = question("execCommandApproval", {"command": ["/usr/bin/rm", "-rf", "x"], "cwd": "/w"}, None, tmp_path)
    assert (q.title, q.detail, q.scope) == ("run a command: /usr/bin/rm -rf x", "in /w", "cmd:/usr/bin/rm -rf x")
    # the wrapper is taken off once; what is inside is judged as it is
    q = question("item/commandExecution/requestApproval",
                 {"command": "/bin/bash -lc 'git status; rm -f x'", "proposedExecpolicyAmendment": ["git", "status"]},
                 None, tmp_path)
    assert q.scope == q.request == "cmd:git status; rm -f x"
    assert q.session_label == "Allow this exact command for this session"
    q = question("item/commandExecution/requestApproval",
                 {"command": "/bin/bash -lc 'git status --short'", "proposedExecpolicyAmendment": ["git", "status"]},
                 None, tmp_path)
    assert (q.scope, q.request) == ("cmd-prefix:git status", "cmd:git status --short")
    changes = [{"path": str(tmp_path / "a.py"), "kind": {"type": "update", "move_path": None}},
               {"path": str(tmp_path / "old.py"), "kind": {"type": "delete"}},
               {"path": str(tmp_path / "c.py"), "kind": {"type": "update", "move_path": str(tmp_path / "d.py")}}]
    q = question("item/fileChange/requestApproval", {"itemId": "i"}, changes, tmp_path)
    assert q.title == f"change files: {tmp_path / 'a.py'}, {tmp_path / 'old.py'}, {tmp_path / 'c.py'}"
    assert q.scope == ("edit:a.py", "delete:old.py", 'move:["c.py", "d.py"]')
    q = question("item/fileChange/requestApproval", {"itemId": "i"}, [*changes, {"path": "/etc/hosts"}], tmp_path)
    assert q.scope == () and q.session_label is None, "a file outside the workspace: allowed once at most"
    q = question("item/fileChange/requestApproval", {"itemId": "i", "grantRoot": str(tmp_path)}, changes, tmp_path)
    assert q.session_label is None, "a whole directory is more than these files"
    q = question("applyPatchApproval", {"fileChanges": {str(tmp_path / "c.txt"): {"delete": {"content": ""}}}},
                 None, tmp_path)
    assert q.title == f"change files: {tmp_path / 'c.txt'}" and q.scope == ("delete:c.txt",)


# --- typed answers inside the run -------------------------------------------------------------------


async def test_typed_allow_once_runs_the_command(env, host):  # noqa: F811
    runner = make_runner(PLUGIN, host)
    out = await drive(runner, host, host.make_context("make a file", steering=True, config=ask_config(env)), ["allow"])
    assert rtype(terminal(out)) == "run.completed", out[-1].data
    (q,) = questions(out)
    assert "run a command: touch created-by-tool.txt" in q
    (start,) = env.requests("thread/start")
    assert (start["sandbox"], start["approvalPolicy"]) == ("workspace-write", "untrusted")
    (a,) = env.events("approval")
    assert a["answer"] == {"decision": "accept"}
    assert made(env)
    assert not tool_done(out)[0]["error"]
    assert DONE in "".join(messages(out))


async def test_deny_declines_and_the_turn_goes_on(env, host):  # noqa: F811
    runner = make_runner(PLUGIN, host)
    # (this once answered only the first question. The reason now comes to Codex as its next turn,
    # on which the scripted model runs the tool again: tests/plugins/test_codex_agent_deny_reason.py.)
    out = await drive(runner, host, host.make_context("make a file", steering=True, config=ask_config(env)),
                      ["deny: not in this repo", "deny"])
    assert rtype(terminal(out)) == "run.completed"
    a = env.events("approval")[0]
    assert a["answer"] == {"decision": "decline"}  # Codex's decline has no field for the reason
    assert not made(env)
    assert tool_done(out)[0]["error"] == "declined"
    assert DONE in "".join(messages(out))


async def test_allow_for_session_is_kept_by_the_kit_and_not_asked_again(env, host):  # noqa: F811
    runner = make_runner(PLUGIN, host)
    cfg = ask_config(env)
    out1 = await drive(runner, host, host.make_context("make a file", steering=True, config=cfg), ["always"])
    assert rtype(terminal(out1)) == "run.completed" and len(questions(out1)) == 1
    # (this once expected acceptForSession: Codex's own session approval would answer later
    # requests without the chat. The kit keeps "for this session" and answers Codex.)
    assert env.events("approval")[0]["answer"] == {"decision": "accept"}
    for w in made(env):
        (w / "created-by-tool.txt").unlink()
    out2 = await drive(runner, host, host.make_context("once more", steering=True, config=cfg), ["deny"])
    assert rtype(terminal(out2)) == "run.completed"
    assert not questions(out2), "the same kind of request is not asked again"
    assert [e["answer"]["decision"] for e in env.events("approval")] == ["accept", "accept"]
    assert made(env)


async def test_no_answer_within_the_approval_timeout_is_a_denial(env, host):  # noqa: F811
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("make a file", steering=True, config=ask_config(env, **{"approval-timeout": 1.2}))
    out = await drive(runner, host, ctx)
    assert rtype(terminal(out)) == "run.completed"
    (a,) = env.events("approval")
    assert a["answer"] == {"decision": "decline"}
    assert not made(env)
    assert any("No answer within" in m for m in messages(out)), messages(out)


async def test_someone_else_cannot_answer_and_the_question_stays_open(env, host):  # noqa: F811
    runner = make_runner(PLUGIN, host)
    other = Identity(actor_id="u-2", actor_name="Mallory")
    ctx = host.make_context("make a file", steering=True, config=ask_config(env))
    # one shared session (user-id-source conversation, the default): Mallory's "allow" is no answer
    # to Tester's question; it is her message, the session's next turn (where the agent asks her)
    out = await drive(runner, host, ctx, [("allow", other), "allow", ("deny", other)])
    assert rtype(terminal(out)) == "run.completed"
    decisions = [e["answer"]["decision"] for e in env.events("approval")]
    assert decisions[0] == "accept" and len(decisions) == 2 and decisions[1] != "accept"
    assert any("Only" in m for m in messages(out))
    assert any("your message comes after it" in m for m in messages(out))
    assert made(env)


async def test_other_modes_do_not_ask(env, host):  # noqa: F811
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("make a file", steering=True, config=env.config("toolw"))
    out = await drive(runner, host, ctx)
    assert rtype(terminal(out)) == "run.completed"
    assert not questions(out) and not env.events("approval")
    (start,) = env.requests("thread/start")
    assert start["approvalPolicy"] == "never"


# --- "allow for this session" covers exactly what was approved (issue 29) ---------------------------


async def _always_then(env, host, ws, first, second, answer):  # noqa: F811
    """Run 1: Codex runs ``first``, the chat answers "always"; run 2: Codex runs ``second`` and the
    chat (if asked) answers ``answer``. The second run's results."""
    runner = make_runner(PLUGIN, host)
    cfg = {**env.config(None, **{"permission-mode": "ask"}), "workspace": str(ws)}
    env.api.tool_command = first
    out1 = await drive(runner, host, host.make_context("first", steering=True, config=cfg), ["always"])
    assert rtype(terminal(out1)) == "run.completed" and len(questions(out1)) == 1, out1[-1].data
    env.api.tool_command = second
    out2 = await drive(runner, host, host.make_context("second", steering=True, config=cfg), [answer])
    assert rtype(terminal(out2)) == "run.completed"
    return out2


async def test_always_on_git_status_does_not_allow_a_command_chained_to_it(env, host, tmp_path):  # noqa: F811
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "precious.txt").write_text("keep me")
    out = await _always_then(env, host, ws, "git status", "git status; rm -f precious.txt; touch PWNED.txt", "deny")
    (q,) = questions(out)
    assert "git status; rm -f precious.txt; touch PWNED.txt" in q, "asked again, naming the whole command"
    assert "always (allow this exact command for this session)" in q
    assert (ws / "precious.txt").read_text() == "keep me" and not (ws / "PWNED.txt").exists()
    assert [e["answer"]["decision"] for e in env.events("approval")] == ["accept", "decline"]


async def test_always_on_cd_and_ls_does_not_allow_another_cd_chain(env, host, tmp_path):  # noqa: F811
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    out = await _always_then(env, host, ws, "cd src && ls", "cd .. && touch PWNED.txt", "deny")
    (q,) = questions(out)
    assert "cd .. && touch PWNED.txt" in q
    assert not (tmp_path / "PWNED.txt").exists()
    assert [e["answer"]["decision"] for e in env.events("approval")] == ["accept", "decline"]


async def test_codexs_proposed_prefix_still_covers_a_simple_command(env, host, tmp_path):  # noqa: F811
    ws = tmp_path / "ws"
    ws.mkdir()
    out = await _always_then(env, host, ws, "touch made.txt", "touch made.txt --no-create", "deny")
    assert not questions(out), "Codex proposed the rule `touch made.txt`, which 'always' allowed"
    assert (ws / "made.txt").exists(), "the commands run in this workspace"
    assert [e["answer"]["decision"] for e in env.events("approval")] == ["accept", "accept"]


# --- buttons: the answer comes as a new run ---------------------------------------------------------


async def test_button_answer_through_a_new_run_finishes_the_turn_and_stops_codex(env, host):  # noqa: F811
    runner = make_runner(PLUGIN, host)
    cfg = ask_config(env)
    out1 = await drive(runner, host, host.make_context("make a file", interactions=True, config=cfg))
    assert rtype(terminal(out1)) == "run.completed"
    (req,) = host.interactions
    assert "touch created-by-tool.txt" in req["description"]
    assert [a["id"] for a in req["actions"]] == ["allow", "always", "deny"]
    assert req["actions"][1]["label"] == "Allow commands starting with `touch created-by-tool.txt` for this session"
    (pid,) = agent_pids("fake_codex.py")  # the host's pid (the agent's own is its sandbox's)
    assert alive(pid), "codex waits, parked, for the click"
    assert not made(env)
    out2 = await drive(runner, host, host.make_context(
        "", interactions=True, config=cfg,
        interaction={"interaction_id": req["interaction_id"], "action_id": "allow"}))
    assert rtype(terminal(out2)) == "run.completed", out2[-1].data
    assert made(env)
    assert [e["answer"]["decision"] for e in env.events("approval")] == ["accept"]
    assert tool_done(out2) and not tool_done(out2)[0]["error"], "the rest streams in run 2"
    assert DONE in "".join(messages(out2))
    assert not alive(pid), "codex is stopped at the end of run 2"


# --- request_user_input --------------------------------------------------------------------------


async def test_request_user_input_is_asked_per_question_and_answered_by_id(tmp_path):
    from types import SimpleNamespace

    from codex_agent.adapter import CodexAdapter

    asked: list[ap.Question] = []

    async def ask(q):
        asked.append(q)
        return ap.Decision(allow=True, answer="Postgres" if q.options else "soon")

    a = CodexAdapter(SimpleNamespace(config={}, ask=ask))
    a._perms = Permissions.from_config({"permission-mode": "ask"}, tmp_path)
    params = {"threadId": "t", "turnId": "u", "itemId": "i", "questions": [
        {"id": "db", "header": "Database", "question": "Which database?", "isOther": False, "isSecret": False,
         "options": [{"label": "Postgres", "description": "the usual"}, {"label": "SQLite", "description": "small"}]},
        {"id": "when", "header": "When", "question": "When to ship?", "options": None}]}
    got = await a._answer("item/tool/requestUserInput", params)
    assert got == {"answers": {"db": {"answers": ["Postgres"]}, "when": {"answers": ["soon"]}}}
    assert [q.kind for q in asked] == ["question", "question"]
    assert [o.value for o in asked[0].options] == ["Postgres", "SQLite"] and not asked[0].free_text
    assert asked[1].free_text and asked[0].title == "Which database?"
