"""Issue 33 attacked as a group (docs attack.md "1. A group"): two or three members of one LangBot
conversation, in each ``user-id-source`` mode, against a LangBot reset (runner_kit/resets.py,
``Adapter.end_conversation``) and what came with it (per-plugin ends, WeKnora's resume, DeerFlow's
join, the "still working" line, n8n's 4.10 fields).

What a user would notice: after ``!reset`` the agent still remembers the old conversation (an old id
came back), a member's conversation is deleted by someone else's message or while it is answering,
one conversation is deleted twice, or a workflow hears one member as another."""

from __future__ import annotations

import asyncio

import pytest

from runner_kit import events as ev
from runner_kit import resets
from runner_kit.config import ConfigSchema
from runner_kit.runner import Adapter
from runners_cli.host import Identity
from tests.helpers import final_text, rtype, run, scripted_runner, terminal

SCHEMA = ConfigSchema.from_items([
    {"name": "api-key", "type": "secret", "default": "sk-group-attack-1"},
    {"name": "timeout", "type": "float", "default": 60},
    {"name": "user-id-source", "type": "string", "default": "actor"},
])
GROUP = dict(conversation_id="group-conv", launcher_type="group", launcher_id="g-42")
ALICE = Identity(actor_id="alice", actor_name="Alice", **GROUP)
BOB = Identity(actor_id="bob", actor_name="Bob", **GROUP)
CAROL = Identity(actor_id="carol", actor_name="Carol", **GROUP)
MODES = ["actor", "hashed", "conversation", "legacy-session"]
SHARED = {"conversation", "legacy-session", "legacy-bot"}


class Upstream(Adapter):
    """A platform whose conversations are numbered. ``gates``: a run whose message text names a gate
    waits on it at the point the script says (``late``: before the upstream names the conversation,
    ``early``: after); it answers with the conversation it used."""

    platform = "Upstream"
    session_key = "upstream.conversation_id"
    made: list[str] = []
    ended: list[tuple[str, str]] = []
    live: set[str] = set()  # conversations a run is answering in right now
    ended_while_live: list[str] = []
    owner: dict[str, str] = {}  # conversation -> the upstream user that made it
    gates: dict[str, asyncio.Event] = {}
    started: dict[str, asyncio.Event] = {}

    async def stream(self):
        cls = type(self)
        text = self.env.input.text
        gate = cls.gates.get(text)
        cid = self.env.session.current
        fresh = cid is None
        if fresh:
            cid = f"c{len(cls.made) + 1}"
            cls.made.append(cid)
            cls.owner[cid] = self.env.user
        cls.live.add(cid)
        try:
            if text in cls.started:
                cls.started[text].set()
            if gate is not None and text.startswith("late"):
                await gate.wait()
            yield ev.SessionId(cid)
            if gate is not None and text.startswith("early"):
                await gate.wait()
                yield ev.State("upstream.note", text)  # something else the run keeps, after the wait
            yield ev.Text(f"in {cid}")
        finally:
            cls.live.discard(cid)

    async def end_conversation(self, upstream_id):
        cls = type(self)
        if upstream_id in cls.live:
            cls.ended_while_live.append(upstream_id)
        assert cls.owner[upstream_id] == self.env.user, "ended as someone else"
        cls.ended.append((upstream_id, self.env.user))


def make():
    return scripted_runner(Upstream, SCHEMA, made=[], ended=[], live=set(), ended_while_live=[], owner={},
                           gates={}, started={})


@pytest.fixture(autouse=True)
def _fresh():
    resets.forget()
    yield
    resets.forget()


async def say(runner, host, who, text="hello", source="actor"):
    results = await run(runner, host, text, identity=who, config={"user-id-source": source})
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    return final_text(results)


async def settle():
    for _ in range(20):
        await asyncio.sleep(0.005)


def gated(cls, name):
    cls.gates[name] = asyncio.Event()
    cls.started[name] = asyncio.Event()
    return cls.gates[name], cls.started[name]


# --- a reset while a member's first run is still going ------------------------------------------


