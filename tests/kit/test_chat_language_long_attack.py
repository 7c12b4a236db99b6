"""Attack, "a long conversation" (attack.md), on the chat language (issue 34 item 2: runner_kit.texts,
runner_kit.explain and the notes the kit writes): hundreds of runs in one conversation, one run with
dozens of follow-up turns from members writing English and Chinese, runs closed by the host mid-turn
and cleanup that outlives its run, the process-wide memory of each person's language (``_LAST``),
what ``explanation()`` costs, and the stored texts of configs from before the change.

The scenarios that held are plain tests; each break found was fixed and is kept as a test (what the chat
showed is in each docstring). Waits are milliseconds; the one measurement counts calls, with bounds far
above what was seen."""

from __future__ import annotations

import asyncio
import gc
import re
import sys
import time
from contextlib import asynccontextmanager
from typing import Any

import pytest

from runner_kit import approvals as ap
from runner_kit import events as ev
from runner_kit import explain, sessions, texts
from runner_kit import routing as kit_routing
from runner_kit import runner as kit_runner
from runner_kit.config import ConfigSchema
from runner_kit.errors import RunnerError
from runner_kit.runner import (
    DEFAULT_SESSION_RESET_TEXT,
    DEFAULT_SESSION_RESET_TEXT_ZH,
    NO_REPLY_TEXT,
    Adapter,
)
from runners_cli.host import Identity, LocalHost
from tests.helpers import collect, messages, rtype, scripted_runner
from tests.kit.test_chat_language import KEY
from tests.kit.test_chat_language import SCHEMA as LABELLED
from tests.kit.test_runner import Scripted

pytestmark = pytest.mark.usefixtures("no_parked")

HAN = re.compile(r"[\u4e00-\u9fff]")
ALICE = Identity(actor_id="alice", actor_name="Alice")
BOB = Identity(actor_id="bob", actor_name="Bob")
CAROL = Identity(actor_id="carol", actor_name="Carol")
DAN = Identity(actor_id="dan", actor_name="Dan")
ERIN = Identity(actor_id="erin", actor_name="Erin")

EN_NEXT = "({who}, your message is answered next, in your own session.)"
ZH_NEXT = "（{who}，接下来在你自己的会话中回答你的消息。）"
EN_DOWN = "Loop cannot be reached right now"
ZH_DOWN = "暂时无法连接 Loop"


@pytest.fixture(autouse=True)
async def quick(monkeypatch):
    monkeypatch.setattr(kit_routing, "BUSY_NOTICE_AFTER", 0.02)
    monkeypatch.setattr(kit_runner, "POLL_INTERVAL", 0.01)
    monkeypatch.setattr(kit_routing, "PARKED_CHECK", 0.01, raising=False)
    texts.forget()
    yield
    await ap.close_all()
    sessions.SLOTS.clear()
    texts.forget()


def chinese(text: str) -> bool:
    return bool(HAN.search(text))


def english(text: str) -> bool:
    return not HAN.search(text)


async def drained() -> None:
    """Let the end-of-run cleanups (runner._CLEANUPS) finish: a few loop turns, then short waits."""
    for _ in range(50):
        if not kit_runner._CLEANUPS:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(kit_runner._CLEANUPS)} cleanup task(s) still running")


def unbound() -> bool:
    """Nothing of any run is bound in this (the test's) context."""
    return texts.current() == texts.EN and not texts.labels() and not texts._fixed.get()


