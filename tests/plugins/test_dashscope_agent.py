"""DashScopeAgent against the loopback DashScope fake: what a Bailian user notices, request shapes,
the platform's quirks, error mapping and the config LangBot's migration produces."""

from __future__ import annotations

import asyncio
import base64
import logging

import pytest

from runners_cli.host import Identity, LocalHost
from tests.fakes.dashscope import FakeDashScope
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

KEY = "sk-plugin-test-key-0001"
APP = "app-plugin"
SESSION = stored_key("dashscope.session_id")  # the default identity's stored session
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()
MIGRATED_HOST_FIELDS = {
    "enable-all-tools": False,
    "tools": [],
    "knowledge-bases": [],
    "mcp-resources": [],
    "mcp-resource-agent-read-enabled": False,
}


@pytest.fixture
def srv():
    with FakeDashScope(api_key=KEY, app_id=APP) as s:
        yield s


@pytest.fixture
def host():
    return LocalHost()


def plugin_module(name: str):
    """A module of the plugin package (loading the runner puts the package on the path)."""
    import importlib

    from runners_cli.plugins import find, load_runner_class

    load_runner_class(find("dashscope-agent"))
    return importlib.import_module(f"dashscope_agent.{name}")


def cfg(srv: FakeDashScope, **extra) -> dict:
    return {"base-url": srv.base_url, "api-key": KEY, "app-id": APP, "app-type": "agent", **extra}


def message_content(results) -> list[dict]:
    msg = [r for r in results if rtype(r) == "message.completed"][0].data["message"]["content"]
    return msg if isinstance(msg, list) else [{"type": "text", "text": msg}]


# --- the standard cases -----------------------------------------------------------------------


async def test_ok_text_streams_and_keeps_the_session(srv, host):
    srv.answer_tokens = ["你好", "，", "我是", "百炼应用。"]
    results = await run(make_runner("dashscope-agent", host), host, "你是谁", config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "你好，我是百炼应用。"
    sid = srv.calls[0].session_out
    assert state_updates(results) == {SESSION: sid}
    shown = deltas(results)
    assert shown and all(b.startswith(a) for a, b in zip(shown, shown[1:], strict=False))


async def test_request_shape(srv, host):
    await run(make_runner("dashscope-agent", host), host, "hello", config=cfg(srv))
    (call,) = srv.calls
    req = srv.find_requests("POST", f"/api/v1/apps/{APP}/completion")[0]
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.headers["x-dashscope-sse"] == "enable"
    assert "x-dashscope-workspace" not in req.headers
    assert call.body == {
        "input": {"prompt": "hello"},
        "parameters": {"incremental_output": True, "has_thoughts": True, "enable_thinking": True},
        "debug": {},
    }
    assert "x-dashscope-ossresourceresolve" not in req.headers, "only a request naming oss:// links carries it"


async def test_ok_tool_step_is_reported_and_its_thought_shown(srv, host):
    srv.tool = {"name": "天气查询", "input": {"city": "杭州"}, "observation": {"weather": "晴", "temp": 21},
                "thought": "用户想知道杭州的天气，调用天气插件。"}
    srv.answer_tokens = ["杭州今天晴，", "21°C。"]
    results = await run(make_runner("dashscope-agent", host), host, "杭州天气", config=cfg(srv))
    started = [r.data for r in results if rtype(r) == "tool.call.started"]
    completed = [r.data for r in results if rtype(r) == "tool.call.completed"]
    assert started == [{"tool_call_id": "step-1", "tool_name": "天气查询", "parameters": {"city": "杭州"}}]
    assert len(completed) == 1 and completed[0]["result"] == {"weather": "晴", "temp": 21}
    assert final_text(results) == "<think>\n用户想知道杭州的天气，调用天气插件。\n</think>\n杭州今天晴，21°C。"


async def test_ok_usage_is_summed_over_every_model_the_app_called(srv, host):
    srv.models = [("qwen-plus", 30), ("qwen-max", 7)]
    srv.answer_tokens = ["a", "b", "c"]
    end = terminal(await run(make_runner("dashscope-agent", host), host, config=cfg(srv)))
    # output tokens per model are the 3 tokens streamed; the last event's counts are the run's
    assert end.usage.model_dump() == {"prompt_tokens": 37, "completion_tokens": 6, "total_tokens": 43}


async def test_no_usage_is_unknown_not_zero(srv, host):
    srv.include_usage = False
    end = terminal(await run(make_runner("dashscope-agent", host), host, config=cfg(srv)))
    assert rtype(end) == "run.completed" and end.usage is None


async def test_resume_second_turn_continues_the_session(srv, host):
    runner = make_runner("dashscope-agent", host)
    await run(runner, host, "first", config=cfg(srv))
    second = await run(runner, host, "second", config=cfg(srv))
    assert rtype(terminal(second)) == "run.completed"
    first_sid = srv.calls[0].session_out
    assert srv.calls[1].session_in == first_sid and srv.calls[1].body["input"]["session_id"] == first_sid
    assert state_updates(second) == {}, "same session, nothing new to store"
    assert [t[0] for t in srv.sessions[first_sid].turns] == ["first", "second"]


@pytest.mark.parametrize(
    ("fault", "code", "retryable", "words"),
    [
        ("http_401", "upstream.auth", False, "InvalidApiKey"),
        ("http_404", "upstream.not_found", False, "app-id"),
        ("http_429", "upstream.rate_limited", True, "Throttling"),
        ("http_500", "upstream.unavailable", True, "InternalError"),
        ("http_503", "upstream.unavailable", True, "ServiceUnavailable"),
    ],
)
async def test_http_errors_are_mapped_with_a_hint(srv, host, fault, code, retryable, words):
    srv.fault = fault
    results = await run(make_runner("dashscope-agent", host), host, config=cfg(srv))
    got = failure(results)
    assert got[:2] == (code, retryable)
    assert words in got[2] and KEY not in got[2]


async def test_401_explanation_names_the_key(srv, host):
    srv.fault = "http_401"
    results = await run(make_runner("dashscope-agent", host), host, config=cfg(srv))
    shown = final_text(results)
    assert "API key" in shown and "InvalidApiKey" in shown


async def test_error_event_midstream_keeps_the_partial_answer(srv, host):
    srv.answer_tokens = ["The first part ", "and the rest."]
    srv.fault = "error_event"
    results = await run(make_runner("dashscope-agent", host), host, config=cfg(srv))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True)
    assert "HTTP 500" in message and "InternalError" in message, "the status comes from :HTTP_STATUS/500"
    text = final_text(results)
    assert text.startswith("The first part") and "incomplete" in text
    assert state_updates(results), "the session is kept for the next turn"
    assert terminal(results).usage.total_tokens == 13, "the partial usage is recorded"


