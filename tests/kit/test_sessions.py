"""Group chats through the kit's turn loop (runner_kit.sessions): whose session a message goes to,
who waits for whom, and that nothing one member sends is dropped, answered in someone else's session
or answers someone else's question. Two and three members, in per-person and shared identity modes."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from runner_kit import approvals as ap
from runner_kit import events as ev
from runner_kit import routing as kit_routing
from runner_kit import sessions
from runner_kit.config import ConfigSchema
from runner_kit.runner import INTERRUPTED_NOTE, Adapter
from runners_cli.host import Identity
from tests.helpers import collect, messages, rtype, scripted_runner, terminal

pytestmark = pytest.mark.usefixtures("no_parked")

SCHEMA = ConfigSchema.from_items(
    [
        {"name": "timeout", "type": "float", "default": 60},
        {"name": "approval-timeout", "type": "float", "default": 600},
        {"name": "approvers", "type": "array[string]", "default": []},
        {"name": "user-id-source", "type": "string", "default": "actor"},
        {"name": "follow-up-mode", "type": "select", "default": "next-turn",
         "options": [{"name": "next-turn"}, {"name": "interrupt"}]},
    ]
)

ALICE = Identity(actor_id="alice", actor_name="Alice")
BOB = Identity(actor_id="bob", actor_name="Bob")
CAROL = Identity(actor_id="carol", actor_name="Carol")
SHARED = {"user-id-source": "conversation"}


ADAPTERS = itertools.count()


class Agent(Adapter):
    """A scripted coding agent: every turn is logged with the session it ran in. A turn whose text
    contains "ask" asks the chat for permission first; "slow" waits ``pause`` seconds."""

    platform = "Agent"
    session_key = "agent.session"
    multi_turn = True
    log: list = []
    pause = 0.15
    started: asyncio.Event | None = None

    def __init__(self, env):
        super().__init__(env)
        self.sid = None
        self.serial = next(ADAPTERS)  # which adapter: never reused, as id() is once one is freed

    async def turn(self, inp, index):
        stored = self.env.session.current
        self.sid = stored or f"sess-{self.env.user}-{len(type(self).log)}"
        type(self).log.append({"user": self.env.user, "text": inp.text, "index": index, "adapter": self.serial,
                               "stored": stored})
        yield ev.SessionId(self.sid)
        if "slow" in inp.text:
            if type(self).started is not None:
                type(self).started.set()
            await asyncio.sleep(type(self).pause)
        if "ask" in inp.text:
            d = await self.env.ask(ap.Question(title="run a command: rm -rf build", scope="cmd:rm -rf build"))
            yield ev.Text(f"[{d.word}{': ' + d.reason if d.reason else ''}] ")
        yield ev.Text(f"{self.env.user} got: {inp.text}")


def make(**attrs):
    return scripted_runner(Agent, SCHEMA, log=[], **attrs)


def on_first_delta(host, ctx, *follow_ups):
    done = []

    def during(r):
        if rtype(r) == "message.delta" and not done:
            done.append(True)
            for text, ident in follow_ups:
                host.queue_steering(ctx, text, ident)

    return during


def question_id(results):
    """The interaction id of the question a run put to the chat with buttons."""
    (req,) = [r.data["payload"] for r in results
              if rtype(r) == "action.requested" and r.data.get("action") == "interaction.requested"]
    return req["interaction_id"]


def turns_of(cls, user):
    return [t["text"] for t in cls.log if t["user"] == user]


# --- a member writing while another member's run works (steering claims it for that run) -----------


async def test_per_person_a_follow_up_from_someone_else_is_answered_in_their_own_session():
    runner, host, cls = make()
    ctx = host.make_context("slow: refactor the parser", steering=True, identity=ALICE)
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("delete the tests folder", BOB)))
    assert rtype(terminal(out)) == "run.completed"
    assert turns_of(cls, "user_alice") == ["slow: refactor the parser"], "Alice's session never hears Bob"
    assert turns_of(cls, "user_bob") == ["delete the tests folder"]
    bob_turn = next(t for t in cls.log if t["user"] == "user_bob")
    assert bob_turn["index"] == 0 and bob_turn["adapter"] != cls.log[0]["adapter"], "Bob gets his own agent"
    said = messages(out)
    assert said[0] == "user_alice got: slow: refactor the parser"
    assert said[1:] == ["(Bob, your message is answered next, in your own session.)",
                        "user_bob got: delete the tests folder"]
    # Bob's session id is stored under Bob's key, Alice's under hers
    state = host.conversation_state(ctx) if hasattr(host, "conversation_state") else None
    assert state is None or len([k for k in state if k.startswith("agent.session.u")]) == 2


async def test_per_person_three_members_overlapping_each_answered_in_order_in_their_own_session():
    runner, host, cls = make()
    ctx = host.make_context("slow: first", steering=True, identity=ALICE)
    out = await collect(runner, host, ctx, on_first_delta(
        host, ctx, ("bob one", BOB), ("alice two", ALICE), ("carol one", CAROL), ("bob two", BOB)))
    assert rtype(terminal(out)) == "run.completed"
    assert turns_of(cls, "user_alice") == ["slow: first", "alice two"]
    assert turns_of(cls, "user_bob") == ["bob one\n\nbob two"]
    assert turns_of(cls, "user_carol") == ["carol one"]
    said = messages(out)
    assert len(said) == 6 and not any("not answered" in s for s in said)


async def test_shared_session_follow_ups_of_several_members_keep_their_names():
    runner, host, cls = make()
    ctx = host.make_context("slow: first", steering=True, identity=ALICE, config=SHARED)
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("add tests", BOB), ("and docs", CAROL)))
    assert rtype(terminal(out)) == "run.completed"
    assert [t["text"] for t in cls.log] == ["slow: first", "Bob: add tests\n\nCarol: and docs"]
    assert len({t["adapter"] for t in cls.log}) == 1, "one shared session"


async def test_shared_session_own_follow_up_alone_has_no_name():
    runner, host, cls = make()
    ctx = host.make_context("slow: first", steering=True, identity=ALICE, config=SHARED)
    await collect(runner, host, ctx, on_first_delta(host, ctx, ("and this", ALICE)))
    assert [t["text"] for t in cls.log] == ["slow: first", "and this"]


# --- two runs of one session at once (a host that does not steer, two quick messages) --------------


async def test_two_runs_of_one_session_go_one_after_another_and_the_second_continues_the_first():
    runner, host, cls = make(started=asyncio.Event())
    first = host.make_context("slow one", identity=ALICE)
    second = host.make_context("two", identity=ALICE)  # its state snapshot is taken before the first stored anything
    a = asyncio.create_task(collect(runner, host, first))
    await cls.started.wait()
    out_b = await collect(runner, host, second)
    out_a = await a
    assert [t["text"] for t in cls.log] == ["slow one", "two"], "never two turns of one session at once"
    assert cls.log[1]["stored"] == cls.log[0]["stored"] or cls.log[1]["stored"] is not None
    assert cls.log[1]["stored"] == "sess-user_alice-0", "the second run continues the session the first one started"
    assert messages(out_a) == ["user_alice got: slow one"]
    assert messages(out_b) == ["user_alice got: two"]


async def test_a_run_that_waits_long_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(kit_routing, "BUSY_NOTICE_AFTER", 0.02)
    runner, host, cls = make(started=asyncio.Event())
    first = host.make_context("slow one", identity=ALICE, config=SHARED)
    second = host.make_context("two", identity=BOB, config=SHARED)
    a = asyncio.create_task(collect(runner, host, first))
    await cls.started.wait()
    out_b = await collect(runner, host, second)
    await a
    said = messages(out_b)
    assert said[0] == kit_routing.BUSY_NOTE and said[1].endswith("got: two")
    assert [t["stored"] for t in cls.log] == [None, "sess-conversation_conv-1-0"]


async def test_different_people_in_per_person_mode_never_wait_for_each_other():
    runner, host, cls = make(started=asyncio.Event(), pause=0.5)
    first = host.make_context("slow one", identity=ALICE)
    a = asyncio.create_task(collect(runner, host, first))
    await cls.started.wait()
    out_b = await asyncio.wait_for(collect(runner, host, host.make_context("hi", identity=BOB)), 0.4)
    assert messages(out_b) == ["user_bob got: hi"]
    assert not a.done()
    await a


# --- a question open in one session ---------------------------------------------------------------


async def test_per_person_an_open_question_never_blocks_another_member():
    runner, host, cls = make()
    asked = await collect(runner, host, host.make_context("ask: clean", identity=ALICE, interactions=True))
    qid = question_id(asked)
    out = await collect(runner, host, host.make_context("what is this bot doing", identity=BOB))
    assert messages(out) == ["user_bob got: what is this bot doing"], "Bob's own session answers at once"
    assert len(ap.PARKED) == 1, "Alice's question is still open"
    done = await collect(runner, host, host.make_context(
        "", identity=ALICE, interaction={"interaction_id": qid, "action_id": "allow"}))
    assert any("[allow] user_alice got: ask: clean" in m for m in messages(done))


async def test_shared_session_another_members_message_waits_for_the_question_and_is_not_lost():
    runner, host, cls = make()
    await collect(runner, host, host.make_context("ask: clean", identity=ALICE, config=SHARED))
    assert ap.PARKED
    bob = await collect(runner, host, host.make_context("yes", identity=BOB, config=SHARED))
    said = messages(bob)
    assert len(said) == 1 and "Only Alice" in said[0] and "kept" in said[0]
    carol = await collect(runner, host, host.make_context("lol what is this", identity=CAROL, config=SHARED))
    assert "waiting for Alice" in messages(carol)[0] and "kept" in messages(carol)[0]
    assert len(ap.PARKED) == 1, "nobody but Alice answered"
    alice = await collect(runner, host, host.make_context("deny: use git clean", identity=ALICE, config=SHARED))
    said = messages(alice)
    assert "[deny: use git clean]" in said[0]
    assert cls.log[-1]["text"] == "Bob: yes\n\nCarol: lol what is this", "the kept messages come next, with names"
    assert said[-1].endswith("got: Bob: yes\n\nCarol: lol what is this")


async def test_an_approver_answers_a_question_of_another_persons_session_by_typing():
    runner, host, cls = make()
    cfg = {"approvers": ["bob"]}
    await collect(runner, host, host.make_context("ask: clean", identity=ALICE, config=cfg))
    out = await collect(runner, host, host.make_context("allow", identity=BOB, config=cfg))
    assert any("[allow] user_alice got: ask: clean" in m for m in messages(out)), "the agent is Alice's"
    assert turns_of(cls, "user_bob") == [], "Bob's own session was not started by his answer"
    assert not ap.PARKED


async def test_a_replayed_click_on_an_answered_question_says_it_was_answered():
    runner, host, cls = make()
    asked = await collect(runner, host, host.make_context("ask: clean", identity=ALICE, interactions=True))
    click = {"interaction_id": question_id(asked), "action_id": "allow"}
    await collect(runner, host, host.make_context("", identity=ALICE, interaction=click))
    again = await collect(runner, host, host.make_context("", identity=ALICE, interaction=click))
    assert messages(again) == ["(That question was already answered by Alice.)"]


# --- smaller things -------------------------------------------------------------------------------


class Silent(Adapter):
    platform = "Silent"
    session_key = "silent.session"
    multi_turn = True
    log: list = []

    def __init__(self, env):
        super().__init__(env)
        self.stop = asyncio.Event()

    async def turn(self, inp, index):
        type(self).log.append(inp.text)
        if index == 0:
            yield ev.Progress("thinking")
            await asyncio.wait_for(self.stop.wait(), 5)
            return
        yield ev.Text(f"got {inp.text}")

    async def interrupt(self):
        self.stop.set()


async def test_an_interrupted_turn_that_wrote_nothing_says_it_stopped_for_the_next_message(monkeypatch):
    monkeypatch.setattr("runner_kit.runner.POLL_INTERVAL", 0.02)
    runner, host, cls = scripted_runner(Silent, SCHEMA, log=[])
    ctx = host.make_context("long task", steering=True, config={"follow-up-mode": "interrupt"})
    task = asyncio.create_task(collect(runner, host, ctx))
    await asyncio.sleep(0.05)
    host.queue_steering(ctx, "stop, do this instead")
    out = await task
    assert messages(out) == [INTERRUPTED_NOTE, "got stop, do this instead"]


async def test_a_reason_the_protocol_cannot_carry_reaches_the_agent_as_the_next_turn():
    class Teller(Agent):
        async def turn(self, inp, index):
            type(self).log.append({"user": self.env.user, "text": inp.text, "index": index})
            if index == 0:
                self.env.tell_agent("Alice denied “rm -rf build”: use git clean")
            yield ev.Text(f"ok {index}")

    runner, host, cls = scripted_runner(Teller, SCHEMA, log=[])
    out = await collect(runner, host, host.make_context("clean", steering=True))
    assert [t["text"] for t in cls.log] == ["clean", "Alice denied “rm -rf build”: use git clean"]
    assert messages(out) == ["ok 0", "ok 1"]


async def test_slots_are_forgotten_when_no_run_uses_them():
    runner, host, cls = make()
    for who in (ALICE, BOB, ALICE):
        await collect(runner, host, host.make_context("hi", identity=who))
    assert not sessions.SLOTS


async def test_a_flood_while_a_question_is_open_is_kept_only_up_to_a_bound():
    runner, host, cls = make()
    await collect(runner, host, host.make_context("ask: clean", identity=ALICE, config=SHARED))
    replies = []
    for i in range(sessions.HELD_MAX + 3):
        out = await collect(runner, host, host.make_context(f"spam {i}", identity=BOB, config=SHARED))
        replies.append(messages(out)[0])
    assert all("kept" in r for r in replies[:sessions.HELD_MAX])
    assert all("please send this again after" in r for r in replies[sessions.HELD_MAX:])
    await collect(runner, host, host.make_context("allow", identity=ALICE, config=SHARED))
    assert cls.log[-1]["text"].count("Bob: spam") == sessions.HELD_MAX
    assert not sessions.SLOTS and not ap.PARKED


async def test_per_person_a_follow_up_for_a_session_that_waits_on_its_own_question_is_kept_for_it():
    runner, host, cls = make()
    await collect(runner, host, host.make_context("ask: clean", identity=BOB))  # Bob's agent waits on Bob
    ctx = host.make_context("slow: alice's job", steering=True, identity=ALICE)
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("and the docs too", BOB)))
    said = messages(out)
    assert said[0] == "user_alice got: slow: alice's job"
    assert "Bob's own session is waiting" in said[1] and "kept" in said[1]
    assert turns_of(cls, "user_alice") == ["slow: alice's job"]
    done = await collect(runner, host, host.make_context("allow", identity=BOB))
    assert turns_of(cls, "user_bob") == ["ask: clean", "Bob: and the docs too"]
    assert messages(done)[-1] == "user_bob got: Bob: and the docs too"


async def test_a_stale_click_while_the_session_waits_on_a_newer_question_answers_at_once():
    runner, host, cls = make()
    first = await collect(runner, host, host.make_context("ask: clean", identity=ALICE, interactions=True))
    click = {"interaction_id": question_id(first), "action_id": "allow"}
    await collect(runner, host, host.make_context("", identity=ALICE, interaction=click))
    await collect(runner, host, host.make_context("ask: again", identity=ALICE, interactions=True))
    (newer,) = ap.PARKED.values()
    again = await asyncio.wait_for(
        collect(runner, host, host.make_context("", identity=ALICE, interaction=click)), 0.5)
    assert messages(again) == ["(That question was already answered by Alice.)"]
    assert list(ap.PARKED.values()) == [newer] and not newer.future.done()
    unknown = {"interaction_id": "ask-0000000000000000", "action_id": "allow"}
    out = await asyncio.wait_for(collect(runner, host, host.make_context("", identity=BOB, interaction=unknown)), 0.5)
    assert "no longer waiting" in messages(out)[0]
    assert list(ap.PARKED.values()) == [newer]


async def test_what_the_agent_did_after_a_question_timed_out_reaches_the_sessions_next_run(monkeypatch):
    """No run is there when a parked question times out (LangBot 4.11.2 lets a plugin post only in a
    run): the agent takes the denial and goes on; the session's next run shows what it said, after
    one line, and counts that turn's usage."""
    monkeypatch.setattr(ap, "PARK_GRACE", 0.2)

    class Reacting(Agent):
        async def turn(self, inp, index):
            async for e in super().turn(inp, index):
                yield e
            yield ev.Usage(7, 11)

    runner, host, cls = scripted_runner(Reacting, SCHEMA, log=[])
    cfg = {"approval-timeout": 0.05}
    await collect(runner, host, host.make_context("ask: clean", identity=ALICE, config=cfg))
    await asyncio.sleep(0.4)  # timed out, the agent took the denial, and was stopped
    assert not ap.PARKED
    out = await collect(runner, host, host.make_context("hello again", identity=ALICE, config=cfg))
    said = messages(out)
    assert said[0].startswith("(“run a command: rm -rf build” is no longer waiting and was denied: nobody "
                              "answered in time.)\n(What Agent did then:)")
    assert "[deny: nobody answered in time] user_alice got: ask: clean" in said[0]
    assert said[-1].endswith("user_alice got: hello again")
    end = terminal(out)
    assert (end.usage.prompt_tokens, end.usage.completion_tokens) == (14, 22), "both turns' usage"
    again = await collect(runner, host, host.make_context("and again", identity=ALICE, config=cfg))
    assert not any("did then" in m for m in messages(again)), "said once"