@asynccontextmanager
async def loop_errors():
    """What reaches the event loop's exception handler meanwhile (a task's exception never retrieved,
    an async generator that failed to close)."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        yield seen
    finally:
        loop.set_exception_handler(old)


# --- a multi-turn agent whose turns the test scripts ------------------------------------------------

SCHEMA = ConfigSchema.from_items([
    {"name": "timeout", "type": "float", "default": 60},
    {"name": "user-id-source", "type": "string", "default": "actor"},
    {"name": "follow-up-mode", "type": "select", "default": "next-turn",
     "options": [{"name": "next-turn"}, {"name": "interrupt"}]},
    {"name": "chat-language", "type": "select", "default": "auto",
     "options": [{"name": "auto"}, {"name": "en_US"}, {"name": "zh_Hans"}]},
])


class Loop(Adapter):
    """Each turn: logs (user, text, the language the adapter sees), lets ``hook`` queue the next
    follow-up, then answers. "quiet"/"安静" answers nothing; "boom" fails; "hang" never ends."""

    platform = "Loop"
    session_key = "loop.session"
    multi_turn = True
    log: list = []
    hook: Any = None
    closed: list = []

    async def turn(self, inp, index):
        yield ev.SessionId(f"s-{self.env.user}")
        type(self).log.append((self.env.user, inp.text, texts.current()))
        if type(self).hook is not None:
            type(self).hook(inp.text)
        if "hang" in inp.text:
            yield ev.Text("working")
            await asyncio.sleep(30)
        if "quiet" in inp.text or "安静" in inp.text:
            return
        if "boom" in inp.text:
            raise RunnerError("upstream.unavailable", "the connection dropped")
        yield ev.Text(f"{self.env.user} got: {inp.text}")

    async def close(self):
        type(self).closed.append(self.env.user)


def make_loop(**attrs):
    return scripted_runner(Loop, SCHEMA, log=[], closed=[], hook=None, **attrs)


def feeder(host: LocalHost, ctx: Any, follow_ups: list[tuple[str, Identity]]):
    """A hook that, at the start of every turn, claims the next follow-up for ``ctx``'s run (as
    LangBot does for a message written while the run works): one per turn, so each is a turn."""
    queue = list(follow_ups)

    def hook(_text: str) -> None:
        if queue:
            text, who = queue.pop(0)
            host.queue_steering(ctx, text, who)

    return hook


def sequence(n: int) -> list[tuple[str, Identity, str]]:
    """``n`` follow-ups: Bob and Dan write Chinese, Carol and Erin English, Alice (whose run it is)
    alternates and sometimes wants no answer; never the same member twice in a row."""
    order = [BOB, ALICE, CAROL, ALICE, DAN, ALICE, ERIN, ALICE]
    out = []
    for i in range(n):
        who = order[i % len(order)]
        if who in (BOB, DAN):
            out.append((f"第{i}个问题，请帮我看看这个日志", who, "zh"))
        elif who in (CAROL, ERIN):
            out.append((f"question {i}: please have a look at the log", who, "en"))
        elif i % 4 == 1:
            out.append((f"quiet please, step {i} needs no reply", who, "en"))
        else:
            out.append((f"第{i}步：继续检查测试", who, "zh"))
    return out


# === 1. one run, dozens of follow-up turns in two languages ==========================================


async def test_dozens_of_follow_up_turns_in_two_languages_each_note_in_its_senders_language_and_nothing_drifts():
    """Alice's English run takes 32 follow-ups, one per turn, from five members (Chinese and English,
    Alice herself switching): each "answered next" note is in its member's language (texts.to), the
    notes for Alice's own turns stay in the run's English after every switch (never stuck on the
    last texts.to), each turn runs in its sender's language, the final failure is
    explained in English, and nothing of the run is left bound; the next runs of Bob and Carol
    read their own languages."""
    runner, host, cls = make_loop()
    follow = sequence(32) + [("boom: last step", ALICE, "en")]
    ctx = host.make_context("start the long refactor", steering=True, identity=ALICE)
    cls.hook = feeder(host, ctx, [(t, w) for t, w, _ in follow])
    out = await collect(runner, host, ctx)
    said = messages(out)

    answered = [text for _, text, _ in cls.log]
    assert answered[0] == "start the long refactor"
    assert sorted(answered[1:]) == sorted(t for t, _, _ in follow), "every follow-up became a turn"
    lang_of = {t: lang for t, _, lang in follow}
    assert cls.log[0][2] == "en" and all(seen == lang_of[text] for _, text, seen in cls.log[1:]), \
        "each turn is in its sender's language (one sender per turn here), never stuck on an earlier one"

    notes = [m for m in said if "your own session" in m or "你自己的会话" in m]
    expected = []
    for _, who, lang in follow:
        if who is not ALICE:
            expected.append((ZH_NEXT if lang == "zh" else EN_NEXT).format(who=who.actor_name))
    assert notes == expected
    quiet = sum(1 for t, w, _ in follow if w is ALICE and "quiet" in t)
    assert said.count(NO_REPLY_TEXT) == quiet >= 4, "Alice's own notes stay English after each texts.to"
    assert EN_DOWN in said[-1] and english(said[-1]), said[-1]
    assert unbound()
    await drained()

    bob = await collect(runner, host, host.make_context("boom 为什么又失败了", identity=BOB))
    carol = await collect(runner, host, host.make_context("boom why did it fail again", identity=CAROL))
    assert ZH_DOWN in messages(bob)[-1] and EN_DOWN in messages(carol)[-1]


async def test_the_no_reply_note_of_another_members_own_turn_is_in_their_language():
    runner, host, cls = make_loop()
    ctx = host.make_context("start the long refactor", steering=True, identity=ALICE)
    cls.hook = feeder(host, ctx, [("请安静，这一步不用回复", BOB)])
    said = messages(await collect(runner, host, ctx))
    assert said[:2] == ["user_alice got: start the long refactor", ZH_NEXT.format(who="Bob")]
    assert said[2] == kit_runner.NO_REPLY_TEXT_ZH, said


# === 2. runs ended by the host mid-turn, cleanup after the run ========================================


async def forever(_adapter):
    await asyncio.sleep(30)


def make_scripted(script):
    return scripted_runner(Scripted, LABELLED, script=script, cancelled=[], attempts=[])


@pytest.mark.parametrize("how", ["aclose", "cancel"])
async def test_a_run_the_host_ends_mid_stream_leaves_no_binding_and_the_next_runs_read_their_own_language(how):
    """The host closes the result stream (or cancels the task reading it) after the first delta of a
    Chinese answer: no exception reaches the loop, the upstream is told to stop, nothing is left bound
    in the host's context, and the same person's next runs (English, then a sticker, then Chinese)
    read their own languages."""
    runner, host, cls = make_scripted([ev.Text("第一部分"), forever])
    ctx = host.make_context("请写一份很长的报告")
    async with loop_errors() as errors:
        agen = runner.invoke(ctx)

        async def read() -> None:
            async for r in agen:
                host.apply_result(ctx.run_id, r)
                if rtype(r) == "message.delta" and how == "aclose":
                    break
                # "cancel": the host's task is cancelled while it waits for the next result

        if how == "aclose":
            await read()
            await agen.aclose()
        else:
            task = asyncio.create_task(read())
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await drained()
        assert cls.cancelled == [True], "the upstream was told to stop"
        assert unbound()

        async def fails(text):
            cls.script = [boom_step(RunnerError("upstream.auth", "HTTP 401"))]
            return messages(await collect(runner, host, host.make_context(text)))[-1]

        assert "rejected the API key" in await fails("why did it stop")
        assert "rejected the API key" in await fails("👍"), "a sticker: what this person last wrote in"
        assert "拒绝了 API 密钥" in await fails("为什么停了")
        assert "拒绝了 API 密钥" in await fails("👍")
        gc.collect()
        await asyncio.sleep(0)
    assert not errors, errors


def boom_step(exc):
    async def step(_adapter):
        raise exc

    return step


async def test_a_multi_turn_run_cancelled_mid_turn_after_many_notes_to_others_leaves_nothing_bound():
    """Ten follow-up turns with notes in both languages, then the host cancels the run while an
    eleventh turn works: the agent session is closed, the loop sees no error, the host's context has
    nothing bound, and Bob's next run (Chinese) and Alice's (English) read their own languages."""
    runner, host, cls = make_loop()
    ctx = host.make_context("start the long refactor", steering=True, identity=ALICE)
    follow = [(t, w) for t, w, _ in sequence(10)] + [("hang on this one", ALICE)]
    cls.hook = feeder(host, ctx, follow)
    async with loop_errors() as errors:
        task = asyncio.create_task(collect(runner, host, ctx))
        for _ in range(200):
            if any("hang" in text for _, text, _ in cls.log):
                break
            await asyncio.sleep(0.005)
        assert any("hang" in text for _, text, _ in cls.log)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await drained()
        assert unbound()
        assert cls.closed, "the agent session was closed"
        cls.hook = None
        bob = messages(await collect(runner, host, host.make_context("boom 怎么又停了", identity=BOB)))
        alice = messages(await collect(runner, host, host.make_context("boom where did it stop", identity=ALICE)))
        gc.collect()
        await asyncio.sleep(0)
    assert ZH_DOWN in bob[-1] and EN_DOWN in alice[-1]
    assert not errors, errors


async def test_a_run_iterated_and_closed_early_in_one_task_undoes_its_binding():
    """A host that iterates ``run()`` itself (no invoke wrapper; bench's ``via="kit"``) and closes it
    after the first delta: the language, labels and fixed flag the run bound are undone in that task."""
    runner, host, cls = make_scripted([ev.Text("第一部分"), forever])
    gen = runner.run(host.make_context("请写一份很长的报告", config={"chat-language": "zh_Hans"}))
    first = await gen.__anext__()
    assert rtype(first) == "message.delta"
    await gen.aclose()
    assert unbound()
    await drained()


async def test_two_runs_read_alternately_by_one_host_task_keep_their_own_language():
    """One host task reads two runs' result streams in turn (each run has its own task under
    invoke): each cut-off answer is noted in its own language, and nothing crosses."""
    class Slow(Scripted):
        async def stream(self):
            yield ev.Text("…")
            await asyncio.sleep(0.02)
            raise RunnerError("upstream.auth", "HTTP 401")

    runner, host, cls = scripted_runner(Slow, LABELLED, script=[], cancelled=[], attempts=[])
    zh = runner.invoke(host.make_context("为什么失败", identity=Identity(actor_id="bob", conversation_id="c-bob")))
    en = runner.invoke(host.make_context("why does it fail", identity=Identity(actor_id="carol", conversation_id="c-carol")))
    got: dict[str, list[str]] = {"zh": [], "en": []}
    live = {"zh": zh, "en": en}
    while live:
        for name, stream in list(live.items()):
            try:
                r = await stream.__anext__()
            except StopAsyncIteration:
                del live[name]
                continue
            if rtype(r) == "message.completed":
                got[name].append(r.data["message"]["content"])
    assert got["zh"] == ["…\n\n（此回答不完整：HTTP 401。）"] and got["en"] == ["…\n\n(This answer is incomplete: HTTP 401.)"]
    assert unbound()
    await drained()


async def test_cleanup_that_outlives_its_run_keeps_its_language_to_itself(monkeypatch):
    """A Chinese run stops at its time limit and its upstream's stop call hangs past the host's
    deadline, so the stop goes on in the background (runner._CLEANUPS) holding the session. The same
    person's next run, in English, waits for it: its busy line and its explanation are English; the
    cleanup ends on its own without an error in the loop."""
    monkeypatch.setattr(kit_runner, "CANCEL_GRACE", 0.3)

    class Hanging(Scripted):
        seen: list = []

        async def cancel(self):
            type(self).seen.append(texts.current())
            await asyncio.sleep(30)

    runner, host, cls = scripted_runner(Hanging, LABELLED, script=[ev.Text("第一部分"), forever],
                                        cancelled=[], attempts=[], seen=[])
    async with loop_errors() as errors:
        first = messages(await collect(runner, host, host.make_context("请写一份很长的报告",
                                                                        config={"timeout": 0.4})))
        assert first[-1].startswith("第一部分\n\n（此回答不完整"), first
        assert kit_runner._CLEANUPS, "the stop call goes on after the run"
        cls.script = [boom_step(RunnerError("upstream.auth", "HTTP 401"))]
        second = messages(await collect(runner, host, host.make_context("why did it stop")))
        assert second[0] == kit_routing.BUSY_NOTE, second
        assert "rejected the API key" in second[-1] and english(second[-1])
        await drained()
        gc.collect()
        await asyncio.sleep(0)
    assert cls.seen == ["zh"], "the stop call ran with the first run's (Chinese) binding, its own context"
    assert unbound()
    assert not errors, errors


async def test_a_dropped_run_finalised_by_the_loop_ends_without_an_error():
    runner, host, cls = make_scripted([ev.Text("第一部分"), forever])
    async with loop_errors() as errors:
        gen = runner.run(host.make_context("请写一份很长的报告"))
        await asyncio.get_running_loop().create_task(gen.__anext__())  # read in a task of its own, then dropped
        del gen
        gc.collect()
        await asyncio.sleep(0.02)
        await drained()
        gc.collect()
        await asyncio.sleep(0)
    assert not errors, [c.get("exception") for c in errors]


# === 3. hundreds of runs in one conversation ==========================================================

OLD_DEFAULT = DEFAULT_SESSION_RESET_TEXT


async def test_three_hundred_runs_in_a_row_alternating_languages_each_read_their_own():
    """300 runs of one person in one conversation, alternating English and Chinese, every fifth a
    sticker: a failure explained, a partial answer noted, a lost session announced (the old English
    default stored with a trailing newline), in the language of the run — or, for the sticker, of
    the last run with words. Nothing stays bound, no cleanup is left."""
    runner, host, cls = make_scripted([])
    config = {"advanced-settings": True, "session-reset-text": OLD_DEFAULT + "\n"}
    last = None
    for i in range(300):
        sticker = i % 5 == 4
        lang = last if sticker else ("zh" if i % 2 else "en")
        text = "👍" if sticker else (f"请继续处理第 {i} 步" if lang == "zh" else f"please go on with step {i}")
        kind = i % 3
        if kind == 0:
            cls.script = [boom_step(RunnerError("upstream.auth", "HTTP 401"))]
        elif kind == 1:
            cls.script = [ev.Text("part"), boom_step(RunnerError("upstream.unavailable", "the connection dropped"))]
        else:
            fresh = []

            async def missing(adapter, fresh=fresh):
                fresh.append(adapter.env.session.current)
                if len(fresh) == 1:
                    from runner_kit.errors import SessionMissing
                    raise SessionMissing()

            cls.script = [missing, ev.SessionId("fresh"), ev.Text("ok")]
            host.store.set(host.scope_key(Identity(), "conversation"), KEY, "stale")
        said = messages(await collect(runner, host, host.make_context(text, config=config)))[-1]
        if kind == 0:
            want = "拒绝了 API 密钥" if lang == "zh" else "rejected the API key"
        elif kind == 1:
            want = "（此回答不完整" if lang == "zh" else "(This answer is incomplete"
        else:
            want = DEFAULT_SESSION_RESET_TEXT_ZH if lang == "zh" else DEFAULT_SESSION_RESET_TEXT
        assert want in said, (i, text, said)
        assert (chinese(said) if lang == "zh" else english(said)), (i, said)
        last = lang
        assert unbound()
    await drained()
    assert len(texts._LAST) == 1


async def test_a_hundred_overlapping_runs_in_alternating_languages_never_cross():
    """100 people's runs at once (each in its own conversation session), alternating languages, each
    failing after a different few milliseconds: each explanation is in its own run's language."""

    class Jittery(Scripted):
        async def stream(self):
            n = int(re.findall(r"\d+", self.env.input.text)[0])
            yield ev.Text("")
            await asyncio.sleep((n * 7 % 11) / 1000)
            raise RunnerError("upstream.auth", "HTTP 401")

    runner, host, cls = scripted_runner(Jittery, LABELLED, script=[], cancelled=[], attempts=[])

    async def one(i: int) -> tuple[int, str]:
        text = f"第 {i} 个问题为什么失败" if i % 2 else f"why does request {i} fail"
        who = Identity(actor_id=f"p{i}", actor_name=f"P{i}")
        return i, messages(await collect(runner, host, host.make_context(text, identity=who)))[-1]

    for i, said in await asyncio.gather(*(one(i) for i in range(100))):
        assert ("拒绝了 API 密钥" in said) if i % 2 else ("rejected the API key" in said and english(said)), (i, said)
    assert unbound()
    await drained()


