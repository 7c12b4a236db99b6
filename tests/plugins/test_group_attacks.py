"""Issue 29's boundary as a group chat meets it: two members (Alice and Bob) of one LangBot
conversation, a coding agent, each ``user-id-source`` mode (attack.md, brief "1. A group").

What each mode promises: ``actor`` and ``hashed`` give each member their own agent session, their own
workspace and HOME, and their own "allow for this session" memory; ``conversation`` gives the group one
of each (the config form and README say so). So: Bob's tools never see Alice's workspace in a
per-person mode; only Alice (or a listed approver) answers Alice's question, by button or by word;
what is allowed "for this session" is remembered for the agent session that asked, whoever clicked,
and never for someone else's; and a member's answer never moves another member's upstream session.

(Routing of follow-ups, a parked question blocking the group, and the typed-word table are issue 31's.)
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner_kit import agent_mcp
from runner_kit import approvals as ap
from runners_cli.host import Identity
from tests.fakes.model_api import FakeModelAPI
from tests.helpers import make_runner, messages, rtype, terminal
from tests.helpers import run_answering as drive
from tests.plugins.test_hostile_members import (  # noqa: F401 - nothing_left_running, owner_sandbox: autouse fixtures
    KEY_PREFIX,
    PLUGINS,
    SECTION,
    agent_config,
    new_host,
    nothing_left_running,
    one_turn,
    owner_sandbox,
    tool_output,
)

pytestmark = pytest.mark.usefixtures("no_parked")  # tests/conftest.py: nothing left parked

ROOT = Path(__file__).resolve().parents[2]
CLAUDE = "claude-code-agent"
GROUP = "group-1"
ALICE = Identity(conversation_id=GROUP, actor_id="alice", actor_name="Alice")
BOB = Identity(conversation_id=GROUP, actor_id="bob", actor_name="Bob")


@pytest.fixture
def key() -> str:
    return KEY_PREFIX + secrets.token_hex(16)


@pytest.fixture
def api(key):
    with FakeModelAPI(api_keys={key}) as srv:
        yield srv


def questions(out: list[Any]) -> list[str]:
    return [m for m in messages(out) if "wants to" in m]


def completed(out: list[Any]) -> list[Any]:
    assert rtype(terminal(out)) == "run.completed", out[-1].data
    return out


# --- workspaces: what each mode says -------------------------------------------------------------


@pytest.mark.parametrize(("plugin", "source"), [*((p, "actor") for p in PLUGINS), (CLAUDE, "hashed")])
async def test_per_person_modes_bob_cannot_read_alices_workspace_in_the_same_group(plugin, source, api, key):
    host = new_host(plugin)
    cfg = agent_config(plugin, api, key, **{"user-id-source": source})
    note = "note-" + secrets.token_hex(8)
    api.tool_command = f"echo {note} > notes.txt && pwd"
    a = await one_turn(plugin, host, cfg, "remember this", identity=ALICE)
    a_ws = Path(tool_output(a).strip().splitlines()[-1])
    assert (a_ws / "notes.txt").read_text().strip() == note

    api.tool_command = (f"pwd; echo {SECTION}; cat notes.txt ../*/notes.txt {a_ws}/notes.txt 2>&1; "
                        f"ls -la {a_ws} 2>&1; echo {SECTION}; ls -la .. ../.. 2>&1; "
                        "find / -name notes.txt 2>/dev/null")
    b = await one_turn(plugin, host, cfg, "what did alice write?", identity=BOB)
    where, read, listed = tool_output(b).split(SECTION)
    assert Path(where.strip().splitlines()[-1]) != a_ws, "Bob's agent works in Alice's workspace"
    assert note not in read + listed, "Bob's tool read Alice's workspace"
    assert "No such file" in read
    assert a_ws.name not in listed, "Bob's tool can list Alice's workspace"


async def test_conversation_mode_shares_one_workspace_and_the_form_says_so(api, key):
    host = new_host(CLAUDE)
    cfg = agent_config(CLAUDE, api, key, **{"user-id-source": "conversation"})
    note = "note-" + secrets.token_hex(8)
    api.tool_command = f"echo {note} > notes.txt"
    await one_turn(CLAUDE, host, cfg, "remember this", identity=ALICE)
    api.tool_command = "cat notes.txt"
    b = await one_turn(CLAUDE, host, cfg, "what did alice write?", identity=BOB)
    assert note in tool_output(b), "one shared session and workspace for the group, as the mode says"
    # ... and the owner is told, for every coding agent, where the mode is chosen
    for plugin in PLUGINS:
        form = yaml.safe_load((ROOT / plugin / "components" / "runner" / "default.yaml").read_text())
        [item] = [i for i in form["spec"]["config"] if i["name"] == "user-id-source"]
        said = item["description"]["en_US"].lower()
        assert "workspace" in said or "working directory" in said, (plugin, said)
        assert "whole group" in said, (plugin, said)


# --- "allow for this session": per agent session --------------------------------------------------


# each member's own agent session (Claude Code's default, like ACP's and Codex's, is the conversation's)
ACTOR = {"user-id-source": "actor"}


def ask_cfg(srv, api_key, **extra) -> dict[str, Any]:
    return agent_config(CLAUDE, srv, api_key, **{"permission-mode": "ask", **extra})


async def typed(runner, host, cfg, who: Identity, answers: list[Any], text: str = "make a file") -> list[Any]:
    return completed(await drive(runner, host, host.make_context(text, steering=True, config=cfg, identity=who),
                                 answers))


async def test_actor_mode_alices_always_does_not_cover_bobs_command(api, key):
    host = new_host(CLAUDE)
    runner = make_runner(CLAUDE, host)
    cfg = ask_cfg(api, key, **ACTOR)
    api.tool_command = "touch made.txt"
    a = await typed(runner, host, cfg, ALICE, ["always"])
    assert len(questions(a)) == 1
    b = await typed(runner, host, cfg, BOB, [("deny", BOB)])
    (q,) = questions(b)
    assert "touch made.txt" in q, "Bob's own session asks: Alice's 'always' is not his"
    # Alice's own session still remembers
    again = await typed(runner, host, cfg, ALICE, ["deny"])
    assert not questions(again), "Alice is asked again for what she allowed for her session"


async def test_actor_mode_bobs_always_does_not_make_alice_forget_hers(api, key):
    """(Broke: one memory per conversation, holding one agent session; Bob's "always" replaced
    Alice's. Now kept beside each session's id.)"""
    host = new_host(CLAUDE)
    runner = make_runner(CLAUDE, host)
    cfg = ask_cfg(api, key, **ACTOR)
    api.tool_command = "touch made.txt"
    await typed(runner, host, cfg, ALICE, ["always"])
    b = await typed(runner, host, cfg, BOB, [("always", BOB)])
    assert len(questions(b)) == 1
    again = await typed(runner, host, cfg, ALICE, ["deny"])
    assert not questions(again), "Bob's 'always' wiped what Alice allowed for her own session"


async def test_conversation_mode_one_always_covers_the_shared_session(api, key):
    """One shared agent session: what Alice allowed for it is allowed for it, whoever speaks next
    (the question says "for this session"; the mode says the group has one)."""
    host = new_host(CLAUDE)
    runner = make_runner(CLAUDE, host)
    cfg = ask_cfg(api, key, **{"user-id-source": "conversation"})
    api.tool_command = "touch made.txt"
    await typed(runner, host, cfg, ALICE, ["always"])
    b = await typed(runner, host, cfg, BOB, [("deny", BOB)])
    assert not questions(b)


# --- a question parked for a button ---------------------------------------------------------------


@pytest.fixture
def handovers(monkeypatch) -> list[tuple[str, str]]:
    """Every hand-over of a parked agent's LangBot MCP bridge: (from run, to run)."""
    seen: list[tuple[str, str]] = []
    original = agent_mcp.hand_over

    def recording(old, new):
        seen.append((str(old.ctx.run_id), str(new.ctx.run_id)))
        return original(old, new)

    monkeypatch.setattr(agent_mcp, "hand_over", recording)
    return seen


