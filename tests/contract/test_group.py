"""Group chats, for every plugin (issue 31): two or three members of one LangBot conversation, each
``user-id-source`` the plugin offers, checked by what a member of the chat sees.

- Alternating speakers (Alice, Bob, Alice, Carol, Bob): every message gets its own non-empty reply;
  per-person modes (``actor``, ``hashed``) keep one upstream conversation for each person and never
  show one person's words to another's; shared modes keep one for everyone.
- Bob writes while Alice's run works. Runners without steering: Bob's message is a run of its own,
  answered in his own upstream conversation (per person), or, in a shared session, after Alice's run
  and in the conversation her run stored (never a second new one). Runners with steering (LangBot
  claims Bob's message for Alice's active run, as the local host does here): Bob still gets his
  answer, in per-person modes from his own session with a one-line note, and Alice's session never
  receives his words.
- One member sends two messages at once (two runs of one session, a host that does not steer):
  both answered, in order, in one upstream conversation.
- While Alice's question is open (``PluginCase.question``: how the fake asks), Bob's unrelated
  message is answered, not refused or dropped (in a shared session once the question is settled);
  Bob typing the answer does not answer Alice's question unless he is in ``approvers``; Alice's own
  answer still works after.

The routing rules are the kit's (runner_kit/sessions.py); a plugin passes by using the kit.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from runner_kit.explain import parse_failure_log
from runners_cli.host import Identity
from runners_cli.plugins import find
from tests.contract.cases import PluginCase, Question
from tests.helpers import deltas, make_runner, messages, rtype, state_updates

pytestmark = pytest.mark.usefixtures("no_parked")  # tests/conftest.py: nothing left waiting on a question

TOKENS = ["Hello", ", ", "this ", "is ", "the ", "answer."]
ANSWER = "".join(TOKENS)
SLOW = ["Alice's ", "long "] + ["answer "] * 30 + ["ends."]  # 33 tokens, a few ms apart
SLOW_ANSWER = "".join(SLOW)
FOR_BOB = ["Answer ", "for ", "Bob."]
BOB_ANSWER = "".join(FOR_BOB)
SOURCES = ["actor", "hashed", "conversation", "legacy-session", "legacy-bot", "no-option"]
WAIT = 15.0  # the longest a cell waits for what should take well under a second


# --- the group --------------------------------------------------------------------------------------


def modes(case: PluginCase) -> dict[str, str]:
    """``user-id-source`` option -> "person" or "shared"; a plugin without the option (LocalAgent:
    LangBot's own conversation is the only one) is one shared mode, "no-option". A case that does
    not say what its fake received, or what each of its modes shares, fails: every plugin gets these
    cells."""
    if case.seen is None:
        pytest.fail(f"{case.plugin}: its contract case needs a seen hook (every answer request its fake "
                    "received, with what it carried) for the group cells")
    if not any(i["name"] == "user-id-source" for i in find(case.plugin).config_items):
        return {"no-option": "shared"}
    if not case.group_modes:
        pytest.fail(f"{case.plugin}: its contract case must say in group_modes what each user-id-source "
                    "shares in a group (\"person\" or \"shared\")")
    return dict(case.group_modes)


def mode_of(case: PluginCase, source: str) -> str:
    got = modes(case)
    if source not in got:
        pytest.skip(f"{case.plugin} has no user-id-source {source!r} in its group modes")
    return got[source]


def first_of(case: PluginCase, kind: str) -> str:
    """The plugin's first mode of this kind ("person" / "shared")."""
    for source, k in modes(case).items():
        if k == kind:
            return source
    pytest.skip(f"{case.plugin} has no {kind} mode")


def config(case: PluginCase, server: Any, source: str, **extra: Any) -> dict[str, Any]:
    cfg = {**case.config(server), **extra, "timeout": 60}
    if source != "no-option":
        cfg["user-id-source"] = source
    return cfg


def steers(case: PluginCase) -> bool:
    return bool(find(case.plugin).capabilities.get("steering"))


class Members:
    """Alice, Bob and Carol in one group conversation of their own (one per test)."""

    def __init__(self) -> None:
        group = "group-" + secrets.token_hex(4)
        self.tag = secrets.token_hex(3)
        self.alice, self.bob, self.carol = (
            Identity(conversation_id=group, actor_id=name.lower(), actor_name=name, bot_id="bot-1",
                     launcher_type="group", launcher_id=group)
            for name in ("Alice", "Bob", "Carol"))

    def says(self, who: Identity, what: str) -> str:
        """A message text the platform's requests can be searched for."""
        return f"{who.actor_id}-{what}-{self.tag}"


@dataclass
class Run:
    who: Identity
    text: str
    ctx: Any
    results: list[Any] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # when each result arrived
    task: asyncio.Task[None] | None = None

    @property
    def done(self) -> bool:
        return self.task is not None and self.task.done()

    @property
    def end(self) -> Any:
        ends = [r for r in self.results if rtype(r) in ("run.completed", "run.failed")]
        assert len(ends) == 1 and self.results[-1] is ends[0], [rtype(r) for r in self.results]
        return ends[0]

    def completed(self) -> Run:
        end = self.end
        assert rtype(end) == "run.completed", f"{self.who.actor_name}'s run ({self.text}) failed: {end.data}"
        shown = [f for r in self.results if rtype(r) == "processor.log" and (f := parse_failure_log(r.data.get("text")))]
        assert not shown, f"{self.who.actor_name}'s run ({self.text}) failed: {shown} {self.said()}"
        return self

    def said(self) -> list[str]:
        """Every complete message the run put in the chat, in order."""
        out = messages(self.results)
        for r in self.results:
            if rtype(r) == "run.completed" and r.data.get("message"):
                content = r.data["message"]["content"]
                out.append(content if isinstance(content, str) else "".join(c.get("text") or "" for c in content))
        return out

    def first_time(self, text: str) -> float | None:
        """When ``text`` first showed in this run's output (a delta or a message)."""
        for r, t in zip(self.results, self.times, strict=True):
            kind = rtype(r)
            if kind == "message.delta" and text in (r.data["chunk"].get("all_content") or ""):
                return t
            if kind in ("message.completed", "run.completed") and text in str((r.data or {}).get("message") or ""):
                return t
        return None

    def time_of(self, kind: str) -> float:
        return next(t for r, t in zip(self.results, self.times, strict=True) if rtype(r) == kind)


class Chat:
    """One group conversation as LangBot 4.11.2 runs it for this runner: a member's message is
    claimed for an active run that takes follow-ups (steering), or starts a run of its own."""

    def __init__(self, case: PluginCase, host: Any, cfg: dict[str, Any], *, steering: bool,
                 interactions: bool = False):
        self.case = case
        self.host = host
        self.runner = make_runner(case.plugin, host)
        self.cfg = cfg
        self.steering = steering
        self.interactions = interactions
        self.runs: list[Run] = []
        self.claimed: list[tuple[str, str]] = []  # (text, the run that claimed it)

    def send(self, who: Identity, text: str) -> Run | None:
        """``who`` writes ``text``: the run that claims it gets it (None), or a new run starts."""
        if self.steering:
            ctx = self.host.claim(text, who)
            if ctx is not None:
                self.claimed.append((text, ctx.run_id))
                return None
        ctx = self.host.make_context(text, config=self.cfg, identity=who, steering=self.steering,
                                     interactions=self.interactions)
        return self._start(who, text, ctx)

    def click(self, who: Identity, interaction: dict[str, Any]) -> Run:
        """``who`` clicks a button (LangBot runs the click as a new ``interaction.submitted`` run)."""
        ctx = self.host.make_context("", config=self.cfg, identity=who, steering=self.steering, interactions=True,
                                     interaction=interaction)
        return self._start(who, "(click)", ctx)

    def _start(self, who: Identity, text: str, ctx: Any) -> Run:
        run = Run(who, text, ctx)

        async def go() -> None:
            try:
                async for r in self.runner.invoke(ctx):
                    self.host.apply_result(ctx.run_id, r)
                    run.results.append(r)
                    run.times.append(time.monotonic())
            finally:
                self.host.end_run(ctx.run_id)

        run.task = asyncio.ensure_future(go())
        self.runs.append(run)
        return run

    def pulled(self, text: str) -> bool:
        """The run that claimed ``text`` has taken it from the host."""
        return not any(i["input"]["text"] == text for i in self.host.steering)

    async def until(self, check: Any, what: str, timeout: float = WAIT) -> None:
        end = time.monotonic() + timeout + self.case.startup
        while not check():
            if time.monotonic() > end:
                pytest.fail(f"{self.case.plugin}: waited {timeout + self.case.startup:g} s for {what}")
            await asyncio.sleep(0.02)

    async def handled(self, run: Run | None, text: str, settle: float = 0.4) -> None:
        """Give the runner what it needs to act on ``text``: its own run ends, or up to ``settle``
        seconds when that run waits (a shared session); a claimed message is pulled by its run."""
        if run is not None:
            assert run.task is not None
            await asyncio.wait([run.task], timeout=3.0 + self.case.startup)
        else:
            await self.until(lambda: self.pulled(text), f"the active run to take “{text}”")
            await asyncio.sleep(settle)

    async def settle(self, timeout: float = WAIT) -> None:
        """Every run has ended (a failure says which one was still going)."""
        tasks = [r.task for r in self.runs if r.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout + self.case.startup)
        stuck = [f"{r.who.actor_name}: {r.text}" for r in self.runs if r.task in pending]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)
        assert not stuck, f"{self.case.plugin}: still running after {timeout + self.case.startup:g} s: {stuck}"
        for t in tasks:
            t.result()


