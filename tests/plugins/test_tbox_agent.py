"""TboxAgent against the loopback fake Tbox: request shape, conversations, files, errors, config."""

from __future__ import annotations

import base64
import dataclasses

import pytest

from runner_kit.netguard import FETCH_ALLOW_ENV
from runners_cli.host import Identity
from runners_cli.plugins import find, load_runner_class
from tests.fakes.tbox import FakeTbox
from tests.helpers import (
    deltas,
    dump,
    failure,
    final_text,
    rtype,
    run,
    state_updates,
    stored_key,
    terminal,
)

PLUGIN = "tbox-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "pat_tbox_test_token_123456"
APP = "202501010000000123"
SESSION = stored_key("tbox.conversation_id")
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x01" * 32).decode()
HOST_FIELDS = {"enable-all-tools": False, "tools": [], "knowledge-bases": [], "mcp-resources": [],
               "mcp-resource-agent-read-enabled": False}


@pytest.fixture(name="srv")
def tbox_fake():
    """The fake Tbox (other Tbox test modules import this fixture: ``srv`` there too)."""
    with FakeTbox(api_key=KEY, app_id=APP) as s:
        yield s
    assert s.handler_errors == []


def cfg(srv, **extra):
    return {"base-url": srv.base_url, "api-key": KEY, "app-id": APP, **extra}


def bodies(srv) -> list[dict]:
    return [r.json() for r in srv.chat_requests()]


# -- ok_text / resume / request shape --------------------------------------------------------------


async def test_ok_text_streams_and_the_request_has_the_tbox_shape(srv, host, runner):
    srv.answer_tokens = ["你好", "，", "世界"]
    results = await run(runner, host, "hello", config=cfg(srv))
    assert final_text(results) == "你好，世界"
    assert deltas(results)
    (req,) = srv.chat_requests()
    assert req.path == "/api/chat"
    assert req.headers["authorization"] == KEY, "the raw token, no Bearer"
    assert req.headers["source"] == "AGENT_SDK"
    assert req.json() == {"appId": APP, "userId": "user_u-1", "stream": True, "query": "hello", "searchEngine": False}


async def test_a_pasted_bearer_prefix_is_dropped(srv, host, runner):
    await run(runner, host, config=cfg(srv, **{"api-key": f"Bearer {KEY}"}))
    assert srv.chat_requests()[0].headers["authorization"] == KEY


async def test_resume_continues_the_conversation(srv, host, runner):
    first = await run(runner, host, "one", config=cfg(srv))
    cid = state_updates(first)[SESSION]
    assert cid in srv.conversations
    second = await run(runner, host, "two", config=cfg(srv))
    assert rtype(terminal(second)) == "run.completed" and SESSION not in state_updates(second)
    assert [b.get("conversationId") for b in bodies(srv)] == [None, cid]
    assert [q for q, _ in srv.conversations[cid].turns] == ["one", "two"]


@pytest.mark.parametrize("spelling", [("sessionId",), ("conversationId",), ()])
async def test_the_conversation_id_is_read_under_either_name_in_header_or_chunks(srv, host, runner, spelling):
    srv.id_spelling = spelling
    srv.id_in_chunks = not spelling
    first = await run(runner, host, config=cfg(srv))
    cid = state_updates(first)[SESSION]
    assert cid in srv.conversations
    await run(runner, host, config=cfg(srv))
    assert bodies(srv)[1]["conversationId"] == cid


async def test_a_gone_conversation_is_replaced_once_with_a_notice(srv, host, runner):
    first = await run(runner, host, config=cfg(srv))
    old = state_updates(first)[SESSION]
    srv.forget_conversations()
    second = await run(runner, host, config=cfg(srv))
    assert rtype(terminal(second)) == "run.completed"
    assert final_text(second).startswith("(The previous conversation") and final_text(second).endswith("Tbox.")
    new = state_updates(second)[SESSION]
    assert new != old and [b.get("conversationId") for b in bodies(srv)] == [None, old, None]


