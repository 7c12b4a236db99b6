"""WeKnoraAgent delivering the files WeKnora's agent skills produce (artifacts) to the chat, against
the loopback fake WeKnora.

What the fake follows is read from Tencent/WeKnora @412dcc41c662c9b45698959e0c3c37db5b8dc9d3:
when the agent completes, ArtifactCollector drains the skill sandbox's output directory into storage
(internal/application/service/artifact_collector.go Collect) and the ``complete`` event lists the new
files as ``data.artifacts`` — index, file_name, file_type, file_size, source_path, mod_time,
created_at, no storage URL (internal/handler/session/agent_stream_handler.go handleComplete,
publicArtifactViews). The assistant message holding them is stored only after the agent returns
(internal/handler/session/qa.go, completeAssistantMessage in the deferred block of the agent run).
``GET /sessions/{id}/messages/{message_id}/artifacts/{index}/download`` sits in the API key's chat
group (internal/router/routes_chat.go RegisterSessionRoutes) and checks the caller's own session
(GetSession: 404 "session not found" for another external user's), the message, the index (404
"artifact index out of range"), the stored blob (404 "artifact blob missing"), then streams the bytes
with Content-Type by extension, Content-Disposition and Content-Length
(internal/handler/session/artifact_download.go DownloadMessageArtifact, mimeTypeFor,
buildAttachmentHeader).
"""

from __future__ import annotations

import base64

import pytest

from runners_cli.host import Identity
from tests.fakes.http_server import FakeHTTPServer
from tests.fakes.weknora import FakeWeKnora
from tests.helpers import final_text, rtype, run, state_updates, stored_key, terminal

PLUGIN = "weknora-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "sk-weknora-artifacts-test-0001"
SESSION = stored_key("weknora.session_id")
ANSWER = "Hello, world!"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x01" * 64
PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\n%%EOF\n"
NOTES = "# 季度报告\n\n- revenue up\n".encode()
BMP = b"BM" + b"\0" * 60


