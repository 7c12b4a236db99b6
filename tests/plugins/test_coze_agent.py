"""CozeAgent against the loopback fake Coze: request shape, conversations, files, tools, errors."""

from __future__ import annotations

import base64
import json
import sys
import time

import pytest

from runner_kit.errors import RunnerError
from runners_cli.host import Identity
from runners_cli.plugins import find, load_runner_class
from tests.fakes.coze import FakeCoze
from tests.helpers import (
    deltas,
    failure,
    final_text,
    rtype,
    run,
    state_updates,
    stored_key,
    terminal,
)

PLUGIN = "coze-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "pat_coze_test_token_123456"
BOT = "7400000000000000123"
SESSION = stored_key("coze.conversation_id")
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x01" * 32).decode()


@pytest.fixture
def srv():
    with FakeCoze(api_key=KEY, bot_id=BOT) as s:
        yield s
    assert s.handler_errors == []


def cfg(srv, **extra):
    return {"api-base": srv.base_url, "api-key": KEY, "bot-id": BOT, **extra}


def requests(srv):
    return srv.chat_requests()


def normalize_base(raw):
    """The adapter's api-base normaliser (the plugin package is importable once its runner is loaded)."""
    adapter = load_runner_class(find("coze-agent")).adapter
    return sys.modules[adapter.__module__].normalize_base(raw)


# -- ok_text / resume / request shape --------------------------------------------------------------


async def test_ok_text_streams_and_the_request_has_the_coze_shape(srv, host, runner):
    srv.answer_tokens = ["Hi", " there", "!"]
    results = await run(runner, host, "hello", config=cfg(srv))
    assert final_text(results) == "Hi there!", "completed, verbose and follow_up add nothing"
    assert len(deltas(results)) >= 1
    (req,) = requests(srv)
    body = req.json()
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert "conversation_id" not in req.query and "conversation_id" not in body
    assert body == {
        "bot_id": BOT, "user_id": "user_u-1", "stream": True, "auto_save_history": True,
        "additional_messages": [{"role": "user", "type": "question", "content": "hello", "content_type": "text"}],
    }


async def test_resume_continues_the_conversation_through_the_query_parameter(srv, host, runner):
    first = await run(runner, host, "one", config=cfg(srv))
    cid = state_updates(first)[SESSION]
    assert cid in srv.conversations and "external.conversation_id" not in state_updates(first)
    second = await run(runner, host, "two", config=cfg(srv))
    assert rtype(terminal(second)) == "run.completed"
    assert [r.query.get("conversation_id", "") for r in requests(srv)] == ["", cid]
    assert [m["content"] for m in srv.conversations[cid].messages if m["role"] == "user"] == ["one", "two"]
    assert SESSION not in state_updates(second)


async def test_auto_save_history_off_is_sent(srv, host, runner):
    await run(runner, host, config=cfg(srv, **{"auto-save-history": False}))
    assert requests(srv)[0].json()["auto_save_history"] is False


async def test_params_become_string_custom_variables(srv, host, runner):
    await run(runner, host, config=cfg(srv), params={"city": "Berlin", "count": 3, "tags": ["a"]})
    body = requests(srv)[0].json()
    assert body["custom_variables"] == {"city": "Berlin", "count": "3", "tags": '["a"]'}


async def test_ok_usage_maps_coze_counts(srv, host, runner):
    usage = terminal(await run(runner, host, config=cfg(srv))).usage.model_dump()
    chat = next(iter(srv.chats.values()))
    assert usage == {"prompt_tokens": chat.usage["input_count"], "completion_tokens": chat.usage["output_count"],
                     "total_tokens": chat.usage["token_count"]}


# -- tools, reasoning, answers -----------------------------------------------------------------------


async def test_ok_tool_function_call_and_output_are_tool_events(srv, host, runner):
    srv.tools = True
    results = await run(runner, host, "weather?", config=cfg(srv))
    started = [r.data for r in results if rtype(r) == "tool.call.started"]
    completed = [r.data for r in results if rtype(r) == "tool.call.completed"]
    assert [s["tool_name"] for s in started] == ["weather-getWeather"]
    assert started[0]["parameters"] == {"city": "Berlin"}
    assert completed[0]["tool_call_id"] == started[0]["tool_call_id"]
    assert completed[0]["result"] == {"temp": 12, "sky": "cloudy"}
    assert final_text(results) == "Hello, world!"


