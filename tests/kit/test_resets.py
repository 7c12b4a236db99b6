"""A LangBot reset ends the upstream conversation it left behind (issue 33 item 15,
runner_kit/resets.py and ``Adapter.end_conversation``).

LangBot 4.11.2's reset (``agent/runner/context_reset.py``) deletes the conversation's state and
seeds ``external.conversation_id`` with a new generation; the local host does the same
(``LocalHost.reset_conversation``). Tried as a group (per-person and shared sessions), over a long
conversation (many resets) and by a hostile member (nothing a message says ends anyone's
conversation; a failing or hanging end call never reaches the chat or holds the run)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from runner_kit import events as ev
from runner_kit import resets, sessions
from runner_kit import runner as kit_runner
from runner_kit.config import ConfigSchema
from runner_kit.errors import RunnerError
from runner_kit.runner import Adapter
from runners_cli.host import Identity
from tests.helpers import final_text, messages, rtype, run, scripted_runner, terminal

SCHEMA = ConfigSchema.from_items([
    {"name": "api-key", "type": "secret", "default": "sk-reset-secret-7"},
    {"name": "timeout", "type": "float", "default": 60},
    {"name": "user-id-source", "type": "string", "default": "actor"},
])
ALICE = Identity(actor_id="alice", actor_name="Alice")
BOB = Identity(actor_id="bob", actor_name="Bob")


class Upstream(Adapter):
    """A platform whose conversations are numbered; it answers with the conversation it used."""

    platform = "Upstream"
    session_key = "upstream.conversation_id"
    made: list[str] = []
    ended: list[tuple[str, str]] = []  # (conversation, the upstream user that ended it)
    fail_end: BaseException | None = None
    hang_end = False

    async def stream(self):
        cid = self.env.session.current
        if cid is None:
            cid = f"c{len(type(self).made) + 1}"
            type(self).made.append(cid)
        yield ev.SessionId(cid)
        yield ev.Text(f"in {cid}")

    async def end_conversation(self, upstream_id):
        if type(self).hang_end:
            await asyncio.sleep(3600)
        if type(self).fail_end is not None:
            raise type(self).fail_end
        type(self).ended.append((upstream_id, self.env.user))


def make(**attrs):
    return scripted_runner(Upstream, SCHEMA, made=[], ended=[], fail_end=None, hang_end=False, **attrs)


async def say(runner, host, who=ALICE, text="hello", source="actor"):
    results = await run(runner, host, text, identity=who, config={"user-id-source": source})
    assert rtype(terminal(results)) == "run.completed", terminal(results)
    return final_text(results)


async def settled(cls, n):
    for _ in range(200):
        if len(cls.ended) >= n:
            return
        await asyncio.sleep(0.005)


async def test_a_reset_ends_the_old_upstream_conversation_once_and_the_next_message_starts_a_new_one():
    runner, host, cls = make()
    assert await say(runner, host) == "in c1"
    assert await say(runner, host) == "in c1"
    assert cls.ended == [], "no reset, nothing ended"
    host.reset_conversation(ALICE)
    assert await say(runner, host) == "in c2", "the reset starts a new upstream conversation"
    await settled(cls, 1)
    assert cls.ended == [("c1", "user_alice")], "the old one is ended, as the same upstream user"
    assert await say(runner, host) == "in c2"
    await asyncio.sleep(0.02)
    assert cls.ended == [("c1", "user_alice")], "ended once"


async def test_without_an_end_api_a_reset_just_starts_a_new_conversation():
    class NoEnd(Adapter):
        platform, session_key, made = "NoEnd", "noend.id", []

        async def stream(self):
            cid = self.env.session.current or f"n{len(type(self).made) + 1}"
            if self.env.session.current is None:
                type(self).made.append(cid)
            yield ev.SessionId(cid)
            yield ev.Text(cid)

    runner, host, _ = scripted_runner(NoEnd, SCHEMA, made=[])
    assert await say(runner, host) == "n1"
    host.reset_conversation(ALICE)
    assert await say(runner, host) == "n2"


@pytest.mark.parametrize("source", ["actor", "conversation"])
async def test_in_a_group_each_session_the_reset_left_is_ended_as_its_own_user(source):
    """Per-person sessions: each member's old conversation is ended when that member next writes,
    as that member (nobody's conversation is ended as someone else). One shared session: ended
    once, by whoever writes first after the reset."""
    runner, host, cls = make()
    assert await say(runner, host, ALICE, source=source) == "in c1"
    first_bob = await say(runner, host, BOB, source=source)
    assert first_bob == ("in c2" if source == "actor" else "in c1")
    host.reset_conversation(ALICE)  # one member resets: the whole LangBot conversation is reset
    await say(runner, host, BOB, source=source)
    await settled(cls, 1)
    if source == "actor":
        assert cls.ended == [("c2", "user_bob")], "Bob's own old conversation, as Bob"
        await say(runner, host, ALICE, source=source)
        await settled(cls, 2)
        assert cls.ended == [("c2", "user_bob"), ("c1", "user_alice")]
    else:
        assert cls.ended == [("c1", "conversation_" + (ALICE.conversation_id or ""))]
        await say(runner, host, ALICE, source=source)
        await asyncio.sleep(0.02)
        assert len(cls.ended) == 1, "the shared conversation is ended once"


async def test_nothing_a_member_writes_ends_a_conversation():
    runner, host, cls = make()
    await say(runner, host, ALICE)
    for text in ("!reset", "/reset", "/new", "reset", "重置", '{"external.conversation_id": "x"}'):
        await say(runner, host, BOB, text=text)
        await say(runner, host, ALICE, text=text)
    await asyncio.sleep(0.02)
    assert cls.ended == [], "only the host's reset counts"


async def test_a_failing_or_hanging_end_call_never_reaches_the_chat_nor_holds_the_run(monkeypatch, caplog):
    monkeypatch.setattr(kit_runner, "CANCEL_GRACE", 0.05)
    runner, host, cls = make()
    await say(runner, host)
    host.reset_conversation(ALICE)
    cls.fail_end = RunnerError("upstream.auth", "401 for key sk-reset-secret-7")
    with caplog.at_level(logging.INFO):
        results = await run(runner, host, "hi", identity=ALICE, config={"user-id-source": "actor"})
        await asyncio.sleep(0.02)
    assert messages(results) == ["in c2"], "the answer alone: nothing about the end call"
    assert "sk-reset-secret-7" not in caplog.text
    assert "was not ended" in caplog.text
    await say(runner, host)
    host.reset_conversation(ALICE)
    cls.fail_end, cls.hang_end = None, True
    started = asyncio.get_running_loop().time()
    results = await run(runner, host, "hi", identity=ALICE, config={"user-id-source": "actor"})
    assert messages(results) == ["in c3"]
    assert asyncio.get_running_loop().time() - started < 2.0, "bounded by CANCEL_GRACE, not the hang"


async def test_many_resets_in_a_long_conversation_end_each_old_conversation_exactly_once():
    runner, host, cls = make()
    for i in range(1, 41):
        assert await say(runner, host) == f"in c{i}"
        assert await say(runner, host) == f"in c{i}"
        host.reset_conversation(ALICE)
    await say(runner, host)
    await settled(cls, 40)
    assert [c for c, _ in cls.ended] == [f"c{i}" for i in range(1, 41)]


async def test_the_memory_is_bounded_and_a_forgotten_session_is_simply_left(monkeypatch):
    monkeypatch.setattr(resets, "KEEP", 3)
    runner, host, cls = make()
    people = [Identity(actor_id=f"p{i}", actor_name=f"P{i}") for i in range(5)]
    for who in people:
        await say(runner, host, who)
    assert len(resets._SEEN) <= 3
    host.reset_conversation(people[0])
    await say(runner, host, people[0])  # the oldest was forgotten: nothing to end, a new conversation
    await say(runner, host, people[4])
    await settled(cls, 1)
    assert [c for c, _ in cls.ended] == ["c5"], "the remembered one is ended, the forgotten one left"


def test_what_a_session_wrote_before_a_reset_is_not_put_back_into_a_later_snapshot():
    """A run queued behind another of its session has what that run stored put into its snapshot
    (Slot.catch_up); after a reset in between, the old id must not come back."""
    slot = sessions.Slot("Upstream|bot|conv|t|upstream.conversation_id")
    resets.arrive(slot.key, sessions.conversation_of(slot.key), "gen-1", None)
    slot.wrote("upstream.conversation_id", "c1")

    class Ctx:
        class state:  # noqa: N801 - the shape of a RunnerContext's state
            conversation = {"external.conversation_id": "gen-2"}

    assert not slot.catch_up(Ctx)
    assert "upstream.conversation_id" not in Ctx.state.conversation
    Ctx.state.conversation = {"external.conversation_id": "gen-1"}
    slot.wrote("upstream.conversation_id", "c1")
    assert slot.catch_up(Ctx) and Ctx.state.conversation["upstream.conversation_id"] == "c1"
