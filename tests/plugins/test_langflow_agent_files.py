"""LangflowAgent's uploads (issue 33 item 7): which Langflow route each file takes, how it reaches
the flow, and that everything a run uploaded is deleted after it, whatever its end.

Langflow 1.13.0 (the langflow-base 1.13.0 wheel from PyPI, as installed in the real-peer venv):
``langflow/api/v1/files.py`` ``upload_file`` / ``delete_file`` (images, ``<flow>/<timestamp>_<name>``),
``langflow/api/v2/files.py`` ``upload_user_file`` / ``delete_file`` (other files, the key owner's
"My Files", ``<user>/<name>`` with `` (n)`` for a name taken), and the Langflow files docs: "/v2/files
doesn't support image files. To send image files to your flows through the API, use Upload image
files (v1)".
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time

import pytest

from runners_cli.host import Identity
from tests.fakes.langflow import USER_ID, FakeLangflow
from tests.helpers import failure, final_text, rtype, run, terminal

PLUGIN = "langflow-agent"
KEY = "sk-langflow-files-test-key"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x01" * 32).decode()
TXT = base64.b64encode(b"the secret word is kiwi").decode()
ANSWER = "Hello from the fake model."


@pytest.fixture
def srv():
    with FakeLangflow(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture(autouse=True)
async def _deletes_settled():
    """The deletes run in a task of their own after the run: let them end inside the test's loop."""
    yield
    from langflow_agent import adapter  # the plugin's package, importable once its runner is loaded

    await adapter.cleanups_done()


def cfg(srv, **extra):
    return {"base-url": srv.base_url, "api-key": KEY, "flow-id": srv.flow_id, **extra}


def image_and_file(text="what are these", name="notes.txt"):
    return [{"type": "text", "text": text}, {"type": "image_base64", "image_base64": PNG},
            {"type": "file_base64", "file_base64": TXT, "file_name": name}]


async def deleted(srv, count, timeout=3.0):
    """Wait (milliseconds when it works) until ``count`` uploads were deleted."""
    return await srv.wait_until_async(lambda: len(srv.deleted) >= count and not srv.stored, timeout)


async def test_an_image_goes_by_the_v1_route_a_file_by_v2_both_reach_the_chat_input_and_are_deleted_after(
        srv, host, runner):
    """Images by ``POST /api/v1/files/upload/{flow}`` (Langflow's docs: v2 takes no images), other
    files by ``POST /api/v2/files``; both paths go into the Chat Input's ``files``. After the answer
    both are deleted: ``DELETE /api/v1/files/delete/{flow}/{name}`` and ``DELETE /api/v2/files/{id}``,
    so nothing stays in the key owner's "My Files"."""
    results = await run(runner, host, "what are these", config=cfg(srv), contents=image_and_file())
    assert final_text(results) == ANSWER, terminal(results).data
    (image,) = srv.find_requests("POST", f"/api/v1/files/upload/{srv.flow_id}")
    (other,) = srv.find_requests("POST", "/api/v2/files")
    assert image.form().files["file"].data.startswith(b"\x89PNG")
    assert other.form().files["file"].data == b"the secret word is kiwi"
    (run_,) = srv.runs
    v1_path, v2_path = run_.files
    assert v1_path.startswith(f"{srv.flow_id}/") and v1_path.endswith(".png")
    assert v2_path.startswith(f"{USER_ID}/notes-") and v2_path.endswith(".txt")
    assert await deleted(srv, 2), srv.deleted
    assert sorted(srv.deleted) == sorted([v1_path, v2_path]) and srv.stored == {}
    v1_delete = [r for r in srv.find_requests("DELETE") if r.path.startswith("/api/v1/files/delete/")]
    v2_delete = [r for r in srv.find_requests("DELETE") if r.path.startswith("/api/v2/files/")]
    assert [r.path for r in v1_delete] == [f"/api/v1/files/delete/{v1_path}"]
    assert len(v2_delete) == 1 and all(r.headers["x-api-key"] == KEY for r in v1_delete + v2_delete)


