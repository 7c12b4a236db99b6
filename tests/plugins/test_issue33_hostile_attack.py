"""Issue 33 under a member who is not benign (docs/attack.md §3): files both ways and the new fields.

Each scenario is what a hostile member (or an agent a member talked into it) can do through the
plugins issue 33 changed: what they send in (a data: image whose media type carries header lines, a
link), what an agent presents back (a thousand files, a link to a server that trickles, a redirect
into the metadata address), what a workflow names its file, and what an upstream error echoes. Every
test also scans what the chat got and what was logged for the plugin's API key.
"""

from __future__ import annotations

import base64
import json
import logging
import time

import pytest

from runner_kit import resets
from runner_kit.inputs import InputFile, download
from runner_kit.netguard import FETCH_ALLOW_ENV
from runners_cli.host import LocalHost
from tests.fakes.dashscope import FakeDashScope
from tests.fakes.deerflow import FakeDeerFlow
from tests.fakes.http_server import FakeHTTPServer
from tests.fakes.n8n import FakeN8n
from tests.helpers import dump, failure, fake_dns, final_text, make_runner, rtype, run, terminal

DS_KEY = "sk-hostile-dashscope-0003"
DF_KEY = "df-pat-hostile-0001"
DS_APP = "app-hostile"
PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"\x01" * 80
PNG = base64.b64encode(PNG_BYTES).decode()
DF_ANSWER = "Hello from the fake agent."
# a media type a member wrote into a data: URL (LangBot's HTTP and web-page bots pass what the
# sender wrote): without a check, each line becomes a header of the part the plugin sends upstream
CRLF_TYPE = 'image/png\r\nContent-Disposition: form-data; name="sessionId"\r\nX-Injected: 1'
CRLF_IMAGE = f"data:{CRLF_TYPE};base64,{PNG}"


@pytest.fixture
def host():
    return LocalHost()


@pytest.fixture(autouse=True)
def _fresh_reset_memory():
    resets.forget()
    yield
    resets.forget()


def no_secret(results, caplog, *keys: str) -> None:
    """None of ``keys`` in anything the chat or LangBot got, nor in a log line."""
    shown = dump(results)
    logged = caplog.text
    for key in keys:
        assert key not in shown, f"{key} reached the results"
        assert key not in logged, f"{key} reached a log line"


def ds_cfg(srv, **extra) -> dict:
    return {"base-url": srv.base_url, "api-key": DS_KEY, "app-id": DS_APP, "app-type": "agent", **extra}


def df_cfg(srv, **extra) -> dict:
    return {"api-base": srv.base_url, "api-key": DF_KEY, **extra}


# --- what a member sends in ---------------------------------------------------------------------------


