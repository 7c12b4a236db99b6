"""Attack on the chat language (issue 34 item 2: runner_kit.texts and every note the kit writes) as a
group uses it: two or three members of one LangBot conversation writing in different languages
(one Chinese, one English, one sending only a sticker), in each ``user-id-source`` mode, through
tests/kit/test_sessions.py's scripted ``Agent``.

What a member reads must be in *their* language: a note addressed to a member (their follow-up,
their question, their kept message) in the language that member writes in, never in the language of
whoever's run happened to carry it. Each break found was fixed and is kept as a test; one older
break (not from this change, legacy-session) stays a strict xfail saying what the chat shows."""

from __future__ import annotations

import asyncio
import dataclasses
import re

import pytest

from runner_kit import approvals as ap
from runner_kit import command_scope as cs
from runner_kit import events as ev
from runner_kit import routing as kit_routing
from runner_kit import runner as kit_runner
from runner_kit import sessions, texts
from runner_kit.errors import RunnerError
from tests.helpers import collect, messages, rtype, scripted_runner
from tests.kit.test_sessions import (
    ALICE,
    BOB,
    CAROL,
    SCHEMA,
    Agent,
    on_first_delta,
    question_id,
    turns_of,
)

pytestmark = pytest.mark.usefixtures("no_parked")

HAN = re.compile(r"[\u4e00-\u9fff]")
LATIN_WORDS = re.compile(r"[A-Za-z]{3,}")
MODES = ("actor", "hashed", "conversation", "legacy-session", "legacy-bot")
PER_PERSON = ("actor", "hashed")


@pytest.fixture(autouse=True)
async def quick(monkeypatch):
    monkeypatch.setattr(kit_routing, "BUSY_NOTICE_AFTER", 0.02)
    monkeypatch.setattr(kit_runner, "POLL_INTERVAL", 0.01)
    monkeypatch.setattr(kit_routing, "PARKED_CHECK", 0.01, raising=False)
    monkeypatch.setattr(ap, "PARK_GRACE", 0.01)
    texts.forget()
    yield
    await ap.close_all()
    sessions.SLOTS.clear()
    texts.forget()


def chinese(text: str) -> bool:
    """A kit note in Chinese: Chinese characters and no English sentence (names and code aside)."""
    return bool(HAN.search(text)) and not re.search(r"\b(the|your|is|was|can|only|message|answer|session)\b",
                                                       text, re.I)


def english(text: str) -> bool:
    return not HAN.search(text)


def member(ident, mode: str):
    """``ident`` as LangBot 4.11 describes a group member for ``mode`` (legacy-session: the launcher
    is the group, the same for everyone in it)."""
    if mode == "legacy-session":
        return dataclasses.replace(ident, launcher_type="group", launcher_id="group-1")
    return ident


def cfg(mode: str, **more):
    return {"user-id-source": mode, **more}


class Failing(Agent):
    """``Agent``, except: a turn whose text has "boom" (or only a 👍 sticker) fails with an
    authentication error before it says anything; "ask boom" asks first and fails after the answer."""

    async def turn(self, inp, index):
        if "boom" in inp.text or inp.text.strip().endswith("👍"):
            type(self).log.append({"user": self.env.user, "text": inp.text, "index": index})
            yield ev.SessionId(f"sess-{self.env.user}")
            if "ask" in inp.text:
                await self.env.ask(ap.Question(title="run a command: rm -rf build", scope="cmd:rm -rf build"))
            raise RunnerError("upstream.auth", "HTTP 401")
        async for e in super().turn(inp, index):
            yield e


def make(adapter=Agent, **attrs):
    return scripted_runner(adapter, SCHEMA, log=[], **attrs)


def requested(results):
    return [r.data["payload"] for r in results
            if rtype(r) == "action.requested" and r.data.get("action") == "interaction.requested"]


def on_question(host, ctx, *follow_ups):
    """Queue follow-ups for ``ctx``'s run once its typed question reaches the chat."""
    done = []

    def during(r):
        if rtype(r) == "message.completed" and not done:
            content = r.data["message"]["content"]
            if isinstance(content, str) and ("wants to" in content or "请求许可" in content):
                done.append(True)
                for text, ident in follow_ups:
                    host.queue_steering(ctx, text, ident)

    return during


def explained(results) -> str:
    """The failure explanation a run ended with (its one notice about the rejected key)."""
    (said,) = [m for m in messages(results) if "API" in m]
    return said


