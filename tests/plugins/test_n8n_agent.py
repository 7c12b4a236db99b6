"""N8nAgent against the loopback fake n8n: response modes, auth, sessions, files, identities."""

from __future__ import annotations

import base64
import json
import time

import pytest

from runners_cli.host import Identity
from tests.fakes.n8n import FakeN8n
from tests.helpers import (
    dump,
    failure,
    final_text,
    rtype,
    run,
    state_updates,
    stored_key,
    terminal,
)

PLUGIN = "n8n-agent"  # tests/plugins/conftest.py: the host and runner fixtures
SESSION = stored_key("n8n.session_id")  # where the default identity's sessionId is kept
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x01" * 32).decode()
KEY = "n8n-header-secret-1"


@pytest.fixture
def srv():
    with FakeN8n() as s:
        yield s


def cfg(srv, **extra):
    return {"webhook-url": srv.webhook_url, **extra}


def header_auth(srv, key=KEY):
    srv.auth = "header"
    srv.api_keys = {KEY}
    return {"auth-type": "header", "header-name": srv.header_name, "header-value": key}


# -- the standard cases ----------------------------------------------------------------------


async def test_ok_text_streams_and_sends_the_request_n8n_expects(srv, host, runner):
    srv.answer_tokens = ["Hi", " there", "!"]
    results = await run(runner, host, "hello", config=cfg(srv), params={"lang": "en"})
    assert final_text(results) == "Hi there!"
    (body,) = srv.bodies()
    assert body["chatInput"] == "hello" and body["message"] == "hello"
    assert body["sessionId"] == state_updates(results)[SESSION]
    assert body["sessionId"].startswith("langbot-")
    assert body["userId"] == "user_u-1" and body["userName"] == "Tester" and body["conversationId"] == "conv-1"
    assert body["params"] == {"lang": "en"} and body["action"] == "sendMessage"
    assert "external.conversation_id" not in state_updates(results)
    req = srv.find_requests("POST")[0]
    assert req.headers["content-type"] == "application/json"


@pytest.mark.parametrize("tokens", [
    ["[1]", " and ", "[2, 3]", ". Config: ", '{"message": "hi"}'],
    ["Answer", ": ", '{"output": "x"}', " and ", '[{"text": "y"}]'],
    ["[1]", " is the first reference."],
])
async def test_a_model_whose_tokens_look_like_json_is_shown_as_it_wrote(srv, host, runner, tokens):
    """Issue 33 item 2: a streamed token that happens to be valid JSON ("[1]", '{"message": "hi"}')
    was parsed and rewritten ("1 and2\n\n3. Config: hi"). Only n8n's envelope is JSON; an item's
    content is text, except a Respond to Webhook node's whole body (tests/plugins: the real n8n
    transcript 02, where it is the group's one item)."""
    srv.answer_tokens = tokens
    results = await run(runner, host, "hello", config=cfg(srv))
    assert final_text(results) == "".join(tokens)


async def test_ok_tool_agent_with_tool_calls_streams_only_its_answer(srv, host, runner):
    """n8n's stream carries no tool events: an agent that used a tool runs its model twice, and only
    the answer text reaches the webhook. Nothing is invented for the tool."""
    srv.answer_tokens = ["The weather", " in Paris", " is sunny."]
    results = await run(runner, host, "weather in Paris? TOOL", config=cfg(srv))
    assert final_text(results) == "The weather in Paris is sunny."
    assert not [r for r in results if rtype(r).startswith("tool.call")]


async def test_ok_usage_from_the_workflow_answer(srv, host, runner):
    srv.mode = "last_node"
    srv.include_usage = True
    end = terminal(await run(runner, host, config=cfg(srv)))
    assert end.usage.model_dump() == {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}
    srv.include_usage = False
    end = terminal(await run(runner, host, config=cfg(srv)))
    assert end.usage is None, "n8n says nothing about usage: none is invented"


async def test_resume_second_turn_uses_the_same_session_id(srv, host, runner):
    srv.echo_history = True
    first = await run(runner, host, "one", config=cfg(srv))
    sid = state_updates(first)[SESSION]
    second = await run(runner, host, "two", config=cfg(srv))
    assert final_text(second).startswith("(memory: 1 turns)"), "the workflow's memory saw the first turn"
    assert [b["sessionId"] for b in srv.bodies()] == [sid, sid]
    assert state_updates(second) == {}, "an unchanged sessionId is not re-sent"
    assert srv.memory[sid][0][0] == "one"


