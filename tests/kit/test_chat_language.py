"""What the chat reads is in the person's language (English or Chinese), and names settings as the
form does (issue 34 items 2 and 3): runner_kit.texts, runner_kit.explain and the notes the kit
writes during a run — for one person, for a group whose members write in different languages, and
with the owner's fixed choice."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path

import pytest

from runner_kit import events as ev
from runner_kit import explain, texts
from runner_kit import routing as kit_routing
from runner_kit.config import ConfigSchema
from runner_kit.errors import CODES, RunnerError, SessionMissing, platform_error
from runners_cli.host import Identity
from runners_cli.plugins import discover
from tests.helpers import collect, failure, final_text, messages, rtype, run, scripted_runner, stored_key
from tests.kit.test_runner import Scripted
from tests.kit.test_sessions import ALICE, BOB, SHARED, Agent, on_first_delta, turns_of
from tests.kit.test_sessions import SCHEMA as AGENT_SCHEMA

HAN = re.compile(r"[\u4e00-\u9fff]")

SCHEMA = ConfigSchema.from_items([
    {"name": "api-key", "type": "secret", "default": "sk-scripted-secret-1",
     "label": {"en_US": "App API key", "zh_Hans": "应用 API 密钥"}},
    {"name": "base-url", "type": "string", "default": "http://127.0.0.1:9",
     "label": {"en_US": "API address", "zh_Hans": "API 地址"}},
    {"name": "timeout", "type": "float", "default": 60, "label": {"en_US": "Timeout", "zh_Hans": "超时"}},
    {"name": "chat-language", "type": "select", "default": "auto",
     "options": [{"name": "auto"}, {"name": "en_US"}, {"name": "zh_Hans"}]},
    {"name": "session-reset-text", "type": "string", "default": ""},
])
KEY = stored_key("scripted.session")


def make(script):
    return scripted_runner(Scripted, SCHEMA, script=script, cancelled=[], attempts=[])


def boom(exc):
    async def step(_):
        raise exc

    return step


# --- which language ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("hello, can you help?", "en"),
    ("你好，帮我看看这个报错", "zh"),
    ("帮我看下 this bug", "zh"),  # mostly Chinese characters
    ("Please ask 张三 about the release notes", "en"),  # a Chinese name in an English message
    ("请看 https://example.com/some/long/english/path/to/a/page", "zh"),  # a link is not English words
    ("`pip install foo` 为什么失败", "zh"),
    ("🙂👍", None),
    ("", None),
    ("12345", None),
])
def test_the_language_of_a_message(text, expected):
    assert texts.language_of(text) == expected


def test_the_owner_fixed_language_wins_and_a_message_without_words_keeps_the_last_one():
    texts.forget()
    assert texts.choose("en_US", "你好", "c1") == "en"
    assert texts.choose("zh_Hans", "hello", "c1") == "zh"
    assert texts.choose("auto", "你好呀", "c1") == "zh"
    assert texts.choose("auto", "", "c1") == "zh", "an image alone: what this person last wrote in"
    assert texts.choose("auto", "", "c2") == "en", "nobody wrote here before: English"
    assert texts.choose("auto", "ok thanks", "c1") == "en"
    assert texts.choose(None, "🙂", "c1") == "en"


def test_remembered_languages_stay_bounded(monkeypatch):
    monkeypatch.setattr(texts, "_LAST_MAX", 50)
    for i in range(500):
        texts.choose("auto", "你好", f"conv-{i}")
    assert len(texts._LAST) == 50
    texts.forget()


# --- every failure code, both languages --------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_failure_code_is_explained_in_english_and_in_chinese(code):
    tokens = texts.bind(texts.EN)
    try:
        en = explain.explanation("Dify", code, "something specific happened")
    finally:
        texts.unbind(tokens)
    tokens = texts.bind(texts.ZH)
    try:
        zh = explain.explanation("Dify", code, "something specific happened")
        note = explain.incomplete_note("Dify", code, "it stopped")
    finally:
        texts.unbind(tokens)
    assert code in explain._EXPLANATIONS, "each code has its own words, not the catch-all"
    assert not HAN.search(en)
    assert HAN.search(zh) and "could not" not in zh and "Please" not in zh
    assert "something specific happened" in zh or code == "upstream.rate_limited", "the detail stays"
    assert HAN.search(note) and "incomplete" not in note
    assert code not in en and code not in zh, "never a bare internal code"


# --- settings named as the form names them -------------------------------------------------------------


def named(message: str, language: str, code: str = "config.invalid") -> str:
    tokens = texts.bind(language, SCHEMA.labels())
    try:
        return explain.explanation("Dify", code, message)
    finally:
        texts.unbind(tokens)


def test_a_missing_setting_is_named_by_its_label_in_each_language():
    msg = "config key 'api-key' is required but not set"
    en, zh = named(msg, "en", "config.missing"), named(msg, "zh", "config.missing")
    assert "“App API key” is not set" in en and "api-key" not in en and "config key" not in en
    assert "「应用 API 密钥」未填写" in zh and "api-key" not in zh and "required" not in zh


@pytest.mark.parametrize("message", [
    "`base-url` must be an http(s) address",
    "`timeout` is too short for this app",
    "check base-url: nothing listens there",
    "the value of 'timeout' is too large",
    "config key 'timeout' must be at least 1",
])
def test_keys_in_any_form_become_labels(message):
    en, zh = named(message, "en"), named(message, "zh")
    for text in (en, zh):
        assert "base-url" not in text and "'timeout'" not in text and "config key" not in text, text
    assert "“API address”" in en or "“Timeout”" in en
    assert "「API 地址」" in zh or "「超时」" in zh
    if "at least" in message:
        assert "「超时」不能小于 1" in zh


def test_a_key_inside_another_word_or_a_json_field_is_left_alone():
    text = named('the x-api-key header, the api-keys list and the entry\'s "timeout" field', "en")
    assert "x-api-key" in text and "api-keys" in text and '"timeout"' in text


def test_trace_ids_stay_in_the_log_and_a_status_is_said_once():
    err = platform_error("Tbox", "upstream.forbidden", "check api-key", 403, "403",
                         "access denied (traceId 0bb4ce2817338) [logid 20250101abcdef]")
    assert "HTTP 403 403" not in err.message and "HTTP 403" in err.message
    shown = named(err.message, "en", "upstream.forbidden")
    assert "traceId" not in shown and "0bb4ce2817338" not in shown and "logid" not in shown
    assert "access denied" in shown and "“App API key”" in shown
    assert "traceId 0bb4ce2817338" in err.message, "the ledger and the log keep it"
    assert "request_id" not in named("bad input, request_id: 7f3a9c21-0d1e", "en")


def test_a_label_is_never_a_way_around_the_redactor():
    tokens = texts.bind("en", {"api-key": {"en_US": "sk-abcdefghijklmnop", "zh_Hans": "x"}})
    try:
        shown = explain.explanation("Dify", "config.invalid", "check api-key")
    finally:
        texts.unbind(tokens)
    assert "sk-abcdefghijklmnop" not in shown  # a label is shown text too: it goes through the redactor


# --- what a run says -------------------------------------------------------------------------------------


async def test_a_chinese_message_gets_a_chinese_explanation_and_an_english_one_english():
    for said, words, other in (("你的API为什么连不上", "此机器人的 Dify", "settings need"),
                               ("why is this failing", "settings need fixing", "此机器人")):
        r, host, _ = make([boom(RunnerError("config.invalid", "config key 'base-url' must start with http"))])
        r.adapter.platform = "Dify"
        results = await run(r, host, said)
        (shown,) = messages(results)
        assert words in shown and other not in shown, shown
        assert "base-url" not in shown
        assert "base-url" in failure(results)[2], "the ledger keeps the key"


async def test_the_owner_fixed_language_is_used_whatever_the_person_writes():
    r, host, _ = make([boom(RunnerError("upstream.auth", "HTTP 401"))])
    results = await run(r, host, "为什么不回答", config={"chat-language": "en_US"})
    (shown,) = messages(results)
    assert "rejected the API key" in shown and not HAN.search(shown)
    r, host, _ = make([boom(RunnerError("upstream.auth", "HTTP 401"))])
    results = await run(r, host, "why no answer", config={"chat-language": "zh_Hans"})
    assert "拒绝了 API 密钥" in messages(results)[0]


async def test_a_partial_answer_is_noted_in_the_persons_language():
    r, host, _ = make([ev.Text("第一部分"), boom(RunnerError("upstream.unavailable", "the connection dropped"))])
    results = await run(r, host, "写一个总结")
    assert final_text(results).startswith("第一部分\n\n（此回答不完整：the connection dropped。）")


def fresh_after_missing():
    calls = []

    async def first_missing(adapter):
        calls.append(adapter.env.session.current)
        if len(calls) == 1:
            raise SessionMissing()

    return [first_missing, ev.SessionId("fresh"), ev.Text("ok")]


@pytest.mark.parametrize("said, config, notice", [
    ("继续我们刚才的话题", {}, "（之前的会话无法继续，这条回复开始了一段新的会话。）"),
    ("go on", {}, "(The previous conversation could not be continued, so this reply starts a new one.)"),
    # what 0.3.0 stored as the default: still the built-in line, so in the person's language
    ("继续", {"advanced-settings": True, "session-reset-text":
              "(The previous conversation could not be continued, so this reply starts a new one.)"},
     "（之前的会话无法继续，这条回复开始了一段新的会话。）"),
    ("继续", {"session-reset-text": "新会话开始啦"}, "新会话开始啦"),  # the owner's own words, as they are
])
async def test_the_new_conversation_notice_is_in_the_persons_language_unless_the_owner_wrote_one(said, config, notice):
    r, host, _ = make(fresh_after_missing())
    host.store.set(host.scope_key(Identity(), "conversation"), KEY, "stale")
    results = await run(r, host, said, config=config)
    assert final_text(results) == f"{notice}\n\nok"


async def test_an_image_alone_gets_notes_in_the_language_the_person_last_wrote_in():
    r, host, _ = make([ev.Text("好的")])
    await run(r, host, "你好")
    r2, _, _ = make([boom(RunnerError("upstream.auth", "HTTP 401"))])
    r2.bind_runtime(plugin_runtime_handler=host)
    results = await run(r2, host, "👍")  # no words (a sticker, or an image alone)
    assert "拒绝了 API 密钥" in messages(results)[0]


# --- a group whose members write in different languages ----------------------------------------------


async def test_in_a_group_each_member_is_told_in_their_own_language():
    """Per person: Alice (English) has a run going; Bob writes in Chinese meanwhile. The line that
    tells Bob his message is answered next is in Chinese; Alice's answer and nothing of hers changes."""
    runner, host, cls = scripted_runner(Agent, AGENT_SCHEMA, log=[])
    ctx = host.make_context("slow: refactor the parser", steering=True, identity=ALICE)
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("帮我把测试目录删掉", BOB)))
    assert rtype(out[-1]) == "run.completed"
    said = messages(out)
    assert said[0] == "user_alice got: slow: refactor the parser"
    assert said[1] == "（Bob，接下来在你自己的会话中回答你的消息。）"
    assert turns_of(cls, "user_bob") == ["帮我把测试目录删掉"]


