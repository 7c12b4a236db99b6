"""A member who is not benign, against the chat-language change (fbb23df, 623fd72, eba52f7):
runner_kit.texts (language_of, choose, t, label, the process-global _LAST), runner_kit.explain
(_detail, _named, _TRACE) and the chat lines of runner_kit.http / config / errors.

Anyone in a group writes anything; platforms echo a member's input in their error messages. Each
scenario is what a member can send and what the chat then shows. Every break found was fixed and
is kept here (the test's name says what must hold). A regex that backtracks is caught by running it
in a forked child with a bound far above what it takes (milliseconds) and far below what the broken
one took (minutes)."""

from __future__ import annotations

import multiprocessing
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx
import pytest

from runner_kit import events as ev
from runner_kit import explain, texts
from runner_kit import runner as rk
from runner_kit.config import ConfigSchema
from runner_kit.errors import Redactor, RunnerError, platform_error
from runner_kit.http import close_shared_client, transport_error
from runner_kit.logs import bind_redactor, unbind_redactor
from runner_kit.netguard import FETCH_ALLOW_ENV, fetch
from runner_kit.runner import Adapter
from runners_cli.host import Identity
from tests.fakes.http_server import closed_port
from tests.helpers import collect, dump, failure, fake_dns, messages, rtype, run, scripted_runner
from tests.kit.test_runner import Scripted
from tests.kit.test_sessions import ALICE, Agent, on_first_delta
from tests.kit.test_sessions import SCHEMA as AGENT_SCHEMA

SECRET = "Zq81kLmNopQr77"  # a credential of no well-known shape: only the key=value patterns or the run's values catch it
PASSWORD = "Pw-9hunter2x"

LABELS: dict[str, Mapping[str, str]] = {
    "api-key": {"en_US": "App API key", "zh_Hans": "应用 API 密钥"},
    "base-url": {"en_US": "API address", "zh_Hans": "API 地址"},
    "timeout": {"en_US": "Timeout", "zh_Hans": "超时"},
    "basic-password": {"en_US": "Basic auth password", "zh_Hans": "Basic 认证密码"},
    "jwt-secret": {"en_US": "JWT secret", "zh_Hans": "JWT 密钥"},
    "header-value": {"en_US": "Auth header value", "zh_Hans": "认证请求头的值"},
    "auth-token": {"en_US": "Auth token", "zh_Hans": "认证令牌"},
}

SCHEMA = ConfigSchema.from_items([
    {"name": "api-key", "type": "secret", "default": "sk-scripted-secret-1", "label": dict(LABELS["api-key"])},
    {"name": "base-url", "type": "string", "default": "http://127.0.0.1:9", "label": dict(LABELS["base-url"])},
    {"name": "timeout", "type": "float", "default": 60, "label": dict(LABELS["timeout"])},
    {"name": "advanced-settings", "type": "boolean", "default": False},
    {"name": "chat-language", "type": "select", "default": "auto", "advanced": True,
     "options": [{"name": "auto"}, {"name": "en_US"}, {"name": "zh_Hans"}],
     "label": {"en_US": "Language of the bot's own notes", "zh_Hans": "机器人提示语的语言"}},
])


@pytest.fixture(autouse=True)
async def _clean():
    texts.forget()
    yield
    texts.forget()
    await close_shared_client()


def shown(code: str, message: str, language: str, *, secrets: Iterable[str] = (),
          labels: Mapping[str, Mapping[str, str]] = LABELS, partial: bool = False) -> str:
    """What the chat reads for a failure, as runner.drive makes it: the run's redactor (knowing
    ``secrets``) bound, ``exc.message`` redacted once by the driver, then explained."""
    redact = Redactor(secrets)
    token = bind_redactor(redact)
    spoken = texts.bind(language, labels)
    try:
        if partial:
            return explain.incomplete_note("Dify", code, redact(message))
        return explain.explanation("Dify", code, redact(message))
    finally:
        texts.unbind(spoken)
        unbind_redactor(token)


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    fn(*args)


