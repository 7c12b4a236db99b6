"""claude-code-agent in ``permission-mode: ask``: claude runs with ``--permission-mode default
--permission-prompt-tool stdio`` and sends its permission prompts as ``can_use_tool`` control
requests (the scripted claude, tests/fakes/cli/fake_claude.py, asks for a command its mode would
prompt for); the chat answers — typed inside the run, or by a button through a new run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runner_kit import approvals as ap
from runner_kit.process import alive
from runners_cli.host import Identity
from tests.contract import cases as _cases  # noqa: F401 - loads the case modules in their order
from tests.contract.case_claude_code_agent import KEY, ClaudeModelAPI, config
from tests.helpers import agent_pids, make_runner, messages, rtype, terminal
from tests.helpers import run_answering as drive
from tests.plugins.test_claude_code_agent import no_children

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "claude-code-agent"))
from claude_code_agent import const  # noqa: E402
from claude_code_agent.adapter import ClaudeCodeAdapter, permission_question, prefix_rule  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_parked")  # tests/conftest.py: nothing left parked

PLUGIN = "claude-code-agent"
HELLO = "Hello from the fake model."


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


@pytest.fixture
def answers_file(tmp_path):
    return tmp_path / "answers.jsonl"  # the fake's log, named through the `env` setting



def answers(path: Path) -> list[dict]:
    """What the adapter answered claude's can_use_tool requests (the fake's log)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def ask_config(api, ws, **extra):
    return {**config(api), "workspace": str(ws), "permission-mode": "ask",
            "advanced-settings": True, "env": f"FAKE_CLAUDE_ANSWERS={ws.parent / 'answers.jsonl'}", **extra}


def questions(out):
    return [m for m in messages(out) if "wants to" in m]


def tool_done(out):
    return [r.data for r in out if rtype(r) == "tool.call.completed"]


def tool_results(api) -> list[dict]:
    """The tool_result blocks claude sent back to the model."""
    found = []
    for req in api.model_requests():
        for m in req.body.get("messages") or []:
            for b in m.get("content") or [] if isinstance(m.get("content"), list) else []:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    found.append(b)
    return found


# --- pieces -------------------------------------------------------------------------------------


def test_ask_runs_claude_in_default_mode_with_the_stdio_prompt_tool(api, host, tmp_path):
    assert const.PERMISSION_MODES["ask"] == "default"
    import asyncio
    from types import SimpleNamespace

    from runner_kit.errors import Redactor

    env = SimpleNamespace(config={**ask_config(api, tmp_path)}, redact=Redactor(), session=SimpleNamespace(current=None))
    a = ClaudeCodeAdapter(env)
    a._langbot_mcp = lambda: asyncio.sleep(0)  # type: ignore[method-assign]
    argv = asyncio.run(a.argv())
    i = argv.index("--permission-mode")
    assert argv[i + 1] == "default"
    assert argv[argv.index("--permission-prompt-tool") + 1] == "stdio"
    env.config["permission-mode"] = "workspace-write"
    assert "--permission-prompt-tool" not in asyncio.run(a.argv())


def test_questions_name_the_command_the_file_or_the_tool(tmp_path):
    # (these once expected the scopes "shell:git", "shell:rm", "edit" and "WebFetch": a first word,
    # every edit anywhere, every fetch. Now: this command, this file, this call.)
    q = permission_question("Bash", {"command": "git push origin main", "description": "Push"}, Path("/w"))
    assert (q.title, q.detail, q.scope) == ("run a command: git push origin main", "Push", "cmd:git push origin main")
    q = permission_question("Bash", {"command": "FOO=1 /usr/bin/rm -rf x"}, None)
    assert q.scope == "cmd:FOO=1 /usr/bin/rm -rf x" and q.session_label == "Allow this exact command for this session"
    q = permission_question("Write", {"file_path": str(tmp_path / "src" / "a.py"), "content": "x"}, tmp_path)
    assert (q.title, q.scope) == (f"edit {tmp_path / 'src' / 'a.py'}", "edit:src/a.py")
    assert q.session_label == "Allow editing src/a.py for this session"
    q = permission_question("Edit", {"file_path": "/etc/hosts"}, tmp_path)
    assert q.scope == "" and q.session_label is None, "outside the workspace: allowed once at most"
    assert permission_question("Write", {"file_path": "../x.py"}, tmp_path).scope == ""
    assert permission_question("NotebookEdit", {"notebook_path": "/w/n.ipynb"}, None).title == "edit /w/n.ipynb"
    q = permission_question("WebFetch", {"url": "https://example.com", "prompt": "summarise"}, None)
    assert q.title.startswith("use WebFetch: ") and "https://example.com" in q.title
    assert q.scope.startswith("tool:") and q.session_label == "Allow this exact request for this session"