async def test_uploads_are_deleted_also_when_the_flow_fails(srv, host, runner):
    srv.fail_component = "OpenAI"
    results = await run(runner, host, "what are these", config=cfg(srv), contents=image_and_file())
    assert failure(results)[0] == "upstream.error"
    assert await deleted(srv, 2), srv.deleted


async def test_uploads_are_deleted_also_when_the_run_is_stopped_and_langflow_cancels_the_flow(srv, host, runner):
    """LangBot stops the run mid-answer: ``/run`` has no cancel route, so the stream is closed, and
    Langflow cancels the flow's task on the disconnect (langflow/api/v1/endpoints.py
    ``simplified_run_flow``: ``on_disconnect`` → ``main_task.cancel()``). The uploads go all the same."""
    srv.answer_tokens = ["a "] * 50
    srv.token_delay = 0.05
    gen = runner.invoke(host.make_context("what are these", config=cfg(srv), contents=image_and_file()))
    async for r in gen:
        if rtype(r) == "message.delta":
            break
    await gen.aclose()
    assert await srv.wait_until_async(lambda: bool(srv.runs) and srv.runs[0].cancelled, 3)
    assert await deleted(srv, 2), srv.deleted


async def test_uploads_are_deleted_also_when_the_time_limit_ends_the_run(srv, host, runner):
    srv.fault = "stall"
    results = await run(runner, host, "what are these", config=cfg(srv, timeout=1.5), contents=image_and_file(),
                        deadline_at=time.time() + 1.5)
    assert failure(results)[:2] == ("upstream.timeout", True)
    assert await deleted(srv, 2), srv.deleted
    assert await srv.wait_until_async(lambda: srv.runs[0].cancelled, 3), "closing the stream cancels the flow"


async def test_when_a_later_upload_is_refused_the_earlier_one_is_deleted(srv, host, runner):
    srv.upload_faults = [None, 413]  # the image is taken, the file refused
    code, _, message = failure(await run(runner, host, "x", config=cfg(srv), contents=image_and_file()))
    assert code == "upstream.too_large" and "uploading 'notes.txt' failed" in message
    assert not srv.runs, "nothing was run"
    assert await deleted(srv, 1) and srv.deleted == list(srv.uploads)[:1]


async def test_a_refused_delete_is_only_logged_and_the_answer_stands(srv, host, runner, caplog):
    caplog.set_level(logging.INFO)
    srv.delete_fault = 500
    results = await run(runner, host, "what are these", config=cfg(srv), contents=image_and_file())
    assert rtype(terminal(results)) == "run.completed" and final_text(results) == ANSWER
    from langflow_agent import adapter

    await adapter.cleanups_done()
    said = [r.getMessage() for r in caplog.records if "was not deleted" in r.getMessage()]
    assert len(said) == 2 and any("'image-2.png'" in m for m in said) and any("'notes.txt'" in m for m in said)
    assert all("HTTP 500" in m and KEY not in m for m in said), said
    assert len(srv.stored) == 2


async def test_a_slow_delete_neither_holds_the_answer_nor_runs_forever(srv, host, runner, caplog, monkeypatch):
    from langflow_agent import adapter, const

    monkeypatch.setattr(const, "CLEANUP_SECONDS", 0.3)
    caplog.set_level(logging.INFO)
    srv.delete_delay = 30
    started = time.monotonic()
    results = await run(runner, host, "what are these", config=cfg(srv), contents=image_and_file())
    assert final_text(results) == ANSWER and time.monotonic() - started < 2, "the answer did not wait"
    await asyncio.wait_for(adapter.cleanups_done(), 2)
    assert any("took over 0.3 s" in r.getMessage() for r in caplog.records)