ZH_AUTH = "Agent 拒绝了 API 密钥"
EN_AUTH = "Agent rejected the API key"


# === the scenarios that held =========================================================================


@pytest.mark.parametrize("mode", MODES)
async def test_each_member_keeps_their_own_remembered_language_in_every_mode(mode):
    """Alice writes English, Bob Chinese, Carol only ever sends a sticker. Each one's sticker is then
    answered (here: explained) in their own language — Bob's Chinese never becomes Alice's, also where
    the whole group shares one upstream conversation (``_LAST`` is keyed by conversation *and* person)."""
    runner, host, cls = make(Failing)
    alice, bob, carol = (member(i, mode) for i in (ALICE, BOB, CAROL))
    await collect(runner, host, host.make_context("hello there, can you help", identity=alice, config=cfg(mode)))
    await collect(runner, host, host.make_context("你好，帮我看看这个报错", identity=bob, config=cfg(mode)))
    assert EN_AUTH in explained(await collect(runner, host, host.make_context("👍", identity=alice, config=cfg(mode))))
    assert ZH_AUTH in explained(await collect(runner, host, host.make_context("👍", identity=bob, config=cfg(mode))))
    assert EN_AUTH in explained(await collect(runner, host, host.make_context("👍", identity=carol, config=cfg(mode))))


@pytest.mark.parametrize("mode", ("conversation", "legacy-session", "legacy-bot"))
async def test_while_a_chinese_question_waits_each_member_is_told_in_their_own_language(mode):
    """Shared session: Alice's (Chinese) question waits. Bob's "no problem" and "lol what is this",
    Carol's "不错" and her sticker answer nothing; each is told in their own language that the message
    is kept. Alice's "可以" answers; every kept message reaches the agent once, with its sender's name."""
    runner, host, cls = make()
    alice, bob, carol = (member(i, mode) for i in (ALICE, BOB, CAROL))
    c = cfg(mode)
    await collect(runner, host, host.make_context("这个不错", identity=carol, config=c))
    asked = await collect(runner, host, host.make_context("ask: 清理构建目录", identity=alice, config=c))
    assert messages(asked)[-1].startswith("🔐 Agent 请求许可")
    for text, who, lang in (("no problem", bob, english), ("不错", carol, chinese),
                            ("lol what is this", bob, english), ("👍", carol, chinese)):
        out = await collect(runner, host, host.make_context(text, identity=who, config=c))
        (said,) = messages(out)
        assert lang(said), (text, said)
    assert len(ap.PARKED) == 1 and not next(iter(ap.PARKED.values())).future.done(), "nobody but Alice answered"
    done = await collect(runner, host, host.make_context("可以", identity=alice, config=c))
    said = messages(done)
    assert said[0].startswith("[allow]")
    kept = "Bob: no problem\n\nCarol: 不错\n\nBob: lol what is this\n\nCarol: 👍"
    assert cls.log[-1]["text"] == kept and said[-1].endswith(kept)
    assert [t["text"] for t in cls.log].count(kept) == 1 and len(said) == 2, "each kept message sent once"


@pytest.mark.parametrize("asker, approver, typed", [(ALICE, BOB, "allow"), (BOB, ALICE, "允许"),
                                                    (ALICE, BOB, "always"), (BOB, ALICE, "总是允许")])
async def test_an_approver_answers_in_their_own_language_whatever_the_question_was_asked_in(asker, approver, typed):
    """Bob writes Chinese, Alice English; each is the other's approver. A question asked in one
    language is answered by typing in the other; the asker's agent goes on (never the approver's)."""
    runner, host, cls = make()
    c = {"approvers": ["alice", "bob"]}
    await collect(runner, host, host.make_context("你好", identity=BOB, config=c))
    await collect(runner, host, host.make_context("hello", identity=ALICE, config=c))
    said = "ask: 清理构建目录" if asker is BOB else "ask: clean the build"
    await collect(runner, host, host.make_context(said, identity=asker, config=c))
    out = await collect(runner, host, host.make_context(typed, identity=approver, config=c))
    word = "always" if typed in ("always", "总是允许") else "allow"
    assert messages(out) == [f"[{word}] user_{asker.actor_id} got: {said}"]
    assert not ap.PARKED