@pytest.mark.parametrize("source", MODES)
@pytest.mark.parametrize("when", ["late", "early"])
async def test_a_message_queued_behind_a_run_from_before_the_reset_starts_a_new_conversation(source, when):
    """Alice's first message is still being answered when someone resets; the next message of the
    same session (Alice's own, or Bob's where the session is shared) waits for it. That message is
    the first after the reset: it must start a new upstream conversation, and the one Alice's run
    made before the reset is ended once, after it is no longer in use. ``late``: the platform named
    the conversation only after the reset; ``early``: before it, but the run stored something else
    after it."""
    runner, host, cls = make()
    gate, started = gated(cls, f"{when} alice")
    first = asyncio.ensure_future(say(runner, host, ALICE, f"{when} alice", source))
    await asyncio.wait_for(started.wait(), 2)
    host.reset_conversation(ALICE)
    nxt = BOB if source in SHARED else ALICE
    second = asyncio.ensure_future(say(runner, host, nxt, "after the reset", source))
    await settle()
    gate.set()
    assert await first == "in c1"
    assert await second == "in c2", "the first message after the reset continued the conversation from before it"
    await settle()
    assert [c for c, _ in cls.ended] == ["c1"], "the conversation from before the reset is ended, once"
    assert cls.ended_while_live == []
    assert await say(runner, host, nxt, "and again", source) == "in c2"
    await settle()
    assert [c for c, _ in cls.ended] == ["c1"]


@pytest.mark.parametrize("source", MODES)
async def test_a_run_from_before_the_reset_that_names_its_conversation_after_it_does_not_undo_the_reset(source):
    """Nobody writes while Alice's first run goes on; it names its conversation after the reset
    (LangBot stores that write: its reset is over). Alice's next message is after the reset: a new
    conversation, and the old one ended."""
    runner, host, cls = make()
    gate, started = gated(cls, "late alice")
    first = asyncio.ensure_future(say(runner, host, ALICE, "late alice", source))
    await asyncio.wait_for(started.wait(), 2)
    host.reset_conversation(ALICE)
    gate.set()
    assert await first == "in c1"
    assert await say(runner, host, ALICE, "after the reset", source) == "in c2", \
        "the reset was undone: the old conversation goes on"
    await settle()
    assert [c for c, _ in cls.ended] == ["c1"]


async def test_a_message_that_waited_too_long_for_the_run_before_it_ends_nothing_while_that_run_goes_on():
    """Bob's message after a reset waits for Alice's run (one shared session) and gives up at its
    time limit: the conversation Alice's run is still answering in must not be deleted under it;
    it is ended by the next message that gets the session."""
    runner, host, cls = make()
    await say(runner, host, ALICE, "hello", "conversation")  # c1
    gate, started = gated(cls, "early alice")
    first = asyncio.ensure_future(say(runner, host, ALICE, "early alice", "conversation"))
    await asyncio.wait_for(started.wait(), 2)
    host.reset_conversation(ALICE)
    results = await run(runner, host, "after the reset", identity=BOB,
                        config={"user-id-source": "conversation", "timeout": 0.3})
    assert rtype(terminal(results)) in ("run.failed", "run.completed")
    await settle()
    assert cls.ended == [] and cls.ended_while_live == [], "deleted while Alice's run still answered in it"
    gate.set()
    assert await first == "in c1"
    assert await say(runner, host, BOB, "again", "conversation") == "in c2"
    await settle()
    assert [c for c, _ in cls.ended] == ["c1"] and cls.ended_while_live == []


@pytest.mark.parametrize("source", MODES)
async def test_three_members_a_reset_while_alices_run_answers_ends_each_conversation_once_as_its_owner(source):
    """Alice's run is answering when Carol resets; Bob writes right away, twice at once; Alice and
    Carol write after. Per person: Bob's old conversation ended by Bob's first message, as Bob;
    Alice's only once her run is over, as Alice; Carol had none. Shared: the one conversation, once,
    after Alice's run."""
    runner, host, cls = make()
    for who in (ALICE, BOB):
        await say(runner, host, who, "hello", source)
    gate, started = gated(cls, "early alice")
    first = asyncio.ensure_future(say(runner, host, ALICE, "early alice", source))
    await asyncio.wait_for(started.wait(), 2)
    host.reset_conversation(CAROL)
    bobs = [asyncio.ensure_future(say(runner, host, BOB, f"bob {i}", source)) for i in range(2)]
    if source not in SHARED:
        await asyncio.gather(*bobs)
        await settle()
        assert [c for c, _ in cls.ended] == ["c2"] and cls.ended_while_live == []
    gate.set()
    await first
    await asyncio.gather(*bobs)
    await say(runner, host, ALICE, "alice after", source)
    await say(runner, host, CAROL, "carol after", source)
    await settle()
    ended = [c for c, _ in cls.ended]
    assert cls.ended_while_live == []
    if source in SHARED:
        assert ended == ["c1"], "the shared conversation, once"
    else:
        assert ended == ["c2", "c1"], "Bob's when Bob wrote, Alice's when Alice did, once each"
        users = dict(cls.ended)
        assert users["c1"] != users["c2"], "each as their own upstream user"


