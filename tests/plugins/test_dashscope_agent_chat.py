"""DashScopeAgent, what a chat sees (issue 33 items 4, 5, 6, 15): knowledge-base citations, images
and files sent as data, the app settings LangBot 4.10 sent or left out, workflow answers, and what
a stop or a reset does upstream. Against the loopback DashScope fake, plus byte-exact replays where
the shape of one real stream matters."""

from __future__ import annotations

import asyncio
import base64

import pytest

from runner_kit.netguard import FETCH_ALLOW_ENV
from runners_cli.host import Identity, LocalHost
from tests.fakes.dashscope import FakeDashScope
from tests.fakes.http_server import FakeHTTPServer
from tests.fakes.replay import ReplayServer, Reply
from tests.helpers import (
    deltas,
    failure,
    final_text,
    make_runner,
    rtype,
    run,
    state_updates,
    stored_key,
    terminal,
)

KEY = "sk-chat-test-key-0002"
APP = "app-chat"
PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"\x01" * 80
PNG = base64.b64encode(PNG_BYTES).decode()
PDF = base64.b64encode(b"%PDF-1.4\n" + b"x" * 40).decode()
SSE = "text/event-stream;charset=UTF-8"
GROUP = "group-7"


@pytest.fixture
def srv():
    with FakeDashScope(api_key=KEY, app_id=APP) as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture
def host():
    return LocalHost()


@pytest.fixture
def loopback_uploads(monkeypatch):
    """The fake's storage is on loopback: the administrator's allow-list lets the upload through."""
    monkeypatch.setenv(FETCH_ALLOW_ENV, "127.0.0.1")


def cfg(srv, **extra) -> dict:
    return {"base-url": srv.base_url, "api-key": KEY, "app-id": APP, "app-type": "agent", **extra}


def advanced(srv, **extra) -> dict:
    return cfg(srv, **{"advanced-settings": True, **extra})


def assert_cumulative(shown: list[str]) -> None:
    assert shown and all(b.startswith(a) for a, b in zip(shown, shown[1:], strict=False)), shown


# --- item 4: citation tags --------------------------------------------------------------------------

# the cut points of a recorded real stream: cnblogs/dashscope-sdk @7afccbd
# test/Cnblogs.DashScope.Tests.Shared/RawHttpData/application-single-generation-text-sse.response.body.txt
CITED_TOKENS = ["测试应该帮助", "我们提高质量", "<ref>[4]</", "ref>，理解", "装置的方法<ref", ">[2]</ref", ">，并说明",
                "的重要性<ref>[", "3]</ref>", "。"]
REFERENCES = [
    {"index_id": "4", "title": "Goals", "doc_id": "file_1", "doc_name": "xUnit Test Patterns", "text": "…",
     "images": []},
    {"index_id": "2", "title": "Fixtures", "doc_id": "file_1", "doc_name": "xUnit Test Patterns", "text": "…",
     "images": []},
    {"index_id": "3", "title": "Databases", "doc_id": "file_2", "doc_name": "数据库测试.pdf", "text": "…",
     "images": []},
]


async def test_citation_tags_cut_across_events_become_numbers_matching_the_list(srv, host):
    """A knowledge-base app writes ``<ref>[n]</ref>`` into its answer, cut anywhere between events,
    and lists the cited slices in ``doc_references`` (the recorded stream above). LangBot 4.10
    rewrote the tags (langbot-app/LangBot @a715edd src/langbot/pkg/provider/runners/dashscopeapi.py
    _replace_references); the chat now reads ``[4]`` where the tag stood and the list after the
    answer names each document with the numbers that cite it. No update ever shows part of a tag."""
    srv.answer_tokens = CITED_TOKENS
    srv.doc_references = REFERENCES
    srv.split_writes = True
    results = await run(make_runner("dashscope-agent", host), host, "总结", config=cfg(srv))
    assert final_text(results) == (
        "测试应该帮助我们提高质量[4]，理解装置的方法[2]，并说明的重要性[3]。\n\n"
        "参考资料来自:\n[2][4] xUnit Test Patterns\n[3] 数据库测试.pdf"
    )
    shown = deltas(results)
    assert_cumulative(shown)
    assert not any("<" in d or "ref>" in d for d in shown), shown
    # the references really arrived mid-stream, each with its tag (what the adapter reads)
    body = srv.find_requests("POST")[0]
    assert body.response_status == 200