def upstream_id(run: Run) -> Any:
    """The upstream conversation id the run stored (None: it stored none)."""
    for key, value in state_updates(run.results).items():
        if key.endswith((".approvals", ".pending-question")) or "pending" in key:
            continue
        if isinstance(value, dict) and value.get("thread_id"):
            return value["thread_id"]
        if isinstance(value, str) and value:
            return value
    return None


def carrying(seen: list[Any], text: str) -> list[int]:
    """Indexes of the upstream requests that carried ``text``."""
    return [i for i, s in enumerate(seen) if text in s.sent]


def answering(seen: list[Any], text: str, *others: str) -> list[int]:
    """Indexes of the upstream requests whose own (newest) message is ``text`` rather than one of
    ``others``: a request that carries a conversation's history carries earlier messages too."""
    return [i for i, s in enumerate(seen)
            if text in s.sent and all(s.sent.rfind(text) > s.sent.rfind(o) for o in others)]


def extra_lines(said: list[str], *answers: str) -> list[str]:
    """The lines of what a run said besides ``answers`` (notes, notices)."""
    rest = "\n".join(said)
    for a in answers:
        rest = rest.replace(a, "", 1)
    return [line for line in rest.splitlines() if line.strip()]


# --- 1. alternating speakers ---------------------------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES)
async def test_alternating_speakers_each_keep_their_conversation(case, server, host, source):
    kind = mode_of(case, source)
    g = Members()
    order = [g.alice, g.bob, g.alice, g.carol, g.bob]
    texts = [g.says(who, f"m{i}") for i, who in enumerate(order)]
    cfg = config(case, server, source)
    case.answer(server, TOKENS, 0.0)
    chat = Chat(case, host, cfg, steering=steers(case))
    mark = len(case.seen(server))
    runs = []
    for who, text in zip(order, texts, strict=True):
        run = chat.send(who, text)
        assert run is not None
        await chat.settle()
        run.completed()
        assert run.said() == [ANSWER], f"{source}: {who.actor_name} gets exactly the answer, never empty: {run.said()}"
        runs.append(run)
    seen = case.seen(server)[mark:]
    assert len(seen) == len(order), f"{source}: one upstream request per message, no retries ({len(seen)})"
    for i, text in enumerate(texts):
        assert text in seen[i].sent, f"{source}: message {i} reached the platform in its turn"
    first: dict[str, int] = {}
    if kind == "person":
        for i, who in enumerate(order):
            others = [t for j, t in enumerate(texts[:i]) if order[j] is not who]
            leaked = [t for t in others if t in seen[i].sent]
            assert not leaked, f"{source}: {who.actor_name}'s conversation carries someone else's words: {leaked}"
            if who.actor_id in first:
                j = first[who.actor_id]
                assert seen[i].user == seen[j].user, f"{source}: {who.actor_name} is one upstream user"
                assert seen[i].conversation == upstream_id(runs[j]), \
                    f"{source}: {who.actor_name}'s message {i} continues {who.actor_name}'s own conversation"
            else:
                assert seen[i].user not in {seen[k].user for k in first.values()}, \
                    f"{source}: {who.actor_name} is not another member's upstream user"
                first[who.actor_id] = i
        ids = [upstream_id(runs[i]) for i in first.values()]
        assert len(set(ids)) == len(ids), f"{source}: one conversation each: {ids}"
    else:
        assert len({s.user for s in seen}) == 1, f"{source}: the group is one upstream user"
        created = upstream_id(runs[0]) or seen[0].conversation
        if created:
            assert [s.conversation for s in seen[1:]] == [created] * (len(order) - 1), \
                f"{source}: everyone continues the one conversation the first message started"
        else:  # no upstream id (LangBot's own conversation): each request carries the ones before
            for i in range(1, len(order)):
                assert texts[i - 1] in seen[i].sent, f"{source}: message {i} sees the conversation so far"