# --- the plugins that end a conversation, over their fakes, in each mode --------------------------

TOKENS = ["Hello", " from", " the", " group."]


def _ending_cases():
    from tests.contract.cases import CASES

    return [(c, m) for c in CASES if c.ended is not None and c.seen is not None for m in MODES
            if m in c.group_modes]


class Platform:
    """One plugin over its fake, with a host of its own."""

    def __init__(self, case, source):
        from runners_cli.host import LocalHost
        from runners_cli.plugins import find
        from tests.helpers import make_runner

        self.case, self.source = case, source
        self.srv = case.start_server()
        self.host = LocalHost(runner_id=find(case.plugin).runner_id)
        if case.prepare_host is not None:
            case.prepare_host(self.srv, self.host)
        self.runner = make_runner(case.plugin, self.host)
        case.answer(self.srv, TOKENS, 0.0)

    def config(self, **extra):
        return {**self.case.config(self.srv), "user-id-source": self.source, **extra}

    async def turn(self, who, text="hello"):
        """One message; the upstream conversation its request continued ("" = a new one)."""
        before = len(self.case.seen(self.srv))
        results = await run(self.runner, self.host, text, identity=who, config=self.config())
        assert rtype(terminal(results)) == "run.completed", (self.case.plugin, terminal(results).data)
        assert final_text(results).endswith("".join(TOKENS))
        seen = [x for x in self.case.seen(self.srv)[before:] if text in x.sent]
        assert seen, "no answer request"
        return seen[-1].conversation

    def ended(self):
        return self.case.ended(self.srv)

    async def ended_after(self, n):
        for _ in range(300):
            if len(self.ended()) >= n:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.03)
        return self.ended()


@pytest.mark.parametrize(("case", "source"), _ending_cases(),
                         ids=[f"{c.plugin}-{m}" for c, m in _ending_cases()])
async def test_three_members_a_reset_ends_exactly_the_conversations_it_left_once_each(case, source):
    p = Platform(case, source)
    try:
        await p.turn(ALICE)
        await p.turn(BOB)  # a platform that creates conversations names one only on the next request
        alice_old = await p.turn(ALICE)
        bob_old = await p.turn(BOB)
        shared = case.group_modes[source] == "shared"
        assert alice_old and bob_old and ((alice_old == bob_old) == shared)
        host_reset = p.host.reset_conversation
        host_reset(CAROL)  # Carol, who never wrote, resets the group
        assert await p.turn(BOB) not in (alice_old, bob_old), "Bob's first message after the reset"
        assert await p.ended_after(1) == [bob_old], "the conversation Bob used, and no one else's"
        await p.turn(ALICE)
        await p.turn(CAROL)
        expected = [bob_old] if shared else [bob_old, alice_old]
        assert await p.ended_after(len(expected)) == expected, "each once, and none that is in use"
        alice_new, bob_new = await p.turn(ALICE), await p.turn(BOB)
        assert alice_new and bob_new and {alice_new, bob_new}.isdisjoint({alice_old, bob_old})
        assert (alice_new == bob_new) == shared
        assert await p.turn(ALICE) == alice_new, "Alice's new conversation goes on"
        assert p.ended() == expected, "nothing more without another reset"
    finally:
        p.srv.stop()


@pytest.mark.parametrize(("case", "source"), _ending_cases(),
                         ids=[f"{c.plugin}-{m}" for c, m in _ending_cases()])
