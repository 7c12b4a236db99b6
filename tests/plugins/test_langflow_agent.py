"""LangflowAgent against the loopback fake Langflow: request shape, sessions, tweaks, files,
base URL forms, identities, the migrated pipeline config, and the platform's quirks."""

from __future__ import annotations

import base64
import time

import pytest

from runners_cli.host import Identity
from tests.fakes.langflow import FakeLangflow
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

PLUGIN = "langflow-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "sk-langflow-plugin-test-key"
SESSION = stored_key("langflow.session_id")  # where the default identity's session id is kept
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x01" * 32).decode()
ANSWER = "Hello from the fake model."


@pytest.fixture
def srv():
    with FakeLangflow(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


def cfg(srv, **extra):
    return {"base-url": srv.base_url, "api-key": KEY, "flow-id": srv.flow_id, **extra}


def run_requests(srv):
    return [r for r in srv.find_requests("POST") if r.path.startswith("/api/v1/run/")]


async def test_request_shape(srv, host, runner):
    await run(runner, host, "hello", config=cfg(srv))
    (req,) = run_requests(srv)
    assert req.path == f"/api/v1/run/{srv.flow_id}" and req.query == {"stream": "true"}
    assert req.headers["x-api-key"] == KEY and "authorization" not in req.headers
    body = req.json()
    assert set(body) == {"input_value", "input_type", "output_type", "session_id", "user_id"}
    assert (body["input_value"], body["input_type"], body["output_type"]) == ("hello", "chat", "chat")
    assert body["user_id"] == "user_u-1"
    assert body["session_id"].startswith("langbot-") and body["session_id"] != srv.flow_id


async def test_session_is_minted_once_per_conversation_never_the_flow_id(srv, host, runner):
    first = await run(runner, host, "one", config=cfg(srv))
    session = state_updates(first)[SESSION]
    assert "external.conversation_id" not in state_updates(first)
    await run(runner, host, "two", config=cfg(srv))
    other = await run(runner, host, "three", config=cfg(srv), identity=Identity(conversation_id="conv-2"))
    sessions = [r.session_id for r in srv.runs]
    assert sessions[:2] == [session, session] and sessions[2] != session
    assert srv.flow_id not in sessions and list(state_updates(other).values()) == [sessions[2]]


async def test_memory_follows_the_session_and_a_reset_starts_fresh(srv, host, runner):
    srv.echo_memory = True
    srv.mode = "plain"
    assert final_text(await run(runner, host, "a", config=cfg(srv))) == "I remember 0 earlier turns."
    assert final_text(await run(runner, host, "b", config=cfg(srv))) == "I remember 1 earlier turns."
    host.store.reset(host.scope_key(Identity(), "conversation"))  # the user resets the conversation
    assert final_text(await run(runner, host, "c", config=cfg(srv))) == "I remember 0 earlier turns."


@pytest.mark.parametrize("suffix", ["", "/", "/api/v1", "/api/v1/", "/API/V1/"])
async def test_base_url_root_or_with_the_api_prefix(srv, host, runner, suffix):
    results = await run(runner, host, config=cfg(srv, **{"base-url": srv.root_url + suffix}))
    assert final_text(results) == ANSWER
    assert run_requests(srv)[0].path == f"/api/v1/run/{srv.flow_id}"


async def test_streamed_tokens_then_repeated_final_message_not_doubled(srv, host, runner):
    srv.answer_tokens = ["Hel", "lo", " wor", "ld"]
    srv.token_delay = 0.3
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "Hello world"
    assert all(d.count("world") <= 1 for d in deltas(results)) and len(deltas(results)) >= 2


async def test_usage_from_the_model_and_omitted_without_one(srv, host, runner):
    end = terminal(await run(runner, host, config=cfg(srv)))
    assert end.usage.model_dump() == {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
    srv.mode = "plain"
    end = terminal(await run(runner, host, config=cfg(srv)))
    assert rtype(end) == "run.completed" and end.usage is None


async def test_non_streaming_fallback(srv, host, runner):
    results = await run(runner, host, config=cfg(srv, **{"advanced-settings": True, "streaming": False}))
    assert final_text(results) == ANSWER
    assert run_requests(srv)[0].query == {"stream": "false"}
    assert terminal(results).usage.total_tokens == 16
    srv.fail_component = "OpenAI"
    code, retryable, message = failure(await run(runner, host, config=cfg(srv, **{"advanced-settings": True,
                                                                                 "streaming": False})))
    assert (code, retryable) == ("upstream.error", False) and "fake upstream failure" in message


@pytest.mark.parametrize("tweaks", [{"OpenAIModelComponent-RcQ3e": {"temperature": 0.2}},
                                    '{"OpenAIModelComponent-RcQ3e": {"temperature": 0.2}}'])
async def test_tweaks_as_dict_or_json_string(srv, host, runner, tweaks):
    await run(runner, host, config=cfg(srv, tweaks=tweaks))
    assert srv.runs[0].tweaks == {"OpenAIModelComponent-RcQ3e": {"temperature": 0.2}}


@pytest.mark.parametrize("tweaks", ["{not json", "[1, 2]"])
async def test_invalid_tweaks_is_config_invalid_naming_the_key(srv, host, runner, tweaks):
    code, retryable, message = failure(await run(runner, host, config=cfg(srv, tweaks=tweaks)))
    assert (code, retryable) == ("config.invalid", False) and "tweaks" in message
    assert not srv.find_requests()


async def test_empty_tweaks_are_not_sent(srv, host, runner):
    await run(runner, host, config=cfg(srv, tweaks=""))
    assert "tweaks" not in run_requests(srv)[0].json()


async def test_types_and_output_component_reach_langflow(srv, host, runner):
    config = cfg(srv, **{"input-type": "text", "output-type": "any", "advanced-settings": True,
                         "output-component": "ChatOutput--hvXQ"})
    await run(runner, host, config=config)
    body = run_requests(srv)[0].json()
    assert (body["input_type"], body["output_type"], body["output_component"]) == ("text", "any", "ChatOutput--hvXQ")


async def test_output_component_needs_advanced_settings(srv, host, runner):
    await run(runner, host, config=cfg(srv, **{"output-component": "ChatOutput--hvXQ"}))
    assert "output_component" not in run_requests(srv)[0].json()


async def test_image_uploaded_then_attached_to_the_chat_input_by_tweaks(srv, host, runner):
    contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG}]
    tweaks = {"ChatInput-Wna_m": {"should_store_message": True}}
    results = await run(runner, host, "what is this", config=cfg(srv, tweaks=tweaks), contents=contents)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    (upload,) = srv.find_requests("POST", f"/api/v1/files/upload/{srv.flow_id}")  # the route for images
    assert upload.headers["x-api-key"] == KEY and upload.form().files["file"].data.startswith(b"\x89PNG")
    assert srv.find_requests("GET", f"/api/v1/flows/{srv.flow_id}"), "the Chat Input id is looked up"
    (path,) = srv.uploads
    assert srv.runs[0].tweaks == {"ChatInput-Wna_m": {"should_store_message": True, "files": [path]}}