async def test_without_the_list_the_citations_go_too(srv, host):
    srv.answer_tokens = CITED_TOKENS
    srv.doc_references = REFERENCES
    results = await run(make_runner("dashscope-agent", host), host, "总结",
                        config=advanced(srv, **{"show-references": False}))
    assert final_text(results) == "测试应该帮助我们提高质量，理解装置的方法，并说明的重要性。"


async def test_a_citation_with_no_document_listed_stays_a_number(srv, host):
    """A long-term memory citation: the app cites ``<ref>[1]</ref>`` and lists no document for it
    (cnblogs/dashscope-sdk @7afccbd RawHttpData/application-single-generation-text-with-memory-nosse
    .response.body.txt). The number stays; no list follows."""
    srv.answer_tokens = ["您喜欢面食", "<ref>[1]</ref>", "。"]
    results = await run(make_runner("dashscope-agent", host), host, "我爱吃什么", config=cfg(srv))
    assert final_text(results) == "您喜欢面食[1]。"


async def test_citation_numbers_can_be_asked_away(srv, host):
    """``doc_reference_type: simple`` makes the app answer without the tags and list the slices only
    (dashscope/dashscope-sdk-python @c0d7a0b dashscope/app/application.py ``Application.call`` doc);
    by default nothing is sent and the app decides."""
    srv.answer_tokens = CITED_TOKENS
    srv.doc_references = REFERENCES
    await run(make_runner("dashscope-agent", host), host, "总结", config=cfg(srv))
    assert "doc_reference_type" not in srv.calls[0].body["input"]
    results = await run(make_runner("dashscope-agent", host), host, "总结",
                        config=advanced(srv, **{"doc-reference-type": "simple"}))
    assert srv.calls[1].body["input"]["doc_reference_type"] == "simple"
    assert final_text(results).startswith("测试应该帮助我们提高质量，理解装置的方法，并说明的重要性。\n\n参考资料来自:\n")


async def test_a_real_stream_replayed_in_tiny_pieces():
    """The recorded stream's framing and cut points, replayed split mid-UTF-8: the same answer."""
    events = []
    cited: list[dict] = []
    answer = ""
    for n, tok in enumerate(CITED_TOKENS, 1):
        answer += tok
        for ref in REFERENCES:
            if f"[{ref['index_id']}]</ref>" in answer and ref not in cited:
                cited.append(ref)
        output = {"session_id": "069db8223d514dab91185954dc5108de", "finish_reason": "null", "text": tok}
        if cited:
            output["doc_references"] = sorted(cited, key=lambda r: r["index_id"])
        events.append((n, output))
    events.append((len(events) + 1, {"session_id": "069db8223d514dab91185954dc5108de", "finish_reason": "stop",
                                     "text": "", "doc_references": sorted(cited, key=lambda r: r["index_id"])}))
    import json

    body = "".join(
        f"id:{n}\nevent:result\n:HTTP_STATUS/200\ndata:"
        + json.dumps({"output": out, "usage": {"models": [{"input_tokens": 2304, "output_tokens": n,
                                                           "model_id": "qwen-max-latest"}]},
                      "request_id": "44862941-b743-9332-b49f-5f3db75a4873"}, ensure_ascii=False, separators=(",", ":"))
        + "\n\n" for n, out in events).encode()
    with ReplayServer({"POST /api/v1/apps/{app_id}/completion": Reply(body, content_type=SSE)}) as rs:
        host = LocalHost()
        config = {"base-url": rs.root_url, "api-key": KEY, "app-id": APP, "app-type": "agent"}
        results = await run(make_runner("dashscope-agent", host), host, "总结", config=config)
    assert final_text(results).startswith("测试应该帮助我们提高质量[4]，理解装置的方法[2]，并说明的重要性[3]。\n\n")
    assert not any("<" in d for d in deltas(results))