@pytest.mark.parametrize("media_type", [CRLF_TYPE, 'image/png\r\n; name="sessionId"'])
async def test_header_lines_in_a_data_images_type_never_reach_the_workflow(host, caplog, media_type):
    """The n8n workflow gets the member's image as a multipart part: the part's Content-Type was the
    data: URL's media type as written, so its line breaks added headers of the member's choosing
    (a second Content-Disposition naming the part ``sessionId``: parsers that take the last one,
    as n8n's formidable does, read it as that field). Fixed in runner_kit/inputs.py (_media_type):
    a type that is not one is not used; the bytes say what the image is."""
    with FakeN8n() as srv:
        srv.mode, srv.output_key = "last_node", "response"
        image = f"data:{media_type};base64,{PNG}"
        contents = [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": image}}]
        with caplog.at_level(logging.DEBUG):
            results = await run(make_runner("n8n-agent", host), host, "see", config={"webhook-url": srv.webhook_url},
                                contents=contents)
        assert rtype(terminal(results)) == "run.completed", terminal(results).data
        (turn,) = srv.turns
    (name, ctype, data) = turn.files["file0"]
    assert (ctype, data) == ("image/png", PNG_BYTES), "the part is the image, under its own type"
    (part,) = [p for p in srv.requests[-1].form().parts if p.name == "file0"]
    assert part.headers.get_all("content-disposition") == [part.headers["content-disposition"]]
    assert "x-injected" not in part.headers
    assert "sessionId" not in str(part.headers.raw())
    assert json.loads(turn.body["files"])[0]["mimeType"] == "image/png", "the workflow is told the same type"


async def test_the_temporary_storage_gets_the_images_type_not_the_senders_lines(host, caplog, monkeypatch):
    """DashScope's OSS form POST carries the type twice (a form field and the file part's header)."""
    monkeypatch.setenv(FETCH_ALLOW_ENV, "127.0.0.1")
    with FakeDashScope(api_key=DS_KEY, app_id=DS_APP) as srv:
        contents = [{"type": "text", "text": "what"}, {"type": "image_url", "image_url": {"url": CRLF_IMAGE}}]
        with caplog.at_level(logging.DEBUG):
            results = await run(make_runner("dashscope-agent", host), host, "what", config=ds_cfg(srv),
                                contents=contents)
        assert final_text(results) == "Hello, world!"
        (upload,) = srv.uploads.values()
        (post,) = [r for r in srv.requests if r.method == "POST" and r.path == "/"]
        file_part = post.form().parts[-1]
    assert (upload.content_type, upload.data) == ("image/png", PNG_BYTES)
    assert "x-injected" not in file_part.headers and file_part.content_type == "image/png"
    assert srv.calls[0].images == [PNG_BYTES], "the app read the member's image"
    no_secret(results, caplog, DS_KEY)


async def test_an_api_key_an_upstream_error_echoes_never_reaches_the_chat(host, caplog, monkeypatch):
    """A gateway in front of DashScope (or DashScope itself) that echoes the Authorization header in
    its refusal of the upload policy: the key was shown to the whole group in the note saying why the
    image was left out (a failure's message is redacted by the kit; this note is the plugin's own
    text). Fixed in dashscope_agent/adapter.py (_upload_images): the reason is redacted."""
    monkeypatch.setenv(FETCH_ALLOW_ENV, "127.0.0.1")
    with FakeDashScope(api_key=DS_KEY, app_id=DS_APP) as srv:
        srv.policy_fault = (401, "InvalidApiKey", f"Invalid API-key provided: Bearer {DS_KEY}")
        contents = [{"type": "text", "text": "what"}, {"type": "image_base64", "image_base64": PNG}]
        with caplog.at_level(logging.DEBUG):
            results = await run(make_runner("dashscope-agent", host), host, "what", config=ds_cfg(srv),
                                contents=contents)
    text = final_text(results)
    assert text.startswith("(Not sent to DashScope: 'image-2.png'; they could not be uploaded (")
    assert "InvalidApiKey" in text and text.endswith("\n\nHello, world!")
    no_secret(results, caplog, DS_KEY)


@pytest.mark.xfail(strict=True, reason=(
    "dashscope_agent/uploads.py checks upload_host's addresses (_check_host) and then posts through the "
    "shared client, which resolves the name again: a name whose second answer is loopback or the metadata "
    "address (DNS rebinding) gets the member's image and the OSS form posted there. The fix belongs in "
    "runner_kit/netguard.py: a send for methods other than GET that connects to the checked address (as "
    "fetch does, Host header and TLS name kept), which uploads.upload would use; needs a hostile DashScope "
    "answer or DNS, not a chat member"))
async def test_an_upload_host_whose_name_rebinds_to_loopback_is_never_posted_to(host, monkeypatch):
    with FakeDashScope(api_key=DS_KEY, app_id=DS_APP) as srv:
        srv.upload_host = f"http://localhost:{srv.port}/"
        fake_dns(monkeypatch, {"localhost": "93.184.216.34"})  # the check's answer: public
        contents = [{"type": "text", "text": "what"}, {"type": "image_base64", "image_base64": PNG}]
        results = await run(make_runner("dashscope-agent", host), host, "what", config=ds_cfg(srv),
                            contents=contents)
        assert final_text(results).endswith("Hello, world!")
        assert not srv.uploads, "the connection went to 127.0.0.1, not to the address that was checked"


class Trickle(FakeHTTPServer):
    """A public server (allowed here) that sends a PNG one byte at a time, each well within a read
    timeout, for as long as anyone listens; ``/hop`` redirects to the cloud metadata address."""

    def __init__(self) -> None:
        super().__init__()
        self.add_route("GET", "/slow.png", self._slow)
        self.add_route("GET", "/hop.png", self._hop)

    async def _slow(self, req, resp) -> None:
        await resp.start_stream(200, "image/png")
        await resp.write(b"\x89PNG\r\n\x1a\n")
        for _ in range(2000):
            if not await resp.stall(0.02):
                return
            await resp.write(b"\0")
        await resp.end()

    async def _hop(self, req, resp) -> None:
        await resp.send(302, b"", None, {"Location": "http://169.254.169.254/latest/meta-data/iam/x.png"})


async def test_a_members_link_that_trickles_is_given_up_within_the_budget(monkeypatch):
    """runner_kit.inputs.download promises a link is fetched "within budget seconds" (Tbox downloads
    a member's links so; DeerFlow the links an agent presents): each byte came in time for the read
    timeout, so the download ran on for as long as the server liked. Fixed in runner_kit/netguard.py
    (_read): the body is read within the fetch's deadline."""
    monkeypatch.setenv(FETCH_ALLOW_ENV, "127.0.0.1")
    with Trickle() as slow:
        started = time.monotonic()
        with pytest.raises(Exception) as caught:
            await download(InputFile("slow.png", "image", "image/png", url=slow.url("/slow.png")),
                           max_bytes=1024 * 1024, budget=0.3)
        took = time.monotonic() - started
    assert getattr(caught.value, "code", None) == "input.unreadable", caught.value
    assert "did not arrive in time" in str(caught.value)
    assert took < 1.5, took


# --- what an agent presents back --------------------------------------------------------------------------


async def test_a_thousand_presented_files_leave_a_short_note(host, caplog):
    """An agent talked into presenting a thousand files: ten are tried, and the chat got every other
    name in one line (100 KB here; with long names past what one LangBot message carries, cutting the
    answer). Fixed in deerflow_agent/adapter.py (_attachments): twenty are named, the rest counted,
    as WeKnora does."""
    with FakeDeerFlow(api_key=DF_KEY) as srv:
        srv.extra_artifacts = [f"/mnt/user-data/outputs/{'x' * 70}-{i}.txt" for i in range(1000)]
        with caplog.at_level(logging.DEBUG):
            results = await run(make_runner("deerflow-agent", host), host, "make files", config=df_cfg(srv))
        assert len(srv.artifact_requests) == 10, "ten are fetched at most"
    text = final_text(results)
    assert text.startswith(DF_ANSWER + "\n\n(Not attached: ")
    assert text.endswith("; 980 more.)"), text[-200:]
    assert text.count(".txt'") == 20 and len(text) < 4000
    no_secret(results, caplog, DF_KEY)


async def test_a_presented_link_that_trickles_neither_holds_the_answer_nor_marks_it_incomplete(host, caplog,
                                                                                          monkeypatch):
    """An agent presents a link to a server that sends a byte now and then (a member's, or just a slow
    one). The fetch ran unbounded and noted nothing as life, so idle-timeout ended the run after the
    whole answer had streamed: the chat read "(This answer is incomplete: DeerFlow sent nothing for
    1 s …)" and LangBot got a failure. Fixed in deerflow_agent/adapter.py (_attachments): fetching
    the files keeps the run alive and is bounded in all (ARTIFACT_SECONDS); what is not in by then is
    named, and the answer stands."""
    runner = make_runner("deerflow-agent", host)  # puts the plugin's package on the path
    from deerflow_agent import const

    monkeypatch.setenv(FETCH_ALLOW_ENV, "127.0.0.1")
    monkeypatch.setattr(const, "ARTIFACT_SECONDS", 1.0, raising=False)
    with FakeDeerFlow(api_key=DF_KEY) as srv, Trickle() as slow:
        srv.extra_artifacts = [slow.url("/slow.png")]
        srv.present_files = {"/mnt/user-data/outputs/ok.png": PNG_BYTES}
        started = time.monotonic()
        with caplog.at_level(logging.DEBUG):
            results = await run(runner, host, "draw", config=df_cfg(
                srv, **{"advanced-settings": True, "idle-timeout": 0.3, "timeout": 20}))
        took = time.monotonic() - started
    assert rtype(terminal(results)) == "run.completed" and terminal(results).data.get("finish_reason") != \
        "upstream.timeout", terminal(results).data
    assert final_text(results) == DF_ANSWER + "\n\n(Not attached: 'slow.png' (it could not be read).)"
    (done,) = [r for r in results if rtype(r) == "message.completed"]
    assert [c["type"] for c in done.data["message"]["content"] if c["type"] != "text"] == ["image_base64"]
    assert took < 5, took
    no_secret(results, caplog, DF_KEY)


async def test_a_presented_link_that_redirects_to_the_metadata_address_is_not_followed(host, caplog, monkeypatch):
    monkeypatch.setenv(FETCH_ALLOW_ENV, "127.0.0.1")  # the first hop counts as public here
    with FakeDeerFlow(api_key=DF_KEY) as srv, Trickle() as hop:
        srv.extra_artifacts = [hop.url("/hop.png"), "/mnt/user-data/outputs/%2e%2e/%2e%2e/etc/passwd"]
        with caplog.at_level(logging.DEBUG):
            results = await run(make_runner("deerflow-agent", host), host, "draw", config=df_cfg(srv))
        assert [r.path for r in hop.requests] == ["/hop.png"], "one hop, never the metadata address"
        routes = [r.target for r in srv.artifact_requests]
    assert final_text(results) == DF_ANSWER + ("\n\n(Not attached: 'hop.png' (a link to a private or local "
                                               "address); 'passwd' (it could not be read).)")
    assert routes == [f"/api/threads/{srv.runs[0].thread_id}/artifacts/mnt/user-data/outputs/%252e%252e/%252e%252e/"
                      "etc/passwd"], "an encoded '..' stays a name inside the thread's workspace"
    no_secret(results, caplog, DF_KEY)


async def test_chat_text_never_reaches_the_owners_extra_configurable(host):
    """extra-configurable is owner config: a member's message (or a variable) spelled like it changes
    nothing in what the graph is configured with."""
    with FakeDeerFlow(api_key=DF_KEY) as srv:
        spoof = json.dumps({"extra-configurable": {"model_name": "evil", "user_id": "alice"},
                            "configurable": {"recursion_limit": 1}})
        config = df_cfg(srv, **{"advanced-settings": True, "extra-configurable": {"team": "blue"}})
        results = await run(make_runner("deerflow-agent", host), host, spoof, config=config,
                            params={"extra-configurable": {"team": "red"}, "configurable": {"team": "red"}})
        assert final_text(results) == DF_ANSWER
        body = srv.runs[0].body
    assert body["config"]["configurable"] == {"team": "blue"}
    assert body["config"]["recursion_limit"] == 1000 and "model_name" not in body["context"]


# --- what a workflow sends back -------------------------------------------------------------------------


async def test_a_workflow_file_name_with_a_direction_mark_is_named_as_it_is(host):
    """A workflow that names its file after the member's upload (a converter): n8n_agent/files.py
    dropped control characters but not a right-to-left override, so the chat's not-sent note showed
    "invoice<RLO>fdp.exe" as "invoiceexe.pdf". Fixed in files._clean (printable characters only,
    as WeKnora and DeerFlow name theirs)."""
    with FakeN8n() as srv:
        srv.mode = "respond_binary"
        srv.binary_data, srv.binary_mime = b"MZ" + b"\0" * 64, "application/octet-stream"
        srv.response_headers = {"Content-Disposition": "attachment; filename*=UTF-8''invoice%E2%80%AEfdp.exe%0D%0AX"}
        results = await run(make_runner("n8n-agent", host), host, config={"webhook-url": srv.webhook_url})
    text = final_text(results)
    assert "\u202e" not in text and "“invoicefdp.exeX”" in text, text


class EndlessFile(FakeHTTPServer):
    """A webhook answering with a PNG that never ends and states no length."""

    def __init__(self) -> None:
        super().__init__()
        self.add_route("POST", "/webhook/endless", self._endless)

    async def _endless(self, req, resp) -> None:
        await resp.start_stream(200, "image/png")
        await resp.write(PNG_BYTES)
        chunk = b"\0" * 65536
        while not resp.client_disconnected:
            await resp.write(chunk)


async def test_a_workflow_file_that_never_ends_is_refused_at_the_limit(host):
    with EndlessFile() as srv:
        started = time.monotonic()
        results = await run(make_runner("n8n-agent", host), host, config={
            "webhook-url": srv.url("/webhook/endless"), "advanced-settings": True, "max-file-size-mb": 1})
        took = time.monotonic() - started
    code, _, message = failure(results)
    assert code == "upstream.too_large" and "1.0 MiB" in message, message
    assert took < 5, took