# === 4. the memory of each person's language over many conversations ==================================


def test_remembered_languages_over_twenty_thousand_conversations_stay_bounded_and_fall_back_to_english():
    """20,000 conversations: at most 10,000 remembered (a few MB at most); the newest still known;
    the oldest forgotten, so a sticker there falls back to English — the fallback of a person
    nobody remembers, whatever they wrote before."""
    texts.forget()
    started = time.perf_counter()
    for i in range(20_000):
        texts.choose("auto", "你好，帮我看看" if i % 2 else "hello there", f"Loop|bot|conv-{i}||user-{i}")
    took = time.perf_counter() - started
    assert len(texts._LAST) == texts._LAST_MAX == 10_000
    size = sys.getsizeof(texts._LAST) + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in texts._LAST.items())
    assert size < 4 * 1024 * 1024, size
    assert texts.choose("auto", "🙂", "Loop|bot|conv-19999||user-19999") == "zh"
    assert texts.choose("auto", "🙂", "Loop|bot|conv-19998||user-19998") == "en"
    assert texts.choose("auto", "🙂", "Loop|bot|conv-1||user-1") == "en", "forgotten: English"
    assert len(texts._LAST) == 10_000, "a look-up adds nothing"
    assert took < 2.0, took


def test_a_person_who_keeps_sending_only_pictures_is_not_forgotten_while_active():
    texts.forget()
    me = "Loop|bot|conv-me||me"
    assert texts.choose("auto", "你好，请帮我记账", me) == "zh"
    for i in range(12_000):
        texts.choose("auto", "hello there", f"Loop|bot|conv-{i}||user-{i}")
        if i % 1_000 == 999:
            assert texts.choose("auto", "📷", me) == "zh", f"after {i + 1} other conversations"