# --- 2. a member writes while another member's run works --------------------------------------------


@pytest.mark.parametrize("source", SOURCES)
async def test_a_member_writing_while_another_members_run_works(case, server, host, source):
    kind = mode_of(case, source)
    g = Members()
    cfg = config(case, server, source)
    steering = steers(case)
    chat = Chat(case, host, cfg, steering=steering)
    bob_id = bob_user = None
    if kind == "person":  # Bob already talks to the agent: his message must continue his conversation
        case.answer(server, TOKENS, 0.0)
        warm = chat.send(g.bob, g.says(g.bob, "earlier"))
        await chat.settle()
        bob_id = upstream_id(warm.completed())
        bob_user = case.seen(server)[-1].user
    mark = len(case.seen(server))
    a_text, b_text = g.says(g.alice, "long-job"), g.says(g.bob, "meanwhile")
    case.answer(server, SLOW, 0.02)
    alice = chat.send(g.alice, a_text)
    assert alice is not None
    await chat.until(lambda: deltas(alice.results) or alice.done, "Alice's answer to start streaming")
    assert not alice.done, "Alice's run is still working when Bob writes"
    case.answer(server, FOR_BOB, 0.0)
    bob = chat.send(g.bob, b_text)
    await chat.settle()
    alice.completed()
    seen = case.seen(server)[mark:]
    a_reqs, b_reqs = carrying(seen, a_text), carrying(seen, b_text)
    assert a_reqs, "Alice's message reached the platform"
    assert b_reqs, f"{source}: Bob's message never reached the platform (dropped)"
    a_req, b_req = seen[a_reqs[0]], seen[b_reqs[0]]
    said = alice.said()

    if bob is not None:  # a run of its own (the runner takes no follow-ups)
        bob.completed()
        assert said == [SLOW_ANSWER], f"{source}: Alice's answer is whole and only hers: {said}"
        assert bob.said()[-1].endswith(BOB_ANSWER), f"{source}: Bob gets his answer: {bob.said()}"
        if kind == "person":
            assert bob.said() == [BOB_ANSWER], f"{source}: Bob's own session has nothing to wait for: {bob.said()}"
            assert b_req.user != a_req.user and b_req.user == bob_user, f"{source}: Bob speaks as himself"
            assert b_req.conversation == bob_id, f"{source}: Bob's message continues Bob's conversation"
            assert a_req.conversation != bob_id
        else:
            waited = extra_lines(bob.said(), BOB_ANSWER)
            assert len(waited) <= 1, f"{source}: at most one line says Bob's message waited: {waited}"
            created = upstream_id(alice) or a_req.conversation
            assert b_req.conversation == created and created, \
                f"{source}: Bob's run continues the conversation Alice's run stored, not a second new one " \
                f"(Bob's request: {b_req.conversation!r}, Alice's: {created!r})"
            assert b_reqs[0] > a_reqs[0]
            got = bob.first_time("Answer for")
            assert got is not None and got >= alice.time_of(rtype(alice.end)), \
                f"{source}: Bob's run waits for Alice's run to end before it answers"
        return

    # claimed for Alice's run (LangBot's steering): Alice's run answers Bob after her own turn
    assert chat.claimed and chat.claimed[0][0] == b_text
    assert said and said[0].endswith(SLOW_ANSWER), f"{source}: Alice's answer comes first and whole: {said}"
    assert any(m.endswith(BOB_ANSWER) for m in said[1:]), f"{source}: Bob still gets his answer: {said}"
    if kind == "person":
        assert b_req.user == bob_user, f"{source}: Bob's message is answered by Bob's own session"
        if bob_id is not None:
            assert b_req.conversation == bob_id, f"{source}: ... continuing Bob's conversation"
        to_alice = [i for i, s in enumerate(seen) if s.user == a_req.user and b_text in s.sent]
        assert not to_alice, f"{source}: Alice's session received Bob's words (requests {to_alice})"
        note = extra_lines(said, SLOW_ANSWER, BOB_ANSWER)
        assert len(note) == 1, f"{source}: one line says Bob's message was answered in his own session: {note}"
    else:
        if a_req.conversation:
            assert b_req.conversation == a_req.conversation, f"{source}: Bob's turn is in the shared session"
        else:  # LangBot's own conversation: Bob's turn carries Alice's
            assert a_text in b_req.sent, f"{source}: Bob's turn continues the shared conversation"