async def test_a_whole_json_answer_gets_its_citations_rewritten_too(host):
    """A proxy that drops ``X-DashScope-SSE`` gets one JSON answer; its tags are rewritten the same way."""
    doc = {"output": {"text": "支持七天无理由退货<ref>[1]</ref>。", "finish_reason": "stop", "session_id": "s-1",
                      "doc_references": [{"index_id": "1", "doc_name": "售后手册.pdf"}]}, "request_id": "r"}
    import json

    reply = Reply(json.dumps(doc, ensure_ascii=False).encode(), content_type="application/json")
    with ReplayServer({"POST /api/v1/apps/{app_id}/completion": reply}) as rs:
        config = {"base-url": rs.root_url, "api-key": KEY, "app-id": APP, "app-type": "agent"}
        results = await run(make_runner("dashscope-agent", host), host, "退货", config=config)
    assert final_text(results) == "支持七天无理由退货[1]。\n\n参考资料来自:\n[1] 售后手册.pdf"


def test_citation_rewriter_at_every_cut():
    """Every way of cutting a tagged answer gives the same text, and nothing shown is ever taken back."""
    import importlib

    from runners_cli.plugins import find, load_runner_class

    load_runner_class(find("dashscope-agent"))
    citations = importlib.import_module("dashscope_agent.citations")
    text = "a<ref>[1]</ref>b<ref>[2][3]</ref> c <re d <ref>not a citation, the text goes on and on for a while</ref>"
    want = "a[1]b[2][3] c <re d <ref>not a citation, the text goes on and on for a while</ref>"
    for cut in range(1, len(text)):
        c = citations.Citations()
        got = c.feed(text[:cut]) + c.feed(text[cut:]) + c.flush()
        assert got == want, cut
    c = citations.Citations()
    assert "".join(c.feed(ch) for ch in text) + c.flush() == want
    assert citations.Citations().whole("ends mid-tag <ref>[7]</re") == "ends mid-tag [7]"
    assert citations.Citations(keep=False).whole("x<ref>[1]</ref>y") == "xy"


# --- item 5: images and files sent as data ----------------------------------------------------------------


async def test_an_image_sent_as_data_reaches_the_app_through_temporary_storage(srv, host, loopback_uploads):
    """An image LangBot passes as base64 goes into DashScope's temporary storage (getPolicy, then
    the OSS form POST; dashscope/dashscope-sdk-python @c0d7a0b dashscope/utils/oss_utils.py
    ``OssUtils.upload``) and reaches the app as an ``oss://`` link in ``image_list``, with the header
    that lets DashScope resolve it (Model Studio, "Upload a local file to obtain a temporary URL")."""
    contents = [{"type": "text", "text": "这是什么？"}, {"type": "image_base64", "image_base64": PNG}]
    results = await run(make_runner("dashscope-agent", host), host, "这是什么？", config=cfg(srv), contents=contents)
    assert final_text(results) == "Hello, world!"
    (policy,) = srv.find_requests("GET", "/api/v1/uploads")
    assert policy.query == {"action": "getPolicy", "model": "qwen-vl-max"}
    assert policy.headers["authorization"] == f"Bearer {KEY}"
    (upload,) = srv.uploads.values()
    assert upload.data == PNG_BYTES and upload.content_type == "image/png"
    assert "image-2" not in upload.key, "the sender's file name is not sent"
    (call,) = srv.calls
    assert call.body["input"]["image_list"] == [f"oss://{upload.key}"]
    assert call.headers["x-dashscope-ossresourceresolve"] == "enable"
    assert call.images == [PNG_BYTES], "the app read the image"
    assert call.body["input"]["prompt"] == "这是什么？"


async def test_an_image_alone_gets_the_built_in_prompt(srv, host, loopback_uploads):
    contents = [{"type": "image_base64", "image_base64": PNG}]
    results = await run(make_runner("dashscope-agent", host), host, "", config=cfg(srv), contents=contents)
    assert rtype(terminal(results)) == "run.completed"
    assert srv.calls[0].body["input"]["prompt"] == "Please look at the attached images or files and answer."
    assert srv.calls[0].images == [PNG_BYTES]