# === 5. what an explanation costs =======================================================================

THIRTY_LABELS = {
    **{f"key-number-{i}": {"en_US": f"Setting number {i}", "zh_Hans": f"第 {i} 项设置"} for i in range(15)},
    **{f"word{i}": {"en_US": f"Word {i}", "zh_Hans": f"词 {i}"} for i in range(15)},
}
MESSAGE_400 = ("config key 'key-number-3' must be at least 1; check key-number-7 and `word4` (the value of "
               "'word9' is too large), see https://example.com/docs/key-number-12 for what key-number-14 "
               "means [trace_id 0bb4ce2817338aa] ").ljust(400, "x")


def _per_call(language: str, n: int, cold: bool = False) -> float:
    tokens = texts.bind(language, THIRTY_LABELS)
    try:
        explain.explanation("Dify", "config.invalid", MESSAGE_400)
        started = time.perf_counter()
        for _ in range(n):
            if cold:
                re.purge()  # as if the pattern cache had been taken over by other patterns
            explain.explanation("Dify", "config.invalid", MESSAGE_400)
        return (time.perf_counter() - started) / n
    finally:
        texts.unbind(tokens)


def test_an_explanation_with_thirty_labels_costs_about_half_a_millisecond():
    """A 400-character detail, 30 labelled keys (15 hyphenated: two patterns each): measured on the
    review machine at about 0.4 ms (English) / 0.5 ms (Chinese) a call with the pattern cache warm
    (10,000 calls: 3.8 s / 5.1 s), 1.6 ms with it cold — once per failed run, next to a failed
    network call: it does not matter. The bound is generous; the labels are all named."""
    assert len(MESSAGE_400) == 400 and len(THIRTY_LABELS) == 30
    tokens = texts.bind(texts.ZH, THIRTY_LABELS)
    try:
        shown = explain.explanation("Dify", "config.invalid", MESSAGE_400)
    finally:
        texts.unbind(tokens)
    assert "key-number-3" not in shown and "「第 3 项设置」不能小于 1" in shown and "「词 4」" in shown
    assert "trace_id" not in shown and "0bb4ce2817338aa" not in shown
    warm_en, warm_zh = _per_call(texts.EN, 1_000), _per_call(texts.ZH, 1_000)
    cold = _per_call(texts.ZH, 100, cold=True)
    print(f"\nexplanation(): {warm_en * 1e3:.3f} ms (en), {warm_zh * 1e3:.3f} ms (zh), {cold * 1e3:.3f} ms (cold cache)")
    assert warm_en < 0.005 and warm_zh < 0.005 and cold < 0.02