async def test_in_a_shared_session_the_waiting_member_reads_the_busy_line_in_their_language(monkeypatch):
    monkeypatch.setattr(kit_routing, "BUSY_NOTICE_AFTER", 0.02)
    runner, host, cls = scripted_runner(Agent, AGENT_SCHEMA, log=[], started=asyncio.Event())
    first = host.make_context("slow one", identity=ALICE, config=SHARED)
    second = host.make_context("第二个问题", identity=BOB, config=SHARED)
    a = asyncio.create_task(collect(runner, host, first))
    await cls.started.wait()
    out_b = await collect(runner, host, second)
    out_a = await a
    assert messages(out_b)[0] == kit_routing.BUSY_NOTE_ZH
    assert messages(out_a) == ["user_alice got: slow one"] or "got: slow one" in messages(out_a)[0]


async def test_a_fixed_language_holds_for_notes_to_other_members_too():
    runner, host, cls = scripted_runner(Agent, AGENT_SCHEMA, log=[])
    ctx = host.make_context("slow: first", steering=True, identity=ALICE, config={"chat-language": "en_US"})
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("帮我看看", BOB)))
    assert "(Bob, your message is answered next, in your own session.)" in messages(out)


# --- every plugin: what its own messages say of its settings ------------------------------------------


def _messages_in(package: Path) -> list[str]:
    """The string constants of a plugin's code (f-strings with their holes left out)."""
    found: list[str] = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                found.append("".join(v.value for v in node.values
                                     if isinstance(v, ast.Constant) and isinstance(v.value, str)))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and " " in node.value:
                found.append(node.value)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # docstrings are not messages
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant) and body[0].value.value in found:
                found.remove(body[0].value.value)
    return found


