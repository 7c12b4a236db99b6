"""A long-lived group conversation through the kit's session routing (runner_kit.sessions): hundreds
of messages, many members, questions that expire, runs that wait behind long runs, many runs in one
plugin process. Nothing may grow per message or per run and never shrink, nothing one member sends
may be lost or run in someone else's session, and a run that waits keeps the run's own deadline."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from runner_kit import approvals as ap
from runner_kit import routing as kit_routing
from runner_kit import sessions
from runner_kit.errors import RunnerError
from runner_kit.results import ResultBuilder
from runners_cli.host import Identity
from tests.helpers import collect, failure, messages, rtype, terminal
from tests.kit.test_sessions import ALICE, BOB, CAROL, SHARED, Agent, make, on_first_delta, turns_of

pytestmark = pytest.mark.usefixtures("no_parked", "fresh_sessions")


@pytest.fixture
def fresh_sessions(monkeypatch):
    """Every test starts with no session in the plugin process, and leaves none behind."""
    monkeypatch.setattr(sessions, "SLOTS", {})
    if hasattr(sessions, "MISSED"):
        monkeypatch.setattr(sessions, "MISSED", {})


def members(n):
    return [Identity(actor_id=f"m{i}", actor_name=f"M{i}") for i in range(n)]


# --- a member whose own agent waits on a question writes twice while another member's run works ----


async def test_a_second_follow_up_for_a_session_waiting_on_its_question_never_runs_in_another_session(monkeypatch):
    """Bob's agent waits on Bob's question; while Alice's run works Bob writes twice. The first is
    kept for Bob's session; the second, pulled after the run turned to Bob's (waiting) session, was
    run as a turn of Alice's agent (whose session the run had just closed)."""
    runner, host, cls = make()
    await collect(runner, host, host.make_context("ask: clean", identity=BOB))
    ctx = host.make_context("slow: alice's job", steering=True, identity=ALICE)
    keep = sessions.Slot.keep
    sent = []

    def keep_and_write_again(self, held):  # Bob writes again right as his first message is kept
        if not sent:
            sent.append(True)
            host.queue_steering(ctx, "bob two", BOB)
        return keep(self, held)

    monkeypatch.setattr(sessions.Slot, "keep", keep_and_write_again)
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("bob one", BOB)))
    monkeypatch.setattr(sessions.Slot, "keep", keep)
    assert rtype(terminal(out)) == "run.completed"
    assert turns_of(cls, "user_alice") == ["slow: alice's job"], "Bob's words never reach Alice's agent"
    assert not any("bob two" in m for m in messages(out)), "nothing of Bob's is answered by Alice's agent"
    assert all("not answered" not in m for m in messages(out))
    done = await collect(runner, host, host.make_context("allow", identity=BOB))
    last = turns_of(cls, "user_bob")[-1]
    assert "bob one" in last and "bob two" in last, "both are given to Bob's agent once his question is settled"
    assert messages(done)[-1].startswith("user_bob got:")


# --- a run that waits for a session behind a long run, until its deadline ---------------------------


async def test_a_follow_up_whose_session_stays_busy_past_the_deadline_is_named_as_unanswered(monkeypatch):
    """Bob's own run is long; Bob's follow-up claimed by Alice's run waits for Bob's session and the
    run's deadline comes first: it was neither answered nor named (the items were already taken out
    of the run's follow-ups when the wait failed)."""
    monkeypatch.setattr(kit_routing, "BUSY_NOTICE_AFTER", 0.01)
    runner, host, cls = make(started=asyncio.Event(), pause=0.4)
    bob_run = asyncio.create_task(collect(runner, host, host.make_context("slow: bob's long job", identity=BOB)))
    await cls.started.wait()
    cls.started = None
    ctx = host.make_context("hi", steering=True, identity=ALICE, config={"timeout": 0.35})
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("and the changelog", BOB)))
    said = messages(out)
    assert said[0] == "user_alice got: hi"
    assert "not answered" in said[-1] and "and the changelog" in said[-1], said
    assert turns_of(cls, "user_bob") == ["slow: bob's long job"]
    await bob_run
    assert not sessions.SLOTS


async def test_a_run_waiting_for_its_own_session_behind_a_long_run_fails_cleanly_at_its_deadline(monkeypatch):
    monkeypatch.setattr(kit_routing, "BUSY_NOTICE_AFTER", 0.01)
    runner, host, cls = make(started=asyncio.Event(), pause=0.4)
    first = asyncio.create_task(collect(runner, host, host.make_context("slow one", identity=ALICE)))
    await cls.started.wait()
    out = await collect(runner, host, host.make_context("two", identity=ALICE, config={"timeout": 0.35}))
    assert messages(out)[0] == kit_routing.BUSY_NOTE
    code, retryable, _ = failure(out)
    assert code == "upstream.timeout" and retryable
    await first
    assert [t["text"] for t in cls.log] == ["slow one"], "the late run started nothing"
    assert not sessions.SLOTS