async def test_an_image_that_came_only_as_a_link_is_left_out_and_said_and_the_text_answered(srv, host, runner):
    """Issue 33 item 7: an image LangBot passes only as an http link failed the whole turn
    (input.unreadable); Langflow takes uploads, not links. Now it is left out with a note, in the
    person's language, and the text is answered, as the other plugins do."""
    contents = [{"type": "text", "text": "what is this"},
                {"type": "image_url", "image_url": {"url": "https://img.example.com/cat.png"}}]
    results = await run(runner, host, "what is this", config=cfg(srv), contents=contents)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    said = final_text(results)
    assert said.startswith("(Not sent to Langflow: ") and "only came as a link" in said
    assert not srv.find_requests("POST", "/api/v2/files"), "nothing uploaded"
    assert srv.runs[0].input_value == "what is this" and not srv.runs[0].tweaks
    zh = await run(runner, host, "这是什么", config=cfg(srv), contents=[
        {"type": "text", "text": "这是什么"}, {"type": "image_url", "image_url": {"url": "https://img.example.com/a.png"}}])
    assert final_text(zh).startswith("（未发送给 Langflow：")
    # a link and no words: nothing to send, said plainly
    alone = await run(runner, host, "", config=cfg(srv), contents=[
        {"type": "image_url", "image_url": {"url": "https://img.example.com/b.png"}}])
    assert failure(alone)[0] == "input.unreadable"