@pytest.mark.parametrize("plugin", [p.directory.name for p in discover()])
def test_no_message_of_a_plugin_reaches_the_chat_with_a_raw_setting_key(plugin):
    """Every sentence in a plugin's code that mentions one of its settings by key (a hyphenated key
    anywhere, any key in single quotes or backticks) reaches the chat with the form's label instead,
    in both languages."""
    (found,) = [p for p in discover() if p.directory.name == plugin]
    schema = ConfigSchema.from_items(found.config_items)
    labels = schema.labels()
    keys = [k for k in labels if "-" in k]
    checked = 0
    for text in _messages_in(found.directory):
        mentioned = [k for k in keys if re.search(rf"(?<![\w./-]){re.escape(k)}(?![\w/-])", text)]
        quoted = [k for k in labels if "-" not in k and re.search(rf"(['`]){re.escape(k)}\1", text)]
        if not (mentioned or quoted) or "\n" in text:
            continue
        checked += 1
        for language in ("en", "zh"):
            tokens = texts.bind(language, labels)
            try:
                shown = explain.explanation(found.name, "config.invalid", text)
            finally:
                texts.unbind(tokens)
            for key in mentioned:
                assert not re.search(rf"(?<![\w./-]){re.escape(key)}(?![\w/-])", shown), (key, text, shown)
            for key in quoted:
                assert not re.search(rf"(['`]){re.escape(key)}\1", shown), (key, text, shown)
    assert checked or plugin in ("local-agent",), f"{plugin}: no message mentions a setting (the scan found nothing)"
