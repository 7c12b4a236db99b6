"""WeKnoraAgent against the loopback fake WeKnora: request shape, sessions, files, tools, errors."""

from __future__ import annotations

import asyncio
import base64

import pytest

from runners_cli.host import Identity
from tests.fakes.weknora import DEFAULT_REFERENCES, FakeWeKnora, Session
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

PLUGIN = "weknora-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "sk-weknora-plugin-test-0001"
SESSION = stored_key("weknora.session_id")
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x01" * 32).decode()
PDF = base64.b64encode(b"%PDF-1.4 tiny").decode()


@pytest.fixture
def srv():
    with FakeWeKnora(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


def cfg(srv, **extra):
    return {"base-url": srv.base_url, "api-key": KEY, "app-type": "chat", **extra}


def chats(srv):
    return srv.chat_requests()


# -- the standard cases --------------------------------------------------------------------------


async def test_ok_text_creates_a_session_then_streams(srv, host, runner):
    srv.answer_tokens = ["a" * 30, "b" * 40, "c" * 80]
    results = await run(runner, host, "彗尾朝哪边？", config=cfg(srv))
    assert final_text(results) == "".join(srv.answer_tokens)
    assert len(deltas(results)) == 3, "each answer event goes out as it arrives (no batching every N events)"
    (create,) = srv.find_requests("POST", "/api/v1/sessions")
    assert create.headers["x-api-key"] == KEY and create.json() == {"title": "IM Chat - user_u-1"}
    sid = state_updates(results)[SESSION]
    assert sid in srv.sessions
    (chat,) = chats(srv)
    assert chat.path == f"/api/v1/knowledge-chat/{sid}"
    assert chat.json() == {"query": "彗尾朝哪边？", "agent_id": "builtin-quick-answer", "channel": "im"}
    assert chat.headers["x-api-key"] == KEY and chat.headers["x-external-user-id"] == "user_u-1"
    assert terminal(results).usage is None, "WeKnora reports no usage"


async def test_ok_tool_agent_chat_request_and_steps(srv, host, runner):
    srv.tools, srv.reasoning = True, ["Search ", "first."]
    config = cfg(srv, **{"app-type": "agent", "knowledge-base-ids": [" kb-1 ", "kb-2", "kb-1", ""],
                         "web-search-enabled": True})
    results = await run(runner, host, config=config)
    assert rtype(terminal(results)) == "run.completed"
    (chat,) = chats(srv)
    assert chat.path.startswith("/api/v1/agent-chat/")
    body = chat.json()
    assert body["agent_id"] == "builtin-smart-reasoning" and body["agent_enabled"] is True
    assert body["knowledge_base_ids"] == ["kb-1", "kb-2"] and body["web_search_enabled"] is True
    kinds = [rtype(r) for r in results]
    assert kinds.index("tool.call.started") < kinds.index("tool.call.completed")
    # issue 33 item 9: the real server announces each call twice (first without arguments): one start
    (started,) = [r for r in results if rtype(r) == "tool.call.started"]
    assert started.data["parameters"] == {"query": "comet tail", "knowledge_base_ids": ["kb-1"]}
    assert final_text(results) == "<think>\nSearch first.\n</think>\nHello, world!"


async def test_a_tool_call_announced_only_as_pending_is_started_once_when_its_result_comes():
    from weknora_agent.adapter import WeKnoraAdapter, _State

    st = _State()
    adapter = WeKnoraAdapter.__new__(WeKnoraAdapter)
    pending = {"response_type": "tool_call", "content": "Calling tool: grep", "done": False,
               "data": {"tool_name": "grep", "arguments": None, "tool_call_id": "t1"}}
    result = {"response_type": "tool_result", "content": "3 lines", "done": False,
              "data": {"tool_name": "grep", "success": True, "tool_call_id": "t1"}}
    events = [*await adapter._map(pending, st), *await adapter._map(result, st)]
    assert [type(e).__name__ for e in events] == ["ToolStarted", "ToolCompleted"]


async def test_ok_usage_when_a_server_sends_it(srv, host, runner):
    srv.include_usage = True
    end = terminal(await run(runner, host, config=cfg(srv)))
    assert end.usage.model_dump() == {"prompt_tokens": 120, "completion_tokens": 6, "total_tokens": 126}


async def test_resume_second_turn_continues_the_session(srv, host, runner):
    first = await run(runner, host, "one", config=cfg(srv))
    second = await run(runner, host, "two", config=cfg(srv))
    assert rtype(terminal(second)) == "run.completed"
    sid = state_updates(first)[SESSION]
    assert [r.path.rsplit("/", 1)[-1] for r in chats(srv)] == [sid, sid]
    assert len(srv.find_requests("POST", "/api/v1/sessions")) == 1
    assert [m["content"] for m in srv.sessions[sid].messages if m["role"] == "user"] == ["one", "two"]


@pytest.mark.parametrize(("fault", "code"), [("http_401", "upstream.auth"), ("http_404", "upstream.not_found"),
                                             ("http_429", "upstream.rate_limited"), ("http_500", "upstream.unavailable"),
                                             ("http_503", "upstream.unavailable")])
async def test_http_errors(srv, host, runner, fault, code):
    srv.fault = fault
    got, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert got == code and KEY not in message and message.startswith("WeKnora error HTTP")


async def test_bad_key_on_session_creation_is_auth(srv, host, runner):
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"api-key": "sk-wrong-key-0000000"})))
    assert code == "upstream.auth" and "invalid API key" in message
    assert not chats(srv), "no chat without a session"


