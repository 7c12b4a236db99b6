"""Self-test of the n8n fake, driven with plain httpx: it must behave like the real n8n 2.40.7
(fixtures real-peers/n8n/) for the adapter tests to mean anything."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import httpx
import pytest

from tests.fakes.n8n import FAULTS, FakeN8n

BODY = {"chatInput": "hi", "sessionId": "s1"}


@pytest.fixture
def srv():
    with FakeN8n() as s:
        yield s
    assert s.handler_errors == []


def lines(raw: bytes) -> list[dict]:
    return [json.loads(line) for line in raw.split(b"\n") if line.strip()]


def test_streaming_is_ndjson_labelled_json_with_begin_items_end(srv):
    r = httpx.post(srv.webhook_url, json=BODY)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json; charset=utf-8"
    assert r.headers["transfer-encoding"] == "chunked" and r.headers["cache-control"] == "no-cache"
    items = lines(r.content)
    assert [i["type"] for i in items] == ["begin", "item", "item", "item", "item", "end"]
    assert "".join(i["content"] for i in items if i["type"] == "item") == "Hello from n8n."
    assert set(items[0]["metadata"]) == {"nodeId", "nodeName", "itemIndex", "runIndex", "timestamp"}
    assert r.content.endswith(b"}\n") and b": " not in r.content.split(b"\n")[0], "compact JSON, one per line"


def test_stream_respond_node_sends_its_json_body_as_a_string_in_one_chunk(srv):
    srv.mode, srv.output_key = "stream_respond", "reply"
    with httpx.stream("POST", srv.webhook_url, json=BODY) as r:
        chunks = list(r.iter_raw())
    items = lines(b"".join(chunks))
    assert [i["type"] for i in items] == ["begin", "item", "end"] and len(chunks) == 1
    assert json.loads(items[1]["content"]) == {"reply": "Hello from n8n."}


def test_usage_second_node_object_content_and_keepalive(srv):
    srv.include_usage, srv.second_node_text, srv.object_content = True, "More.", True
    srv.keepalive_every, srv.token_delay = 0.05, 0.06
    items = lines(httpx.post(srv.webhook_url, json=BODY).content)
    assert {"type": "keepalive"} in items
    assert items[1]["content"] == {"text_chunk": "Hello", "metadata": {}}
    assert sum(1 for i in items if i["type"] == "begin") == 3
    assert json.loads(items[-2]["content"]) == {"tokenUsage": srv.usage}


@pytest.mark.parametrize(
    ("mode", "ctype", "body"),
    [
        ("last_node", "application/json; charset=utf-8", b'{"output":"Hello from n8n."}'),
        ("all_entries", "application/json; charset=utf-8",
         b'[{"output":"Hello"},{"output":" from"},{"output":" n8n"},{"output":"."}]'),
        ("respond_text", "text/html; charset=utf-8", b"Hello from n8n."),  # as n8n 2.40.7 labels it
        ("on_received", "application/json; charset=utf-8", b'{"message":"Workflow was started"}'),
    ],
)
def test_plain_response_modes(srv, mode, ctype, body):
    srv.mode = mode
    r = httpx.post(srv.webhook_url, json=BODY)
    assert r.status_code == 200 and r.headers["content-type"] == ctype and r.content == body
    assert "transfer-encoding" not in r.headers


def test_custom_status_code(srv):
    srv.status_code = 201
    assert httpx.post(srv.webhook_url, json=BODY).status_code == 201


def test_unknown_path_wrong_method_and_test_url(srv):
    r = httpx.post(srv.root_url + "/webhook/nope", json=BODY)
    assert r.status_code == 404 and r.json()["message"] == 'The requested webhook "POST nope" is not registered.'
    assert "hint" in r.json() and "stacktrace" in r.json()
    r = httpx.get(srv.webhook_url)
    assert r.status_code == 404 and "Did you mean to make a POST request?" in r.json()["message"]
    test_url = srv.root_url + "/webhook-test/chat"
    assert httpx.post(test_url, json=BODY).status_code == 404
    srv.listen_test()
    assert httpx.post(test_url, json=BODY).status_code == 200
    assert httpx.post(test_url, json=BODY).status_code == 404, "one call per listen"


def test_invalid_json_body_is_a_422(srv):
    r = httpx.post(srv.webhook_url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["message"] == "Failed to parse request body"


def test_memory_keyed_by_session_id(srv):
    srv.echo_history = True
    httpx.post(srv.webhook_url, json=BODY)
    r = httpx.post(srv.webhook_url, json={**BODY, "chatInput": "again"})
    assert "(memory: 1 turns)" in r.text
    assert [t[0] for t in srv.memory["s1"]] == ["hi", "again"] and srv.history_seen == [0, 1]
    httpx.post(srv.webhook_url, json={**BODY, "sessionId": "s2"})
    assert srv.history_seen[-1] == 0


def test_multipart_fields_and_files(srv):
    r = httpx.post(srv.webhook_url, data={"chatInput": "look", "sessionId": "s9"},
                   files={"file0": ("a.png", b"\x89PNG", "image/png")})
    assert r.status_code == 200
    (turn,) = srv.turns
    assert turn.body == {"chatInput": "look", "sessionId": "s9"}
    assert turn.files["file0"] == ("a.png", "image/png", b"\x89PNG")


def test_basic_auth(srv):
    srv.auth, srv.basic_users = "basic", {"u": "pä"}
    r = httpx.post(srv.webhook_url, json=BODY)
    assert (r.status_code, r.text) == (401, "Authorization is required!")
    assert r.headers["www-authenticate"] == 'Basic realm="Webhook"'
    bad = httpx.post(srv.webhook_url, json=BODY, auth=("u", "nope"))
    assert (bad.status_code, bad.text) == (401, "Authentication data is wrong!")
    good = httpx.post(srv.webhook_url, json=BODY, headers={"Authorization": "Basic " + base64.b64encode(
        "u:pä".encode()).decode()})  # n8n decodes UTF-8
    assert good.status_code == 200


def test_header_auth_rejects_missing_header_with_403(srv):
    srv.auth, srv.api_keys = "header", {"k1", "k2"}
    assert httpx.post(srv.webhook_url, json=BODY).status_code == 403
    assert httpx.post(srv.webhook_url, json=BODY, headers={srv.header_name: "k2"}).status_code == 200


def _jwt(secret: str, claims: dict, alg: str = "HS256") -> str:
    def enc(d: bytes) -> str:
        return base64.urlsafe_b64encode(d).rstrip(b"=").decode()

    h = enc(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    p = enc(json.dumps(claims).encode())
    digest = {"HS256": hashlib.sha256, "HS512": hashlib.sha512}[alg]
    return f"{h}.{p}.{enc(hmac.new(secret.encode(), f'{h}.{p}'.encode(), digest).digest())}"


def test_jwt_auth_checks_signature_algorithm_and_expiry(srv):
    srv.auth, srv.jwt_secret = "jwt", "sekret"
    now = int(time.time())
    ok = _jwt("sekret", {"iat": now, "exp": now + 60})
    assert httpx.post(srv.webhook_url, json=BODY, headers={"Authorization": f"Bearer {ok}"}).status_code == 200
    for token, why in ((_jwt("other", {"exp": now + 60}), "invalid signature"),
                       (_jwt("sekret", {"exp": now - 5}), "jwt expired"),
                       (_jwt("sekret", {"exp": now + 60}, "HS512"), "invalid algorithm")):
        r = httpx.post(srv.webhook_url, json=BODY, headers={"Authorization": f"Bearer {token}"})
        assert (r.status_code, r.text) == (403, why)
    r = httpx.post(srv.webhook_url, json=BODY)
    assert (r.status_code, r.text) == (401, "No token provided")


@pytest.mark.parametrize("fault", [f for f in FAULTS if f.startswith(("http_", "html_"))])
def test_status_faults(srv, fault):
    srv.fault = fault
    r = httpx.post(srv.webhook_url, json=BODY)
    assert r.status_code == int(fault.split("_")[1])
    if fault.startswith("html_"):
        assert r.headers["content-type"].startswith("text/html")
    if fault == "http_500":
        assert r.content == b'{"message":"Error in workflow"}'
    if fault == "http_401":
        assert r.text == "Authorization is required!"


def test_stream_faults(srv):
    srv.fault = "error_event"
    items = lines(httpx.post(srv.webhook_url, json=BODY).content)
    assert [i["type"] for i in items] == ["begin", "item", "error"] and items[-1]["content"] == "fake upstream failure"
    assert list(items[-1]["metadata"]) == ["nodeId", "nodeName", "runIndex", "itemIndex"]
    srv.fault = "empty"
    assert httpx.post(srv.webhook_url, json=BODY).content == b""
    srv.fault = "truncated"
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(srv.webhook_url, json=BODY)
    srv.fault = "non_utf8"
    assert b"\xff\xfe" in httpx.post(srv.webhook_url, json=BODY).content
    srv.fault = "invalid_json"
    with pytest.raises(ValueError):
        lines(httpx.post(srv.webhook_url, json=BODY).content)


def test_stall_pings_sends_only_keepalives(srv):
    srv.fault = "stall_pings"
    got = b""
    with httpx.stream("POST", srv.webhook_url, json=BODY, timeout=5) as r:
        start = time.monotonic()
        for chunk in r.iter_bytes():
            got += chunk
            if time.monotonic() - start > 0.8:
                break
    items = lines(got)
    assert [i["type"] for i in items[:2]] == ["begin", "item"] and items[2:] and all(
        i == {"type": "keepalive"} for i in items[2:])


def test_active_requests_return_to_zero_after_client_leaves(srv):
    srv.fault = "stall"
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(srv.webhook_url, json=BODY, timeout=0.5)
    assert srv.wait_until(lambda: srv.active_requests == 0, timeout=3)


def test_unknown_fault_is_refused(srv):
    with pytest.raises(ValueError):
        srv.fault = "nope"