async def test_truncated_stream_is_not_a_success(srv, host):
    srv.fault = "truncated"
    code, retryable, _ = failure(await run(make_runner("dashscope-agent", host), host, config=cfg(srv)))
    assert (code, retryable) == ("upstream.unavailable", True)


async def test_malformed_line_is_a_protocol_error(srv, host):
    srv.fault = "invalid_json"
    code, retryable, _ = failure(await run(make_runner("dashscope-agent", host), host, config=cfg(srv)))
    assert (code, retryable) == ("upstream.protocol", False)


async def test_slow_stream_streams_before_the_end(srv, host):
    srv.answer_tokens = ["one "] + ["more "] * 4
    srv.token_delay = 0.15
    runner = make_runner("dashscope-agent", host)
    ctx = host.make_context("hi", config=cfg(srv))
    loop = asyncio.get_running_loop()
    start = loop.time()
    first = None
    async for r in runner.invoke(ctx):
        if rtype(r) == "message.delta" and first is None:
            first = loop.time() - start
    assert first is not None and first < loop.time() - start - 0.4


# --- quirks -------------------------------------------------------------------------------------


async def test_split_writes_and_no_trailing_blank_line(srv, host):
    srv.split_writes = True
    srv.trailing_blank_line = False
    srv.answer_tokens = ["多字节", "字符", "😀"]
    results = await run(make_runner("dashscope-agent", host), host, config=cfg(srv))
    assert final_text(results) == "多字节字符😀"