def test_claudes_own_prefix_rule_is_offered_for_a_simple_command_only():
    # claude 2.1.197's suggestions for `touch made.txt` (seen on the real CLI): an exact rule
    real = [{"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "touch made.txt"}],
             "behavior": "allow", "destination": "localSettings"},
            {"type": "addDirectories", "directories": ["/w"], "destination": "session"},
            {"type": "setMode", "mode": "acceptEdits", "destination": "session"}]
    assert prefix_rule(real, "touch made.txt") == ""
    rule = [{"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "git status:*"}]}]
    assert prefix_rule(rule, "git status --short") == "cmd-prefix:git status"
    assert prefix_rule(rule, "git status; rm -f precious.txt") == ""
    assert prefix_rule(rule, "git push") == ""
    assert prefix_rule(None, "ls") == prefix_rule([{"type": "setMode"}], "ls") == ""
    q = permission_question("Bash", {"command": "git status --short"}, None, rule)
    assert (q.scope, q.request) == ("cmd-prefix:git status", "cmd:git status --short")
    assert q.session_label == "Allow commands starting with `git status` for this session"
    q = permission_question("Bash", {"command": "git status && rm -rf ~"}, None, rule)
    assert q.scope == q.request == "cmd:git status && rm -rf ~"


# --- typed answers inside the run -------------------------------------------------------------------


async def test_typed_allow_once_runs_the_command(api, host, tmp_path, answers_file):
    api.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("make a file", steering=True, config=ask_config(api, ws))
    out = await drive(runner, host, ctx, ["allow"])
    assert rtype(terminal(out)) == "run.completed", out[-1].data
    (q,) = questions(out)
    assert "run a command: touch made.txt" in q
    assert (ws / "made.txt").exists()
    (a,) = answers(answers_file)
    assert a["subtype"] == "success" and a["response"]["behavior"] == "allow"
    assert a["response"]["updatedInput"] == {"command": "touch made.txt"}
    assert "updatedPermissions" not in a["response"]
    assert not tool_done(out)[0]["error"]
    assert HELLO in "".join(messages(out))
    assert not await no_children()


async def test_deny_with_a_reason_reaches_claude(api, host, tmp_path, answers_file):
    api.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("make a file", steering=True, config=ask_config(api, ws))
    out = await drive(runner, host, ctx, ["deny: not in this repo"])
    assert rtype(terminal(out)) == "run.completed"
    assert not (ws / "made.txt").exists()
    (a,) = answers(answers_file)
    assert a["response"] == {"behavior": "deny", "message": "not in this repo"}
    assert tool_results(api)[-1]["content"] == "not in this repo", "the reason reaches the model"
    assert tool_done(out)[0]["error"]


async def test_allow_for_session_is_kept_by_the_kit_and_not_asked_again(api, host, tmp_path, answers_file):
    api.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner(PLUGIN, host)
    cfg = ask_config(api, ws)
    ctx = host.make_context("make a file", steering=True, config=cfg)
    out1 = await drive(runner, host, ctx, ["always"])
    assert rtype(terminal(out1)) == "run.completed" and len(questions(out1)) == 1
    assert "always (allow commands starting with `touch` for this session)" in questions(out1)[0]
    (a,) = answers(answers_file)
    assert a["response"]["behavior"] == "allow"
    # (this once expected claude's own rule back in updatedPermissions: claude would then have
    # allowed `touch x; rm -rf ~` by itself. The kit keeps "for this session" and answers claude.)
    assert "updatedPermissions" not in a["response"]
    assert not (ws / ".claude").exists()
    # the next run: a new claude process (its session rule is gone) asks again; the kit remembers
    (ws / "made.txt").unlink()
    out2 = await drive(runner, host, host.make_context("once more", steering=True, config=cfg), ["deny"])
    assert rtype(terminal(out2)) == "run.completed"
    assert not questions(out2), "the same kind of request is not asked again"
    assert (ws / "made.txt").exists()
    assert [x["response"]["behavior"] for x in answers(answers_file)] == ["allow", "allow"]


async def test_no_answer_within_the_approval_timeout_is_a_denial(api, host, tmp_path, answers_file):
    api.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("make a file", steering=True, config=ask_config(api, ws, **{"approval-timeout": 1.2}))
    out = await drive(runner, host, ctx)
    assert rtype(terminal(out)) == "run.completed"
    assert not (ws / "made.txt").exists()
    (a,) = answers(answers_file)
    assert a["response"]["behavior"] == "deny" and a["response"]["message"]
    assert any("No answer within" in m for m in messages(out)), messages(out)
    assert not await no_children()


async def test_someone_else_cannot_answer_and_the_question_stays_open(api, host, tmp_path, answers_file):
    api.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner(PLUGIN, host)
    other = Identity(actor_id="u-2", actor_name="Mallory")
    # whose session: the sender (the default is the conversation, where Mallory's message would be
    # kept for the shared session instead)
    ctx = host.make_context("make a file", steering=True, config=ask_config(api, ws, **{"user-id-source": "actor"}))
    # Mallory's "allow" is no answer to Alice's question: it is her own message, answered after
    # Alice's turn in Mallory's own session (whose agent then asks Mallory, who says no)
    out = await drive(runner, host, ctx, [("allow", other), "allow", ("deny", other)])
    assert rtype(terminal(out)) == "run.completed"
    assert (ws / "made.txt").exists()
    assert [x["response"]["behavior"] for x in answers(answers_file)] == ["allow", "deny"]
    assert any("Only" in m for m in messages(out))
    assert any(m == "(Mallory, your message is answered next, in your own session.)" for m in messages(out))


async def test_other_modes_do_not_ask(api, host, tmp_path, answers_file):
    api.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("make a file", steering=True,
                            config={**ask_config(api, ws), "permission-mode": "workspace-write"})
    out = await drive(runner, host, ctx)
    assert rtype(terminal(out)) == "run.completed"
    assert not questions(out) and not answers(answers_file)
    assert (ws / "made.txt").exists()


# --- "allow for this session" covers exactly what was approved (issue 29) ---------------------------


async def _always_then(api, host, ws, first, second, answer):
    """Run 1: claude runs ``first``, the chat answers "always"; run 2: claude runs ``second`` and
    the chat (if asked) answers ``answer``. The second run's results."""
    runner = make_runner(PLUGIN, host)
    cfg = ask_config(api, ws)
    api.tool_command = first
    out1 = await drive(runner, host, host.make_context("first", steering=True, config=cfg), ["always"])
    assert rtype(terminal(out1)) == "run.completed" and len(questions(out1)) == 1
    api.tool_command = second
    out2 = await drive(runner, host, host.make_context("second", steering=True, config=cfg), [answer])
    assert rtype(terminal(out2)) == "run.completed"
    return out2


async def test_always_on_git_status_does_not_allow_a_command_chained_to_it(api, host, tmp_path, answers_file):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "precious.txt").write_text("keep me")
    out = await _always_then(api, host, ws, "git status", "git status; rm -f precious.txt; touch PWNED.txt", "deny")
    (q,) = questions(out)
    assert "git status; rm -f precious.txt; touch PWNED.txt" in q, "asked again, naming the whole command"
    assert "always (allow this exact command for this session)" in q
    assert (ws / "precious.txt").read_text() == "keep me" and not (ws / "PWNED.txt").exists()
    assert [x["response"]["behavior"] for x in answers(answers_file)] == ["allow", "deny"]
    assert "updatedPermissions" not in answers(answers_file)[0]["response"]
    assert not await no_children()


async def test_always_on_cd_and_ls_does_not_allow_another_cd_chain(api, host, tmp_path, answers_file):
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    out = await _always_then(api, host, ws, "cd src && ls", "cd .. && touch PWNED.txt", "deny")
    (q,) = questions(out)
    assert "cd .. && touch PWNED.txt" in q
    assert not (tmp_path / "PWNED.txt").exists() and not (ws / "PWNED.txt").exists()
    assert [x["response"]["behavior"] for x in answers(answers_file)] == ["allow", "deny"]


async def test_claudes_prefix_rule_still_covers_a_simple_command(api, host, tmp_path, answers_file):
    ws = tmp_path / "ws"
    ws.mkdir()
    out = await _always_then(api, host, ws, "touch made.txt", "touch other.txt", "deny")
    assert not questions(out), "claude's rule Bash(touch:*) was what 'always' allowed"
    assert (ws / "other.txt").exists()
    assert [x["response"]["behavior"] for x in answers(answers_file)] == ["allow", "allow"]


# --- buttons: the answer comes as a new run ---------------------------------------------------------


async def test_button_answer_through_a_new_run_finishes_the_turn_and_stops_claude(api, host, tmp_path,
                                                                                  answers_file):
    api.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    runner = make_runner(PLUGIN, host)
    cfg = ask_config(api, ws)
    out1 = await drive(runner, host, host.make_context("make a file", interactions=True, config=cfg))
    assert rtype(terminal(out1)) == "run.completed"
    (req,) = host.interactions
    assert "touch made.txt" in req["description"] and [a["id"] for a in req["actions"]] == ["allow", "always", "deny"]
    assert req["actions"][1]["label"] == "Allow commands starting with `touch` for this session"
    (pid,) = agent_pids("fake_claude.py")  # the host's pid (the agent's own is its sandbox's)
    assert alive(pid), "claude waits, parked, for the click"
    assert not (ws / "made.txt").exists()
    out2 = await drive(runner, host, host.make_context(
        "", interactions=True, config=cfg,
        interaction={"interaction_id": req["interaction_id"], "action_id": "allow"}))
    assert rtype(terminal(out2)) == "run.completed"
    assert (ws / "made.txt").exists()
    assert [x["response"]["behavior"] for x in answers(answers_file)] == ["allow"]
    assert tool_done(out2) and not tool_done(out2)[0]["error"], "the rest streams in run 2"
    assert HELLO in "".join(messages(out2))
    assert not alive(pid), "claude is stopped at the end of run 2"
    assert not await no_children()


# --- AskUserQuestion -------------------------------------------------------------------------------


async def test_ask_user_question_is_asked_with_options_and_answered_in_updated_input():
    from types import SimpleNamespace

    from runner_kit.errors import Redactor

    asked = []

    async def ask(q):
        asked.append(q)
        return ap.Decision(allow=True, answer="Postgres" if "database" in q.title else "free text", by="T")

    env = SimpleNamespace(config={"permission-mode": "ask"}, redact=Redactor(), ask=ask)
    a = ClaudeCodeAdapter(env)
    tool_input = {"questions": [
        {"question": "Which database?", "header": "DB", "multiSelect": False,
         "options": [{"label": "Postgres", "description": "SQL"}, {"label": "Mongo", "description": "docs"}]},
        {"question": "Anything else?", "header": "More", "multiSelect": False, "options": []}]}
    resp = await a._questions(tool_input)
    assert resp == {"behavior": "allow", "updatedInput": {
        **tool_input, "answers": {"Which database?": "Postgres", "Anything else?": "free text"}}}
    assert [q.kind for q in asked] == ["question", "question"]
    assert [o.label for o in asked[0].options] == ["Postgres", "Mongo"] and asked[0].detail == "DB"

    async def timeout(q):
        return ap.Decision(allow=False, timed_out=True)

    env.ask = timeout
    resp = await a._questions(tool_input)
    assert resp["behavior"] == "deny" and resp["message"]