async def test_reset_conversation_gets_a_new_session_id(srv, host, runner):
    await run(runner, host, "one", config=cfg(srv))
    host.reset_conversation()
    await run(runner, host, "two", config=cfg(srv))
    first, second = srv.bodies()
    assert first["sessionId"] != second["sessionId"]


@pytest.mark.parametrize(
    ("fault", "code", "retryable", "words"),
    [
        ("http_401", "upstream.auth", False, "Authentication"),
        ("http_404", "upstream.not_found", False, "published"),
        ("http_429", "upstream.rate_limited", True, "Too Many Requests"),
        ("http_500", "upstream.error", False, "Executions list"),
        ("http_502", "upstream.unavailable", True, "Bad Gateway"),
        ("html_503", "upstream.unavailable", True, "may be down"),
        ("error_event", "upstream.error", False, "fake upstream failure"),
        ("invalid_json", "upstream.protocol", False, "invalid JSON"),
        ("truncated", "upstream.unavailable", True, "closed"),
    ],
)
async def test_errors_are_mapped_with_a_hint(srv, host, runner, fault, code, retryable, words):
    srv.fault = fault
    got, again, message = failure(await run(runner, host, config=cfg(srv)))
    assert (got, again) == (code, retryable), message
    assert words in message


async def test_error_event_midstream_keeps_the_streamed_part(srv, host, runner):
    srv.answer_tokens = ["Partial ", "answer"]
    srv.fault = "error_event"
    results = await run(runner, host, config=cfg(srv))
    code, _, message = failure(results)
    assert code == "upstream.error" and "node 'AI Agent'" in message
    assert final_text(results).startswith("Partial ") and "incomplete" in final_text(results)


async def test_malformed_line(srv, host, runner):
    srv.fault = "invalid_json"
    assert failure(await run(runner, host, config=cfg(srv)))[:2] == ("upstream.protocol", False)


async def test_truncated_stream(srv, host, runner):
    srv.fault = "truncated"
    assert failure(await run(runner, host, config=cfg(srv)))[:2] == ("upstream.unavailable", True)


async def test_slow_stream_reaches_the_chat_as_it_comes(srv, host, runner):
    srv.answer_tokens = ["slow "] * 6
    srv.token_delay = 0.2
    ctx = host.make_context("hi", config=cfg(srv))
    start = time.monotonic()
    firsts = []
    async for r in runner.invoke(ctx):
        if rtype(r) == "message.delta":
            firsts.append(time.monotonic() - start)
    total = time.monotonic() - start
    assert firsts and firsts[0] < total - 0.6 and len(firsts) >= 2


async def test_utf8_split_inside_characters_and_lines(srv, host, runner):
    srv.split_writes = True
    srv.answer_tokens = ["你好", "，世界", "🌍", " ok"]
    assert final_text(await run(runner, host, config=cfg(srv))) == "你好，世界🌍 ok"


# -- response modes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "key", "extra", "answer"),
    [
        ("last_node", "output", {}, "Hello from n8n."),  # the AI Agent's own key, a fallback
        ("last_node", "result", {"output-key": "result"}, "Hello from n8n."),
        ("last_node", "response", {}, "Hello from n8n."),  # the migrated default key
        ("last_node", "answer", {"output-key": "response"}, "Hello from n8n."),
        ("all_entries", "text", {}, "Hello\n\n from\n\n n8n\n\n."),
        ("respond_text", "output", {}, "Hello from n8n."),
        ("stream_respond", "reply", {}, "Hello from n8n."),
    ],
)
async def test_answers_in_every_response_mode(srv, host, runner, mode, key, extra, answer):
    srv.mode, srv.output_key = mode, key
    results = await run(runner, host, config=cfg(srv, **extra))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == answer


async def test_output_key_picks_the_answer_over_fallbacks(srv, host, runner):
    srv.mode = "last_node"
    srv.output_key = "summary"
    # no known key: the whole JSON is shown, as LangBot 4.10 did, so the owner sees which key to set
    shown = final_text(await run(runner, host, config=cfg(srv)))
    assert json.loads(shown) == {"summary": "Hello from n8n."}
    assert final_text(await run(runner, host, config=cfg(srv, **{"output-key": "summary"}))) == "Hello from n8n."