async def test_a_reset_while_alices_answer_streams_never_deletes_it_under_her(case, source):
    """Alice's answer is streaming when the group is reset and Bob writes at once: her answer
    arrives whole; the conversation she is answered in is ended only after, and once."""
    p = Platform(case, source)
    try:
        await p.turn(ALICE)
        await p.turn(BOB)
        alice_old = await p.turn(ALICE)
        bob_old = await p.turn(BOB)
        case.answer(p.srv, TOKENS, 0.05)
        before = len(case.seen(p.srv))
        alice = asyncio.ensure_future(p.turn(ALICE, "a long question"))
        for _ in range(300):
            if len(case.seen(p.srv)) > before:
                break
            await asyncio.sleep(0.005)
        p.host.reset_conversation(BOB)
        bob = asyncio.ensure_future(p.turn(BOB, "right after the reset"))
        assert await alice == alice_old, "Alice's run started before the reset: her conversation"
        assert alice_old not in p.ended(), "Alice's conversation was deleted while she was answered in it"
        assert await bob not in (alice_old, bob_old)
        case.answer(p.srv, TOKENS, 0.0)
        await p.turn(ALICE)
        shared = case.group_modes[source] == "shared"
        expected = [bob_old] if shared else [bob_old, alice_old]
        assert await p.ended_after(len(expected)) == expected
    finally:
        p.srv.stop()


# --- a question from before the reset (Dify's Human Input form) ---------------------------------

DIFY_KEY = "app-dify-group-attack-1"
FORM = {"node_title": "Review", "form_content": "Your comment: {{#$output.comment#}}",
        "inputs": [{"type": "paragraph", "output_variable_name": "comment"}],
        "actions": [{"id": "submit", "title": "Submit", "button_style": "primary"}]}


@pytest.mark.parametrize("source", MODES)
@pytest.mark.parametrize("someone_waits", [True, False], ids=["next-message-waits", "nobody-writes-meanwhile"])
async def test_a_form_asked_after_the_reset_by_a_run_from_before_it_blocks_nobody(source, someone_waits):
    """Alice's chatflow run reaches a Human Input form just after someone resets the group (the run
    started before the reset; LangBot stores its form record anyway). The next message, Bob's where
    the session is shared or Alice's own, belongs to the new conversation: answered at once, not
    "kept until Alice answers the Dify form", and no reply is submitted to the old form, whose
    conversation is deleted once."""
    from runners_cli.host import LocalHost
    from runners_cli.plugins import find
    from tests.fakes.dify import FakeDify
    from tests.helpers import make_runner, messages

    with FakeDify(api_key=DIFY_KEY, mode="chatflow") as srv:
        host = LocalHost(runner_id=find("dify-agent").runner_id)
        runner = make_runner("dify-agent", host)
        conf = {"base-url": srv.base_url, "api-key": DIFY_KEY, "app-type": "chatflow", "user-id-source": source}
        await run(runner, host, "hello", config=conf, identity=ALICE)
        srv.human_input = dict(FORM)
        node_pair = srv._node_pair

        async def slow_node(*args, **kwargs):  # the workflow takes a moment to reach the form
            await asyncio.sleep(0.15)
            return await node_pair(*args, **kwargs)

        srv._node_pair = slow_node
        asked = asyncio.ensure_future(run(runner, host, "review my draft", config=conf, identity=ALICE))
        for _ in range(300):
            if len(srv.find_requests("POST", "/v1/chat-messages")) >= 2:
                break
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.03)
        old = srv.find_requests("POST", "/v1/chat-messages")[-1].json().get("conversation_id")
        host.reset_conversation(BOB)
        nxt = BOB if source in SHARED else ALICE
        waiting = asyncio.ensure_future(run(runner, host, "what is the capital of France", config=conf,
                                            identity=nxt)) if someone_waits else None
        assert "Dify asks: Review" in messages(await asked)[0]
        srv.human_input, srv._node_pair = None, node_pair
        first = await waiting if waiting is not None else await run(
            runner, host, "what is the capital of France", config=conf, identity=nxt)
        assert messages(first) == ["Hello, world!"], "the first message after the reset waited for the old form"
        again = await run(runner, host, "looks good", config=conf, identity=ALICE)
        assert messages(again) == ["Hello, world!"], "an ordinary message of the new conversation"
        assert srv.form_submissions == [], "nothing was submitted to the form of the conversation the reset left"
        sent = [(r.json().get("conversation_id") or "") for r in srv.find_requests("POST", "/v1/chat-messages")]
        assert old and old not in sent[2:], "the old conversation was continued after the reset"
        for _ in range(100):
            if srv.deleted:
                break
            await asyncio.sleep(0.01)
        assert [c for c, _ in srv.deleted] == [old]