async def test_reasoning_content_is_think_and_can_be_hidden(srv, host, runner):
    srv.reasoning = ["step ", "by step"]
    assert final_text(await run(runner, host, config=cfg(srv))) == "<think>\nstep by step\n</think>\nHello, world!"
    hidden = await run(runner, host, config=cfg(srv, **{"remove-think": "true"}))
    assert final_text(hidden) == "Hello, world!" and all("think" not in d for d in deltas(hidden))


async def test_answer_only_in_completed_is_shown_once(srv, host, runner):
    srv.completed_only = True
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "Hello, world!"


async def test_multi_answer_bot_shows_every_answer(srv, host, runner):
    srv.extra_answers = ["And a second message."]
    assert final_text(await run(runner, host, config=cfg(srv))) == "Hello, world!\n\nAnd a second message."


async def test_follow_up_suggestions_only_when_asked(srv, host, runner):
    srv.follow_ups = ["What else?", "Why?"]
    assert final_text(await run(runner, host, config=cfg(srv))) == "Hello, world!"
    shown = await run(runner, host, config=cfg(srv, **{"advanced-settings": True, "follow-up-suggestions": True}))
    assert final_text(shown) == "Hello, world!\n\n- What else?\n- Why?"


async def test_stream_quirks_still_complete(srv, host, runner):
    srv.trailing_blank_line = False
    srv.split_writes = True
    srv.answer_tokens = ["你好", "，世界", "🌍"]
    assert final_text(await run(runner, host, config=cfg(srv))) == "你好，世界🌍"


# -- failures ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "code", "retryable"),
    [
        ("http_401", "upstream.auth", False),
        ("http_404", "upstream.not_found", False),
        ("http_429", "upstream.rate_limited", True),
        ("http_500", "upstream.unavailable", True),
        ("html_502", "upstream.unavailable", True),
        ("invalid_json", "upstream.protocol", False),
        ("truncated", "upstream.unavailable", True),
    ],
)
async def test_http_and_stream_faults(srv, host, runner, fault, code, retryable):
    srv.fault = fault
    got, got_retry, message = failure(await run(runner, host, config=cfg(srv)))
    assert (got, got_retry) == (code, retryable), message
    assert KEY not in message


async def test_chat_failed_carries_the_coze_code_and_message(srv, host, runner):
    srv.fail_chat = {"code": 4011, "msg": "Insufficient Coze token balance"}
    code, retryable, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "upstream.quota" and not retryable
    assert "4011" in message and "Insufficient Coze token balance" in message


async def test_error_event_midstream_keeps_what_was_streamed(srv, host, runner):
    srv.fault = "error_event"
    results = await run(runner, host, config=cfg(srv))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True) and "5000" in message
    text = final_text(results)
    assert text.startswith("Hello") and "incomplete" in text


async def test_requires_action_asks_the_chat_not_an_empty_response(srv, host, runner):
    # the whole round trip is in test_coze_agent_requires_action.py
    srv.requires_action = True
    results = await run(runner, host, config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed"
    text = final_text(results)
    assert "get_local_time" in text and "Reply with your answer" in text and "empty" not in text.lower()


async def test_empty_answer_names_the_bot(srv, host, runner):
    srv.empty_answer = True
    code, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "upstream.empty_response" and "bot finished without producing any answer" in message


async def test_tools_without_an_answer_say_so(srv, host, runner):
    srv.empty_answer = True
    srv.tools = True
    _, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert "only ran tools" in message


@pytest.mark.parametrize(
    ("error", "code", "words"),
    [
        ({"code": 4015, "msg": "bot not published"}, "config.invalid", "Agent as API"),
        ({"code": 4008, "msg": "daily limit"}, "upstream.quota", "daily limit"),
        ({"code": 4016, "msg": "busy"}, "upstream.rate_limited", "still running"),
        ({"code": 700012006, "msg": "access token invalid"}, "upstream.auth", "access token invalid"),
    ],
)
async def test_business_envelopes_with_http_200(srv, host, runner, error, code, words):
    srv.business_error = error
    got, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert got == code and words in message and str(error["code"]) in message and "logid" in message


async def test_unknown_bot_id_points_at_bot_id(srv, host, runner):
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"bot-id": "123"})))
    assert code == "config.invalid" and "bot-id" in message