async def test_length_finish_is_still_an_answer(srv, host):
    srv.finish_reason = "length"
    results = await run(make_runner("dashscope-agent", host), host, config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed" and final_text(results) == "Hello, world!"


async def test_doc_references_follow_the_answer_with_the_configured_heading(srv, host):
    srv.doc_references = [
        {"index_id": "1", "title": "退货政策", "doc_id": "d1", "doc_name": "退货政策.pdf", "text": "…",
         "doc_url": "https://example.com/refund.pdf"},
        {"index_id": "2", "title": "FAQ", "doc_id": "d2", "doc_name": "FAQ.docx", "text": "…"},
    ]
    srv.answer_tokens = ["七天无理由退货。"]
    results = await run(make_runner("dashscope-agent", host), host, config=cfg(srv, references_quote="参考资料来自:"))
    assert final_text(results) == (
        "七天无理由退货。\n\n参考资料来自:\n[1] 退货政策.pdf https://example.com/refund.pdf\n[2] FAQ.docx"
    )
    off = await run(make_runner("dashscope-agent", host), host,
                    config=cfg(srv, **{"advanced-settings": True, "show-references": False}))
    assert final_text(off) == "七天无理由退货。"


async def test_reasoning_thoughts_and_think_tags_in_the_answer(srv, host):
    srv.reasoning = ["先想一想", "，再回答。"]
    srv.answer_tokens = ["答案是 42。"]
    shown = await run(make_runner("dashscope-agent", host), host, config=cfg(srv))
    assert final_text(shown) == "<think>\n先想一想，再回答。\n</think>\n答案是 42。"
    hidden = await run(make_runner("dashscope-agent", host), host, config=cfg(srv, **{"remove-think": True}))
    assert final_text(hidden) == "答案是 42。"


@pytest.mark.parametrize("remove", [False, True])
async def test_think_tags_the_model_writes_into_the_answer(srv, host, remove):
    srv.answer_tokens = ["<thi", "nk>\n推理", "过程</think>", "\n\n最终回答。"]
    results = await run(make_runner("dashscope-agent", host), host, config=cfg(srv, **{"remove-think": remove}))
    text = final_text(results)
    if remove:
        assert text == "最终回答。" and not any("推理" in d for d in deltas(results))
    else:
        assert text == "<think>\n推理过程</think>\n\n最终回答。"


async def test_thoughts_can_be_turned_off(srv, host):
    srv.reasoning = ["hidden"]
    results = await run(make_runner("dashscope-agent", host), host,
                        config=cfg(srv, **{"advanced-settings": True, "show-thoughts": False}))
    assert "has_thoughts" not in srv.calls[0].body["parameters"]
    assert final_text(results) == "Hello, world!"


async def test_workspace_header_is_sent_when_set(srv, host):
    await run(make_runner("dashscope-agent", host), host,
              config=cfg(srv, **{"advanced-settings": True, "workspace-id": "llm-ws123"}))
    assert srv.find_requests()[0].headers["x-dashscope-workspace"] == "llm-ws123"


async def test_a_json_answer_without_sse_is_still_an_answer(host):
    """A proxy that strips X-DashScope-SSE gets DashScope's one JSON answer."""
    from tests.fakes.http_server import FakeHTTPServer

    class Plain(FakeHTTPServer):
        def __init__(self):
            super().__init__()
            self.add_route("POST", "/api/v1/apps/{app_id}/completion", self._answer)

        async def _answer(self, req, resp):
            await resp.json(200, {"output": {"text": "整段回答", "finish_reason": "stop", "session_id": "s-9"},
                                  "usage": {"models": [{"model_id": "qwen-max", "input_tokens": 5,
                                                        "output_tokens": 4}]}, "request_id": "r"})

    with Plain() as plain:
        config = {"base-url": plain.root_url, "api-key": KEY, "app-id": APP, "app-type": "agent"}
        results = await run(make_runner("dashscope-agent", host), host, config=config)
    assert final_text(results) == "整段回答"
    assert state_updates(results) == {SESSION: "s-9"}
    assert terminal(results).usage.total_tokens == 9


# --- workflow apps ------------------------------------------------------------------------------


async def test_workflow_gets_pipeline_variables_as_biz_params(srv, host):
    srv.mode = "workflow"
    config = cfg(srv, **{"app-type": "workflow", "advanced-settings": True, "biz-params": {"city": "Hangzhou"}})
    results = await run(make_runner("dashscope-agent", host), host, "go", config=config,
                        params={"user_level": "vip", "city": "Beijing"})
    assert final_text(results) == "Hello, world!"
    body = srv.calls[0].body
    assert body["input"]["biz_params"] == {"city": "Beijing", "user_level": "vip"}
    # message_format is what LangBot 4.10 sent for every workflow app (langbot-app/LangBot @a715edd
    # src/langbot/pkg/provider/runners/dashscopeapi.py _workflow_messages), so migrated workflows
    # answer with the same nodes' messages; no enable_thinking for a workflow (4.10 sent none either)
    assert body["parameters"] == {"incremental_output": True, "flow_stream_mode": "message_format"}
    assert terminal(results).usage.total_tokens == 12 + 4, "usage {} on intermediate workflow chunks"


async def test_agent_apps_do_not_get_pipeline_variables(srv, host):
    await run(make_runner("dashscope-agent", host), host, config=cfg(srv), params={"user_level": "vip"})
    assert "biz_params" not in srv.calls[0].body["input"]


@pytest.mark.parametrize("mode", ["message_format", "full_thoughts"])
async def test_workflow_stream_modes_read_the_answer(srv, host, mode):
    srv.mode = "workflow"
    srv.answer_tokens = ["节点", "输出"]
    config = cfg(srv, **{"app-type": "workflow", "advanced-settings": True, "flow-stream-mode": mode})
    results = await run(make_runner("dashscope-agent", host), host, config=config)
    assert srv.calls[0].body["parameters"]["flow_stream_mode"] == mode
    assert final_text(results) == "节点输出"
    assert not [r for r in results if rtype(r).startswith("tool.")], "workflow node results are not tool steps"


# --- images and files -----------------------------------------------------------------------------


async def test_image_and_file_links_go_up_as_lists(srv, host):
    contents = [
        {"type": "text", "text": "看看这个"},
        {"type": "image_url", "image_url": {"url": "https://img.example.com/cat.png"}},
        {"type": "file_url", "file_url": "https://files.example.com/report.pdf", "file_name": "report.pdf"},
    ]
    await run(make_runner("dashscope-agent", host), host, "看看这个", config=cfg(srv), contents=contents)
    inp = srv.calls[0].body["input"]
    assert inp["image_list"] == ["https://img.example.com/cat.png"]
    assert inp["file_list"] == ["https://files.example.com/report.pdf"]
    assert inp["prompt"] == "看看这个"


async def test_base64_images_are_left_out_with_a_note_when_uploads_are_off(srv, host, caplog):
    caplog.set_level(logging.INFO)
    contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG}]
    config = cfg(srv, **{"advanced-settings": True, "image-upload-model": ""})
    results = await run(make_runner("dashscope-agent", host), host, "what is this", config=config, contents=contents)
    assert rtype(terminal(results)) == "run.completed"
    assert "image_list" not in srv.calls[0].body["input"] and not srv.uploads
    assert final_text(results) == ("(Not sent to DashScope: 'image-2.png'; uploading images is turned off "
                                   "(“Model for uploaded images” is empty).)\n\nHello, world!")
    assert any("not sent" in r.getMessage() for r in caplog.records)