class _Env:
    """What :func:`runner_kit.routing.take` uses of a run: its budget and its state snapshot."""

    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds
        self.ctx = None

    def budget(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise RunnerError("upstream.timeout", "the run's time limit was reached")
        return left

    def refresh(self):
        pass


async def _drain(gen):
    return [r async for r in gen]


async def test_a_run_that_comes_just_as_the_session_is_freed_still_waits_only_until_its_deadline(monkeypatch):
    """The session's lock was released and the run waiting for it woken, but it has not run yet: the
    lock reads as free, so a run coming in that moment took it "at once" with no limit, and waited
    behind the woken run however long that ran, without a word, past its own deadline."""
    monkeypatch.setattr(kit_routing, "BUSY_NOTICE_AFTER", 0.01)
    slot = sessions.Slot("k")
    await slot.lock.acquire()  # a long run holds the session
    waiting = asyncio.create_task(_drain(kit_routing.take(slot, _Env(5), ResultBuilder("b"), kit_routing.Hold())))
    await asyncio.sleep(0.01)
    slot.lock.release()  # it ends; the waiting run is woken but has not run yet
    late = _drain(kit_routing.take(slot, _Env(0.1), ResultBuilder("c"), kit_routing.Hold()))
    with pytest.raises(RunnerError) as failed:
        await asyncio.wait_for(late, 1.0)  # the woken run holds the session from here on
    assert failed.value.code == "upstream.timeout"
    await waiting
    assert slot.lock.locked()
    slot.lock.release()


# --- hundreds of follow-ups from many members in one run --------------------------------------------


async def test_many_members_writing_during_one_run_are_each_answered_in_their_own_session():
    runner, host, cls = make()
    people = members(120)
    ctx = host.make_context("first", steering=True, identity=ALICE)
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, *[(f"hello {i}", p) for i, p in enumerate(people)]))
    assert rtype(terminal(out)) == "run.completed"
    for i in range(len(people)):
        assert turns_of(cls, f"user_m{i}") == [f"hello {i}"]
    assert len({t["adapter"] for t in cls.log}) == len(people) + 1, "one agent session each"
    assert not any("not answered" in m for m in messages(out))
    assert not sessions.SLOTS, "the sessions the run answered in are forgotten when it ends"


async def test_the_members_a_run_had_no_time_left_for_are_named_and_each_session_keeps_the_runs_deadline():
    """Each other member's session got a new RunEnv whose limit was what was left of the run (so the
    failure said "the run's time limit of 0 s", and each later session kept a smaller margin before
    the host's deadline); the run's deadline and limit are one for all its sessions."""
    class Timed(Agent):
        async def turn(self, inp, index):
            type(self).seen.append((self.env.deadline, self.env.limit))
            async for e in super().turn(inp, index):
                yield e

    from tests.helpers import scripted_runner
    from tests.kit.test_sessions import SCHEMA

    runner, host, cls = scripted_runner(Timed, SCHEMA, log=[], seen=[], pause=0.05)
    people = members(40)
    ctx = host.make_context("first", steering=True, identity=ALICE, config={"timeout": 0.6})
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, *[(f"slow {i}", p) for i, p in enumerate(people)]))
    answered = {t["user"] for t in cls.log} - {"user_alice"}
    assert 0 < len(answered) < len(people)
    last = messages(out)[-1]
    left = len(people) - len(answered)  # those not reached, and the one cut off if the time ran out mid-turn
    assert any(f"({n} follow-up messages not answered" in last for n in (left, left + 1)), last
    assert "time limit of 0 s" not in last, last
    assert len({d for d, _ in cls.seen}) == 1 and len({lim for _, lim in cls.seen}) == 1, cls.seen
    assert not sessions.SLOTS


# --- a question that expires while messages are kept for its session --------------------------------


async def _expire_with_kept(runner, host, cfg, kept):
    await collect(runner, host, host.make_context("ask: clean", identity=ALICE, config=cfg))
    for text in kept:
        out = await collect(runner, host, host.make_context(text, identity=BOB, config=cfg))
        assert "kept" in messages(out)[0]
    await _expired()


async def _expired():
    for _ in range(100):  # the question expires, the agent gets its grace, and is stopped
        await asyncio.sleep(0.01)
        if not ap.PARKED and not ap._CLOSING and not any(s.lock.locked() for s in sessions.SLOTS.values()):
            return
    raise AssertionError("the question did not expire")