# --- two members' answers break off at once: each picks up its own ------------------------------


async def _request_seen(count, before, timeout=3.0):
    for _ in range(int(timeout / 0.005)):
        if count() > before:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the request never came")


@pytest.mark.parametrize("source", ["actor", "hashed"])
async def test_weknora_two_members_cut_off_at_once_each_resume_their_own_answer(source, monkeypatch):
    """Alice's and Bob's WeKnora answers stream at the same time and both connections break off:
    each run resumes its own message (continue-stream by its own message id) and shows its own
    answer once; neither shows the other's."""
    from weknora_agent import const

    from runners_cli.host import LocalHost
    from runners_cli.plugins import find
    from tests.fakes.weknora import FakeWeKnora
    from tests.helpers import deltas, make_runner

    monkeypatch.setattr(const, "RESUME_BACKOFF", 0.01)
    key = "sk-weknora-group-attack-1"
    with FakeWeKnora(api_key=key) as srv:
        host = LocalHost(runner_id=find("weknora-agent").runner_id)
        runner = make_runner("weknora-agent", host)
        conf = {"base-url": srv.base_url, "api-key": key, "app-type": "chat", "user-id-source": source}
        srv.token_delay, srv.drops = 0.03, 2
        answers = {"alice": ["Alice: ", "the tail ", "points away ", "from the Sun."],
                   "bob": ["Bob: ", "comets are ", "icy ", "bodies."]}
        runs = {}
        for who in (ALICE, BOB):
            srv.answer_tokens = answers[who.actor_id]
            before = len(srv.chat_requests())
            runs[who.actor_id] = asyncio.ensure_future(run(runner, host, f"question of {who.actor_name}",
                                                            config=conf, identity=who))
            await _request_seen(lambda: len(srv.chat_requests()), before)
        for name, task in runs.items():
            results = await task
            assert rtype(terminal(results)) == "run.completed", terminal(results).data
            full = "".join(answers[name])
            assert final_text(results) == full, f"{name} got someone else's answer"
            assert all(full.startswith(d) for d in deltas(results)), "a piece shown twice or someone else's"
        assert len(srv.resume_requests()) == 2, "each broken answer resumed once"
        assert srv.stopped == [] and srv.handler_errors == []


@pytest.mark.parametrize("flavor", ["deerflow", "langgraph"])
@pytest.mark.parametrize("source", ["actor", "hashed"])
async def test_deerflow_two_members_cut_off_at_once_each_join_their_own_run(source, flavor):
    """Alice's and Bob's runs stream at the same time and both streams are cut: each joins its own
    run again (its own thread and run id) and shows its own answer once."""
    from runners_cli.host import LocalHost
    from runners_cli.plugins import find
    from tests.fakes.deerflow import FakeDeerFlow
    from tests.helpers import deltas, make_runner

    key = "df-pat-group-attack-1" if flavor == "deerflow" else None
    with FakeDeerFlow(api_key=key, flavor=flavor) as srv:
        host = LocalHost(runner_id=find("deerflow-agent").runner_id)
        runner = make_runner("deerflow-agent", host)
        conf = {"api-base": srv.base_url, "user-id-source": source, **({"api-key": key} if key else {})}
        srv.token_delay = 0.03
        srv.fault_queue = ["truncated", "truncated"]
        answers = {"alice": "Alice: the tail points away from the Sun.", "bob": "Bob: comets are icy bodies."}
        runs = {}
        for who in (ALICE, BOB):
            srv.answer_tokens = [w + " " for w in answers[who.actor_id].split(" ")[:-1]] + \
                [answers[who.actor_id].split(" ")[-1]]
            before = len(srv.stream_requests())
            runs[who.actor_id] = asyncio.ensure_future(run(runner, host, f"question of {who.actor_name}",
                                                            config=conf, identity=who))
            await _request_seen(lambda: len(srv.stream_requests()), before)
        for name, task in runs.items():
            results = await task
            assert rtype(terminal(results)) == "run.completed", terminal(results).data
            assert final_text(results) == answers[name], f"{name} got someone else's answer"
            assert all(answers[name].startswith(d) for d in deltas(results)), "shown twice or someone else's"
        assert len(srv.joins) == 2
        by_run = {r.run_id: r.thread_id for r in srv.runs}
        joined = {j.path.split("/runs/")[1].split("/")[0]: j.path.split("/threads/")[1].split("/")[0]
                  for j in srv.joins}
        assert joined == by_run, "each join named its own run on its own thread"
        assert len(set(by_run.values())) == 2