@pytest.mark.parametrize("status", [201, 202, 203])
async def test_other_2xx_statuses_are_success(srv, host, runner, status):
    srv.status_code = status
    for mode in ("streaming", "last_node"):
        srv.mode = mode
        assert final_text(await run(runner, host, config=cfg(srv))) == "Hello from n8n."


async def test_two_nodes_object_content_and_keepalives(srv, host, runner):
    srv.object_content = True
    srv.second_node_text = "And a closing line."
    srv.keepalive_every = 0.05
    srv.token_delay = 0.06
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "Hello from n8n.\n\nAnd a closing line."


async def test_on_received_webhook_tells_the_owner_what_to_change(srv, host, runner):
    srv.mode = "on_received"
    code, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "config.invalid" and "Respond" in message and "response-handling" in message


@pytest.mark.parametrize("mode", ["streaming", "last_node", "on_received"])
async def test_response_handling_ignore_completes_without_a_reply(srv, host, runner, mode):
    srv.mode = mode
    results = await run(runner, host, config=cfg(srv, **{"response-handling": "ignore"}))
    assert [rtype(r) for r in results if rtype(r) != "state.updated"] == ["run.completed"]
    assert terminal(results).data.get("finish_reason") == "stop"
    assert len(srv.bodies()) == 1
    assert state_updates(results), "the sessionId is still kept for the next message"


async def test_response_handling_ignore_still_reports_failures(srv, host, runner):
    srv.fault = "http_500"
    code, _, _ = failure(await run(runner, host, config=cfg(srv, **{"response-handling": "ignore"})))
    assert code == "upstream.error"


async def test_empty_and_oversized_answers(srv, host, runner):
    srv.fault = "empty"
    assert failure(await run(runner, host, config=cfg(srv)))[0] == "upstream.empty_response"
    srv.mode = "last_node"
    assert failure(await run(runner, host, config=cfg(srv)))[0] == "upstream.empty_response"
    srv.fault = "oversized"
    srv.oversized_bytes = 17 * 1024 * 1024
    code, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "upstream.protocol" and "larger than" in message


# -- authentication --------------------------------------------------------------------------


async def test_header_auth_and_wrong_key(srv, host, runner):
    good = cfg(srv, **header_auth(srv))
    assert final_text(await run(runner, host, config=good)) == "Hello from n8n."
    assert srv.find_requests("POST")[0].headers[srv.header_name] == KEY
    code, _, message = failure(await run(runner, host, config={**good, "header-value": "wrong-value"}))
    assert code == "upstream.auth" and "Authorization data is wrong!" in message
    code, _, message = failure(await run(runner, host, config={**good, "header-value": ""}))
    assert code == "config.missing" and "header-value" in message


@pytest.mark.parametrize(
    ("encoding", "password", "outcome"),
    [
        ("utf-8", "密码🔑", "ok"),
        ("utf-8", "pässwörd", "ok"),
        ("latin1", "plain-ascii-pw", "ok"),
        ("latin1", "pässwörd", "rejected"),  # sent as Latin-1 (LangBot 4.10's way); n8n reads UTF-8
        ("latin1", "密码", "unencodable"),
    ],
)
async def test_basic_auth_with_either_encoding(srv, host, runner, encoding, password, outcome):
    srv.auth = "basic"
    srv.basic_users = {"bot": password}
    config = cfg(srv, **{"auth-type": "basic", "basic-username": "bot", "basic-password": password,
                         "basic-encoding": encoding})
    results = await run(runner, host, config=config)
    if outcome == "ok":
        assert final_text(results) == "Hello from n8n."
        sent = srv.find_requests("POST")[0].headers["authorization"]
        assert base64.b64decode(sent[6:]) == f"bot:{password}".encode(encoding)
        return
    code, _, message = failure(results)
    assert "basic-encoding to utf-8" in message and password not in message
    if outcome == "rejected":
        assert code == "upstream.auth" and "Authentication data is wrong!" in message
    else:
        assert code == "config.invalid" and not srv.find_requests()


async def test_basic_auth_missing_or_wrong_credentials_is_a_401(srv, host, runner):
    srv.auth = "basic"
    srv.basic_users = {"bot": "pw12345"}
    code, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "upstream.auth" and "Authorization is required!" in message
    wrong = cfg(srv, **{"auth-type": "basic", "basic-username": "bot", "basic-password": "nope-nope"})
    code, _, message = failure(await run(runner, host, config=wrong))
    assert code == "upstream.auth" and "Authentication data is wrong!" in message