async def test_a_late_answer_to_an_expired_question_does_not_lose_the_messages_kept_for_after_it(monkeypatch):
    """Alice's question expired while Bob's messages were kept "for right after it"; Alice's late
    "yes" ended the run with "no longer waiting", and Bob's kept messages were taken and dropped."""
    monkeypatch.setattr(ap, "PARK_GRACE", 0.0)
    runner, host, cls = make()
    cfg = {**SHARED, "approval-timeout": 0.05}
    await _expire_with_kept(runner, host, cfg, ["also update the docs", "and bump the version"])
    out = await collect(runner, host, host.make_context("yes", identity=ALICE, config=cfg))
    said = messages(out)
    assert "no longer waiting" in said[0]
    assert cls.log[-1]["text"] == "Bob: also update the docs\n\nBob: and bump the version", \
        "the kept messages go to the agent; the late 'yes' itself is no request"
    assert not sessions.SLOTS


async def test_a_click_on_an_expired_question_does_not_lose_the_messages_kept_for_after_it(monkeypatch):
    monkeypatch.setattr(ap, "PARK_GRACE", 0.0)
    runner, host, cls = make()
    cfg = {**SHARED, "approval-timeout": 0.05}
    asked = await collect(runner, host, host.make_context("ask: clean", identity=ALICE, config=cfg, interactions=True))
    (req,) = [r.data["payload"] for r in asked if rtype(r) == "action.requested"]
    out = await collect(runner, host, host.make_context("and the readme", identity=BOB, config=cfg))
    assert "kept" in messages(out)[0]
    await _expired()
    click = {"interaction_id": req["interaction_id"], "action_id": "allow"}
    out = await collect(runner, host, host.make_context("", identity=ALICE, config=cfg, interaction=click))
    assert "no longer waiting" in messages(out)[0]
    assert cls.log[-1]["text"] == "Bob: and the readme"
    assert not sessions.SLOTS


async def test_messages_kept_for_an_expired_question_are_not_run_long_after_and_the_session_is_forgotten(monkeypatch):
    """After the question expired the kept messages (with their files) stayed in the plugin process
    for as long as nobody wrote in that session again — weeks — and were then run, glued to whatever
    came next ("Bob: delete the tests folder\\n\\nCarol: hi"). The session now waits
    ``HELD_KEEP_FOR`` for its next message, then is forgotten (sessions.sweep, at the next run of
    any session); and the people who were told "kept" hear, in the session's next run, that their
    message never went on (a sweep alone dropped them without a word)."""
    monkeypatch.setattr(ap, "PARK_GRACE", 0.0)
    monkeypatch.setattr(sessions, "HELD_KEEP_FOR", 0.05, raising=False)
    runner, host, cls = make()
    cfg = {**SHARED, "approval-timeout": 0.05}
    await _expire_with_kept(runner, host, cfg, ["delete the tests folder"])
    await asyncio.sleep(0.15)  # nobody writes for longer than HELD_KEEP_FOR
    elsewhere = Identity(actor_id="dan", actor_name="Dan", conversation_id="other-group")
    await collect(runner, host, host.make_context("hello", identity=elsewhere, config=cfg))
    assert not sessions.SLOTS, "nothing is kept in the process for a session nobody uses"
    out = await collect(runner, host, host.make_context("hi", identity=CAROL, config=cfg))
    assert "tests folder" not in cls.log[-1]["text"], "an old kept message is never run later"
    said = messages(out)
    assert "delete the tests folder" in said[0] and "send" in said[0].lower(), "it is named instead"
    assert said[-1].endswith("got: hi")
    again = await collect(runner, host, host.make_context("ok", identity=CAROL, config=cfg))
    assert not any("tests folder" in m for m in messages(again)), "named once"
    assert not sessions.SLOTS


async def test_a_full_set_of_messages_kept_for_an_expired_question_goes_to_the_next_message_that_comes_soon(monkeypatch):
    """The question expires while HELD_MAX messages wait for it (one more was refused): the next
    message, soon after, gets every one of them, in order and named, and nothing stays behind."""
    monkeypatch.setattr(ap, "PARK_GRACE", 0.0)
    runner, host, cls = make()
    cfg = {**SHARED, "approval-timeout": 0.2}
    kept = [f"note {i}" for i in range(sessions.HELD_MAX)]
    await collect(runner, host, host.make_context("ask: clean", identity=ALICE, config=cfg))
    for text in kept:
        assert "kept" in messages(await collect(runner, host, host.make_context(text, identity=BOB, config=cfg)))[0]
    refused = await collect(runner, host, host.make_context("one too many", identity=BOB, config=cfg))
    assert "send this again" in messages(refused)[0]
    await _expired()
    out = await collect(runner, host, host.make_context("hi", identity=CAROL, config=cfg))
    assert cls.log[-1]["text"] == "\n\n".join([*(f"Bob: {t}" for t in kept), "Carol: hi"])
    assert "nobody answered in time" in messages(out)[0]
    assert not sessions.SLOTS and not ap.PARKED