async def test_deleted_conversation_recovers_once(srv, host, runner):
    await run(runner, host, "one", config=cfg(srv))
    srv.forget_conversations()
    results = await run(runner, host, "two", config=cfg(srv))
    assert final_text(results).endswith("Hello, world!")
    convs = [r.query.get("conversation_id", "") for r in requests(srv)]
    assert convs[1] and convs[2] == ""
    assert state_updates(results)[SESSION] in srv.conversations


async def test_reset_conversation_starts_fresh(srv, host, runner):
    await run(runner, host, "one", config=cfg(srv))
    host.reset_conversation()
    await run(runner, host, "two", config=cfg(srv))
    assert "conversation_id" not in requests(srv)[1].query


async def test_deadline_from_timeout_is_respected(srv, host, runner):
    srv.fault = "stall"
    start = time.time()
    code, retryable, _ = failure(await run(runner, host, config=cfg(srv, timeout=2.5), deadline_at=start + 2.5))
    assert (code, retryable) == ("upstream.timeout", True) and time.time() < start + 2.5


# -- files -----------------------------------------------------------------------------------------------


async def test_images_and_files_are_uploaded_and_sent_as_object_string(srv, host, runner):
    contents = [
        {"type": "image_base64", "image_base64": f"data:image/png;base64,{PNG}"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "file_base64", "file_base64": base64.b64encode(b"notes").decode(), "file_name": "notes.txt"},
    ]
    results = await run(runner, host, "look", config=cfg(srv), contents=contents)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    msg = requests(srv)[0].json()["additional_messages"][0]
    assert msg["content_type"] == "object_string" and isinstance(msg["content"], str)
    parts = json.loads(msg["content"])
    assert parts[0] == {"type": "text", "text": "look"}
    assert {"type": "image", "file_url": "https://example.com/cat.jpg"} in parts
    uploaded = {p["type"]: srv.uploads[p["file_id"]] for p in parts if "file_id" in p}
    assert uploaded["image"].data.startswith(b"\x89PNG") and uploaded["file"].name == "notes.txt"
    assert len(srv.find_requests("POST", "/v1/files/upload")) == 2


async def test_image_without_text_is_sent_alone(srv, host, runner):
    contents = [{"type": "image_base64", "image_base64": PNG}]
    assert rtype(terminal(await run(runner, host, "", config=cfg(srv), contents=contents))) == "run.completed"
    parts = json.loads(requests(srv)[0].json()["additional_messages"][0]["content"])
    assert [p["type"] for p in parts] == ["image"]


async def test_upload_refused_with_http_200_names_the_file(srv, host, runner):
    srv.max_upload_bytes = 10
    contents = [{"type": "file_base64", "file_base64": base64.b64encode(b"x" * 100).decode(), "file_name": "big.pdf"}]
    code, _, message = failure(await run(runner, host, "read", config=cfg(srv), contents=contents))
    assert code == "upstream.too_large" and "big.pdf" in message and "4302" in message
    assert not requests(srv)


# -- cancel ---------------------------------------------------------------------------------------------


async def test_host_cancel_calls_chat_cancel_with_both_ids(srv, host, runner):
    srv.answer_tokens = ["a "] * 100
    srv.token_delay = 0.05
    gen = runner.invoke(host.make_context("hi", config=cfg(srv)))
    async for r in gen:
        if rtype(r) == "message.delta":
            break
    await gen.aclose()
    assert await srv.wait_until_async(lambda: bool(srv.cancelled), 3)
    (chat,) = srv.chats.values()
    assert srv.cancelled == [(chat.conversation_id, chat.id)]
    assert srv.find_requests("POST", "/v3/chat/cancel")[0].headers["authorization"] == f"Bearer {KEY}"


async def test_finished_chat_is_not_cancelled(srv, host, runner):
    await run(runner, host, config=cfg(srv))
    assert not srv.cancelled