async def test_two_overlapping_runs_in_one_process_keep_their_own_language():
    """Alice's and Bob's runs overlap in one process (per person: neither waits): each failure is
    explained in its own person's language — the language is bound per run, not per process."""
    runner, host, cls = make(Failing, pause=0.1)

    async def one(text, who):
        return await collect(runner, host, host.make_context(text, identity=who))

    outs = await asyncio.gather(*(one(t, w) for t, w in (("slow boom: check", ALICE), ("慢慢来 slow boom 检查", BOB),
                                                         ("slow boom again", CAROL), ("再来 slow boom 一次", ALICE))))
    assert EN_AUTH in explained(outs[0]) and ZH_AUTH in explained(outs[1])
    assert EN_AUTH in explained(outs[2]) and ZH_AUTH in explained(outs[3])


# === the breaks found =================================================================================


async def test_a_click_is_no_english_message():
    runner, host, cls = make(Failing)
    asked = await collect(runner, host, host.make_context("ask: 清理构建目录", identity=ALICE, interactions=True))
    assert requested(asked)[0]["title"] == "Agent 请求许可"
    click = {"interaction_id": question_id(asked), "action_id": "allow"}
    await collect(runner, host, host.make_context("", identity=ALICE, interaction=click, interactions=True))
    again = await collect(runner, host, host.make_context("", identity=ALICE, interaction=click, interactions=True))
    assert messages(again) == ["（这个问题已经由 Alice 回答了。）"]
    assert ZH_AUTH in explained(await collect(runner, host, host.make_context("👍", identity=ALICE)))


@pytest.mark.parametrize("mode", MODES)
async def test_a_member_clicking_someone_elses_button_is_told_in_their_language(mode):
    runner, host, cls = make()
    alice, bob = member(ALICE, mode), member(BOB, mode)
    c = cfg(mode)
    await collect(runner, host, host.make_context("你好，这个机器人能做什么", identity=bob, config=c))
    asked = await collect(runner, host, host.make_context("ask: clean the build", identity=alice, config=c,
                                                          interactions=True))
    click = {"interaction_id": question_id(asked), "action_id": "allow"}
    out = await collect(runner, host, host.make_context("", identity=bob, config=c, interaction=click, interactions=True))
    (said,) = messages(out)
    assert "Alice" in said and chinese(said), said
    assert len(ap.PARKED) == 1, "Bob answered nothing"


@pytest.mark.parametrize("typed", ["ok", "allow", "yes, go ahead"])
async def test_a_one_word_answer_is_no_change_of_language(typed):
    runner, host, cls = make(Failing)
    asked = await collect(runner, host, host.make_context("ask boom: 清理构建目录", identity=ALICE))
    assert messages(asked)[-1].startswith("🔐 Agent 请求许可")
    done = await collect(runner, host, host.make_context(typed, identity=ALICE))
    assert ZH_AUTH in explained(done), messages(done)


@pytest.mark.parametrize("mode", PER_PERSON)
async def test_a_sticker_follow_up_is_told_in_the_language_its_sender_last_wrote_in(mode):
    runner, host, cls = make()
    await collect(runner, host, host.make_context("你好，帮我看看这个报错", identity=BOB, config=cfg(mode)))
    ctx = host.make_context("slow: refactor the parser", steering=True, identity=ALICE, config=cfg(mode))
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("👍", BOB)))
    said = messages(out)
    assert said[0].endswith("got: slow: refactor the parser") and said[-1].endswith("got: 👍")
    assert said[1] == "（Bob，接下来在你自己的会话中回答你的消息。）", said


@pytest.mark.parametrize("mode", MODES)
async def test_what_a_member_wrote_as_a_follow_up_is_remembered(mode):
    runner, host, cls = make(Failing)
    alice, bob = member(ALICE, mode), member(BOB, mode)
    ctx = host.make_context("slow: refactor the parser", steering=True, identity=alice, config=cfg(mode))
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("帮我看看日志里的报错", bob)))
    assert any(m.endswith("帮我看看日志里的报错") for m in messages(out)), "Bob's follow-up was answered"
    assert ZH_AUTH in explained(await collect(runner, host, host.make_context("👍", identity=bob, config=cfg(mode))))