# --- many runs over weeks in one plugin process --------------------------------------------------


async def test_many_runs_of_many_members_leave_nothing_behind(monkeypatch):
    """Runs of 12 members in both identity modes, with follow-ups, questions answered (typed and
    clicked), questions left to expire, messages kept for them: afterwards nothing is left in
    SLOTS, PARKED or the closing set, the answered-question record stays bounded, and no task of
    any run is still alive."""
    monkeypatch.setattr(ap, "PARK_GRACE", 0.0)
    monkeypatch.setattr(ap, "ANSWERED_KEPT", 25)
    monkeypatch.setattr(ap, "ANSWERED", {})
    monkeypatch.setattr(kit_routing, "BUSY_NOTICE_AFTER", 0.01)
    monkeypatch.setattr(sessions, "HELD_KEEP_FOR", 0.05, raising=False)
    runner, host, cls = make(pause=0.001)
    people = members(12)
    before = asyncio.all_tasks()
    for n in range(120):
        who, other = people[n % 12], people[(n + 5) % 12]
        cfg = {**(SHARED if n % 3 == 0 else {}), "approval-timeout": 0.05 if n % 8 == 1 else 30}
        kind = n % 4
        if kind == 1:  # a question: answered by its asker typing, or clicked, or left to expire
            buttons = n % 8 == 5
            asked = await collect(runner, host, host.make_context("ask: x", identity=who, config=cfg,
                                                                  interactions=buttons))
            await collect(runner, host, host.make_context("and this", identity=other, config=cfg))
            if n % 8 == 1:
                continue  # expires
            if buttons:
                (req,) = [r.data["payload"] for r in asked if rtype(r) == "action.requested"]
                answer = host.make_context("", identity=who, config=cfg,
                                           interaction={"interaction_id": req["interaction_id"], "action_id": "allow"})
            else:
                answer = host.make_context("allow", identity=who, config=cfg)
            await collect(runner, host, answer)
        elif kind == 2:  # a run with follow-ups of two other members
            ctx = host.make_context("slow: work", identity=who, config=cfg, steering=True)
            await collect(runner, host, ctx, on_first_delta(host, ctx, ("f1", other), ("f2", people[(n + 7) % 12])))
        else:
            await collect(runner, host, host.make_context(f"hi {n}", identity=who, config=cfg))
    await asyncio.sleep(0.1)  # longer than HELD_KEEP_FOR: what was kept for expired questions is stale
    await collect(runner, host, host.make_context("a week later", identity=Identity(conversation_id="elsewhere")))
    gc.collect()
    assert not ap.PARKED and not ap._CLOSING
    assert not sessions.SLOTS, {k: (len(s.held), s.users, s.lock.locked(), s.parked) for k, s in sessions.SLOTS.items()}
    assert 0 < len(ap.ANSWERED) <= 25
    left = {t for t in asyncio.all_tasks() - before if not t.done()} - {asyncio.current_task()}
    assert not left, left


# --- a question that expires in the very moment the session's next message comes -------------------


async def test_a_message_that_comes_as_its_sessions_question_expires_does_not_leave_the_session_stuck(monkeypatch):
    """The expiry timer starts the task that stops the agent and frees the session; a run of the
    session coming in the same loop turn cut that task's grace short by cancelling it before it
    had run at all — so it never ran: the agent was never stopped and the session's lock never
    released. Every later message of that session then waited out its whole deadline and failed
    ("an earlier message … is still being answered"), for as long as the plugin ran."""
    monkeypatch.setattr(ap, "PARK_GRACE", 5.0)  # the grace this run cuts short
    runner, host, cls = make()
    await collect(runner, host, host.make_context("ask: clean", identity=ALICE))
    (p,) = ap.PARKED.values()
    slot = p.slot
    ap._expire(p, None)  # what the expiry timer does; the run below comes in the same loop turn
    taken = kit_routing.Hold()
    await _drain(kit_routing.take(slot, _Env(0.5), ResultBuilder("next"), taken))  # in this task: no hop first
    assert taken.slot is slot and p.task.done(), "the session is this run's, the expired agent stopped"
    sessions.release(slot)
    out = await collect(runner, host, host.make_context("hi again", identity=ALICE, config={"timeout": 0.5}))
    assert messages(out)[-1].endswith("user_alice got: hi again")
    assert not sessions.SLOTS


async def test_shutting_down_right_as_a_question_expires_still_stops_its_agent():
    runner, host, cls = make()
    await collect(runner, host, host.make_context("ask: clean", identity=ALICE))
    (p,) = ap.PARKED.values()
    ap._expire(p, None)
    await ap.close_all()
    assert p.task.done(), "the agent is stopped"
    assert not p.slot.lock.locked(), "its session is free"
