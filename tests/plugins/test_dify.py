"""DifyAgent against the loopback fake Dify: every app type, conversations, files, identities."""

from __future__ import annotations

import base64
import json
import time
from types import SimpleNamespace

import pytest

from runner_kit.errors import RunnerError
from runner_kit.inputs import UserInput
from runners_cli.host import Identity
from tests.fakes.dify import FakeDify
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

PLUGIN = "dify-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "app-dify-test-key-123"
SESSION = stored_key("dify.conversation_id")  # where the default identity's conversation id is kept
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x01" * 32).decode()


@pytest.fixture(name="srv")
def dify_fake():
    """The fake Dify (other Dify test modules import this fixture: ``srv`` there too)."""
    with FakeDify(api_key=KEY) as s:
        yield s


def cfg(srv, **extra):
    return {"base-url": srv.base_url, "api-key": KEY, "app-type": "chat", **extra}


def chat_bodies(srv):
    return [r.json() for r in srv.find_requests("POST", "/v1/chat-messages")]


async def test_chat_streams_and_keeps_the_conversation(srv, host, runner):
    srv.answer_tokens = ["Hi", " there", "!"]
    first = await run(runner, host, "hello", config=cfg(srv))
    assert final_text(first) == "Hi there!"
    cid = state_updates(first)[SESSION]
    assert cid and "external.conversation_id" not in state_updates(first)
    second = await run(runner, host, "and again", config=cfg(srv))
    assert rtype(terminal(second)) == "run.completed"
    bodies = chat_bodies(srv)
    assert bodies[0]["conversation_id"] == "" and bodies[1]["conversation_id"] == cid
    assert [t.query for t in srv.turns(cid)] == ["hello", "and again"]
    assert SESSION not in state_updates(second), "unchanged ids are not re-sent"
    assert bodies[0]["user"] == "user_u-1" and bodies[0]["response_mode"] == "streaming"


async def test_deleted_upstream_conversation_recovers_once(srv, host, runner):
    await run(runner, host, "one", config=cfg(srv))
    srv.forget_conversations()
    results = await run(runner, host, "two", config=cfg(srv))
    assert final_text(results).endswith("Hello, world!")  # after the kit's fresh-conversation notice
    bodies = chat_bodies(srv)
    assert bodies[1]["conversation_id"] and bodies[2]["conversation_id"] == ""
    new_id = state_updates(results)[SESSION]
    assert new_id in srv.conversations


async def test_reset_conversation_starts_fresh(srv, host, runner):
    await run(runner, host, "one", config=cfg(srv))
    host.reset_conversation()
    await run(runner, host, "two", config=cfg(srv))
    assert chat_bodies(srv)[1]["conversation_id"] == ""


async def test_usage_maps_only_token_fields(srv, host, runner):
    end = terminal(await run(runner, host, config=cfg(srv)))
    usage = end.usage.model_dump()
    assert set(usage) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_agent_thoughts_tools_and_files(srv, host, runner):
    srv.mode = "agent"
    results = await run(runner, host, "search x", config=cfg(srv, **{"app-type": "agent"}))
    types = [rtype(r) for r in results]
    started = [r for r in results if rtype(r) == "tool.call.started"]
    completed = [r for r in results if rtype(r) == "tool.call.completed"]
    assert len(started) == 1 and len(completed) == 1, types
    assert started[0].data["tool_name"] == "search"
    assert started[0].data["parameters"] == {"search": {"q": "x"}}
    msg = [r for r in results if rtype(r) == "message.completed"][0].data["message"]["content"]
    assert isinstance(msg, list)
    text = msg[0]["text"]
    # the answer step's thought repeats the streamed answer: it is not reasoning, and not shown twice
    assert text == "<think>\nI should look this up.\n</think>\nHello, world!"
    assert all(d.count("Hello, world!") <= 1 for d in deltas(results))
    images = [c for c in msg if c["type"] == "image_url"]
    assert len(images) == 1 and images[0]["image_url"]["url"].startswith("http://127.0.0.1:")
    assert types.index("tool.call.started") < types.index("tool.call.completed")