@pytest.mark.parametrize("mode", MODES)
async def test_a_follow_up_turns_failure_is_explained_in_its_senders_language(mode):
    runner, host, cls = make(Failing)
    alice, carol = member(ALICE, mode), member(CAROL, mode)
    ctx = host.make_context("slow: refactor the parser", steering=True, identity=alice, config=cfg(mode))
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("请帮我 boom 一下", carol)))
    assert messages(out)[0].endswith("got: slow: refactor the parser")
    assert cls.log[-1]["text"].endswith("请帮我 boom 一下"), "Carol's message reached an agent"
    assert (cls.log[-1]["user"] != cls.log[0]["user"]) == (mode in PER_PERSON), "in her own session per person"
    assert ZH_AUTH in explained(out) and chinese(explained(out)), explained(out)


@pytest.mark.parametrize("mode", MODES)
async def test_a_question_from_a_follow_up_turn_is_asked_in_its_senders_language(mode):
    runner, host, cls = make()
    alice, carol = member(ALICE, mode), member(CAROL, mode)
    ctx = host.make_context("slow: refactor the parser", steering=True, identity=alice, config=cfg(mode),
                            interactions=True)
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("请 ask 一下，清理构建目录", carol)))
    (req,) = requested(out)
    assert ap.PARKED and next(iter(ap.PARKED.values())).gate.asker == "carol", "the question is Carol's"
    assert req["title"] == "Agent 请求许可", req
    assert [a["label"] for a in req["actions"]] == ["允许一次", "本次会话内允许：`rm -rf build`", "拒绝"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_refused_typed_answer_is_told_in_the_refused_members_language(mode):
    runner, host, cls = make()
    alice, bob = member(ALICE, mode), member(BOB, mode)
    ctx = host.make_context("ask: clean the build", steering=True, identity=alice,
                            config=cfg(mode, **{"approval-timeout": 0.2}))
    out = await collect(runner, host, ctx, on_question(host, ctx, ("允许", bob)))
    said = messages(out)
    assert said[-1].endswith("允许"), "Bob's message still reaches the agent afterwards, once"
    assert [t["text"] for t in cls.log].count(cls.log[-1]["text"]) == 1
    (refused,) = [m for m in said if "Alice" in m]
    assert chinese(refused), refused


@pytest.mark.parametrize("mode", ("conversation", "legacy-bot"))  # legacy-session: see the test after it
async def test_a_follow_up_kept_for_a_parked_question_is_told_in_its_senders_language(mode):
    runner, host, cls = make()
    alice, bob = member(ALICE, mode), member(BOB, mode)
    ctx = host.make_context("slow ask: clean the build", steering=True, identity=alice, config=cfg(mode),
                            interactions=True)
    host.queue_steering(ctx, "再把文档也更新一下", bob)
    out = await collect(runner, host, ctx)
    (kept,) = [m for m in messages(out) if "Bob" in m]
    done = await collect(runner, host, host.make_context("", identity=alice, config=cfg(mode), interactions=True,
                                                         interaction={"interaction_id": question_id(out),
                                                                      "action_id": "allow"}))
    assert messages(done)[-1].endswith("Bob: 再把文档也更新一下"), "kept, and sent once"
    assert chinese(kept), kept


@pytest.mark.xfail(strict=True, reason="NOT from this change (the same on fbb23df^): legacy-session, Alice's agent "
                   "asks with buttons while Bob's follow-up is claimed for her run; the run then answers it as another "
                   "session's work with a context built from the steering item, which (as LangBot 4.11.2 sends it) has "
                   "no launcher, so the chat reads 'This bot cannot tell who is asking: user-id-source is "
                   "'legacy-session' but the host sent no launcher identity …' and Bob's message never reaches the "
                   "agent, nor is named unanswered")
async def test_legacy_session_a_follow_up_while_the_agent_asks_is_kept_not_a_failure():
    mode = "legacy-session"
    runner, host, cls = make()
    alice, bob = member(ALICE, mode), member(BOB, mode)
    ctx = host.make_context("slow ask: clean the build", steering=True, identity=alice, config=cfg(mode),
                            interactions=True)
    host.queue_steering(ctx, "and update the docs", bob)
    out = await collect(runner, host, ctx)
    assert not any("cannot tell who is asking" in m for m in messages(out)), messages(out)
    done = await collect(runner, host, host.make_context("", identity=alice, config=cfg(mode), interactions=True,
                                                         interaction={"interaction_id": question_id(out),
                                                                      "action_id": "allow"}))
    assert messages(done)[-1].endswith("Bob: and update the docs"), messages(done)


@pytest.mark.parametrize("mode", PER_PERSON)
async def test_a_follow_up_kept_for_its_own_sessions_question_is_told_in_its_senders_language(mode):
    runner, host, cls = make()
    await collect(runner, host, host.make_context("ask: 清理构建目录", identity=BOB, config=cfg(mode), interactions=True))
    ctx = host.make_context("slow: alice's job", steering=True, identity=ALICE, config=cfg(mode))
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("还有文档也要更新", BOB)))
    (kept,) = [m for m in messages(out) if "Bob" in m]
    assert chinese(kept), kept