async def test_other_errors_keep_the_stored_conversation(srv, host, runner):
    cid = state_updates(await run(runner, host, config=cfg(srv)))[SESSION]
    srv.fault = "json_error_200"
    failed = await run(runner, host, config=cfg(srv))
    assert failure(failed)[0] == "upstream.error" and SESSION not in state_updates(failed)
    srv.fault = None
    await run(runner, host, config=cfg(srv))
    assert bodies(srv)[-1]["conversationId"] == cid and len(bodies(srv)) == 3, "no fresh-session retry"


async def test_ok_usage_from_the_charge_message_and_unknown_without_it(srv, host, runner):
    usage = terminal(await run(runner, host, config=cfg(srv))).usage.model_dump()
    out = max(1, len("Hello from Tbox.") // 2)
    assert usage == {"prompt_tokens": 42, "completion_tokens": out, "total_tokens": 42 + out}
    srv.include_usage = False
    assert terminal(await run(runner, host, config=cfg(srv))).usage is None


async def test_an_end_message_also_ends_the_answer(srv, host, runner):
    srv.send_end = True
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "Hello from Tbox."
    assert srv.connections_accepted == 1


# -- reasoning, lanes, followups, revoke --------------------------------------------------------------


@pytest.mark.parametrize("remove", [False, True])
async def test_thinking_messages_are_a_think_block(srv, host, runner, remove):
    srv.thinking = ["让我想想，", "好的。"]
    text = final_text(await run(runner, host, config=cfg(srv, **{"remove-think": remove})))
    assert text == ("Hello from Tbox." if remove else "<think>\n让我想想，好的。\n</think>\nHello from Tbox.")


async def test_followups_are_listed_after_the_answer(srv, host, runner):
    srv.follow_ups = ["What else?", "  And   more? ", "3", "4", "5", "6"]
    text = final_text(await run(runner, host, config=cfg(srv)))
    assert text == "Hello from Tbox.\n\n- What else?\n- And more?\n- 3\n- 4\n- 5", "at most 5, whitespace folded"


async def test_image_lane_urls_become_images(srv, host, runner):
    srv.image_urls = ["https://cdn.example/1.png"]
    msg = [r for r in await run(runner, host, config=cfg(srv)) if rtype(r) == "message.completed"][0]
    content = msg.data["message"]["content"]
    assert content[0]["text"] == "Hello from Tbox."
    assert content[1]["type"] == "image_url" and content[1]["image_url"]["url"] == "https://cdn.example/1.png"


async def test_a_headerless_first_chunk_is_text(srv, host, runner):
    srv.headerless = True
    assert final_text(await run(runner, host, config=cfg(srv))) == "Hello from Tbox."


async def test_revoke_replaces_the_answer_visibly(srv, host, runner):
    srv.revoke = True
    srv.follow_ups = ["never shown"]
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "(Tbox withdrew this answer after its content review.)"
    assert deltas(results)[0].startswith("Hello"), "the withdrawn text had been shown"


# -- errors -------------------------------------------------------------------------------------------


async def test_http_401_names_the_key(srv, host, runner):
    srv.fault = "http_401"
    code, retryable, message = failure(await run(runner, host, config=cfg(srv)))
    assert (code, retryable) == ("upstream.auth", False)
    assert "UNAUTHORIZED" in message and "api-key" in message and "traceId" in message


async def test_a_wrong_token_is_answered_403_but_reported_as_a_key_problem(srv, host, runner):
    results = await run(runner, host, config=cfg(srv, **{"api-key": "pat_wrong_token_999"}))
    code, _, message = failure(results)
    assert code == "upstream.auth" and "HTTP 403" in message
    assert "pat_wrong_token_999" not in dump(results)


async def test_http_404_and_429_and_5xx(srv, host, runner):
    for fault, expect in (("http_404", ("upstream.not_found", False)), ("http_429", ("upstream.rate_limited", True)),
                          ("http_500", ("upstream.unavailable", True)), ("http_503", ("upstream.unavailable", True))):
        srv.fault = fault
        code, retryable, message = failure(await run(runner, host, config=cfg(srv)))
        assert (code, retryable) == expect, (fault, message)


async def test_error_event_midstream_keeps_the_partial_answer(srv, host, runner):
    srv.fault = "error_event"
    results = await run(runner, host, config=cfg(srv))
    code, _, message = failure(results)
    assert code == "upstream.error" and "大模型调用失败" in message
    assert deltas(results)[0] == "Hello"


async def test_type_error_message_and_unknown_app(srv, host, runner):
    srv.fault = "type_error"
    code, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "upstream.error" and "CONTENT_RISK" in message
    srv.fault = None
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"app-id": "999"})))
    assert code == "upstream.not_found" and "app-id" in message