async def test_new_agent_closing_message_is_not_doubled(srv, host, runner):
    srv.mode = "new-agent"
    results = await run(runner, host, config=cfg(srv, **{"app-type": "agent", "remove-think": True}))
    assert final_text(results) == "Hello, world!"
    assert all("Hello, world!Hello" not in d for d in deltas(results))


async def test_chatflow_reasoning_and_usage_counted_once(srv, host, runner):
    srv.mode = "chatflow"
    srv.reasoning = "step by step"
    results = await run(runner, host, config=cfg(srv, **{"app-type": "chatflow"}))
    text = final_text(results)
    assert text == "<think>\nstep by step\n</think>\nHello, world!"
    end = terminal(results)
    assert end.usage.total_tokens == end.usage.prompt_tokens + end.usage.completion_tokens
    hidden = await run(runner, host, config=cfg(srv, **{"app-type": "chatflow", "remove-think": "true"}))
    assert final_text(hidden) == "Hello, world!"
    assert all("think" not in d for d in deltas(hidden))


async def test_workflow_streams_text_and_sends_legacy_inputs(srv, host, runner):
    srv.mode = "workflow"
    ident = Identity(launcher_type="person", launcher_id="42")
    results = await run(runner, host, "run it", config=cfg(srv, **{"app-type": "workflow"}), identity=ident,
                        params={"custom_var": "v1"})
    assert final_text(results) == "Hello, world!"
    assert len(deltas(results)) >= 1
    body = srv.find_requests("POST", "/v1/workflows/run")[0].json()
    assert "query" not in body and "conversation_id" not in body
    inputs = body["inputs"]
    assert inputs["langbot_user_message_text"] == "run it"
    assert inputs["langbot_session_id"] == "person_42"
    assert inputs["langbot_conversation_id"] == "conv-1"
    assert inputs["custom_var"] == "v1"
    assert not any(k.startswith("dify.conversation_id") for k in state_updates(results))


async def test_workflow_answer_from_outputs_key(srv, host, runner):
    srv.mode = "workflow"
    srv.workflow_stream_text = False
    srv.workflow_output_key = "result"
    results = await run(runner, host, config=cfg(srv, **{"app-type": "workflow"}))
    assert final_text(results) == "Hello, world!"
    srv.workflow_output_key = "summary"
    named = cfg(srv, **{"app-type": "workflow", "advanced-settings": True, "workflow-output-key": "summary"})
    assert final_text(await run(runner, host, config=named)) == "Hello, world!"
    wrong = {**named, "workflow-output-key": "nope"}
    code, _, message = failure(await run(runner, host, config=wrong))
    assert code == "config.invalid" and "nope" in message and "summary" in message


async def test_workflow_failure_is_reported(srv, host, runner):
    srv.mode = "workflow"
    srv.workflow_fail = "LLM node exploded"
    code, retryable, message = failure(await run(runner, host, config=cfg(srv, **{"app-type": "workflow"})))
    assert code == "upstream.error" and not retryable and "LLM node exploded" in message


async def test_wrong_app_type_tells_the_owner(srv, host, runner):
    srv.mode = "workflow"
    code, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "config.invalid" and "workflow" in message


async def test_text_generation_app_hints_do_not_send_the_owner_in_circles(srv, host, runner):
    """A completion app is refused by /chat-messages (not_chat_app) and by /workflows/run
    (not_workflow_app): neither hint may just say "switch to the other app-type"."""
    srv.mode = "completion"
    chat_code, _, chat_msg = failure(await run(runner, host, config=cfg(srv)))
    wf_code, _, wf_msg = failure(await run(runner, host, config=cfg(srv, **{"app-type": "workflow"})))
    assert chat_code == wf_code == "config.invalid"
    for message in (chat_msg, wf_msg):
        assert "text-generation" in message and "not supported" in message
    assert "not_chat_app" in chat_msg and "workflow" in chat_msg
    assert "not_workflow_app" in wf_msg and "chat" in wf_msg