@pytest.mark.parametrize("scope", ["cmd-prefix:git status", "cmd:git log --oneline --graph --decorate --all "
                                   "--since=2.weeks --author=alice src/parser tests/parser",
                                   "edit:src/app.py"])
def test_the_chinese_session_button_is_chinese(scope):
    q = ap.Question(title="run it", scope=scope)
    assert q.remembers(), "a scope that can be kept"
    tokens = texts.bind(texts.ZH)
    try:
        label = q.session_label
    finally:
        texts.unbind(tokens)
    assert label is not None and len(label) <= cs.LABEL_LIMIT
    outside_code = re.sub(r"`[^`]*`|\S*/\S*", "", label)
    assert HAN.search(label) and not LATIN_WORDS.search(outside_code), label


async def test_typing_the_chinese_session_buttons_words_answers_the_question():
    runner, host, cls = make()
    await collect(runner, host, host.make_context("ask: 清理构建目录", identity=ALICE))
    done = await collect(runner, host, host.make_context("本次会话内允许", identity=ALICE))
    assert messages(done) == ["[always] user_alice got: ask: 清理构建目录"], messages(done)


async def test_a_run_closed_from_another_task_ends_quietly():
    runner, host, cls = make(pause=1.0)
    gen = runner.run(host.make_context("slow: a long job", identity=ALICE))
    await asyncio.get_running_loop().create_task(gen.__anext__())
    await asyncio.get_running_loop().create_task(gen.aclose())


async def test_a_resumed_turn_speaks_to_whoever_answered_it():
    """Bob (Chinese) approves Alice's English question: the turn goes on in Bob's run, in front of
    Bob, so what it says (here a failure) is in Bob's language — decided so: the asker may not even
    be reading any more, the person who just acted is."""
    runner, host, cls = make(Failing)
    c = {"approvers": ["bob"]}
    await collect(runner, host, host.make_context("ask boom: clean the build", identity=ALICE, config=c))
    out = await collect(runner, host, host.make_context("允许", identity=BOB, config=c))
    assert turns_of(cls, "user_bob") == [], "the agent that goes on is Alice's"
    assert ZH_AUTH in explained(out), messages(out)


class Unreachable(Agent):
    """``Agent``, except: after its question is answered, a turn with "refused" fails as a connection
    nobody accepts (``runner_kit.http.transport_error``: its chat line is written where the error is
    made, inside the agent's reading task), one with "boom" as a rejected key (explained by the run)."""

    async def turn(self, inp, index):
        import httpx

        from runner_kit.http import transport_error

        yield ev.SessionId(f"sess-{self.env.user}")
        await self.env.ask(ap.Question(title="run a command: rm -rf build", scope="cmd:rm -rf build"))
        if "refused" in inp.text:
            raise transport_error(httpx.ConnectError("[Errno 111] Connection refused"), "Agent", "10.0.0.5:8080")
        raise RunnerError("upstream.auth", "HTTP 401")


@pytest.mark.parametrize("mode", MODES)
async def test_a_resumed_turn_speaks_one_language_whatever_fails(mode):
    shown = {}
    for fails in ("refused", "boom"):
        texts.forget()
        runner, host, cls = make(Unreachable)
        alice, bob = member(ALICE, mode), member(BOB, mode)
        c = cfg(mode, approvers=["bob"])
        await collect(runner, host, host.make_context("hello, I am Bob", identity=bob, config=c))
        await ap.close_all()
        asked = await collect(runner, host, host.make_context(f"ask {fails}: 清理构建目录", identity=alice, config=c))
        assert messages(asked)[-1].startswith("🔐 Agent 请求许可")
        out = await collect(runner, host, host.make_context("allow", identity=bob, config=c))
        (said,) = messages(out)
        shown[fails] = "zh" if HAN.search(said) else "en"
        assert not ap.PARKED
    assert shown["refused"] == shown["boom"], shown