async def test_only_a_base64_image_is_explained_and_nothing_is_sent(srv, host):
    contents = [{"type": "image_base64", "image_base64": PNG}]
    config = cfg(srv, **{"advanced-settings": True, "image-upload-model": ""})
    results = await run(make_runner("dashscope-agent", host), host, "", config=config, contents=contents)
    code, retryable, message = failure(results)
    assert code == "input.invalid" and "uploading images is turned off" in message
    assert "could not be sent" in final_text(results)
    assert not srv.find_requests()


async def test_a_link_without_text_uses_the_base_prompt(srv, host):
    contents = [{"type": "image_url", "image_url": {"url": "https://img.example.com/a.jpg"}}]
    await run(make_runner("dashscope-agent", host), host, "", config=cfg(srv), contents=contents)
    inp = srv.calls[0].body["input"]
    assert inp["prompt"] and inp["image_list"] == ["https://img.example.com/a.jpg"]


# --- sessions -------------------------------------------------------------------------------------


async def test_expired_session_is_retried_once_fresh_with_a_notice(srv, host):
    runner = make_runner("dashscope-agent", host)
    await run(runner, host, config=cfg(srv))
    srv.forget_conversations()
    results = await run(runner, host, config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results).endswith("\n\nHello, world!") and "new one" in final_text(results)
    assert [c.session_in != "" for c in srv.calls] == [False, True, False]
    assert state_updates(results) == {SESSION: srv.calls[2].session_out}


async def test_a_session_dashscope_silently_replaced_is_adopted(srv, host):
    srv.forgotten_session = "restart"
    runner = make_runner("dashscope-agent", host)
    await run(runner, host, config=cfg(srv))
    srv.forget_conversations()
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "Hello, world!"
    assert len(srv.calls) == 2
    assert state_updates(results) == {SESSION: srv.calls[1].session_out}