async def test_the_upload_model_is_the_apps(srv, host, loopback_uploads):
    """A temporary file is bound to the model named at upload; the owner names the app's."""
    srv.app_model = "qwen-vl-plus"
    contents = [{"type": "text", "text": "look"}, {"type": "image_base64", "image_base64": PNG}]
    results = await run(make_runner("dashscope-agent", host), host, "look",
                        config=advanced(srv, **{"image-upload-model": "qwen-vl-plus"}), contents=contents)
    assert final_text(results) == "Hello, world!"
    assert srv.find_requests("GET", "/api/v1/uploads")[0].query["model"] == "qwen-vl-plus"


async def test_a_document_sent_as_data_is_left_out_with_a_note_in_the_persons_language(srv, host, loopback_uploads):
    """Documents reach a Bailian app only as links (``file_list``) or from Bailian's own file store
    (``rag_options.session_file_ids``, filled through the Bailian data-center OpenAPI, which signs
    with an AccessKey, not the app's API key): one sent as data is named in a note and the text
    is answered."""
    contents = [{"type": "text", "text": "总结这份报告"},
                {"type": "file_base64", "file_base64": PDF, "file_name": "季度报告.pdf"}]
    results = await run(make_runner("dashscope-agent", host), host, "总结这份报告", config=cfg(srv),
                        contents=contents)
    assert final_text(results) == "（未发送给 DashScope：'季度报告.pdf'；应用只接收链接形式的文档和音频。）\n\nHello, world!"
    assert not srv.uploads and not srv.find_requests("GET", "/api/v1/uploads")
    assert "file_list" not in srv.calls[0].body["input"]


async def test_links_go_up_as_links_and_the_plugin_never_fetches_them(srv, host, loopback_uploads):
    """A hostile member's links to internal addresses are handed to DashScope unfetched (the
    plugin downloads nothing); a local file named by URL or path is never read or uploaded."""
    with FakeHTTPServer() as internal:
        contents = [
            {"type": "text", "text": "see"},
            {"type": "image_url", "image_url": {"url": internal.url("/admin/cat.png")}},
            {"type": "file_url", "file_url": "http://169.254.169.254/latest/meta-data/", "file_name": "meta"},
            {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}},
        ]
        attachments = [{"type": "file", "name": "shadow", "path": "/etc/shadow"}]
        results = await run(make_runner("dashscope-agent", host), host, "see", config=cfg(srv), contents=contents,
                            attachments=attachments)
        assert rtype(terminal(results)) == "run.completed"
        assert internal.requests == [] and internal.connections_accepted == 0
    inp = srv.calls[0].body["input"]
    assert inp["image_list"] == [internal.url("/admin/cat.png")]
    assert inp["file_list"] == ["http://169.254.169.254/latest/meta-data/"]
    assert not srv.uploads and "passwd" not in str(srv.calls[0].body) and "shadow" not in str(srv.calls[0].body)


async def test_an_upload_address_that_is_not_public_is_never_posted_to(srv, host):
    """``upload_host`` comes from DashScope's answer: one that resolves to a private or metadata
    address is refused like a link from the chat would be, the image is named in a note, and the
    text is still answered."""
    srv.upload_host = "http://169.254.169.254/"
    contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG}]
    results = await run(make_runner("dashscope-agent", host), host, "what is this", config=cfg(srv), contents=contents)
    assert final_text(results) == (
        "(Not sent to DashScope: 'image-2.png'; it could not be uploaded (DashScope named an upload address that "
        "is not public (169.254.169.254)).)\n\nHello, world!")
    assert not srv.uploads and "image_list" not in srv.calls[0].body["input"]