async def test_an_endpoint_name_is_turned_into_the_flow_uuid_the_image_route_needs(srv, host, runner):
    """``/api/v1/files/upload/{flow_id}`` and ``GET /api/v1/flows/{flow_id}`` take a UUID only (an
    endpoint name is a 422 there, while ``/run`` takes either): the UUID is found among the key
    owner's flow headers (``GET /api/v1/flows/?header_flows=true``)."""
    results = await run(runner, host, "what are these", config=cfg(srv, **{"flow-id": "lb-chat"}),
                        contents=image_and_file())
    assert final_text(results) == ANSWER, terminal(results).data
    (listing,) = srv.find_requests("GET", "/api/v1/flows/")
    assert listing.query["header_flows"] == "true"
    assert srv.find_requests("POST", f"/api/v1/files/upload/{srv.flow_id}")
    assert [r.path for r in srv.find_requests("POST") if "/run/" in r.path] == ["/api/v1/run/lb-chat"]
    assert await deleted(srv, 2)
    code, _, message = failure(await run(runner, host, "x", config=cfg(srv, **{"flow-id": "no-such-endpoint"}),
                                         contents=image_and_file()))
    assert code == "config.invalid" and "no-such-endpoint" in message and "flow-id" in message


async def test_a_file_only_needs_no_flow_lookup_when_the_chat_input_is_configured(srv, host, runner):
    contents = [{"type": "text", "text": "x"}, {"type": "file_base64", "file_base64": TXT, "file_name": "a.txt"}]
    config = cfg(srv, **{"flow-id": "lb-chat", "advanced-settings": True, "chat-input-id": "ChatInput-Wna_m"})
    assert final_text(await run(runner, host, "x", config=config, contents=contents)) == ANSWER
    assert not srv.find_requests("GET"), "no flow lookup: v2 needs no flow id"
    assert await deleted(srv, 1)


@pytest.mark.parametrize("name", ["../../etc/passwd", "a\nb\r.txt", "CON.txt", "evil\u202etxt.exe", "..", "x" * 400 + ".md",
                                  "report:v2?.pdf"])
async def test_a_hostile_file_name_is_made_safe_and_the_message_answered(srv, host, runner, name):
    """A member's file name must not break the upload (Langflow 400s ``..``, separators, CR/LF,
    format characters, device names and > 255 bytes; v1 500s a separator) nor reach a path."""
    contents = [{"type": "text", "text": "x"}, {"type": "file_base64", "file_base64": TXT, "file_name": name}]
    results = await run(runner, host, "x", config=cfg(srv), contents=contents)
    assert final_text(results) == ANSWER, terminal(results).data
    (path,) = srv.runs[0].files
    stored = path.split("/", 1)[1]
    assert "/" not in stored and ".." not in stored and len(stored.encode()) <= 255
    assert await deleted(srv, 1)


async def test_two_members_sending_the_same_image_name_at_once_never_share_a_file(srv, host, runner):
    """Both are ``image-1.png``; v1 names files by the second, so without a tag of its own each
    upload would overwrite the other's, and the first delete would take both."""
    srv.token_delay = 0.05
    contents = [{"type": "text", "text": "x"}, {"type": "image_base64", "image_base64": PNG}]
    alice, bob = Identity(actor_id="alice", conversation_id="g1"), Identity(actor_id="bob", conversation_id="g1")
    one, two = await asyncio.gather(run(runner, host, "x", config=cfg(srv), contents=contents, identity=alice),
                                    run(runner, host, "x", config=cfg(srv), contents=contents, identity=bob))
    assert final_text(one) == final_text(two) == ANSWER
    paths = [p for r in srv.runs for p in r.files]
    assert len(paths) == len(set(paths)) == 2
    assert await deleted(srv, 2)


async def test_files_a_flow_attaches_to_its_answer_are_not_passed_on(srv, host, runner):
    """A Chat Output may carry ``files`` (storage paths on the Langflow server, lfx ``Message.files``):
    the chat gets the flow's text only, and no path of the server's storage is shown."""
    srv.answer_files = [f"{USER_ID}/chart.png"]
    results = await run(runner, host, "draw it", config=cfg(srv))
    assert final_text(results) == ANSWER
    shown = " ".join(str(r.data) for r in results)
    assert "chart.png" not in shown and USER_ID not in shown