async def test_a_400_that_is_not_about_the_session_keeps_the_stored_id(srv, host):
    runner = make_runner("dashscope-agent", host)
    await run(runner, host, config=cfg(srv))
    srv.fault = "http_400"
    results = await run(runner, host, config=cfg(srv))
    assert failure(results)[0] == "upstream.bad_request"
    assert state_updates(results) == {}
    assert len(srv.find_requests("POST")) == 2, "no retry on a fresh session"


async def test_hashed_identity_gives_each_group_member_a_session(srv, host):
    runner = make_runner("dashscope-agent", host)
    config = cfg(srv, **{"user-id-source": "hashed"})
    for actor in ("alice", "bob", "alice", "bob"):
        ident = Identity(conversation_id="group-1", actor_id=actor, launcher_type="group", launcher_id="g")
        assert rtype(terminal(await run(runner, host, config=config, identity=ident))) == "run.completed"
    ins = [c.session_in for c in srv.calls]
    outs = [c.session_out for c in srv.calls]
    assert ins[:2] == ["", ""] and outs[0] != outs[1]
    assert ins[2:] == outs[:2]
    assert all("alice" not in str(c.body) and "bob" not in str(c.body) for c in srv.calls), "no user id goes up"


async def test_two_bots_in_one_process_keep_their_keys_and_no_cookies(srv, host):
    srv.api_keys.add(KEY + "-b")
    srv.extra_response_headers = {"Set-Cookie": "acw_tc=abc; Path=/"}
    srv.token_delay = 0.01
    host_b = LocalHost()
    ra, rb = make_runner("dashscope-agent", host), make_runner("dashscope-agent", host_b)

    async def chat(runner, h, key, bot):
        for _ in range(3):
            ident = Identity(conversation_id=f"conv-{bot}", actor_id="u", bot_id=bot)
            r = await run(runner, h, config=cfg(srv, **{"api-key": key}), identity=ident)
            assert rtype(terminal(r)) == "run.completed"

    await asyncio.gather(chat(ra, host, KEY, "a"), chat(rb, host_b, KEY + "-b", "b"))
    reqs = srv.find_requests("POST")
    assert len(reqs) == 6 and all("cookie" not in r.headers for r in reqs)
    by_key: dict[str, set[str]] = {}
    for c in srv.calls:
        by_key.setdefault(c.credential, set()).add(c.session_out)
    assert set(by_key) == {KEY, KEY + "-b"}
    assert all(len(s) == 1 for s in by_key.values()) and not (by_key[KEY] & by_key[KEY + "-b"])


# --- base URL forms ---------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["root", "root/", "api", "api/", "completion"])
async def test_base_url_forms(srv, host, form):
    url = {
        "root": srv.root_url,
        "root/": srv.root_url + "/",
        "api": srv.base_url,
        "api/": srv.base_url + "/",
        "completion": srv.base_url + f"/apps/{APP}/completion",
    }[form]
    results = await run(make_runner("dashscope-agent", host), host, config=cfg(srv, **{"base-url": url}))
    assert final_text(results) == "Hello, world!", form


def test_base_url_normalization():
    normalize_base = plugin_module("adapter").normalize_base

    assert normalize_base("https://dashscope-intl.aliyuncs.com") == "https://dashscope-intl.aliyuncs.com/api/v1"
    assert normalize_base("https://dashscope-intl.aliyuncs.com/") == "https://dashscope-intl.aliyuncs.com/api/v1"
    assert normalize_base("https://dashscope.aliyuncs.com/api/v1/") == "https://dashscope.aliyuncs.com/api/v1"
    assert normalize_base("https://dashscope.aliyuncs.com/compatible-mode/v1") == (
        "https://dashscope.aliyuncs.com/api/v1"
    )
    assert normalize_base("") == "https://dashscope.aliyuncs.com/api/v1"
    assert normalize_base("https://ws1.cn-beijing.maas.aliyuncs.com/api/v1") == (
        "https://ws1.cn-beijing.maas.aliyuncs.com/api/v1"
    )


async def test_default_base_url_is_beijing(srv, host):
    from runners_cli.plugins import find

    item = next(i for i in find("dashscope-agent").config_items if i["name"] == "base-url")
    assert item["default"] == "https://dashscope.aliyuncs.com/api/v1"


# --- the migrated config ------------------------------------------------------------------------------