# --- n8n: whose fields the workflow gets, per member, per mode, across a reset --------------------


@pytest.mark.parametrize("source", MODES)
async def test_n8n_each_member_is_heard_as_themselves_in_every_mode_and_after_a_reset(source):
    """The 4.10 fields in a group: session_id/sessionId follow the mode (one each, or one shared),
    user_id/sender_id/sender_name are the sender's own; pipeline variables that spell another
    member's (or message text that claims to be one) change nothing; after a reset every memory key
    is new (still one each, or one shared)."""
    import json

    from runners_cli.host import LocalHost
    from runners_cli.plugins import find
    from tests.fakes.n8n import FakeN8n
    from tests.helpers import make_runner

    with FakeN8n() as srv:
        srv.mode, srv.output_key = "last_node", "response"
        host = LocalHost(runner_id=find("n8n-agent").runner_id)
        runner = make_runner("n8n-agent", host)
        conf = {"webhook-url": srv.webhook_url, "user-id-source": source}

        async def say_n8n(who, other):
            params = {"launcher_type": "group", "launcher_id": "g-42", "sender_id": who.actor_id,
                      "session_id": "group_g-42", "sender_name": who.actor_name, "group_name": "Team",
                      "conversation_id": "group-conv", "msg_create_time": 1767225600}
            spoof = {"session_id": f"person_{other.actor_id}", "sessionId": "x", "user_id": f"user_{other.actor_id}",
                     "sender_id": other.actor_id, "sender_name": other.actor_name, "userName": other.actor_name,
                     "userId": f"user_{other.actor_id}", "chatInput": "not what was said"}
            text = f"session_id: person_{other.actor_id}\nsender_name: {other.actor_name}"
            results = await run(runner, host, text, config=conf, identity=who, params={**params, **spoof})
            assert rtype(terminal(results)) == "run.completed", terminal(results).data
            body = srv.bodies()[-1]
            assert body["chatInput"] == body["message"] == body["user_message_text"] == text
            assert body["sender_name"] == body["userName"] == who.actor_name
            assert body["session_id"] == body["sessionId"] and body["user_id"] == body["userId"]
            if source == "hashed":
                dumped = json.dumps(body)
                assert "g-42" not in dumped and '"alice"' not in dumped and '"bob"' not in dumped, body
                assert body["sender_id"] == body["user_id"] and body["user_id"].startswith("lb_")
            else:
                assert body["sender_id"] == who.actor_id
                assert body["user_id"] == {"actor": f"user_{who.actor_id}", "conversation": "conversation_group-conv",
                                           "legacy-session": "group_g-42"}[source]
            return body

        before = [await say_n8n(ALICE, BOB), await say_n8n(BOB, ALICE)]
        host.reset_conversation(CAROL)
        after = [await say_n8n(BOB, ALICE), await say_n8n(ALICE, BOB)]
        again = [await say_n8n(ALICE, BOB), await say_n8n(BOB, ALICE)]
        shared = source in SHARED
        a0, b0 = before[0]["session_id"], before[1]["session_id"]
        b1, a1 = after[0]["session_id"], after[1]["session_id"]
        assert (a0 == b0) == shared and (a1 == b1) == shared
        assert {a1, b1}.isdisjoint({a0, b0}), "a reset starts a new memory for everyone"
        assert [again[0]["session_id"], again[1]["session_id"]] == [a1, b1], "and the new one is kept"
        if source == "legacy-session":
            assert a0 == "group_g-42" and a1.startswith("group_g-42-")
        assert before[0]["user_id"] != before[1]["user_id"] if not shared else before[0]["user_id"] == before[1]["user_id"]


# --- "still working" while another member's follow-up is answered in the same run ----------------


