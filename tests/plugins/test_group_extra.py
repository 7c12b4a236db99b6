"""More of attack.md brief "1. A group" against "allow for this session" and attachments, with the
scripted Claude Code CLI (it suggests ``Bash(<program>:*)`` for every command it asks about, as the
real one does for a simple one), in each ``user-id-source`` mode.

- Alice allows commands starting with ``git`` (or ``tar``) for the session; Bob, in the same group,
  gets the agent to run the same program with an option that runs another command (``git grep
  -O<cmd>``, an abbreviated ``tar --to-com=<cmd>``, ``git rebase -x <cmd>``, ``sed '1e <cmd>'``).
  Where the group shares one session (conversation; the coding agents refuse the legacy modes) it
  must still be asked, as "this exact command"; in the per-person modes Bob's own session is asked even for
  Alice's exact command.
- A command with a direction override or zero-width character: the question shows it written out
  (``<U+202E>``), and the button does not offer the words it seems to say.
- Alice and Bob each send ``report.txt`` at the same time: neither file replaces the other, and in
  the per-person modes each lands in its sender's own workspace.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import pytest

from runners_cli.host import Identity
from tests.fakes.model_api import FakeModelAPI
from tests.helpers import make_runner, messages, rtype, run, terminal
from tests.helpers import run_answering as drive
from tests.plugins.test_hostile_members import (  # noqa: F401 - nothing_left_running, owner_sandbox: autouse fixtures
    KEY_PREFIX,
    agent_config,
    new_host,
    nothing_left_running,
    owner_sandbox,
)

pytestmark = pytest.mark.usefixtures("no_parked")

CLAUDE = "claude-code-agent"
GROUP = "group-x"
ALICE = Identity(conversation_id=GROUP, actor_id="alice", actor_name="Alice", launcher_type="group",
                 launcher_id=GROUP)
BOB = Identity(conversation_id=GROUP, actor_id="bob", actor_name="Bob", launcher_type="group", launcher_id=GROUP)
SHARED = ("conversation",)  # the coding agents refuse legacy-session and legacy-bot (config.invalid)
PER_PERSON = ("actor", "hashed")
MODES = (*PER_PERSON, *SHARED)


@pytest.fixture
def data(owner_sandbox):  # noqa: F811 - the data root (workspaces, HOMEs) of owner_sandbox
    return owner_sandbox


@pytest.fixture
def key() -> str:
    return KEY_PREFIX + secrets.token_hex(16)


@pytest.fixture
def api(key):
    with FakeModelAPI(api_keys={key}) as srv:
        yield srv


def cfg_for(api: FakeModelAPI, key: str, mode: str) -> dict[str, Any]:
    return agent_config(CLAUDE, api, key, **{"permission-mode": "ask", "user-id-source": mode})


def questions(out: list[Any]) -> list[str]:
    return [m for m in messages(out) if "wants to" in m]


async def say(runner, host, cfg, who: Identity, answers: list[Any], text: str = "do it") -> list[Any]:
    out = await drive(runner, host, host.make_context(text, steering=True, config=cfg, identity=who), answers)
    assert rtype(terminal(out)) == "run.completed", out[-1].data
    return out


# (what Alice allows for the session, the rule it offers, what Bob gets run next; "{p}" is a file
# the command would create)
SMUGGLED = [
    ("git init -q .", "git", "git grep --no-index -O'touch {p}' -e . -- ."),
    ("git init -q .", "git", "git rebase -x 'touch {p}' --root"),
    ("tar --version", "tar", "tar -cf - --to-com='touch {p}' ."),
    ("tar --version", "tar", "tar -cf - -I'touch {p}' ."),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("allowed", "rule", "smuggled"), SMUGGLED, ids=[s[2].split("'")[0] for s in SMUGGLED])
async def test_alices_rule_never_runs_bobs_command_hidden_in_an_option(mode, allowed, rule, smuggled, api, key, data):
    host = new_host(CLAUDE)
    runner = make_runner(CLAUDE, host)
    cfg = cfg_for(api, key, mode)
    api.tool_command = allowed
    a = await say(runner, host, cfg, ALICE, ["always"])
    (qa,) = questions(a)
    assert f"allow commands starting with `{rule}` for this session" in qa, qa

    # the rule works where the session is shared (so the next check is not vacuous) ...
    api.tool_command = allowed
    again = await say(runner, host, cfg, BOB, [("deny", BOB)])
    if mode in SHARED:
        assert not questions(again), "the shared session forgot what Alice allowed for it"
    else:
        assert len(questions(again)) == 1, "Alice's 'always' covered Bob's own session"

    # ... and never covers a command an option of that program runs
    mark = "pwned-" + secrets.token_hex(4)
    api.tool_command = smuggled.format(p=mark)
    b = await say(runner, host, cfg, BOB, [("deny", BOB)])
    qb = questions(b)
    assert qb, f"Bob's {smuggled!r} ran under Alice's rule for `{rule}` without a question"
    assert "allow this exact command for this session" in qb[0], qb[0]
    assert not list(data.rglob(mark)), "the smuggled command ran"


async def test_sed_is_never_given_a_prefix_rule_in_a_shared_session(api, key, data):
    """GNU sed runs ``1e <cmd>`` and ``s/…/…/e``: "commands starting with `sed`" would run anything."""
    host = new_host(CLAUDE)
    runner = make_runner(CLAUDE, host)
    cfg = cfg_for(api, key, "conversation")
    api.tool_command = "sed -n 1p /etc/hostname"
    (qa,) = questions(await say(runner, host, cfg, ALICE, ["always"]))
    assert "starting with" not in qa and "allow this exact command for this session" in qa, qa
    mark = "pwned-" + secrets.token_hex(4)
    api.tool_command = f"sed -n '1e touch {mark}' /etc/hostname"
    assert questions(await say(runner, host, cfg, BOB, [("deny", BOB)])), "Bob's sed ran without a question"
    assert not list(data.rglob(mark))


@pytest.mark.parametrize("mode", ("actor", "conversation"))
@pytest.mark.parametrize("hidden", ["\u202e", "\u200b", "\u00a0", "\u2066"])
async def test_a_question_shows_every_character_that_does_not_read_as_itself(mode, hidden, api, key):
    host = new_host(CLAUDE)
    runner = make_runner(CLAUDE, host)
    cfg = cfg_for(api, key, mode)
    api.tool_command = "git init -q ."
    await say(runner, host, cfg, ALICE, ["always"])
    api.tool_command = f"git log --format=%s{hidden} -1"
    b = await say(runner, host, cfg, BOB, [("deny", BOB)])
    (q,) = questions(b)
    assert hidden not in q, f"the chat shows {hidden!r} as it is: the command reads as another"
    assert f"<U+{ord(hidden):04X}>" in q, q
    assert "allow this exact command for this session" in q, q

    # with buttons: the description and the "for this session" button
    host.interactions.clear()
    out = await drive(runner, host, host.make_context("again", interactions=True, config=cfg, identity=BOB))
    assert rtype(terminal(out)) == "run.completed"
    (req,) = host.interactions
    assert hidden not in req["description"] and f"<U+{ord(hidden):04X}>" in req["description"], req["description"]
    labels = [a["label"] for a in req["actions"]]
    assert "Allow this exact command for this session" in labels, labels
    click = host.make_context("", interactions=True, config=cfg, identity=BOB,
                              interaction={"interaction_id": req["interaction_id"], "action_id": "deny"})
    assert rtype(terminal(await drive(runner, host, click))) == "run.completed"


async def test_a_file_path_with_a_direction_override_is_written_out_on_the_button():
    from runner_kit import approvals as ap
    from runner_kit import command_scope as cs

    label = cs.label("edit:notes\u202etxt.exe")
    assert "\u202e" not in label and "<U+202E>" in label, label
    q = ap.Question(title="edit notes\u202etxt.exe", scope="edit:notes\u202etxt.exe")
    assert "\u202e" not in ap.question_text("Claude Code", q)


# --- attachments -----------------------------------------------------------------------------------


def attached(name: str, body: bytes) -> list[dict[str, Any]]:
    import base64

    return [{"type": "text", "text": "read my report"},
            {"type": "file_base64", "file_base64": base64.b64encode(body).decode(), "file_name": name}]


@pytest.mark.parametrize("mode", MODES)
async def test_two_members_send_the_same_file_name_at_once(mode, api, key, data):
    host = new_host(CLAUDE)
    cfg = agent_config(CLAUDE, api, key, **{"user-id-source": mode})
    api.tool_command = None
    bodies = {"alice": b"alice-" + secrets.token_hex(8).encode(), "bob": b"bob-" + secrets.token_hex(8).encode()}

    async def send(who: Identity) -> list[Any]:
        return await run(make_runner(CLAUDE, host), host, "read my report", config=cfg, identity=who,
                         contents=attached("report.txt", bodies[who.actor_id]))

    outs = await asyncio.gather(send(ALICE), send(BOB))
    for out in outs:
        assert rtype(terminal(out)) == "run.completed", out[-1].data
    files = {p.read_bytes(): p for p in data.rglob("*report.txt")}
    assert set(files) == set(bodies.values()), f"a member's attachment was lost or replaced: {list(files.values())}"
    alice_dir, bob_dir = files[bodies["alice"]].parent, files[bodies["bob"]].parent
    if mode in PER_PERSON:
        assert alice_dir.parent != bob_dir.parent, "both members' files landed in one workspace"
    else:
        assert alice_dir == bob_dir, "the group's shared workspace holds both"
    # each member's turn names their own file to the agent
    sent = " ".join(str(r.body) for r in api.model_requests())
    for body in bodies.values():
        assert f"./langbot-files/{files[body].name}" in sent, "the agent was not told where a member's file is"