async def test_malformed_and_truncated_streams(srv, host, runner):
    srv.fault = "invalid_json"
    assert failure(await run(runner, host, config=cfg(srv)))[0] == "upstream.protocol"
    srv.fault = "truncated"
    results = await run(runner, host, config=cfg(srv))
    assert failure(results)[:2] == ("upstream.unavailable", True)
    assert deltas(results) == ["Hello"]


# -- generation agents ---------------------------------------------------------------------------


async def test_completion_sends_inputs_with_the_text_and_keeps_no_conversation(srv, host, runner):
    config = cfg(srv, **{"app-type": "completion", "text-input-name": "topic", "advanced-settings": True,
                         "inputs": {"style": "short", "topic": "overridden"}})
    results = await run(runner, host, "cats", config=config, params={"city": "Hangzhou"})
    assert final_text(results) == "Hello from Tbox."
    assert state_updates(results) == {}, "a generation agent answers each message on its own"
    (req,) = srv.chat_requests()
    assert req.path == "/api/completion"
    assert req.json() == {"appId": APP, "userId": "user_u-1", "stream": True,
                          "inputs": {"style": "short", "city": "Hangzhou", "topic": "cats"}}
    await run(runner, host, "dogs", config=config)
    assert "conversationId" not in srv.chat_requests()[1].json()


async def test_completion_default_text_input_is_query(srv, host, runner):
    await run(runner, host, "cats", config=cfg(srv, **{"app-type": "completion"}))
    assert srv.chat_requests()[0].json()["inputs"] == {"query": "cats"}


# -- files --------------------------------------------------------------------------------------------


async def test_files_are_uploaded_concurrently_with_their_real_type(srv, host, runner, tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_FILE_DIRS", str(tmp_path))
    (tmp_path / "a.mp3").write_bytes(b"ID3" + b"\0" * 16)
    (tmp_path / "b.mp4").write_bytes(b"\0\0\0\x18ftypmp42" + b"\0" * 16)
    (tmp_path / "c.pdf").write_bytes(b"%PDF-1.4 body")
    srv.upload_delay = 0.2
    contents = [{"type": "image_base64", "image_base64": f"data:image/png;base64,{PNG}"}]
    attachments = [{"type": "file", "path": str(tmp_path / n), "name": n} for n in ("a.mp3", "b.mp4", "c.pdf")]
    results = await run(runner, host, "", config=cfg(srv), contents=contents, attachments=attachments)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    body = bodies(srv)[0]
    assert body["query"] == "Please look at the attached file(s)."
    assert sorted(f["type"] for f in body["files"]) == ["AUDIO", "FILE", "IMAGE", "VIDEO"]
    names = {srv.uploads[f["fileId"]][0]: f["type"] for f in body["files"]}
    assert names["a.mp3"] == "AUDIO" and names["c.pdf"] == "FILE"
    assert srv.peak_active_requests >= 2, "uploads ran side by side"


@pytest.fixture
def allow_loopback(monkeypatch):
    """The administrator allows links to this machine (the picture server below is on 127.0.0.1)."""
    monkeypatch.setenv(FETCH_ALLOW_ENV, "127.0.0.1")


async def test_an_image_url_is_fetched_and_uploaded(srv, host, runner, allow_loopback):
    from tests.fakes.replay import ReplayServer, Reply

    with ReplayServer({"GET /pic.png": Reply(base64.b64decode(PNG), content_type="image/png")}) as pics:
        contents = [{"type": "image_url", "image_url": {"url": pics.root_url + "/pic.png"}}]
        results = await run(runner, host, "what is it", config=cfg(srv), contents=contents)
    assert rtype(terminal(results)) == "run.completed"
    (f,) = bodies(srv)[0]["files"]
    assert f["type"] == "IMAGE" and srv.uploads[f["fileId"]][1] == base64.b64decode(PNG)


async def test_an_upload_failure_is_a_clear_error_and_no_chat_is_sent(srv, host, runner):
    srv.max_upload_bytes = 4
    contents = [{"type": "image_base64", "image_base64": f"data:image/png;base64,{PNG}"}]
    code, _, message = failure(await run(runner, host, "x", config=cfg(srv), contents=contents))
    assert code == "upstream.too_large" and "uploading" in message and "FILE_TOO_LARGE" in message
    assert not srv.chat_requests()


# -- config, base URL, identity, migration ---------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/", "/api", "/api/", "/API/chat"])
async def test_base_url_forms(srv, host, runner, suffix):
    results = await run(runner, host, config=cfg(srv, **{"base-url": srv.base_url + suffix}))
    assert final_text(results) == "Hello from Tbox."
    assert srv.chat_requests()[0].path == "/api/chat"


async def test_missing_app_id_is_config_missing(srv, host, runner):
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"app-id": ""})))
    assert code == "config.missing" and "app-id" in message
    assert not srv.find_requests()


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
    assert bodies(srv)[0]["userId"] == user