async def test_node_without_credential_and_other_403s(srv, host, runner):
    """n8n's 500 when the node has no credential is the workflow's setup; an IP allow-list 403 is
    not a credential problem."""
    from tests.plugins.test_n8n_agent_transcripts import Reply, replay

    code, _, message = failure(await replay(Reply(b"No authentication data defined on node!", 500, "text/plain")))
    assert code == "upstream.error" and "no credential selected" in message
    srv.fault = "http_403"
    code, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "upstream.forbidden" and "whitelisted" in message


@pytest.mark.parametrize("algorithm", ["HS256", "HS384", "HS512"])
async def test_jwt_signed_per_request_with_a_short_expiry(srv, host, runner, algorithm):
    srv.auth, srv.jwt_secret, srv.jwt_algorithm = "jwt", "jwt-shared-secret-xyz", algorithm
    config = cfg(srv, **{"auth-type": "jwt", "jwt-secret": "jwt-shared-secret-xyz", "jwt-algorithm": algorithm})
    for _ in range(2):
        assert final_text(await run(runner, host, config=config)) == "Hello from n8n."
    a, b = srv.jwt_payloads
    assert a["jti"] != b["jti"], "a fresh token per request"
    assert 0 < a["exp"] - a["iat"] <= 300 and abs(a["iat"] - time.time()) < 30
    code, _, message = failure(await run(runner, host, config={**config, "jwt-secret": "another-secret"}))
    assert code == "upstream.auth" and "invalid signature" in message


@pytest.mark.parametrize("algorithm", ["RS256", "ES256", "none"])
async def test_unsupported_jwt_algorithm_is_a_clear_config_error(srv, host, runner, algorithm):
    config = cfg(srv, **{"auth-type": "jwt", "jwt-secret": "s3cret-value", "jwt-algorithm": algorithm})
    code, _, message = failure(await run(runner, host, config=config))
    assert code == "config.invalid" and algorithm in message and "HS256" in message
    assert not srv.find_requests()


async def test_secrets_never_reach_results_or_logs(srv, host, runner, caplog):
    srv.fault = "http_500"
    config = cfg(srv, **header_auth(srv))
    results = await run(runner, host, config=config)
    assert KEY not in dump(results) + caplog.text


# -- sessions, identities, input -------------------------------------------------------------


def _group(actor: str) -> Identity:
    return Identity(conversation_id="group-1", actor_id=actor, actor_name=actor, launcher_type="group",
                    launcher_id="g-7")


@pytest.mark.parametrize(("source", "per_person"), [("actor", True), ("hashed", True), ("conversation", False)])
async def test_session_id_per_person_or_per_conversation(srv, host, runner, source, per_person):
    for actor in ("alice", "bob", "alice"):
        await run(runner, host, config=cfg(srv, **{"user-id-source": source}), identity=_group(actor))
    a1, b1, a2 = srv.bodies()
    assert a1["sessionId"] == a2["sessionId"]
    assert (a1["sessionId"] != b1["sessionId"]) == per_person
    assert (a1["userId"] != b1["userId"]) == per_person


async def test_legacy_session_keeps_langbot_410_session(srv, host, runner):
    ident = Identity(launcher_type="person", launcher_id="10001")
    results = await run(runner, host, config=cfg(srv, **{"user-id-source": "legacy-session"}), identity=ident)
    assert srv.bodies()[0]["sessionId"] == "person_10001" == srv.bodies()[0]["userId"]
    assert state_updates(results) == {"n8n.session_id": "person_10001"}


async def test_legacy_session_without_launcher_fails_closed(srv, host, runner):
    code, retryable, message = failure(await run(runner, host, config=cfg(srv, **{"user-id-source": "legacy-session"})))
    assert code == "config.identity_unavailable" and not retryable and "legacy-session" in message
    assert not srv.find_requests()


async def test_params_never_overwrite_chat_input_or_session_id(srv, host, runner):
    await run(runner, host, "real text", config=cfg(srv), params={"chatInput": "spoof", "sessionId": "spoof"})
    body = srv.bodies()[0]
    assert body["chatInput"] == "real text" and body["sessionId"] != "spoof"
    assert body["params"] == {"chatInput": "spoof", "sessionId": "spoof"}