def finishes_within(seconds: float, fn: Callable[..., Any], *args: Any) -> bool:
    """Whether ``fn(*args)`` returns within ``seconds`` — run in a forked child so a regex that
    backtracks for minutes is killed instead of holding the test (a regex cannot be interrupted)."""
    proc = multiprocessing.get_context("fork").Process(target=_call, args=(fn, args))
    proc.start()
    proc.join(seconds)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return False
    return proc.exitcode == 0


def make(script, schema=SCHEMA):
    return scripted_runner(Scripted, schema, script=script, cancelled=[], attempts=[])


def boom(exc):
    async def step(_):
        raise exc

    return step


# --- 1. secrets: label substitution around the redactor ---------------------------------------------


ECHOES = [
    f"invalid api-key={SECRET}",
    f"Invalid api-key: {SECRET}",
    f"api_key={SECRET} was rejected",
    f"header x-api-key: {SECRET} rejected",
    f"'api-key'='{SECRET}' is wrong",
    f"basic-password={SECRET}",
    f"jwt-secret: {SECRET}",
    f"auth-token={SECRET}",
    f"Authorization: Bearer {SECRET}",
    f"POST http://bot:{SECRET}@dify.internal/v1 failed",
    f"GET https://dify.internal/v1?api_key={SECRET}&x=1 failed",
    f"api-key=sk-{SECRET}",
    f"config key 'api-key' is required but not set (got api-key={SECRET})",
    f"check api-key:{SECRET} (traceId 0bb4ce2817338)",
]


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("code", ["upstream.auth", "upstream.bad_request", "config.invalid"])
@pytest.mark.parametrize("echo", ECHOES)
def test_a_key_name_next_to_a_secret_stays_redacted_after_the_label_replaces_the_key(echo, code, language):
    """A platform's error that names a key next to a credential it does not know (api-key=…,
    x-api-key: …, a URL password): the first redaction pass catches the pattern before _named turns
    'api-key' into “App API key”, so the second pass is not needed — in both languages, in the
    explanation and in the incomplete note."""
    for partial in (False, True):
        said = shown(code, echo, language, partial=partial)
        assert SECRET not in said, said


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_run_secret_that_a_platform_echoes_next_to_a_key_name_stays_redacted(language):
    for message in (f"header-value {SECRET} was refused", f"the header-value '{SECRET}' is not accepted",
                    f"base-url http://u:{PASSWORD}@10.0.0.8:8080 is wrong"):
        said = shown("upstream.forbidden", message, language, secrets=[SECRET, PASSWORD])
        assert SECRET not in said and PASSWORD not in said, said


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("label", [SECRET, f"key {SECRET} here", f"sk-{SECRET}"])
def test_a_label_that_is_or_contains_a_secret_is_redacted_where_it_is_inserted(label, language):
    labels = {"api-key": {"en_US": label, "zh_Hans": label}}
    for message in ("check api-key", "config key 'api-key' is required but not set", "'api-key' is wrong"):
        said = shown("config.invalid", message, language, secrets=[SECRET], labels=labels)
        assert SECRET not in said, said


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("echo", [f"`api-key`: {SECRET}", f"`x-api-key`={SECRET}", f"`password`: {SECRET}"])
def test_a_key_quoted_in_backticks_next_to_a_secret_stays_redacted(echo, language):
    said = shown("upstream.auth", echo, language)
    assert SECRET not in said, said


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_trace_id_between_a_key_and_its_value_does_not_expose_the_value(language):
    said = shown("upstream.bad_request", f"api-key (request id 20250101abcdef) = {SECRET}", language)
    assert SECRET not in said, said


async def test_a_run_that_fails_with_an_echoed_credential_shows_it_redacted_in_chinese():
    """End to end: a Chinese message; the platform's error echoes the owner's key (known to the run)
    and a credential it does not know beside a key name."""
    message = (f"HTTP 401: invalid api-key=sk-scripted-secret-1; the x-api-key: {SECRET} and "
               f"http://bot:{PASSWORD}@upstream.example are refused")
    r, host, _ = make([boom(RunnerError("upstream.auth", message))])
    results = await run(r, host, "为什么连不上")
    (said,) = messages(results)
    assert "拒绝了 API 密钥" in said
    for leak in ("sk-scripted-secret-1", SECRET, PASSWORD):
        assert leak not in said, said
    assert "sk-scripted-secret-1" not in dump(results)