async def test_without_the_allow_list_the_loopback_storage_is_refused_too(srv, host, monkeypatch):
    monkeypatch.delenv(FETCH_ALLOW_ENV, raising=False)
    contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG}]
    results = await run(make_runner("dashscope-agent", host), host, "what is this", config=cfg(srv), contents=contents)
    assert "not public (127.0.0.1)" in final_text(results) and not srv.uploads


async def test_a_refused_upload_policy_leaves_the_image_out_and_answers(srv, host, loopback_uploads):
    """The temporary storage exists in the Beijing region only and is rate limited: a refused
    policy costs the image, not the answer."""
    srv.policy_fault = (400, "InvalidParameter", "Model not exist.")
    contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG}]
    results = await run(make_runner("dashscope-agent", host), host, "what is this", config=cfg(srv), contents=contents)
    text = final_text(results)
    assert text.startswith("(Not sent to DashScope: 'image-2.png'; they could not be uploaded (")
    assert "InvalidParameter" in text and text.endswith("\n\nHello, world!") and KEY not in text


async def test_an_image_larger_than_the_storage_takes(srv, host, loopback_uploads):
    srv.upload_max_mb = 0.00001  # about 10 bytes
    contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG}]
    results = await run(make_runner("dashscope-agent", host), host, "what is this", config=cfg(srv), contents=contents)
    assert "it could not be uploaded (it is larger than" in final_text(results) and not srv.uploads


async def test_two_members_images_reach_their_own_answers(srv, host, loopback_uploads):
    """In a group with a session per member, two images sent at once go each to its sender's call."""
    srv.token_delay = 0.01
    other = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x02" * 80).decode()
    runner = make_runner("dashscope-agent", host)

    async def ask(actor: str, image: str) -> list:
        ident = Identity(conversation_id=GROUP, actor_id=actor, launcher_type="group", launcher_id="g")
        contents = [{"type": "text", "text": f"{actor}'s picture"}, {"type": "image_base64", "image_base64": image}]
        return await run(runner, host, f"{actor}'s picture", config=cfg(srv), contents=contents, identity=ident)

    a, b = await asyncio.gather(ask("alice", PNG), ask("bob", other))
    assert rtype(terminal(a)) == rtype(terminal(b)) == "run.completed"
    seen = {c.body["input"]["prompt"]: c.images for c in srv.calls}
    assert seen == {"alice's picture": [PNG_BYTES], "bob's picture": [base64.b64decode(other)]}


# --- item 6: the settings LangBot 4.10 sent or could not set ------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "remove", "sent", "reasoning_shown"),
    [
        (None, False, True, True),  # LangBot 4.10: enable_thinking on with the thoughts…
        (None, True, False, False),  # …and off when the reasoning is hidden
        ("on", True, True, False),
        ("off", False, False, False),
        ("app", False, None, True),  # nothing sent: the app's own setting
    ],
)
async def test_deep_thinking(srv, host, setting, remove, sent, reasoning_shown):
    """``parameters.enable_thinking`` (dashscope/dashscope-sdk-java @7be4b73
    src/main/java/com/alibaba/dashscope/app/ApplicationParam.java): LangBot 4.10 sent it equal to
    ``has_thoughts``, which was off only with remove-think (langbot-app/LangBot @a715edd
    dashscopeapi.py _agent_messages)."""
    srv.reasoning = ["先想", "一想"]
    srv.answer_tokens = ["答案。"]
    extra = {"remove-think": remove} | ({"advanced-settings": True, "enable-thinking": setting} if setting else {})
    results = await run(make_runner("dashscope-agent", host), host, "问题", config=cfg(srv, **extra))
    params = srv.calls[0].body["parameters"]
    assert params.get("enable_thinking") == sent and ("enable_thinking" in params) == (sent is not None)
    assert final_text(results) == ("<think>\n先想一想\n</think>\n答案。" if reasoning_shown else "答案。")