async def test_error_event_midstream_and_malformed_and_truncated(srv, host, runner):
    for fault, code in (("error_event", "upstream.error"), ("invalid_json", "upstream.protocol"),
                        ("truncated", "upstream.unavailable")):
        srv.fault = fault
        got, _, message = failure(await run(runner, host, config=cfg(srv)))
        assert got == code, (fault, message)
    srv.fault = "error_event"
    results = await run(runner, host, config=cfg(srv))
    assert "failed to call model" in failure(results)[2] and final_text(results).startswith("Hello")


async def test_slow_stream_first_text_arrives_early(srv, host, runner):
    srv.answer_tokens, srv.token_delay = ["a ", "b ", "c ", "d"], 0.2
    ctx = host.make_context("hi", config=cfg(srv))
    loop = asyncio.get_running_loop()
    start, first = loop.time(), None
    async for r in runner.invoke(ctx):
        if rtype(r) == "message.delta" and first is None:
            first = loop.time() - start
    assert first is not None and first < loop.time() - start - 0.4


# -- base URL --------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["{root}", "{root}/", "{root}/api/v1", "{root}/api/v1/", " {root}/API/V1 "])
async def test_base_url_forms(srv, host, runner, form):
    results = await run(runner, host, config=cfg(srv, **{"base-url": form.format(root=srv.root_url)}))
    assert final_text(results) == "Hello, world!"


async def test_base_url_not_http_is_config_invalid(srv, host, runner):
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"base-url": "localhost:8080"})))
    assert code == "config.invalid" and "base-url" in message


# -- sessions ----------------------------------------------------------------------------------------


async def test_deleted_session_is_replaced_once_with_a_notice(srv, host, runner):
    first = await run(runner, host, config=cfg(srv))
    old = state_updates(first)[SESSION]
    srv.forget_conversations()
    second = await run(runner, host, config=cfg(srv))
    new = state_updates(second)[SESSION]
    assert new != old and final_text(second).endswith("Hello, world!")
    assert final_text(second).startswith("(The previous conversation")
    assert [r.path.rsplit("/", 1)[-1] for r in chats(srv)] == [old, old, new]


async def test_direct_principal_sessions_follow_the_user(srv, host, runner):
    srv.direct_principal = True
    alice, bob = Identity(actor_id="alice"), Identity(actor_id="bob", conversation_id="conv-2")
    for ident in (alice, bob, alice):
        assert final_text(await run(runner, host, config=cfg(srv), identity=ident)) == "Hello, world!"
    owners = sorted(s.owner for s in srv.sessions.values())
    assert owners == ["user_alice", "user_bob"], "one WeKnora session per person, owned by them"


async def test_non_ascii_user_ids_are_sent_percent_encoded(srv, host, runner):
    results = await run(runner, host, config=cfg(srv), identity=Identity(actor_id="张三"))
    assert final_text(results) == "Hello, world!"
    assert chats(srv)[0].headers["x-external-user-id"] == "user_%E5%BC%A0%E4%B8%89"


async def test_migrated_pipeline_config_runs_and_continues(srv, host, runner):
    """The exact config LangBot 4.11.2's migration emits for a weknora-api pipeline."""
    migrated = {
        "base-url": srv.root_url + "/api/v1", "api-key": KEY, "app-type": "chat",
        "agent-id": "builtin-quick-answer", "knowledge-base-ids": ["kb-legacy"], "web-search-enabled": False,
        "timeout": 120, "base-prompt": "请回答用户的问题。", "advanced-settings": False,
        "enable-all-tools": False, "tools": [], "knowledge-bases": [], "mcp-resources": [],
        "mcp-resource-agent-read-enabled": False,
    }
    first = await run(runner, host, config=migrated)
    assert final_text(first) == "Hello, world!"
    second = await run(runner, host, config={**migrated, "timeout": 90.5})
    assert rtype(terminal(second)) == "run.completed"
    sid = state_updates(first)[SESSION]
    assert [r.path for r in chats(srv)] == [f"/api/v1/knowledge-chat/{sid}"] * 2
    assert chats(srv)[0].json()["knowledge_base_ids"] == ["kb-legacy"]