@pytest.fixture
def srv():
    with FakeWeKnora(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture(autouse=True)
def quick_waits(monkeypatch, runner):
    from weknora_agent import const

    monkeypatch.setattr(const, "ARTIFACT_WAITS", (0.02, 0.04, 0.08))


def cfg(srv, **extra):
    return {"base-url": srv.base_url, "api-key": KEY, "app-type": "agent", **extra}


def advanced(srv, **extra):
    return cfg(srv, **{"advanced-settings": True, **extra})


NOT_SENT = "(Not sent: {}. LangBot cannot pass a file from this plugin into the chat.)"


def images(results) -> list[bytes]:
    """The images the chat shows with the answer (LangBot 4.11.2 takes an inline image as image_base64)."""
    (done,) = [r for r in results if rtype(r) == "message.completed"]
    content = done.data["message"]["content"]
    parts = [c for c in content if c.get("type") != "text"] if isinstance(content, list) else []
    assert all(c["type"] == "image_base64" for c in parts), parts
    return [base64.b64decode(c["image_base64"].split(",", 1)[1]) for c in parts]


def image_types(results) -> list[str]:
    (done,) = [r for r in results if rtype(r) == "message.completed"]
    content = done.data["message"]["content"]
    return [c["image_base64"].split(";", 1)[0] for c in content if c.get("type") == "image_base64"] \
        if isinstance(content, list) else []


def not_sent(*names: str) -> str:
    """The kit's line for files LangBot cannot take from a plugin (runner_kit.results)."""
    return "\n\n" + NOT_SENT.format(", ".join(f"“{n}”" for n in names))


def download_paths(srv) -> list[str]:
    return [r.path for r in srv.artifact_requests()]


def indexes(srv) -> list[int]:
    return [int(p.rsplit("/", 2)[-2]) for p in download_paths(srv)]


# -- files the agent produced reach the chat ---------------------------------------------------------


async def test_an_agent_answer_with_an_image_and_a_pdf_delivers_both(srv, host, runner):
    """Every file of the answer is downloaded by its index in the answer's own message, with the run's
    key and user; images first. The images are shown with the answer, each file is named (LangBot
    4.11.2 takes no inline file from a plugin). A type WeKnora's small extension table does not know
    (``.bmp``, ``.md`` are served as octet-stream) is taken from the name."""
    srv.tools = True
    srv.artifacts = [{"file_name": "report.pdf", "data": PDF}, {"file_name": "chart.png", "data": PNG},
                     {"file_name": "scan.bmp", "data": BMP}, {"file_name": "季度报告.md", "data": NOTES}]
    results = await run(runner, host, "make me a report", config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == ANSWER + not_sent("report.pdf", "季度报告.md")
    assert images(results) == [PNG, BMP] and image_types(results) == ["data:image/png", "data:image/bmp"]
    sid = state_updates(results)[SESSION]
    (mid,) = srv.runs
    assert download_paths(srv) == [f"/api/v1/sessions/{sid}/messages/{mid}/artifacts/{i}/download"
                                   for i in (1, 2, 0, 3)]
    assert all(r.headers["x-api-key"] == KEY and r.headers["x-external-user-id"] == "user_u-1"
               for r in srv.artifact_requests())

    srv.artifacts = []
    again = await run(runner, host, "thanks", config=cfg(srv))
    assert final_text(again) == ANSWER and images(again) == []
    assert len(srv.artifact_requests()) == 4, "only an answer's own files"


async def test_files_are_fetched_once_weknora_has_stored_the_answer(srv, host, runner, monkeypatch):
    """``complete`` announces the files before WeKnora stores the message holding them: until then a
    download is 404 "artifact index out of range", and the plugin waits a little for it."""
    from weknora_agent import const

    monkeypatch.setattr(const, "ARTIFACT_WAITS", (0.05,) * 10)
    srv.artifacts = [{"file_name": "chart.png", "data": PNG}, {"file_name": "scan.bmp", "data": BMP}]
    srv.artifact_store_delay = 0.15
    results = await run(runner, host, config=cfg(srv))
    assert images(results) == [PNG, BMP] and final_text(results) == ANSWER
    seen = indexes(srv)
    assert seen[:2] == [0, 0] and seen.count(1) == 1, "the second file is fetched once the answer is stored"


async def test_an_answer_never_stored_leaves_a_note_after_a_few_tries(srv, host, runner):
    """The pauses are shared by all the answer's files: a message WeKnora never stores does not make
    each file wait again."""
    srv.artifacts = [{"file_name": "chart.png", "data": PNG}, {"file_name": "report.pdf", "data": PDF}]
    srv.artifact_store_delay = 3600
    results = await run(runner, host, config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed" and images(results) == []
    assert final_text(results) == ANSWER + ("\n\n(Not attached: 'chart.png' (it could not be downloaded from WeKnora); "
                                            "'report.pdf' (it could not be downloaded from WeKnora).)")
    assert indexes(srv) == [0, 0, 0, 0, 1], "three pauses (quick_waits), then each file once"


async def test_a_resumed_answer_still_brings_its_files(srv, host, runner):
    """The ``complete`` event that announces the files may arrive over continue-stream."""
    srv.answer_tokens, srv.drops = ["The ", "chart ", "is ", "ready."], 1
    srv.artifacts = [{"file_name": "chart.png", "data": PNG}]
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "The chart is ready." and images(results) == [PNG]
    assert srv.resume_requests()


async def test_a_knowledge_chat_answer_downloads_nothing(srv, host, runner):
    srv.artifacts = [{"file_name": "chart.png", "data": PNG}]  # skills run in agent mode only
    results = await run(runner, host, config=cfg(srv, **{"app-type": "chat"}))
    assert final_text(results) == ANSWER and images(results) == [] and srv.artifact_requests() == []


# -- too large, too many, failing --------------------------------------------------------------------------


async def test_a_file_over_the_size_limit_is_named_not_downloaded(srv, host, runner):
    srv.artifacts = [{"file_name": "big.png", "data": PNG + b"x" * 4096}, {"file_name": "small.png", "data": PNG}]
    results = await run(runner, host, config=advanced(srv, **{"max-file-size-mb": 0.001}))
    assert images(results) == [PNG]
    assert final_text(results) == ANSWER + "\n\n(Not attached: 'big.png' (larger than 1 KiB, the file size limit).)"
    assert indexes(srv) == [1], "its announced size was enough"


async def test_a_file_of_unknown_size_is_read_only_up_to_the_limit(srv, host, runner):
    """A file stored with size 0 is streamed without Content-Length: the download stops at the limit."""
    srv.artifact_chunked = True
    srv.artifacts = [{"file_name": "big.png", "data": PNG + b"x" * (256 * 1024), "file_size": 0},
                     {"file_name": "small.png", "data": PNG, "file_size": 0}]
    results = await run(runner, host, config=advanced(srv, **{"max-file-size-mb": 0.01}))
    assert images(results) == [PNG]
    assert final_text(results) == ANSWER + "\n\n(Not attached: 'big.png' (larger than 10 KiB, the file size limit).)"


async def test_files_beyond_what_one_langbot_message_carries_are_named_in_chinese(srv, host, runner):
    """LangBot 4.11.2 truncates a result over 1 MiB (runner_kit.results): the inlined files stay
    within the plugin's room, whatever max-file-size-mb allows; the note follows the asker's language."""
    srv.artifacts = [{"file_name": "photo.png", "data": PNG + b"\0" * (700 * 1024)},
                     {"file_name": "chart.png", "data": PNG}]
    results = await run(runner, host, "你好，请画图", config=cfg(srv))
    assert images(results) == [PNG]
    assert final_text(results) == ANSWER + "\n\n（未附上：“photo.png”（超出一条 LangBot 消息能携带的大小）。）"


async def test_a_long_answer_leaves_less_room_for_files(srv, host, runner):
    srv.answer_tokens = ["word " * (180 * 1024)]  # 900 KiB of text
    srv.artifacts = [{"file_name": "photo.png", "data": PNG + b"n" * (100 * 1024)}]
    results = await run(runner, host, config=cfg(srv))
    assert images(results) == []
    assert final_text(results).endswith("(Not attached: 'photo.png' (larger than one LangBot message can carry).)")


async def test_more_than_ten_files_are_named_not_attached(srv, host, runner):
    srv.artifacts = [{"file_name": f"part-{i:02d}.png", "data": PNG + bytes([i])} for i in range(12)]
    results = await run(runner, host, config=cfg(srv))
    assert images(results) == [PNG + bytes([i]) for i in range(10)]
    assert final_text(results) == ANSWER + ("\n\n(Not attached: 'part-10.png' (more than 10 files); 'part-11.png' "
                                            "(more than 10 files).)")
    assert indexes(srv) == list(range(10))


async def test_a_failing_download_leaves_a_note_and_the_answer_stands(srv, host, runner):
    """A stored blob that is gone (404 "artifact blob missing") and a download that breaks off midway
    cost only their own file."""
    srv.missing_blobs, srv.cut_blobs = {"gone.png"}, {"half.png"}
    srv.artifacts = [{"file_name": "gone.png", "data": PNG}, {"file_name": "half.png", "data": PNG * 64},
                     {"file_name": "chart.png", "data": PNG}]
    results = await run(runner, host, config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed"
    assert images(results) == [PNG]
    assert final_text(results) == ANSWER + ("\n\n(Not attached: 'gone.png' (it could not be downloaded from WeKnora); "
                                            "'half.png' (it could not be downloaded from WeKnora).)")
    assert indexes(srv) == [0, 1, 2], "a blob that is gone is not waited for"


# -- group chats and hostile names ---------------------------------------------------------------------------


async def test_each_member_gets_only_their_own_answers_files(srv, host, runner):
    """One WeKnora session per member ("direct" API principal): every download names the asker's own
    session and message and carries the asker's own user header, so nobody's files reach another."""
    srv.direct_principal = True
    alice, bob = Identity(actor_id="alice"), Identity(actor_id="bob")
    srv.artifacts = [{"file_name": "alice-plan.png", "data": PNG + b"alice"}]
    first = await run(runner, host, config=cfg(srv), identity=alice)
    srv.artifacts = []
    second = await run(runner, host, config=cfg(srv), identity=bob)
    srv.artifacts = [{"file_name": "bob-chart.png", "data": PNG + b"bob"}]
    third = await run(runner, host, config=cfg(srv), identity=bob)
    assert images(first) == [PNG + b"alice"] and images(second) == [] and images(third) == [PNG + b"bob"]
    by_owner = {s.owner: s.id for s in srv.sessions.values()}
    alice_dl, bob_dl = srv.artifact_requests()
    assert alice_dl.headers["x-external-user-id"] == "user_alice"
    assert alice_dl.path.startswith(f"/api/v1/sessions/{by_owner['user_alice']}/messages/")
    assert bob_dl.headers["x-external-user-id"] == "user_bob"
    assert bob_dl.path.startswith(f"/api/v1/sessions/{by_owner['user_bob']}/messages/")


async def test_hostile_file_names_are_only_labels(srv, host, runner):
    """A skill (or a prompt-injected agent) names its files: a path or a URL in the name is shown as a
    name only — the download is addressed by session, message and index, nothing is fetched from the
    name's address."""
    with FakeHTTPServer() as internal:
        srv.artifacts = [{"file_name": "../../etc/passwd", "data": b"root:x:0:0"},
                         {"file_name": f"{internal.root_url}/admin/secret.txt?token=1", "data": b"s"},
                         {"file_name": "..", "data": b"dots"}]
        results = await run(runner, host, config=cfg(srv))
        assert internal.requests == [], "nothing was fetched from the address in a name"
    assert final_text(results) == ANSWER + not_sent("passwd", "secret.txt", "file-3")
    sid = state_updates(results)[SESSION]
    (mid,) = srv.runs
    assert download_paths(srv) == [f"/api/v1/sessions/{sid}/messages/{mid}/artifacts/{i}/download" for i in range(3)]


async def test_a_redirect_is_never_followed(srv, host, runner):
    """A proxy in front of WeKnora that answers a download with a redirect (to an internal address
    here) is not followed: the file is named, the answer stands."""
    with FakeHTTPServer() as internal:
        srv.artifact_redirect = f"{internal.root_url}/latest/meta-data/chart.png"
        srv.artifacts = [{"file_name": "chart.png", "data": PNG}]
        results = await run(runner, host, config=cfg(srv))
        assert internal.requests == []
    assert images(results) == []
    assert final_text(results) == ANSWER + "\n\n(Not attached: 'chart.png' (it could not be downloaded from WeKnora).)"


def test_path_parts_are_percent_encoded_and_announced_entries_checked():
    from weknora_agent.artifacts import Artifact, announced, display_name, url_segment

    assert url_segment("a/b c?d#e") == "a%2Fb%20c%3Fd%23e"
    assert [url_segment(v) for v in ("", ".", "..", None)] == [None, None, None, None]
    assert display_name("C:\\temp\\évil\nname.txt", 0) == "évilname.txt"
    assert announced([{"index": 1, "file_name": "b.txt", "file_size": 3}, "junk", {"index": True, "file_name": "c"},
                      {"index": 1, "file_name": "again.txt"}, {"index": "0/../x", "file_name": "d", "file_size": -1}]) == [
        Artifact(1, "b.txt", 3), Artifact(2, "c", None), Artifact(4, "d", None)]