# -- base URL --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "base"),
    [
        ("https://api.coze.cn", "https://api.coze.cn"),
        ("https://api.coze.com/", "https://api.coze.com"),
        ("https://api.coze.cn/v3", "https://api.coze.cn"),
        ("https://api.coze.cn/v3/", "https://api.coze.cn"),
        ("https://api.coze.com/v1/", "https://api.coze.com"),
        ("https://api.coze.cn/v3/chat", "https://api.coze.cn"),
        ("http://coze.internal:8888/", "http://coze.internal:8888"),
        ("http://10.0.0.5/coze/v1", "http://10.0.0.5/coze"),
        ("", "https://api.coze.cn"),
    ],
)
def test_base_url_forms(raw, base):
    assert normalize_base(raw) == base


@pytest.mark.parametrize("raw", ["api.coze.cn", "ftp://api.coze.cn", "not a url", "https://"])
def test_base_url_must_be_plain_http(raw):
    with pytest.raises(RunnerError) as info:
        normalize_base(raw)
    assert info.value.code == "config.invalid" and "api-base" in info.value.message


@pytest.mark.parametrize("suffix", ["", "/", "/v3", "/v3/", "/v1", "/v1/"])
async def test_pasted_api_prefix_reaches_the_same_endpoint(srv, host, runner, suffix):
    results = await run(runner, host, config=cfg(srv, **{"api-base": srv.root_url + suffix}))
    assert final_text(results) == "Hello, world!"
    assert requests(srv)[0].path == "/v3/chat"


# -- identity and migration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "ident", "user"),
    [
        ("actor", Identity(), "user_u-1"),
        ("conversation", Identity(), "conversation_conv-1"),
        ("legacy-session", Identity(launcher_type="group", launcher_id="777"), "group_777"),
        ("legacy-bot", Identity(bot_id="bot-9"), "bot-9"),
    ],
)
async def test_user_identity_sources(srv, host, runner, source, ident, user):
    await run(runner, host, config=cfg(srv, **{"user-id-source": source}), identity=ident)
    assert requests(srv)[0].json()["user_id"] == user


async def test_legacy_session_without_launcher_fails_closed(srv, host, runner):
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"user-id-source": "legacy-session"})))
    assert code == "config.identity_unavailable" and "legacy-session" in message
    assert not srv.find_requests()


async def test_migrated_pipeline_config_runs(srv, host, runner):
    """The exact config LangBot 4.11.2's migration emits for a coze-api pipeline (float timeout)."""
    migrated = {
        "api-key": KEY, "bot-id": BOT, "api-base": srv.root_url, "timeout": 120.0, "auto-save-history": True,
        "advanced-settings": False, "langbot-assets-enabled": False, "remove-think": False,
        "user-id-source": "legacy-session",
        "enable-all-tools": False, "tools": [], "knowledge-bases": [], "mcp-resources": [],
        "mcp-resource-agent-read-enabled": False,
    }
    ident = Identity(launcher_type="person", launcher_id="10001")
    first = await run(runner, host, config=migrated, identity=ident)
    assert final_text(first) == "Hello, world!"
    second = await run(runner, host, config=migrated, identity=ident)
    assert rtype(terminal(second)) == "run.completed"
    assert [r.json()["user_id"] for r in requests(srv)] == ["person_10001"] * 2
    assert requests(srv)[1].query["conversation_id"] == next(iter(state_updates(first).values()))


async def test_missing_bot_id_is_config_missing(srv, host, runner):
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"bot-id": ""})))
    assert code == "config.missing" and "bot-id" in message
    assert not srv.find_requests()


def test_answer_file_links_to_private_addresses_are_dropped(runner):  # runner: the plugin is loaded
    """A bot can echo a member's link in an object_string answer; only public http(s) links are
    passed to the chat (LangBot fetches some itself: runner_kit.netguard.chat_link)."""
    import json as _json

    from coze_agent.adapter import _answer_content

    parts = [{"type": "text", "text": "here"},
             {"type": "image", "file_url": "http://169.254.169.254/latest/meta-data/"},
             {"type": "file", "file_url": "http://user:pw@cdn.example.com/a.pdf"},
             {"type": "image", "file_url": "https://cdn.example.com/ok.png"}]
    text, files = _answer_content("object_string", _json.dumps(parts))
    assert text == "here" and [f.url for f in files] == ["https://cdn.example.com/ok.png"]