async def test_message_replace_wins(srv, host, runner):
    srv.replace_with = "[removed by moderation]"
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "[removed by moderation]"
    assert deltas(results)[-1] == "[removed by moderation]"


async def test_midstream_quota_error(srv, host, runner):
    srv.fail_midstream = {"status": 400, "code": "provider_quota_exceeded", "message": "quota gone"}
    code, retryable, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "upstream.quota" and not retryable and "quota gone" in message


async def test_stream_quirks_still_complete(srv, host, runner):
    srv.trailing_blank_line = False
    srv.split_writes = True
    srv.answer_tokens = ["你好", "，世界", "🌍"]
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "你好，世界🌍"


async def test_images_uploaded_with_same_user_and_urls_passed(srv, host, runner, tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_FILE_DIRS", str(tmp_path))  # attachment paths are read only from here
    doc = tmp_path / "notes.txt"
    doc.write_text("file body")
    contents = [{"type": "image_base64", "image_base64": f"data:image/png;base64,{PNG}"},
                {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/pic.jpg"}}]
    attachments = [{"type": "file", "source": "message_chain", "path": str(doc), "name": "notes.txt"}]
    results = await run(runner, host, "", config=cfg(srv, **{"base-prompt": "Describe it."}), contents=contents,
                        attachments=attachments)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    body = chat_bodies(srv)[0]
    assert body["query"] == "Describe it."
    files = body["files"]
    assert {"type": "image", "transfer_method": "remote_url", "url": "http://127.0.0.1:9/pic.jpg"} in files
    local = [f for f in files if f["transfer_method"] == "local_file"]
    assert {f["type"] for f in local} == {"image", "document"}
    for f in local:
        assert srv.uploads[f["upload_file_id"]].user == body["user"]
    assert any(u.name == "notes.txt" and u.data == b"file body" for u in srv.uploads.values())


async def test_failed_upload_cancels_the_other_uploads(srv, host, runner):
    """One upload is rejected while a sibling is still waiting for Dify: the sibling is cancelled
    (its connection is dropped, nothing is stored) and the run fails with the rejection."""
    srv.max_upload_bytes = 1000
    srv.upload_delays = {"slow.txt": 3.0}
    contents = [
        {"type": "file_base64", "file_base64": base64.b64encode(b"small").decode(), "file_name": "slow.txt"},
        {"type": "file_base64", "file_base64": base64.b64encode(b"x" * 2000).decode(), "file_name": "big.txt"},
    ]
    start = time.monotonic()
    code, _, message = failure(await run(runner, host, "read these", config=cfg(srv), contents=contents))
    assert code == "upstream.too_large" and "big.txt" in message
    assert time.monotonic() - start < 2.0, "the run does not wait for the slow upload"
    assert await srv.wait_until_async(lambda: "slow.txt" in srv.upload_outcomes, timeout=5.0)
    assert srv.upload_outcomes == {"big.txt": "rejected", "slow.txt": "disconnected"}
    assert not srv.uploads and not chat_bodies(srv)


async def test_empty_message_without_files_does_not_send_base_prompt(srv, host, runner):
    """base-prompt stands in for the text of a message that has files; with no files there is
    nothing to ask, and the prompt must not be sent as if the user had typed it."""
    code, retryable, _ = failure(await run(runner, host, "", config=cfg(srv, **{"base-prompt": "Describe it."})))
    assert (code, retryable) == ("input.invalid", False)
    assert not chat_bodies(srv)


@pytest.mark.parametrize("text", ["", "  \n "])
async def test_adapter_refuses_a_blank_message_without_files(srv, runner, text):
    """The adapter itself, whatever the kit checks first: no text and no files is not a query."""
    env = SimpleNamespace(
        config=cfg(srv, **{"base-prompt": "Describe it."}),
        input=UserInput(text=text, files=[], params={}),
        session=SimpleNamespace(current=None),
        user="user_u-1",
        ctx=None,
    )
    adapter = type(runner).adapter(env)
    with pytest.raises(RunnerError) as info:
        await adapter._request()
    assert info.value.code == "input.invalid" and "no text or files" in info.value.message


async def test_too_large_file_is_refused_by_name(srv, host, runner):
    big = base64.b64encode(b"\0" * (2 * 1024 * 1024)).decode()
    contents = [{"type": "file_base64", "file_base64": big, "file_name": "big.bin"}]
    config = cfg(srv, **{"advanced-settings": True, "max-file-size-mb": 1})
    code, _, message = failure(await run(runner, host, "x", config=config, contents=contents))
    assert code == "input.too_large" and "big.bin" in message
    assert not srv.find_requests("POST", "/v1/files/upload")


async def test_unreadable_attachment_named(srv, host, runner, tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_FILE_DIRS", str(tmp_path))
    attachments = [{"type": "file", "path": str(tmp_path / "missing.pdf"), "name": "missing.pdf"}]
    # alongside text the unreadable file is skipped; alone, the message has nothing to send
    assert rtype(terminal(await run(runner, host, "x", config=cfg(srv), attachments=attachments))) == "run.completed"
    assert "files" not in chat_bodies(srv)[0]
    code, _, message = failure(await run(runner, host, "", config=cfg(srv), attachments=attachments))
    assert code == "input.invalid" and "missing.pdf" in message
    assert len(chat_bodies(srv)) == 1


@pytest.mark.parametrize(
    "source,ident,user",
    [
        ("actor", Identity(), "user_u-1"),
        ("conversation", Identity(), "conversation_conv-1"),
        ("legacy-session", Identity(launcher_type="group", launcher_id="777"), "group_777"),
        ("legacy-bot", Identity(bot_id="bot-9"), "bot-9"),
    ],
)
async def test_user_identity_sources(srv, host, runner, source, ident, user):
    await run(runner, host, config=cfg(srv, **{"user-id-source": source}), identity=ident)
    assert chat_bodies(srv)[0]["user"] == user


async def test_legacy_session_without_launcher_fails_closed(srv, host, runner):
    code, retryable, message = failure(await run(runner, host, config=cfg(srv, **{"user-id-source": "legacy-session"})))
    assert code == "config.identity_unavailable" and not retryable and "legacy-session" in message
    assert not srv.find_requests()


async def test_params_and_configured_inputs_reach_dify(srv, host, runner):
    config = cfg(srv, **{"advanced-settings": "true", "inputs": '{"lang": "en", "tone": "formal"}'})
    await run(runner, host, config=config, params={"tone": "casual", "sender_name": "Ann"})
    assert chat_bodies(srv)[0]["inputs"] == {"lang": "en", "tone": "casual", "sender_name": "Ann"}


async def test_migrated_pipeline_config_runs(srv, host, runner):
    """The exact config LangBot 4.11.2's migration emits for a dify-service-api pipeline."""
    migrated = {
        "base-url": srv.base_url, "api-key": KEY, "app-type": "chat",
        "base-prompt": "When the file content is readable, please read the content of the file.",
        "timeout": 30, "advanced-settings": False, "langbot-assets-enabled": False, "remove-think": False,
        "user-id-source": "legacy-session",
        "enable-all-tools": False, "tools": [], "knowledge-bases": [], "mcp-resources": [],
        "mcp-resource-agent-read-enabled": False,
    }
    ident = Identity(launcher_type="person", launcher_id="10001")
    results = await run(runner, host, config=migrated, identity=ident)
    assert final_text(results) == "Hello, world!"
    assert chat_bodies(srv)[0]["user"] == "person_10001"


async def test_deadline_from_migrated_timeout_is_respected(srv, host, runner):
    srv.fault = "stall"
    start = time.time()
    results = await run(runner, host, config=cfg(srv, timeout=2), deadline_at=start + 2)
    code, retryable, _ = failure(results)
    assert (code, retryable) == ("upstream.timeout", True)
    assert time.time() < start + 2
    assert "Hello" not in dump([r for r in results if rtype(r) == "run.failed"])


# --- what a real Dify 1.12.1 showed (tests/real_peers/test_dify_real.py) ---------------------------


async def test_an_unpublished_app_tells_the_owner_to_publish_it(srv, host, runner):
    srv.mode = "workflow"
    srv.published = False
    code, retryable, message = failure(await run(runner, host, config=cfg(srv, **{"app-type": "workflow"})))
    assert (code, retryable) == ("config.invalid", False), message
    assert "Workflow not published" in message and "publish the app in Dify" in message


async def test_start_node_inputs_name_what_to_change(srv, host, runner):
    srv.mode = "workflow"
    srv.user_input_form = [{"paragraph": {"variable": "ticket", "required": True, "max_length": None}}]
    workflow = cfg(srv, **{"app-type": "workflow"})
    code, _, message = failure(await run(runner, host, config=workflow))
    assert code == "config.invalid" and "“ticket”" in message and "Extra app inputs" in message, message
    given = await run(runner, host, config={**workflow, "advanced-settings": True, "inputs": {"ticket": "T-7"}})
    assert rtype(terminal(given)) == "run.completed"
    # a short-text variable Dify caps (its default is 48 characters) and a member's long message
    srv.user_input_form = [{"text-input": {"variable": "langbot_user_message_text", "required": True,
                                           "max_length": 48}}]
    code, _, message = failure(await run(runner, host, "x" * 49, config=workflow))
    assert code == "input.too_large" and "at most 48 characters" in message and "Paragraph" in message, message
    assert rtype(terminal(await run(runner, host, "x" * 48, config=workflow))) == "run.completed"
    srv.user_input_form = [{"select": {"variable": "tone", "required": False, "options": ["warm", "dry"]}}]
    code, _, message = failure(await run(runner, host, config={**workflow, "advanced-settings": True,
                                                                "inputs": {"tone": "loud"}}))
    assert code == "config.invalid" and "“tone”" in message and "Extra app inputs" in message, message


async def test_flask_route_suggestions_never_reach_the_chat(srv, host, runner):
    """Dify 1.12.1 appends Flask-RESTX's "You have requested this URI [...] but did you mean ..."
    to a 404 raised inside a route; the owner is shown Dify's own words only."""
    from dify_agent.errors import conversation_missing, parse_envelope

    real = (b'{"code":"not_found","message":"Conversation Not Exists. You have requested this URI '
            b'[\\/v1\\/chat-messages] but did you mean \\/v1\\/chat-messages or \\/api\\/chat-messages or '
            b'\\/v1\\/chat-messages\\/<string:task_id>\\/stop ?","status":404}')
    assert conversation_missing(404, real)
    err = parse_envelope(404, real, "application/json")
    assert err.message == "Dify error HTTP 404 not_found: Conversation Not Exists.", err.message
    # an unknown route is Werkzeug's HTML page (base-url without /v1)
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"base-url": srv.base_url.removesuffix("/v1")})))
    assert code == "upstream.not_found" and "/v1" in message and "did you mean" not in message, message


