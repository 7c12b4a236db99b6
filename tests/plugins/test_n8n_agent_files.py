"""N8nAgent when the workflow answers with a file (issue 33 item 3): an image or a PDF reaches the
chat as an attachment instead of failing with "n8n sent text that is not valid utf-8".

How n8n 2.40.7 sends a file (read in n8n@2.40.7 as installed by tests/real_peers, and seen on the
wire there, tests/real_peers/test_n8n_real.py):

- Respond to Webhook, Binary File: ``n8n-nodes-base`` ``dist/nodes/RespondToWebhook/utils/binary.js``
  ``getBinaryResponse`` — the bytes, ``content-type`` = the binary's MIME type, ``content-length``, no
  file name unless the node's Response Headers add a Content-Disposition.
- When Last Node Finishes, First Entry Binary: ``n8n`` ``dist/webhooks/webhook-last-node-response-extractor.js``
  ``extractFirstEntryBinaryFromTaskData`` builds a Buffer for an in-memory file, and
  ``webhook-request-handler.js`` ``sendStaticResponse`` sends it with ``res.json``: the body is
  ``{"type":"Buffer","data":[…]}`` labelled ``application/pdf; charset=utf-8``.
- Streaming: ``RespondToWebhook.node.js`` ``execute`` calls ``sendResponse`` for a binary even when
  streaming, and ``webhooks/webhook-helpers.js`` only waits for it in ``responseNode`` mode: the
  stream ends with nothing in it.
"""

from __future__ import annotations

import base64

import pytest

from runners_cli.host import LocalHost
from tests.fakes.n8n import PNG, FakeN8n
from tests.helpers import failure, final_text, make_runner, rtype, run, terminal
from tests.plugins.test_n8n_agent_transcripts import Replay, Reply

PLUGIN = "n8n-agent"
PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
MiB = 1024 * 1024


@pytest.fixture
def srv():
    with FakeN8n() as s:
        s.mode = "respond_binary"
        yield s


def cfg(srv, **extra):
    return {"webhook-url": srv.webhook_url, **extra}


@pytest.fixture(autouse=True)
def produced(monkeypatch) -> list:
    """Every attachment the plugin hands the kit (what reaches LangBot of them is the kit's part:
    tests/kit/test_results.py, images inline, files LangBot 4.11.2 cannot carry named instead)."""
    from runner_kit.results import ResultBuilder

    seen: list = []
    add = ResultBuilder.add_attachment

    def record(self, att):
        seen.append(att)
        return add(self, att)

    monkeypatch.setattr(ResultBuilder, "add_attachment", record)
    _PRODUCED[:] = []
    _PRODUCED.append(seen)
    return seen


_PRODUCED: list = []


def shown_files(results) -> list[tuple[str, str | None, str, bytes]]:
    """What the plugin attached to the run's one complete message: (kind, file name, MIME type,
    bytes) per attachment, decoded from its ``data:`` URL (taken: the next call sees the next run's)."""
    assert [r for r in results if rtype(r) == "message.completed"], "one complete message"
    out = []
    attached, _PRODUCED[0][:] = list(_PRODUCED[0]), []
    for att in attached:
        head, _, data = att.url.partition(",")
        assert head.startswith("data:") and head.endswith(";base64"), head
        out.append((att.kind, att.name if att.kind == "file" else None, head[5:-7], base64.b64decode(data)))
    return out