# --- 3. two messages of one member at once ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["person", "shared"])
async def test_two_messages_at_once_are_answered_in_order_in_one_conversation(case, server, host, kind):
    """Two runs of one session started together (two quick messages, a host that does not steer)."""
    source = first_of(case, kind)
    mode_of(case, source)
    g = Members()
    cfg = config(case, server, source)
    case.answer(server, TOKENS, 0.01)
    chat = Chat(case, host, cfg, steering=False)  # the host claims nothing: both are runs of their own
    mark = len(case.seen(server))
    m1, m2 = g.says(g.alice, "first"), g.says(g.alice, "second")
    one, two = chat.send(g.alice, m1), chat.send(g.alice, m2)
    assert one is not None and two is not None
    await chat.settle()
    one.completed()
    two.completed()
    assert one.said() == [ANSWER], f"{source}: the first message gets its answer: {one.said()}"
    assert two.said() and two.said()[-1].endswith(ANSWER), f"{source}: the second too: {two.said()}"
    waited = extra_lines(two.said(), ANSWER)
    assert len(waited) <= 1, f"{source}: at most one line says the second message waited: {waited}"
    seen = case.seen(server)[mark:]
    i1, i2 = answering(seen, m1, m2), answering(seen, m2, m1)
    assert i1 and i2, f"{source}: both messages reached the platform"
    assert i1[0] < i2[0], f"{source}: answered in order"
    first, second = seen[i1[0]], seen[i2[0]]
    created = upstream_id(one) or first.conversation
    if created:
        assert second.conversation == created, \
            f"{source}: the second message continues the conversation the first one started, not a second " \
            f"new one (first: {created!r}, second: {second.conversation!r}); the first exchange is kept"
    else:  # LangBot's own conversation: the second turn sees the first exchange
        assert ANSWER in second.sent, f"{source}: the second turn sees the first answer"