async def test_files_go_up_as_multipart(srv, host, runner):
    contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}]
    results = await run(runner, host, "what is this", config=cfg(srv), contents=contents, params={"k": 1})
    assert rtype(terminal(results)) == "run.completed"
    (turn,) = srv.turns
    assert turn.body["chatInput"] == "what is this" and turn.body["sessionId"]
    assert json.loads(turn.body["params"]) == {"k": 1}
    (name, ctype, data) = turn.files["file0"]
    assert ctype == "image/png" and data == base64.b64decode(PNG)
    described = json.loads(turn.body["files"])
    assert described[0]["field"] == "file0" and described[1]["url"] == "https://example.com/cat.jpg"
    assert srv.find_requests("POST")[0].headers["content-type"].startswith("multipart/form-data")


async def test_url_only_files_stay_json(srv, host, runner):
    contents = [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "https://e.x/a.png"}}]
    await run(runner, host, "see", config=cfg(srv), contents=contents)
    assert srv.bodies()[0]["files"][0]["url"] == "https://e.x/a.png"
    assert srv.find_requests("POST")[0].headers["content-type"] == "application/json"


# -- URLs and config -------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/"])
async def test_webhook_url_with_or_without_trailing_slash(srv, host, runner, suffix):
    assert final_text(await run(runner, host, config={"webhook-url": srv.webhook_url + suffix})) == "Hello from n8n."


async def test_test_url_works_while_listening(srv, host, runner):
    url = f"{srv.root_url}/webhook-test/{srv.path}"
    code, _, message = failure(await run(runner, host, config={"webhook-url": url}))
    assert code == "upstream.not_found" and "webhook-test" in message
    srv.listen_test()
    assert final_text(await run(runner, host, config={"webhook-url": url})) == "Hello from n8n."


@pytest.mark.parametrize("url", ["n8n.example.com/webhook/x", "ftp://x/webhook/y", ""])
async def test_bad_webhook_url_is_a_config_error(srv, host, runner, url):
    code, _, message = failure(await run(runner, host, config={"webhook-url": url}))
    assert code in ("config.invalid", "config.missing") and "webhook-url" in message


async def test_idle_timeout_is_off_by_default_and_keepalives_count(srv, host, runner):
    from runners_cli.plugins import find

    items = {i["name"]: i for i in find("n8n-agent").config_items}
    assert items["idle-timeout"]["default"] == 0
    srv.keepalive_every = 0.2
    srv.answer_tokens = ["a", "b"]
    srv.token_delay = 1.5
    config = cfg(srv, **{"advanced-settings": True, "idle-timeout": 1})
    assert final_text(await run(runner, host, config=config)) == "ab", "keep-alives kept the run alive"


async def test_migrated_pipeline_config_runs(srv, host, runner):
    """The exact config LangBot 4.11.2's migration emits for an n8n-service-api pipeline."""
    srv.mode = "last_node"
    srv.output_key = "response"
    migrated = {
        "webhook-url": srv.webhook_url, "auth-type": "basic", "basic-username": "bot", "basic-password": "pw-123456",
        "jwt-secret": "", "jwt-algorithm": "HS256", "header-name": "", "header-value": "", "timeout": 120,
        "output-key": "response", "response-handling": "reply", "basic-encoding": "latin1",
        "advanced-settings": False, "langbot-assets-enabled": False, "user-id-source": "legacy-session",
        "enable-all-tools": False, "tools": [], "knowledge-bases": [], "mcp-resources": [],
        "mcp-resource-agent-read-enabled": False,
    }
    srv.auth, srv.basic_users = "basic", {"bot": "pw-123456"}
    ident = Identity(launcher_type="person", launcher_id="10001")
    results = await run(runner, host, config=migrated, identity=ident)
    assert final_text(results) == "Hello from n8n."
    assert srv.bodies()[0]["sessionId"] == "person_10001"


async def test_deadline_from_timeout_is_respected(srv, host, runner):
    srv.mode = "last_node"
    srv.fault = "stall"
    start = time.time()
    results = await run(runner, host, config=cfg(srv, timeout=2), deadline_at=start + 2)
    assert failure(results)[:2] == ("upstream.timeout", True)
    assert time.time() < start + 2