def test_a_long_whitespace_run_in_a_capped_detail_stays_cheap():
    """_TRACE's leading ``\\s*`` makes it quadratic in a run of whitespace (4,000 spaces: about 0.3 s
    on the review machine), but every detail that reaches it is capped first (HTTP and host errors at
    300 characters, a CLI's stderr tail at 600): at 600 it stays in milliseconds."""
    detail = "the agent CLI wrote:" + " " * 600 + "(exit 1)"
    started = time.perf_counter()
    explain.explanation("Codex", "process.exited", detail)
    assert time.perf_counter() - started < 0.05


# === 6. configs from before the change ==================================================================


def fresh_after_missing():
    calls = []

    async def first_missing(adapter):
        calls.append(adapter.env.session.current)
        if len(calls) == 1:
            from runner_kit.errors import SessionMissing
            raise SessionMissing()

    return [first_missing, ev.SessionId("fresh"), ev.Text("ok")]


MISSING = object()


@pytest.mark.parametrize("stored", [
    OLD_DEFAULT, OLD_DEFAULT + "\n", "  " + OLD_DEFAULT + "  ", OLD_DEFAULT + "\r\n", "\n" + OLD_DEFAULT + "\n\n",
    "\t" + OLD_DEFAULT, None, "", "   ", MISSING,
], ids=["old", "newline", "spaces", "crlf", "blank-lines", "tab", "none", "empty", "blank", "unset"])
async def test_a_stored_old_default_or_a_migrated_blank_keeps_the_built_in_notice_in_each_language(stored):
    """What 0.3.0 stored (the English default, as LangBot's form or a migration may have kept it, with
    whitespace around it), or nothing at all: the notice is the built-in one, in the person's
    language, run after run."""
    config: dict[str, Any] = {"advanced-settings": True}
    if stored is not MISSING:
        config["session-reset-text"] = stored
    for said, notice in (("继续我们刚才的话题", DEFAULT_SESSION_RESET_TEXT_ZH), ("go on", DEFAULT_SESSION_RESET_TEXT),
                         ("👍", DEFAULT_SESSION_RESET_TEXT), ("好的，继续", DEFAULT_SESSION_RESET_TEXT_ZH)):
        runner, host, _ = make_scripted(fresh_after_missing())
        host.store.set(host.scope_key(Identity(), "conversation"), KEY, "stale")
        out = await collect(runner, host, host.make_context(said, config=config))
        assert messages(out)[-1] == f"{notice}\n\nok", (said, messages(out))