async def test_configured_chat_input_id_skips_the_lookup(srv, host, runner):
    srv.flows[srv.flow_id].chat_input_id = "ChatInput-custom"
    contents = [{"type": "text", "text": "x"}, {"type": "image_base64", "image_base64": PNG}]
    config = cfg(srv, **{"advanced-settings": True, "chat-input-id": "ChatInput-custom"})
    results = await run(runner, host, "x", config=config, contents=contents)
    assert rtype(terminal(results)) == "run.completed"
    assert not srv.find_requests("GET") and list(srv.runs[0].tweaks) == ["ChatInput-custom"]


async def test_a_file_langflow_cannot_find_fails_in_the_chat_input(srv, host, runner):
    contents = [{"type": "text", "text": "x"}, {"type": "image_base64", "image_base64": PNG}]
    srv.keep_uploads = False  # stored, then lost (a cleanup job, another storage backend)
    code, _, message = failure(await run(runner, host, "x", config=cfg(srv), contents=contents))
    assert code == "upstream.error" and "Chat Input" in message and "File not found" in message


async def test_unknown_flow_and_bad_key_tell_the_owner(srv, host, runner):
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"flow-id": "nope"})))
    assert code == "config.invalid" and "flow-id" in message and "nope" in message
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"api-key": "sk-wrong-key-123"})))
    assert code == "upstream.auth" and "Invalid or missing API key" in message and "sk-wrong" not in message


async def test_endpoint_name_works_as_flow_id(srv, host, runner):
    assert final_text(await run(runner, host, config=cfg(srv, **{"flow-id": "lb-chat"}))) == ANSWER


async def test_wrong_route_is_not_found_with_the_base_url_hint(srv, host, runner):
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"base-url": srv.root_url + "/langflow"})))
    assert code == "upstream.not_found" and "base-url" in message


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
    assert srv.runs[0].user_id == user


async def test_migrated_pipeline_config_runs(srv, host, runner):
    """The exact config LangBot 4.11.2's migration emits for a langflow-api pipeline (no timeout key)."""
    migrated = {
        "base-url": srv.root_url, "api-key": KEY, "flow-id": srv.flow_id, "input-type": "chat",
        "output-type": "chat", "tweaks": {"OpenAIModelComponent-RcQ3e": {"temperature": 0.5}},
        "advanced-settings": False, "langbot-assets-enabled": False,
        "enable-all-tools": False, "tools": [], "knowledge-bases": [], "mcp-resources": [],
        "mcp-resource-agent-read-enabled": False,
    }
    ctx_started = time.time()
    results = await run(runner, host, config=migrated, identity=Identity(launcher_type="person", launcher_id="1"))
    assert final_text(results) == ANSWER
    assert srv.runs[0].tweaks == {"OpenAIModelComponent-RcQ3e": {"temperature": 0.5}}
    assert time.time() - ctx_started < 10


async def test_deadline_is_respected(srv, host, runner):
    srv.fault = "stall"
    start = time.time()
    results = await run(runner, host, config=cfg(srv, timeout=2), deadline_at=start + 2)
    code, retryable, _ = failure(results)
    assert (code, retryable) == ("upstream.timeout", True) and time.time() < start + 2
    assert "Hello" not in dump([r for r in results if rtype(r) == "run.failed"])