async def test_a_stored_id_dify_cannot_parse_starts_a_fresh_conversation(srv, host, runner):
    """Dify 1.12.1 refuses a conversation_id that is not a UUID with 400 invalid_param before
    anything else; kept, such an id would fail every later message of the conversation."""
    await run(runner, host, "one", config=cfg(srv))
    scope = host.scope_key(Identity(), "conversation")
    stored = host.store.get(scope, SESSION)
    cid = state_updates(await run(runner, host, "two", config=cfg(srv)))  # unchanged: nothing re-sent
    assert cid == {}
    old = chat_bodies(srv)[1]["conversation_id"]
    assert old in json.dumps(stored)
    host.store.set(scope, SESSION, json.loads(json.dumps(stored).replace(old, "conv-from-elsewhere")))
    results = await run(runner, host, "three", config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    bodies = chat_bodies(srv)
    assert bodies[-2]["conversation_id"] == "conv-from-elsewhere" and bodies[-1]["conversation_id"] == ""
    assert final_text(results).endswith("Hello, world!") and final_text(results) != "Hello, world!"


async def test_a_file_name_dify_refuses_is_made_safe_not_fatal(srv, host, runner):
    """Dify 1.12.1 refuses ``: * ? " < > |`` in upload names (400 "Filename contains invalid
    characters"); a macOS screenshot's name has colons, and the whole message used to fail."""
    contents = [{"type": "file_base64", "file_base64": base64.b64encode(b"notes").decode(),
                 "file_name": "Screenshot 2026-12-06 at 12:30:05.txt"},
                {"type": "file_base64", "file_base64": base64.b64encode(b"more").decode(),
                 "file_name": 'what?"<is>|this*.txt'}]
    results = await run(runner, host, "read these", config=cfg(srv), contents=contents)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert sorted(u.name for u in srv.uploads.values()) == ["Screenshot 2026-12-06 at 12_30_05.txt",
                                                             "what___is__this_.txt"]


@pytest.mark.parametrize("mode", ["chatflow", "workflow"])
async def test_files_in_the_answer_reach_the_chat(srv, host, runner, mode):
    """Dify 1.12.1 sends an Answer node's files in ``message_end.files`` (chatflow) and an End
    node's in ``workflow_finished.outputs`` (workflow), with no ``message_file`` events: images are
    shown, other files linked, each once, never as a JSON dump of file objects."""
    from tests.fakes.dify import dify_file

    srv.mode = mode
    srv.answer_files = [dify_file("5f0c6d8e-0000-4000-8000-000000000001", "chart.png", "image/png"),
                        dify_file("5f0c6d8e-0000-4000-8000-000000000002", "report.pdf", "application/pdf",
                                  base="https://files.example.com")]
    results = await run(runner, host, config=cfg(srv, **{"app-type": mode}))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    content = [r for r in results if rtype(r) == "message.completed"][-1].data["message"]["content"]
    parts = [{k: v for k, v in c.items() if v is not None} for c in content if c["type"] != "text"]
    host_root = srv.base_url.removesuffix("/v1")
    assert parts == [
        {"type": "image_url", "image_url": {"url": f"{host_root}/files/5f0c6d8e-0000-4000-8000-000000000001/file-preview"
                                                   "?timestamp=1796537556&nonce=5f0c6d8e&sign=c2lnbmVk"}},
        {"type": "file_url", "file_url": "https://files.example.com/files/5f0c6d8e-0000-4000-8000-000000000002/"
                                          "file-preview?timestamp=1796537556&nonce=5f0c6d8e&sign=c2lnbmVk",
         "file_name": "report.pdf"},
    ]
    text = "".join(c["text"] for c in content if c["type"] == "text")
    assert text == "Hello, world!" and "__dify__file__" not in text


async def test_a_workflow_that_answers_only_with_files_prints_no_json(srv, host, runner):
    from tests.fakes.dify import dify_file

    srv.mode = "workflow"
    srv.workflow_output_key = "files"
    srv.workflow_stream_text = False
    srv.answer_files = [dify_file(f"5f0c6d8e-0000-4000-8000-0000000000{n:02d}", f"p{n}.png", "image/png") for n in range(12)]
    results = await run(runner, host, config=cfg(srv, **{"app-type": "workflow"}))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    content = [r for r in results if rtype(r) == "message.completed"][-1].data["message"]["content"]
    images = [c for c in content if c["type"] == "image_url"]
    text = "".join(c["text"] for c in content if c["type"] == "text")
    assert len(images) == 10 and "dify_model_identity" not in text
    assert "p10.png" in text and "p11.png" in text and "more than 10 files" in text, text


async def test_a_chatflow_reports_the_usage_of_its_message_end(srv, host, runner):
    """Dify 1.12.1 sends a chatflow's message_end (the turn's usage, its files) after
    workflow_finished: the stream is read on to it, not dropped at workflow_finished."""
    srv.mode = "chatflow"
    srv.usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    results = await run(runner, host, config=cfg(srv, **{"app-type": "chatflow"}))
    done = terminal(results)
    assert rtype(done) == "run.completed"
    usage = done.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (11, 7, 18), usage