@pytest.mark.parametrize("stored", [
    "Please look at the attached images or files and answer.", " Please look at the attached images or files "
    "and answer.\n", "Please look at the attached file(s).", "Please look at the attached file(s).\r\n", None, "",
])
def test_the_old_file_only_prompts_stored_with_whitespace_count_as_unset(stored):
    """DashScope's and Tbox's former ``base-prompt`` defaults, however stored: the built-in prompt in
    the run's language."""
    from runners_cli.plugins import find, load_runner_class

    load_runner_class(find("dashscope-agent"))  # the plugins' packages are importable once loaded
    load_runner_class(find("tbox-agent"))
    from dashscope_agent.adapter import DEFAULT_BASE_PROMPT, DEFAULT_BASE_PROMPT_ZH
    from tbox_agent import const

    for en, zh in ((DEFAULT_BASE_PROMPT, DEFAULT_BASE_PROMPT_ZH), (const.DEFAULT_BASE_PROMPT, const.DEFAULT_BASE_PROMPT_ZH)):
        if stored and stored.strip() not in (en,):
            continue
        tokens = texts.bind(texts.ZH)
        try:
            assert texts.own_or_builtin(stored, en, zh) == zh
        finally:
            texts.unbind(tokens)


# === 7. lines the kit or LocalAgent write into the chat that are English only ===========================