async def test_long_term_memory_id(srv, host):
    """``input.memory_id`` (dashscope SDK ``Application.call``; cnblogs/dashscope-sdk @7afccbd
    RawHttpData/application-single-generation-text-with-memory-nosse.request.body.json): sent when
    set, for every member alike."""
    await run(make_runner("dashscope-agent", host), host, config=cfg(srv))
    assert "memory_id" not in srv.calls[0].body["input"]
    for actor in ("alice", "bob"):
        ident = Identity(conversation_id=GROUP, actor_id=actor, launcher_type="group", launcher_id="g")
        await run(make_runner("dashscope-agent", host), host, config=advanced(srv, **{"memory-id": " mem-42 "}),
                  identity=ident)
    assert [c.body["input"]["memory_id"] for c in srv.calls[1:]] == ["mem-42", "mem-42"]


async def test_a_message_format_workflow_answers_once(srv, host):
    """message_format streams the End node's messages and closes with one event whose ``output.text``
    is the whole text again (Bailian "调用工作流应用", message_format response example): the chat
    shows the answer once, streamed."""
    srv.mode = "workflow"
    srv.answer_tokens = ["今天", "杭州", "晴。"]
    srv.token_delay = 0.05
    results = await run(make_runner("dashscope-agent", host), host, "天气", config=cfg(srv, **{"app-type": "workflow"}))
    assert srv.calls[0].body["parameters"]["flow_stream_mode"] == "message_format"
    assert final_text(results) == "今天杭州晴。"
    shown = deltas(results)
    assert_cumulative(shown)
    assert shown[0] != "今天杭州晴。", "streamed, not only at the end"


def _workflow_events(*outputs: dict) -> bytes:
    import json

    return "".join(
        f"id:{n}\nevent:result\n:HTTP_STATUS/200\ndata:"
        + json.dumps({"output": {"session_id": "0a6aff53d8e945e4900452f04d55499b", "finish_reason": "null", **out},
                      "usage": {}, "request_id": "88878d48-097f-99c3-b6b9-b76f7366da90"},
                     ensure_ascii=False, separators=(",", ":")) + "\n\n"
        for n, out in enumerate(outputs, 1)).encode()


def _node(name: str, content: str, seq: int, done: bool = False) -> dict:
    return {"workflow_message": {"node_status": "success" if done else "executing", "node_type": name,
                                 "node_msg_seq_id": seq, "node_name": name, "node_id": f"{name}_7w1V",
                                 "node_is_completed": done, "message": {"content": content, "role": "assistant"}}}


async def _replay_workflow(body: bytes) -> list:
    with ReplayServer({"POST /api/v1/apps/{app_id}/completion": Reply(body, content_type=SSE)}) as rs:
        host = LocalHost()
        config = {"base-url": rs.root_url, "api-key": KEY, "app-id": APP, "app-type": "workflow"}
        return await run(make_runner("dashscope-agent", host), host, "你是谁？", config=config)


async def test_a_workflow_whose_end_node_does_not_stream_still_answers():
    """A node streams in message_format only with its streaming switch on; without it the closing
    text is all there is, and it is the answer (LangBot 4.10 read only the node messages and
    showed nothing here)."""
    results = await _replay_workflow(_workflow_events(
        {"finish_reason": "stop", "text": "我是通义千问。"}))
    assert final_text(results) == "我是通义千问。"


async def test_a_workflow_closing_text_that_differs_keeps_what_was_shown():
    """An output node's message, then the End node's: the closing text is the End node's alone, so
    the chat keeps what it showed (as LangBot 4.10 did) instead of taking text back."""
    results = await _replay_workflow(_workflow_events(
        _node("Output", "正在查询……", 1), _node("Output", "", 2, done=True),
        _node("End", "杭州晴。", 1), _node("End", "", 2, done=True),
        {"finish_reason": "stop", "text": "杭州晴。"}))
    assert final_text(results) == "正在查询……杭州晴。"


async def test_the_documented_message_format_stream(srv):
    """The message_format response example of the docs, byte for byte in framing."""
    results = await _replay_workflow(_workflow_events(
        _node("End", "我是", 1), _node("End", "通义千问，", 2), _node("End", "很高兴为你服务。", 3),
        _node("End", "", 4, done=True),
        {"finish_reason": "stop", "text": "我是通义千问，很高兴为你服务。"}))
    assert final_text(results) == "我是通义千问，很高兴为你服务。"
    assert state_updates(results) == {stored_key("dashscope.session_id"): "0a6aff53d8e945e4900452f04d55499b"}