@pytest.mark.parametrize("app_type", ["agent", "workflow"])
async def test_migrated_pipeline_config_answers(srv, host, app_type):
    """What LangBot 4.11.2 writes for a dashscope-app-api pipeline (host-contract.md §5.2): no
    base-url (the default is used; here pointed at the fake), timeout an int 120."""
    srv.mode = app_type
    srv.doc_references = [{"index_id": "1", "doc_name": "手册.pdf"}]
    migrated = {
        "app-type": app_type,
        "api-key": KEY,
        "app-id": APP,
        "references_quote": "参考资料来自:",
        "timeout": 120,
        "advanced-settings": False,
        "langbot-assets-enabled": False,
        "remove-think": False,
        **MIGRATED_HOST_FIELDS,
    }
    from runners_cli.plugins import find

    declared = {i["name"]: i for i in find("dashscope-agent").config_items}
    for key, value in migrated.items():
        if key in MIGRATED_HOST_FIELDS:
            continue
        assert key in declared, key
        kind = declared[key]["type"]
        ok = {"string": str, "secret": str, "select": str, "boolean": bool, "float": (int, float)}[kind]
        assert isinstance(value, ok), key
        if kind == "select":
            assert value in [o["name"] for o in declared[key]["options"]]
    runner = make_runner("dashscope-agent", host)
    results = await run(runner, host, config={**migrated, "base-url": srv.root_url})
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "Hello, world!\n\n参考资料来自:\n[1] 手册.pdf"
    second = await run(runner, host, config={**migrated, "base-url": srv.root_url})
    assert rtype(terminal(second)) == "run.completed"
    assert srv.calls[1].session_in == srv.calls[0].session_out


# --- error mapping ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "message", "taxonomy", "hint"),
    [
        (401, "InvalidApiKey", "Invalid API-key provided.", "upstream.auth", "sk-"),
        (429, "Throttling", "Requests throttling triggered.", "upstream.rate_limited", "rate limiting"),
        (429, "Throttling.AllocationQuota", "Allocated quota exceeded.", "upstream.quota", "quota"),
        (400, "Arrearage", "Access denied, please make sure your account is in good standing.", "upstream.quota",
         "overdue"),
        (404, "AppNotFound", "App not found.", "upstream.not_found", "app-id"),
        (400, "InvalidParameter", "App id is invalid.", "upstream.bad_request", "app-id"),
        (400, "InvalidParameter", "workspace not match", "upstream.bad_request", "workspace-id"),
        (400, "DataInspectionFailed", "Input data may contain inappropriate content.", "upstream.bad_request",
         "inspection"),
        (403, "AccessDenied", "Access denied.", "upstream.forbidden", "workspace"),
        (500, "SomethingNew", "boom", "upstream.unavailable", ""),
    ],
)
def test_error_envelopes_map_to_the_taxonomy(status, code, message, taxonomy, hint):
    import json

    parse_envelope = plugin_module("errors").parse_envelope

    err = parse_envelope(status, json.dumps({"code": code, "message": message, "request_id": "r-1"}).encode(),
                         "application/json")
    assert err.code == taxonomy
    assert code in err.message and hint in err.message


def test_only_the_session_message_means_the_session_is_gone():
    session_gone = plugin_module("errors").session_gone

    assert session_gone(400, b'{"code":"InvalidParameter","message":"Session not found or expired: abc"}')
    assert session_gone(404, b'{"code":"NotFound","message":"session abc does not exist"}')
    assert not session_gone(400, b'{"code":"InvalidParameter","message":"App id is invalid."}')
    assert not session_gone(500, b'{"code":"InternalError","message":"session store unavailable: expired"}')
    assert not session_gone(400, b"<html>session expired</html>")


def test_status_comment_is_read_wherever_the_chunks_are_cut():
    _StatusSniffer = plugin_module("adapter")._StatusSniffer  # noqa: N806

    body = (b'id:1\nevent:result\n:HTTP_STATUS/200\ndata:{"output":{"text":"a"}}\n\n'
            b'id:2\nevent:error\n:HTTP_STATUS/429\ndata:{"code":"Throttling","message":"x"}\n\n')
    for cut in range(1, len(body)):
        for size in (1, 2, 5, cut):
            sniff = _StatusSniffer()
            for i in range(0, len(body), size):
                sniff.feed(body[i : i + size])
            assert sniff.status == 429, (cut, size)
    sniff = _StatusSniffer()
    sniff.feed(b'data:{"output":{"text":"see :HTTP_STATUS/500 here"}}\n\n')
    assert sniff.status is None, "the tag inside a data line is not a status line"