async def park_alices_question(runner, host, cfg) -> dict[str, Any]:
    out = completed(await drive(runner, host, host.make_context("make a file", interactions=True, config=cfg,
                                                                identity=ALICE)))
    assert not questions(out)  # asked with buttons
    (req,) = host.interactions
    assert "touch made.txt" in req["description"]
    return req


def click(host, cfg, who: Identity, req: dict[str, Any], action: str):
    return host.make_context("", interactions=True, config=cfg, identity=who,
                             interaction={"interaction_id": req["interaction_id"], "action_id": action})


async def test_bob_cannot_approve_or_widen_alices_parked_question(api, key, handovers):
    host = new_host(CLAUDE)
    runner = make_runner(CLAUDE, host)
    cfg = ask_cfg(api, key, **ACTOR)
    api.tool_command = "touch made.txt"
    req = await park_alices_question(runner, host, cfg)

    # Bob clicks "Allow for this session", then "Allow once": refused, the question stays Alice's
    for ctx in (click(host, cfg, BOB, req, "always"), click(host, cfg, BOB, req, "allow")):
        out = completed(await drive(runner, host, ctx))
        said = " ".join(messages(out))
        assert "Alice" in said, said
        assert not [r for r in out if rtype(r).startswith("tool.call")], "Alice's agent went on in Bob's run"
    assert not handovers, "Alice's agent (its LangBot MCP bridge) was handed to Bob's run"
    (alices,) = [p for p in ap.PARKED.values() if p.question.id == req["interaction_id"]]
    # then types it, and says something friendly: in his own session (user-id-source actor), his own
    # messages, never an answer to Alice's question nor a turn of her agent
    for text in ("always", "no problem", "不错"):
        out = completed(await drive(runner, host, host.make_context(text, interactions=True, config=cfg,
                                                                     identity=BOB)))
        assert "Only Alice" not in " ".join(messages(out)), "Bob is not blocked by Alice's question"
        assert ap.PARKED.get(alices.key) is alices and not alices.future.done(), "Alice's question is untouched"
    handovers.clear()  # Bob's own agent, handed between Bob's own runs

    # the question is still Alice's, and still only what she is asked
    out = completed(await drive(runner, host, click(host, cfg, ALICE, req, "allow")))
    assert tool_output(out) is not None and said_hello(out)
    assert len(handovers) == 1