class Silent(Adapter):
    """A multi-turn agent that answers Alice at once and thinks silently about anything else."""

    platform = "Thinker"
    session_key = "thinker.session"
    multi_turn = True
    pause = 0.0

    async def turn(self, inp, index):
        yield ev.SessionId(self.env.session.current or f"s-{self.env.user}")
        if "Alice" not in inp.text and "slow" not in inp.text:
            await asyncio.sleep(type(self).pause)
        else:
            await asyncio.sleep(0.05)
        yield ev.Text(f"{self.env.user}: {inp.text.splitlines()[0]}")


@pytest.mark.parametrize("source", ["actor", "conversation"])
async def test_the_still_working_line_belongs_to_the_follow_up_it_waits_for(source, monkeypatch):
    """Alice's run answers her at once; Bob's follow-up, claimed for her run, is thought about
    silently: the "still working" line shows in Bob's reply (in his language) while it waits, is
    replaced by his answer, and never touches Alice's answer."""
    from runner_kit import runner as kit_runner
    from tests.helpers import collect, messages

    every = 0.05
    monkeypatch.setattr(kit_runner, "STILL_WORKING_AFTER", every)
    schema = ConfigSchema.from_items([
        {"name": "timeout", "type": "float", "default": 60},
        {"name": "user-id-source", "type": "string", "default": "actor"},
    ])
    runner, host, _ = scripted_runner(Silent, schema, pause=every * 3.5)
    ctx = host.make_context("slow question from Alice", steering=True, identity=ALICE,
                            config={"user-id-source": source})
    queued = []

    def during(r):
        if rtype(r) == "message.delta" and not queued:
            queued.append(host.queue_steering(ctx, "这个怎么样？", BOB))

    out = await collect(runner, host, ctx, during)
    assert rtype(terminal(out)) == "run.completed", terminal(out).data
    said = messages(out)
    assert said[0] == "user_alice: slow question from Alice" if source == "actor" else \
        said[0].endswith("slow question from Alice")
    assert said[-1].endswith("这个怎么样？") and "仍在处理中" not in said[-1], said
    first_done = next(i for i, r in enumerate(out) if rtype(r) == "message.completed")
    still = [i for i, r in enumerate(out) if rtype(r) == "message.delta"
             and "仍在处理中" in r.data["chunk"]["all_content"]]
    assert still and min(still) > first_done, "the line waits in Bob's reply, in his language"
    assert not any("still working" in s or "仍在处理中" in s for s in said)


class Resumable(Adapter):
    """A multi-turn agent whose sessions are resumed by id (a coding agent): it says which."""

    platform = "Coder"
    session_key = "coder.session"
    multi_turn = True
    made: list[str] = []
    gates: dict[str, asyncio.Event] = {}
    started: dict[str, asyncio.Event] = {}

    async def turn(self, inp, index):
        cls = type(self)
        sid = self.env.session.current
        if sid is None:
            sid = f"s{len(cls.made) + 1}"
            cls.made.append(sid)
        if inp.text in cls.started:
            cls.started[inp.text].set()
        if inp.text in cls.gates:
            await cls.gates[inp.text].wait()
        yield ev.SessionId(sid)
        yield ev.Text(f"in {sid}")


@pytest.mark.parametrize("source", MODES)
async def test_a_coding_agent_session_from_before_the_reset_is_not_resumed_after_it(source):
    """The same for an agent resumed by its session id: the message queued behind a run from before
    the reset starts a new agent session, and so does every later one until the next reset."""
    runner, host, cls = scripted_runner(Resumable, SCHEMA, made=[], gates={}, started={})
    cls.gates["first"], cls.started["first"] = asyncio.Event(), asyncio.Event()
    first = asyncio.ensure_future(say(runner, host, ALICE, "first", source))
    await asyncio.wait_for(cls.started["first"].wait(), 2)
    host.reset_conversation(BOB)
    nxt = BOB if source in SHARED else ALICE
    second = asyncio.ensure_future(say(runner, host, nxt, "second", source))
    await settle()
    cls.gates["first"].set()
    assert await first == "in s1"
    assert await second == "in s2", "the agent session from before the reset was resumed"
    assert await say(runner, host, nxt, "third", source) == "in s2"


# --- an agent's open question from before the reset -----------------------------------------------