# --- 4. while another member's question is pending ---------------------------------------------------


def question_of(case: PluginCase) -> Question:
    q = case.question
    if q is None:
        pytest.fail(f"{case.plugin}: say how its fake asks the chat a question (question=Question(...)) or why "
                    "its platform cannot (question='...') in its contract case")
    if isinstance(q, str):
        pytest.skip(f"{case.plugin} never asks the chat: {q}")
    return q


async def alice_asks(chat: Chat, g: Members, case: PluginCase, q: Question, server: Any, how: str) -> Run:
    """Alice's message makes the agent ask her; returns her run once the question is in the chat."""
    q.ask(server, True)
    before = len(chat.host.interactions)
    alice = chat.send(g.alice, g.says(g.alice, "do-it"))
    assert alice is not None

    def shown() -> bool:
        if how == "buttons":
            return len(chat.host.interactions) > before
        return any(q.shown in m for m in alice.said())

    await chat.until(lambda: shown() or alice.done, "the question to reach the chat")
    q.ask(server, False)
    assert shown(), f"{case.plugin}: Alice's run ended without asking: {alice.said()} {alice.results[-1].data}"
    return alice


@pytest.mark.parametrize("how", ["typed", "buttons"])
@pytest.mark.parametrize("source", SOURCES)
async def test_while_a_members_question_is_pending_the_others_go_on(case, server, host, source, how):
    q = question_of(case)
    kind = mode_of(case, source)
    if how == "buttons" and not find(case.plugin).capabilities.get("interactions"):
        pytest.skip(f"{case.plugin} declares no interactions: its questions are answered by typing")
    g = Members()
    cfg = config(case, server, source, **q.config)
    case.answer(server, TOKENS, 0.0)
    chat = Chat(case, host, cfg, steering=steers(case), interactions=how == "buttons")
    mark = len(case.seen(server))
    alice = await alice_asks(chat, g, case, q, server, how)
    a_user = case.seen(server)[mark].user

    # Bob: something unrelated, then the answer to Alice's question
    b_text = g.says(g.bob, "unrelated")
    bob = chat.send(g.bob, b_text)
    await chat.handled(bob, b_text)
    assert q.received(server) is None, f"{source}: Bob's unrelated message answered Alice's question"
    if kind == "person" and bob is not None:
        assert bob.done, f"{source}: Bob's message waits for Alice's question, which is not his"
        bob.completed()
        assert bob.said() and bob.said()[-1].endswith(ANSWER), \
            f"{source}: Bob's own session answers him while Alice's question is open: {bob.said()}"
    reached_early = bool(carrying(case.seen(server)[mark:], b_text))
    bob_yes = chat.send(g.bob, q.answer)
    await chat.handled(bob_yes, q.answer)
    assert q.received(server) is None, f"{source}: Bob's “{q.answer}” answered Alice's question"

    # Alice answers
    if how == "buttons":
        request = chat.host.interactions[-1]
        answer = chat.click(g.alice, {"interaction_id": request["interaction_id"], **q.click})
    else:
        answer = chat.send(g.alice, q.answer)
    await chat.settle()
    assert q.received(server) == q.expect, f"{source}: Alice's own answer reached the platform"
    for run in chat.runs:
        run.completed()
    assert answer is None or answer.said(), "Alice's answer gets the rest of the reply"
    alice.completed()

    seen = case.seen(server)[mark:]
    b_reqs = carrying(seen, b_text)
    assert b_reqs, f"{source}: Bob's unrelated message never reached the agent (refused or dropped)"
    if kind == "person":
        assert seen[b_reqs[0]].user != a_user, f"{source}: Bob's message went to Alice's session"
        leaked = [i for i, s in enumerate(seen) if s.user == a_user and b_text in s.sent]
        assert not leaked, f"{source}: Alice's session received Bob's words (requests {leaked})"
    else:
        assert not reached_early, f"{source}: Bob's message went to the shared session while it waited on Alice's question"


@pytest.mark.parametrize("kind", ["person", "shared"])
async def test_an_approver_may_answer_a_members_question(case, server, host, kind):
    q = question_of(case)
    if not any(i["name"] == "approvers" for i in find(case.plugin).config_items):
        pytest.skip(f"{case.plugin} has no approvers setting: only the asker answers")
    source = first_of(case, kind)
    mode_of(case, source)
    g = Members()
    cfg = config(case, server, source, **{**q.config, "advanced-settings": True, "approvers": [g.bob.actor_id]})
    case.answer(server, TOKENS, 0.0)
    chat = Chat(case, host, cfg, steering=steers(case))
    await alice_asks(chat, g, case, q, server, "typed")
    chat.send(g.bob, q.answer)
    await chat.settle()
    for run in chat.runs:
        run.completed()
    if kind == "person" and q.free_text:
        # any words fit the question, and Bob's are his own message in his own session: they never
        # answer someone else's question from there (he would use its button)
        assert q.received(server) is None, "Bob's own words were taken as the answer to Alice's question"
        return
    assert q.received(server) == q.expect, "Bob is an approver: his answer is the answer to Alice's question"