async def test_a_chinese_answer_cut_for_size_is_noted_in_chinese():
    runner, host, cls = make_scripted([ev.Text("长" * 180_000)])
    said = messages(await collect(runner, host, host.make_context("请把整个日志逐行解释一遍")))[-1]
    assert len(said) < 180_000, "the answer was cut"
    tail = said[-120:]
    assert "The answer was cut" not in tail and chinese(tail.split("长")[-1]), tail


def _local_agent():
    from runners_cli.host_models import LocalTool, OpenAIChatModel
    from runners_cli.plugins import find
    from tests.fakes.openai import FakeOpenAI
    from tests.helpers import make_runner

    fake = FakeOpenAI(api_key="sk-test")
    fake.__enter__()
    host = LocalHost(runner_id=find("local-agent").runner_id)
    host.add_model(OpenAIChatModel("m-main", base_url=fake.base_url, api_key="sk-test", model_name="gpt-fake"))
    host.add_tool(LocalTool("search", "The search tool", {"type": "object", "properties": {}},
                            lambda p: {"hits": []}))
    return fake, host, make_runner("local-agent", host)


async def test_local_agents_round_limit_reply_is_in_the_persons_language():
    from runner_kit.http import close_shared_client
    from tests.fakes.openai import ToolCalls

    fake, host, runner = _local_agent()
    try:
        fake.script = [ToolCalls([("search", {"q": "a"})]), ToolCalls([("search", {"q": "b"})])]
        config = {"model": {"primary": "m-main", "fallbacks": []}, "enable-all-tools": True,
                  "advanced-settings": True, "date-grounding": False, "max-tool-iterations": 1}
        out = await collect(runner, host, host.make_context("帮我查一下最新的发布说明", config=config,
                                                              identity=Identity(conversation_id="conv-1")))
        said = messages(out)[-1]
        assert "tool round" in said or "工具" in said, said
        assert chinese(said) and "max-tool-iterations" not in said, said
    finally:
        fake.__exit__(None, None, None)
        await close_shared_client()