async def test_migrated_agent_pipeline_uses_the_agent_endpoint(srv, host, runner):
    migrated = {"base-url": srv.base_url, "api-key": KEY, "app-type": "agent", "agent-id": "builtin-smart-reasoning",
                "knowledge-base-ids": [], "web-search-enabled": True, "timeout": 120.0,
                "base-prompt": "请回答用户的问题。", "advanced-settings": False}
    assert final_text(await run(runner, host, config=migrated)) == "Hello, world!"
    body = chats(srv)[0].json()
    assert chats(srv)[0].path.startswith("/api/v1/agent-chat/") and body["web_search_enabled"] is True
    assert "knowledge_base_ids" not in body


async def test_custom_agent_id_is_sent_as_given(srv, host, runner):
    await run(runner, host, config=cfg(srv, **{"agent-id": " my-agent-7 "}))
    assert chats(srv)[0].json()["agent_id"] == "my-agent-7"


async def test_public_resource_links_ask_for_public_urls(srv, host, runner):
    await run(runner, host, config=cfg(srv, **{"advanced-settings": True, "public-resource-links": True}))
    assert chats(srv)[0].query == {"resource_urls": "public"}


async def test_references_follow_the_answer_one_line_per_document(srv, host, runner):
    srv.references = DEFAULT_REFERENCES
    text = final_text(await run(runner, host, config=cfg(srv)))
    assert text == "Hello, world!\n\nReferences:\n- 彗星.txt\n- The Sun (sun.md)"


async def test_untitled_session_trailing_title_is_not_waited_for(srv, host, runner):
    srv.sessions["preset"] = Session("preset", "", KEY, "", "now")  # a session without a title
    srv.title_delay = 2.5  # WeKnora waits up to 3 s for a generated title after complete
    host.store.set(host.scope_key(Identity(), "conversation"), SESSION, "preset")
    loop = asyncio.get_running_loop()
    start = loop.time()
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "Hello, world!" and loop.time() - start < 1.5


# -- files ---------------------------------------------------------------------------------------------


async def test_images_and_files_go_inline(srv, host, runner):
    contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG},
                {"type": "file_base64", "file_base64": PDF, "file_name": "report.pdf"}]
    results = await run(runner, host, "what is this", config=cfg(srv), contents=contents)
    assert rtype(terminal(results)) == "run.completed"
    body = chats(srv)[0].json()
    assert body["images"] == [{"data": "data:image/png;base64," + PNG}]
    assert body["attachment_uploads"] == [{"data": PDF, "file_name": "report.pdf",
                                           "file_size": len(base64.b64decode(PDF))}]


async def test_files_only_message_sends_the_base_prompt(srv, host, runner):
    contents = [{"type": "image_base64", "image_base64": PNG}]
    await run(runner, host, "", config=cfg(srv), contents=contents)
    assert chats(srv)[0].json()["query"] == "请回答用户的问题。"


async def test_image_upload_disabled_on_the_agent_says_so(srv, host, runner):
    srv.image_upload_enabled = False
    contents = [{"type": "text", "text": "hi"}, {"type": "image_base64", "image_base64": PNG}]
    code, _, message = failure(await run(runner, host, "hi", config=cfg(srv), contents=contents))
    assert code == "upstream.bad_request" and "Image upload is not enabled" in message


# -- cancel, approval ---------------------------------------------------------------------------------


async def test_host_cancel_stops_the_answer_with_its_message_id(srv, host, runner):
    srv.answer_tokens, srv.token_delay = ["a "] * 100, 0.05
    gen = runner.invoke(host.make_context("hi", config=cfg(srv)))
    async for r in gen:
        if rtype(r) == "message.delta":
            break
    await gen.aclose()
    assert await srv.wait_until_async(lambda: bool(srv.stopped), 3)
    ((sid, mid),) = srv.stopped
    assert mid in srv.runs and srv.runs[mid].session.id == sid
    (stop,) = srv.find_requests("POST", f"/api/v1/sessions/{sid}/stop")
    assert stop.headers["x-api-key"] == KEY and stop.json() == {"message_id": mid}


async def test_finished_answer_is_not_stopped(srv, host, runner):
    await run(runner, host, config=cfg(srv))
    assert not srv.stopped


@pytest.mark.parametrize(("knob", "words"), [("approval", "approve"), ("oauth", "OAuth")])
async def test_waiting_for_a_person_is_a_clear_pause(srv, host, runner, knob, words):
    setattr(srv, knob, True)
    srv.tools = True
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"app-type": "agent"})))
    assert code == "upstream.paused" and words in message and "web UI" in message
    assert srv.stopped, "the waiting agent is released"