async def test_migrated_pipeline_config_runs_and_continues(srv, host, runner, monkeypatch):
    """The exact config LangBot 4.11.2's migration emits for a tbox-app-api pipeline (no base-url:
    the default address is used, pointed at the fake here)."""
    migrated = {"api-key": KEY, "app-id": APP, "timeout": 120, "remove-think": False,
                "user-id-source": "legacy-bot", **HOST_FIELDS}
    schema = load_runner_class(find("tbox-agent")).schema
    assert schema.fields["base-url"].default == "https://api.tbox.cn"
    monkeypatch.setitem(schema.fields, "base-url", dataclasses.replace(schema.fields["base-url"], default=srv.base_url))
    ident = Identity(bot_id="b0t-uuid-1")
    first = await run(runner, host, config=migrated, identity=ident)
    assert final_text(first) == "Hello from Tbox."
    second = await run(runner, host, config=migrated, identity=ident)
    assert rtype(terminal(second)) == "run.completed"
    assert [b["userId"] for b in bodies(srv)] == ["b0t-uuid-1"] * 2
    assert bodies(srv)[1]["conversationId"] == next(iter(state_updates(first).values()))


# -- payload readers (undocumented shapes) ------------------------------------------------------------


def _adapter_module():
    import sys

    return sys.modules[load_runner_class(find("tbox-agent")).adapter.__module__]


@pytest.mark.parametrize(
    ("payload", "expect"),
    [
        ({"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}, (3, 4, 7)),
        ({"usage": {"prompt_tokens": 1, "completion_tokens": 2}}, (1, 2, None)),
        ({"tokenUsage": {"total_tokens": "9"}}, (None, None, 9)),
        ({"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}, None),  # nothing counted: unknown, not 0
        ({"cost": 0.02, "currency": "CNY"}, None),
    ],
)
def test_usage_is_read_from_the_spellings_seen_and_never_zero_for_unknown(payload, expect):
    usage = _adapter_module().usage_of(payload)
    got = None if usage is None else (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)
    assert got == expect


@pytest.mark.parametrize(
    "payload",
    [{"questions": ["a", "b"]}, ["a", "b"], {"followup": '["a", "b"]'}, {"list": [{"text": "a"}, {"question": "b"}]}],
)
def test_follow_up_payload_shapes(payload):
    assert _adapter_module().follow_ups(payload) == ["a", "b"]


async def test_image_links_to_private_addresses_never_reach_the_chat(srv, host, runner):
    """An agent can give back a link a member wrote; LangBot fetches image links itself for some
    platforms (Discord, Lark, Matrix), so a link to the metadata service or the LAN is dropped
    (runner_kit.netguard.chat_link)."""
    srv.image_urls = ["http://169.254.169.254/latest/meta-data/x.png", "http://127.0.0.1:9/x.png",
                      "file:///etc/passwd", "https://cdn.example/1.png"]
    msg = [r for r in await run(runner, host, config=cfg(srv)) if rtype(r) == "message.completed"][0]
    links = [c["image_url"]["url"] for c in msg.data["message"]["content"] if c["type"] == "image_url"]
    assert links == ["https://cdn.example/1.png"]