def said_hello(out: list[Any]) -> bool:
    return "Hello from the fake model." in "".join(messages(out))


async def test_an_approvers_always_is_remembered_for_the_session_that_asked(api, key):
    """(Broke: an approver's click resumed Alice's agent under the approver's run, so "always" was
    remembered for Bob's session and claude's session id at the end of the turn was stored as Bob's:
    Bob's next message got "could not be continued" and lost his own conversation.)"""
    host = new_host(CLAUDE)
    runner = make_runner(CLAUDE, host)
    cfg = ask_cfg(api, key, approvers="bob", **ACTOR)
    # Bob has his own conversation with the agent first
    api.tool_command = None
    secret_word = "bobword-" + secrets.token_hex(4)
    completed(await drive(runner, host, host.make_context(f"remember {secret_word}", interactions=True, config=cfg,
                                                          identity=BOB)))
    api.tool_command = "touch made.txt"
    req = await park_alices_question(runner, host, cfg)
    out = completed(await drive(runner, host, click(host, cfg, BOB, req, "always")))
    assert said_hello(out), "the approver's click resumed Alice's turn"

    # Bob's next message continues Bob's own conversation
    api.tool_command = None
    mark = len(api.model_requests())
    b = completed(await drive(runner, host, host.make_context("and now?", interactions=True, config=cfg,
                                                              identity=BOB)))
    assert "could not be continued" not in " ".join(messages(b)), "Bob's conversation was replaced"
    sent = " ".join(str(r.body) for r in api.model_requests()[mark:])
    assert secret_word in sent, "Bob's next turn does not remember Bob's first"

    # what Bob allowed "for this session" is Alice's session's: her repeat is not asked again
    api.tool_command = "touch made.txt"
    host.interactions.clear()
    a = completed(await drive(runner, host, host.make_context("again", interactions=True, config=cfg,
                                                              identity=ALICE)))
    assert not host.interactions, "Alice's session forgot what was allowed for it"
    assert said_hello(a)
    # ... and not Bob's: his own agent session asks him
    completed(await drive(runner, host, host.make_context("mine too", interactions=True, config=cfg, identity=BOB)))
    assert len(host.interactions) == 1, "what Bob allowed for Alice's session was allowed for his own"