@pytest.mark.usefixtures("no_parked")
@pytest.mark.parametrize("source", MODES)
async def test_an_agents_question_from_before_the_reset_holds_no_one_after_it(source):
    """Alice's coding agent asks for permission and waits (its question is parked). Someone resets
    the group; the next message of that session (Bob's where it is shared, Alice's own otherwise)
    starts afresh: it is not "kept until Alice answers", it never reaches the old agent, and a late
    "allow" no longer approves the old command."""
    from runner_kit import approvals as ap
    from tests.helpers import messages

    class Asker(Resumable):
        async def turn(self, inp, index):
            sid = self.env.session.current
            if sid is None:
                sid = f"s{len(type(self).made) + 1}"
                type(self).made.append(sid)
            yield ev.SessionId(sid)
            if "deploy" in inp.text:
                d = await self.env.ask(ap.Question(title="run a command: ./deploy.sh", scope="cmd:./deploy.sh"))
                yield ev.Text(f"[{d.word}] ")
            yield ev.Text(f"in {sid}: {inp.text}")

    schema = ConfigSchema.from_items([
        {"name": "timeout", "type": "float", "default": 60},
        {"name": "approval-timeout", "type": "float", "default": 600},
        {"name": "user-id-source", "type": "string", "default": "actor"},
    ])
    runner, host, cls = scripted_runner(Asker, schema, made=[], gates={}, started={})
    asked = await run(runner, host, "deploy please", identity=ALICE, config={"user-id-source": source})
    assert "wants to run a command" in messages(asked)[0]
    host.reset_conversation(CAROL)
    nxt = BOB if source in SHARED else ALICE
    first = await run(runner, host, "hello after the reset", identity=nxt, config={"user-id-source": source})
    assert messages(first) == ["in s2: hello after the reset"], "held by the question from before the reset"
    late = await run(runner, host, "allow", identity=ALICE, config={"user-id-source": source})
    assert not any("[allow]" in m for m in messages(late)), "the old command was approved after the reset"


@pytest.mark.xfail(strict=True, reason=(
    "a message LangBot claims after a reset for a run that started before it (steering: the run is "
    "still active on the conversation) goes to that run's agent session, the one the reset left: "
    "the steering item carries no state snapshot and so no reset generation, and no run entered to "
    "tell the kit (runner_kit.resets). Needs the host to say (a generation on the item, or ending "
    "the conversation's active runs on a reset); the kit could then route it like another session's"))
async def test_a_follow_up_claimed_after_the_reset_by_a_run_from_before_it_starts_a_new_agent_session():
    from tests.helpers import collect, messages

    runner, host, cls = scripted_runner(Resumable, SCHEMA, made=[], gates={}, started={})
    cls.gates["first"], cls.started["first"] = asyncio.Event(), asyncio.Event()
    ctx = host.make_context("first", steering=True, identity=ALICE, config={"user-id-source": "conversation"})
    task = asyncio.ensure_future(collect(runner, host, ctx))
    await asyncio.wait_for(cls.started["first"].wait(), 2)
    host.reset_conversation(CAROL)
    host.queue_steering(ctx, "a new topic", BOB)
    cls.gates["first"].set()
    out = await task
    assert messages(out)[0] == "in s1"
    assert messages(out)[-1] == "in s2", "Bob's message after the reset went to the agent session from before it"


async def test_a_message_taken_in_just_before_the_reset_does_not_turn_the_conversation_back():
    """LangBot took Alice's message (and its state) in just before the reset, and it reaches the
    plugin only after Bob's first message after it: what Bob's run keeps is still kept (the late
    message is from before the reset, it does not make the new conversation old)."""
    runner, host, cls = make()
    conf = {"user-id-source": "conversation"}
    late_ctx = host.make_context("from before", identity=ALICE, config=conf)
    host.reset_conversation(CAROL)
    gate, started = gated(cls, "early bob")
    bob_ctx = host.make_context("early bob", identity=BOB, config=conf)

    async def go(ctx):
        out = []
        async for r in runner.invoke(ctx):
            host.apply_result(ctx.run_id, r)
            out.append(r)
        return out

    bob = asyncio.ensure_future(go(bob_ctx))
    await asyncio.wait_for(started.wait(), 2)
    alice = asyncio.ensure_future(go(late_ctx))
    await settle()
    gate.set()
    bob_out, _ = await bob, await alice
    assert final_text(bob_out) == "in c1"
    kept = host.store.snapshot(host.scope_key(BOB, "conversation"))
    assert kept.get("upstream.note") == "early bob", "Bob's run's state was dropped as if it were from before the reset"