async def test_an_image_from_a_respond_to_webhook_node_reaches_the_chat(srv, host, runner):
    results = await run(runner, host, "draw me a dot", config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert shown_files(results) == [("image", None, "image/png", PNG)]
    assert final_text(results) == "", "the answer is the picture alone"


@pytest.mark.parametrize("in_memory", [True, False], ids=["json-buffer", "streamed-bytes"])
async def test_a_pdf_from_the_last_node_reaches_the_chat_with_its_name(srv, host, runner, in_memory):
    """n8n's default (in-memory) binary mode sends First Entry Binary as a JSON-serialised Node
    Buffer: its bytes, not that JSON, are the file."""
    srv.mode = "last_node_binary"
    srv.binary_in_memory = in_memory
    srv.binary_data, srv.binary_mime = PDF, "application/pdf"
    srv.response_headers = {"Content-Disposition": 'attachment; filename="report.pdf"'}
    results = await run(runner, host, "the report, please", config=cfg(srv))
    assert shown_files(results) == [("file", "report.pdf", "application/pdf", PDF)]


@pytest.mark.parametrize(
    ("mime", "data", "kind", "name"),
    [
        ("image/jpeg", b"\xff\xd8\xff\xe0" + b"\x00" * 20, "image", None),
        ("image/svg+xml", b"<svg xmlns='http://www.w3.org/2000/svg'/>", "file", "n8n-file.svg"),
        ("application/octet-stream", PNG, "image", None),  # unlabelled bytes that are a PNG show as one
        ("application/zip", b"PK\x03\x04" + b"\x00" * 20, "file", "n8n-file.zip"),
        ("text/csv", b"a,b\n1,2\n", None, None),  # text stays text
    ],
)
async def test_what_is_a_picture_a_file_or_text(srv, host, runner, mime, data, kind, name):
    srv.binary_data, srv.binary_mime = data, mime
    results = await run(runner, host, config=cfg(srv))
    if kind is None:
        assert final_text(results) == data.decode().strip("\n") and not shown_files(results)
        return
    (got,) = shown_files(results)
    assert got[0] == kind and got[3] == data
    if name is not None:
        assert got[1] == name


@pytest.mark.parametrize(
    ("disposition", "name"),
    [
        ('attachment; filename="..\\\\..\\\\secret<1>.pdf"', "secret1.pdf"),
        ("attachment; filename*=UTF-8''%E6%8A%A5%E5%91%8A.pdf", "报告.pdf"),
        ('inline; filename="/etc/passwd"', "passwd"),
    ],
)
async def test_a_file_name_from_the_workflow_is_only_a_name(srv, host, runner, disposition, name):
    srv.binary_data, srv.binary_mime = PDF, "application/pdf"
    srv.response_headers = {"Content-Disposition": disposition}
    (got,) = shown_files(await run(runner, host, config=cfg(srv)))
    assert got[1] == name


@pytest.mark.parametrize("in_memory", [True, False])
async def test_a_file_larger_than_the_limit_is_refused_clearly(srv, host, runner, in_memory):
    srv.mode = "last_node_binary"
    srv.binary_in_memory = in_memory
    srv.binary_data, srv.binary_mime = PDF + b"\x00" * (2 * MiB), "application/pdf"
    config = cfg(srv, **{"advanced-settings": True, "max-file-size-mb": 1})
    code, retryable, message = failure(await run(runner, host, config=config))
    assert (code, retryable) == ("upstream.too_large", False)
    assert "1.0 MiB" in message and "file" in message
    srv.binary_data = PDF + b"\x00" * (MiB // 2)  # within the limit, even as a JSON Buffer four times its size
    (got,) = shown_files(await run(runner, host, config=config))
    assert got[3] == srv.binary_data


async def test_the_limit_is_never_above_what_langbot_carries(srv, host, runner):
    srv.binary_data = PNG + b"\x00" * (11 * MiB)
    config = cfg(srv, **{"advanced-settings": True, "max-file-size-mb": 50})
    code, _, message = failure(await run(runner, host, config=config))
    assert code == "upstream.too_large" and "10.0 MiB" in message


async def test_streaming_mode_drops_a_file_and_the_owner_is_told_what_to_change(srv, host, runner):
    srv.mode = "stream_respond_binary"
    code, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "upstream.empty_response"
    assert "binary file" in message and "Using Respond to Webhook Node" in message


async def test_a_file_answer_with_replies_ignored_sends_nothing(srv, host, runner):
    results = await run(runner, host, config=cfg(srv, **{"response-handling": "ignore"}))
    assert [rtype(r) for r in results if rtype(r) != "state.updated"] == ["run.completed"]


async def _replay(reply: Reply):
    with Replay(reply) as server:
        host = LocalHost(runner_id="plugin:langbot-team/N8nAgent/default")
        config = {"webhook-url": server.root_url + "/webhook/chat"}
        return await run(make_runner(PLUGIN, host), host, "hi", config=config)


async def test_text_answers_keep_working_and_bad_text_is_still_an_error():
    assert final_text(await _replay(Reply("echo: héllo".encode(), 200, "text/html; charset=utf-8"))) == "echo: héllo"
    code, _, message = failure(await _replay(Reply(b"caf\xe9 \xff", 200, "text/plain; charset=utf-8")))
    assert code == "upstream.protocol" and "not valid utf-8" in message


async def test_an_unlabelled_picture_is_a_picture():
    results = await _replay(Reply(PNG, 200, ""))
    assert shown_files(results) == [("image", None, "image/png", PNG)]