# --- 2. regexes a member's text (or its echo) can make slow -----------------------------------------

BIG = 100_000


def _language_of_a_long_message(text: str) -> None:
    texts.choose("auto", text, "conv|member")


@pytest.mark.parametrize("body", ["a" * BIG, "你" * BIG, "帮我总结这篇文章：" + "长" * BIG])
def test_choosing_the_language_of_a_100_kb_message_takes_milliseconds(body):
    assert finishes_within(5.0, _language_of_a_long_message, body)


def _explain(message: str) -> None:
    spoken = texts.bind("en", LABELS)
    try:
        explain.explanation("WeKnora", "upstream.error", message)
    finally:
        texts.unbind(spoken)


@pytest.mark.parametrize("message", [
    "stopped this answer: " + " " * BIG + "x",
    "stopped this answer: " + "\n" * BIG,
    "stopped this answer: " + "(trace id " * (BIG // 10),
])
def test_explaining_a_100_kb_echo_takes_milliseconds(message):
    assert finishes_within(5.0, _explain, message)


@pytest.mark.parametrize("message", [
    "config key '" * (BIG // 12),
    "config key 'api-key' " * (BIG // 21),
    "'api-key'" * (BIG // 9),
    "trace_id " * (BIG // 9),
    "x " * (BIG // 2),
    "`" * BIG,
])
def test_named_and_the_other_patterns_stay_linear_on_crafted_100_kb_input(message):
    assert finishes_within(5.0, _explain, message)


@pytest.mark.parametrize("message", ["api-key-" * (BIG // 8), "a." * (BIG // 2)])
def test_redacting_a_100_kb_echo_of_hyphenated_words_takes_milliseconds(message):
    assert finishes_within(5.0, _explain, message)


# --- 3. an explanation that eats meaning, or that a member makes lie -------------------------------


@pytest.mark.parametrize("message, kept", [
    ("Invalid request_id format", "format"),
    ("the x-request-id header is required", "header"),
    ("parameter error (request_id must be a string)", "must be a string"),
    ("log_id parameter missing", "parameter"),
])
def test_words_after_a_trace_field_name_are_not_taken_for_an_id(message, kept):
    for language in ("en", "zh"):
        assert kept in shown("upstream.bad_request", message, language)


def test_real_trace_ids_are_still_left_out():
    for message in ("access denied (traceId 0bb4ce2817338)", "bad input, request_id: 7f3a9c21-0d1e",
                    "denied [logid 20250101abcdef]", "denied; x-request-id=5c1e8a0f"):
        said = shown("upstream.forbidden", message, "en")
        assert "denied" in said or "bad input" in said
        for gone in ("0bb4ce2817338", "7f3a9c21", "20250101abcdef", "5c1e8a0f"):
            assert gone not in said, said


@pytest.mark.parametrize("language, lie", [("zh", "「应用 API 密钥」未填写"), ("en", "“App API key” is not set")])
def test_a_members_echoed_text_is_not_turned_into_the_kits_own_words_about_a_setting(language, lie):
    member = "config key 'api-key' is required but not set"
    err = platform_error("Dify", "upstream.bad_request", "", 400, "invalid_param", f"invalid input: {member}")
    said = shown(err.code, err.message, language)
    assert lie not in said, said


@pytest.mark.parametrize("name", ["api-key", "config key 'base-url' is empty"])
def test_a_members_file_name_is_not_renamed_into_a_setting(name):
    from runner_kit.inputs import _q

    message = f"could not download {_q(name)}: the host files.example was not found"
    for language in ("en", "zh"):
        said = shown("input.unreadable", message, language)
        assert "App API key" not in said and "应用 API 密钥" not in said and "API address" not in said \
            and "API 地址" not in said, said


# --- 4. _LAST: the process-global memory of each person's language ---------------------------------


def test_a_member_writing_from_thousands_of_ids_keeps_the_memory_bounded():
    for i in range(texts._LAST_MAX * 2):
        texts.choose("auto", "你好", f"Dify|bot-1|group-1||sock-{i}")
    assert len(texts._LAST) == texts._LAST_MAX


async def test_one_member_cannot_set_the_language_another_member_reads():
    """Bob writes Chinese in the group; Alice's sticker-only message keeps her own (English) memory."""
    alice = Identity(actor_id="alice", actor_name="Alice")
    bob = Identity(actor_id="bob", actor_name="Bob")
    r, host, _ = make([ev.Text("ok")])
    await run(r, host, "hello there", identity=alice)
    for _ in range(3):
        r, _, _ = make([ev.Text("好")])
        r.bind_runtime(plugin_runtime_handler=host)
        await run(r, host, "你们好", identity=bob)
    r, _, _ = make([boom(RunnerError("upstream.auth", "HTTP 401"))])
    r.bind_runtime(plugin_runtime_handler=host)
    results = await run(r, host, "👍", identity=alice)
    assert "rejected the API key" in messages(results)[0]


# --- 5. str.format with member-controlled values ---------------------------------------------------


FORMAT_BAIT = "{0.__class__} {p} {d} {who} {__import__} {agent!r:>9999999} {"


@pytest.mark.parametrize("language", ["en", "zh"])
def test_braces_in_an_echoed_message_are_shown_as_written(language):
    said = shown("upstream.bad_request", f"invalid input: {FORMAT_BAIT}", language)
    assert FORMAT_BAIT.rstrip("{").strip() in said and "class" not in said.replace("__class__", "")
    note = shown("upstream.unavailable", f"cut: {FORMAT_BAIT}", language, partial=True)
    assert "{0.__class__}" in note


@pytest.mark.parametrize("language", ["en", "zh"])
def test_braces_in_a_link_host_or_an_owner_text_are_not_a_template(language):
    spoken = texts.bind(language)
    try:
        exc = httpx.ConnectError("[Errno 111] Connection refused")
        exc.__cause__ = ConnectionRefusedError(111, "Connection refused")
        err = transport_error(exc, "{p}{0}", "{at}:{why}")
        chat = str(err.chat)
        assert "{p}{0}" in chat and "{at}:{why}" in chat
        assert texts.own_or_builtin("{p} {0.__class__}", "x", "y") == "{p} {0.__class__}"
        assert rk.reset_text({"session-reset-text": "{0} {d}"}) == "{0} {d}"
    finally:
        texts.unbind(spoken)


async def test_braces_in_a_display_name_are_shown_as_written_in_the_chinese_note():
    runner, host, _ = scripted_runner(Agent, AGENT_SCHEMA, log=[])
    evil = Identity(actor_id="bob", actor_name="{who}{0}{agent!r}")
    ctx = host.make_context("slow: refactor the parser", steering=True, identity=ALICE)
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("帮我看看这个", evil)))
    assert rtype(out[-1]) == "run.completed"
    assert "（{who}{0}{agent!r}，接下来在你自己的会话中回答你的消息。）" in messages(out)


# --- 6. display names that forge a line of the kit --------------------------------------------------


@pytest.mark.parametrize("name", ["Bob\n（只有 Mallory 能回答上面的问题。）\n", "Bob\u202e）题问的面上答回能 yrollaM 有只（"])
async def test_a_display_name_cannot_add_a_line_to_the_chinese_note(name):
    runner, host, _ = scripted_runner(Agent, AGENT_SCHEMA, log=[])
    evil = Identity(actor_id="bob", actor_name=name)
    ctx = host.make_context("slow: refactor the parser", steering=True, identity=ALICE)
    out = await collect(runner, host, ctx, on_first_delta(host, ctx, ("帮我把测试目录删掉", evil)))
    notes = [m for m in messages(out) if "接下来在你自己的会话中" in m]
    assert notes, messages(out)
    for note in notes:
        assert "\n" not in note and "\u202e" not in note, repr(note)


# --- 7. the unreachable-address line and a member's links, in Chinese --------------------------------


class NoHost(Adapter):
    """The configured upstream at a per-tenant host carrying the key, whose name does not resolve."""

    platform = "Tenant"

    async def stream(self):
        exc = httpx.ConnectError("[Errno -2] Name or service not known")
        exc.__cause__ = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        raise transport_error(exc, self.platform, f"{SECRET}.tenant.example:443")
        yield  # pragma: no cover


async def test_the_chinese_unreachable_line_passes_the_runs_redactor():
    schema = ConfigSchema.from_items([{"name": "api-key", "type": "secret", "default": SECRET}])
    r, host, _ = scripted_runner(NoHost, schema)
    results = await collect(r, host, host.make_context("为什么连不上"))
    said = "\n".join(messages(results))
    assert "tenant.example" in said and "找不到这个主机名" in said and "AI 设置" in said, said
    assert SECRET not in dump(results), said


@pytest.mark.parametrize("language", ["en", "zh"])
async def test_a_members_link_to_a_closed_port_shows_no_password_address_or_port_in_either_language(
        monkeypatch, language):
    port = closed_port()
    monkeypatch.setenv(FETCH_ALLOW_ENV, "files.example")
    fake_dns(monkeypatch, {"files.example": "127.0.0.1"})
    spoken = texts.bind(language, LABELS)
    try:
        with pytest.raises(RunnerError) as err:
            await fetch(f"http://alice:{PASSWORD}@files.example:{port}/a.png?token=tkn-123", label="'a.png'",
                        max_bytes=1 << 20, budget=3.0)
        said = explain.explanation("Dify", err.value.code, err.value.message)
    finally:
        texts.unbind(spoken)
    assert "files.example" in said
    for leak in (PASSWORD, "alice", "127.0.0.1", str(port), "tkn-123"):
        assert leak not in said, (leak, said)


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("host_of", ["literal", "private.example"])
async def test_a_members_link_to_a_private_address_is_refused_before_connecting(monkeypatch, language, host_of):
    """A listening 127.0.0.1 socket the member's name resolves to: netguard refuses the private
    address, nothing connects, and the line names only the host the member wrote."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.3)
    port = listener.getsockname()[1]
    accepted: list[Any] = []

    def accept():
        try:
            accepted.append(listener.accept())
        except OSError:
            pass

    th = threading.Thread(target=accept)
    th.start()
    monkeypatch.delenv(FETCH_ALLOW_ENV, raising=False)
    fake_dns(monkeypatch, {"private.example": "127.0.0.1"})
    target = "127.0.0.1" if host_of == "literal" else host_of  # a literal private address, or a name for one
    spoken = texts.bind(language, LABELS)
    try:
        with pytest.raises(RunnerError) as err:
            await fetch(f"http://u:{PASSWORD}@{target}:{port}/x", label="'x'", max_bytes=1 << 20, budget=2.0)
        said = explain.explanation("Dify", err.value.code, err.value.message)
    finally:
        texts.unbind(spoken)
        th.join()
        listener.close()
    assert err.value.code == "input.refused", err.value
    assert not accepted, "the plugin connected to the private address"
    assert PASSWORD not in said and str(port) not in said, said
    if host_of == "private.example":
        assert "127.0.0.1" not in said, said


# --- 8. chat-language values that are not in the options -------------------------------------------


@pytest.mark.parametrize("value", ["fr", "zh_CN", ["zh_Hans"], {"x": 1}, "{0.__class__}"])
async def test_a_chat_language_not_in_the_options_is_named_by_its_label_not_a_crash(value):
    r, host, _ = make([ev.Text("never")])
    results = await run(r, host, "why", config={"advanced-settings": True, "chat-language": value})
    code, _, message = failure(results)
    assert code == "config.invalid" and "chat-language" in message
    (said,) = messages(results)
    assert ("Language of the bot's own notes" in said or "机器人提示语的语言" in said) and "chat-language" not in said, said


async def test_a_hidden_chat_language_is_not_applied_when_advanced_settings_are_off():
    r, host, _ = make([boom(RunnerError("upstream.auth", "HTTP 401"))])
    results = await run(r, host, "why no answer", config={"advanced-settings": False, "chat-language": "zh_Hans"})
    assert "rejected the API key" in messages(results)[0], messages(results)