# --- item 15: stop and reset ------------------------------------------------------------------------------


async def test_a_reset_starts_a_new_session_and_asks_dashscope_nothing_else(srv, host):
    """A LangBot reset drops the stored session; the application API has no call to end or delete
    one (dashscope/dashscope-sdk-python @c0d7a0b dashscope/app/: ``Application.call`` only), so the
    old session is simply not sent again and DashScope lets it expire."""
    ident = Identity(conversation_id="conv-reset", actor_id="alice")
    runner = make_runner("dashscope-agent", host)
    await run(runner, host, "first", config=cfg(srv), identity=ident)
    await run(runner, host, "second", config=cfg(srv), identity=ident)
    host.reset_conversation(ident)
    results = await run(runner, host, "after the reset", config=cfg(srv), identity=ident)
    assert rtype(terminal(results)) == "run.completed"
    old = srv.calls[0].session_out
    assert [c.session_in for c in srv.calls] == ["", old, ""]
    assert srv.calls[2].session_out != old
    assert {(r.method, r.path) for r in srv.requests} == {("POST", f"/api/v1/apps/{APP}/completion")}
    await asyncio.sleep(0.05)  # whatever the kit does after the run has had its chance
    assert len(srv.requests) == 3


async def test_a_stopped_run_only_closes_the_stream(srv, host):
    """Cancelling closes the connection; there is no stop call to make (none exists)."""
    srv.answer_tokens = ["one "] + ["more "] * 40
    srv.token_delay = 0.05
    runner = make_runner("dashscope-agent", host)
    ctx = host.make_context("go", config=cfg(srv))
    gen = runner.invoke(ctx)
    async for r in gen:
        if rtype(r) == "message.delta":
            break
    await gen.aclose()
    # the whole answer would take 2 s more: the connection is gone well before
    assert await srv.wait_until_async(lambda: srv.active_requests == 0, timeout=1.0)
    await asyncio.sleep(0.05)
    assert len(srv.requests) == 1


async def test_input_without_anything_sendable_names_why(srv, host):
    contents = [{"type": "file_base64", "file_base64": PDF, "file_name": "a.pdf"}]
    results = await run(make_runner("dashscope-agent", host), host, "", config=cfg(srv), contents=contents)
    code, _, message = failure(results)
    assert code == "input.invalid" and "'a.pdf'" in message and "only as links" in message
    assert not srv.find_requests()


async def test_an_expired_session_with_a_left_out_file_says_each_thing_once(srv, host):
    """A long conversation whose session DashScope forgot: the retry on a new session shows the
    new-conversation notice and the note about the left-out file once each."""
    runner = make_runner("dashscope-agent", host)
    await run(runner, host, "first", config=cfg(srv))
    srv.forget_conversations()
    contents = [{"type": "text", "text": "and this"}, {"type": "file_base64", "file_base64": PDF, "file_name": "a.pdf"}]
    results = await run(runner, host, "and this", config=cfg(srv), contents=contents)
    text = final_text(results)
    assert text.count("Not sent to DashScope: 'a.pdf'") == 1 and text.count("new one") == 1
    assert text.endswith("\n\nHello, world!")
    assert [c.session_in != "" for c in srv.calls] == [False, True, False]


async def test_the_retry_on_a_new_session_does_not_upload_again(srv, host, loopback_uploads):
    runner = make_runner("dashscope-agent", host)
    await run(runner, host, "first", config=cfg(srv))
    srv.forget_conversations()
    contents = [{"type": "text", "text": "and this"}, {"type": "image_base64", "image_base64": PNG}]
    results = await run(runner, host, "and this", config=cfg(srv), contents=contents)
    assert final_text(results).endswith("\n\nHello, world!")
    assert len(srv.uploads) == 1 and len(srv.find_requests("GET", "/api/v1/uploads")) == 1
    assert srv.calls[-1].images == [PNG_BYTES]
