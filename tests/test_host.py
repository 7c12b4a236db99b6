"""The local host answers the SDK's real proxy calls with LangBot's shapes and error strings."""

from __future__ import annotations

import pytest
from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.runner.result import RunnerResult

from runners_cli.host import Identity, LocalHost, StateStore


class Probe(Runner):
    """Calls the run API and reports what came back as text."""

    async def run(self, ctx):
        api = ctx.api
        out = []
        await api.state_set("conversation", "k", {"n": 1})
        out.append(f"get={(await api.state_get('conversation', 'k'))['value']}")
        out.append(f"list={(await api.state_list('conversation'))['keys']}")
        await api.set_plugin_storage("blob", b"\x00\x01")
        out.append(f"storage={(await api.get_plugin_storage('blob'))!r}")
        try:
            await api.get_plugin_storage("missing")
        except Exception as exc:  # noqa: BLE001
            out.append(f"missing={getattr(getattr(exc, 'error', None), 'code', type(exc).__name__)}")
        pulled = await api.steering_pull()
        out.append(f"steer={[i.input.text for i in pulled.items]}")
        page = await api.history_page(limit=5)
        out.append(f"history={len(page.items)}")
        out.append(f"prompt={len(await api.get_prompt())}")
        yield RunnerResult.run_completed(ctx.run_id, message={"role": "assistant", "content": " ".join(out)})


async def invoke(host, ctx):
    r = Probe()
    r.bind_runtime(plugin_runtime_handler=host)
    return [x async for x in r.invoke(ctx)]


async def test_proxy_round_trip_shapes():
    host = LocalHost()
    host.history = [{"transcript_id": "t1", "event_id": "e1", "role": "user", "item_type": "message",
                     "content": "hi", "seq": 1, "cursor": "1"}]
    host.prompt = [{"role": "system", "content": "be nice"}]
    ctx = host.make_context("x", steering=True)
    host.queue_steering(ctx, "follow-up")
    results = await invoke(host, ctx)
    text = results[-1].data["message"]["content"]
    assert "get={'n': 1}" in text and "list=['k']" in text
    assert "storage=b'\\x00\\x01'" in text and "missing=host.action_error" in text
    # the seeded item plus the run's own message, which LangBot writes before it invokes the runner
    assert "steer=['follow-up']" in text and "history=2" in text and "prompt=1" in text
    actions = [c.action for c in host.calls]
    assert actions[:2] == ["state_set", "state_get"] and "steering_pull" in actions


async def test_state_scope_without_identity_errors_like_langbot():
    host = LocalHost()
    ctx = host.make_context("x", identity=Identity(actor_id=None))
    with pytest.raises(Exception) as info:
        await host.call_action("state_get", {"run_id": ctx.run_id, "scope": "actor", "key": "k"})
    assert 'Scope key not available for scope "actor"' in str(info.value)
    with pytest.raises(Exception) as info:
        await host.call_action("state_get", {"run_id": "nope", "scope": "actor", "key": "k"})
    assert "not found or expired" in str(info.value)


async def test_oversized_state_value_rejected():
    host = LocalHost()
    ctx = host.make_context("x")
    with pytest.raises(Exception) as info:
        await host.call_action("state_set", {"run_id": ctx.run_id, "scope": "conversation", "key": "k",
                                             "value": "x" * (300 * 1024)})
    assert "exceeds limit" in str(info.value)


def test_sqlite_state_survives_a_new_host(tmp_path):
    path = tmp_path / "s.sqlite"
    host = LocalHost(store=StateStore(path))
    ctx = host.make_context("x")
    host.apply_result(ctx.run_id, RunnerResult.state_updated(ctx.run_id, "dify.conversation_id", "c1", "conversation"))
    host.store.close()
    again = LocalHost(store=StateStore(path)).make_context("y")
    assert again.state.conversation["dify.conversation_id"] == "c1"
    assert again.state.conversation["external.conversation_id"] == "conv-1"


async def _page(host: LocalHost, ctx, **kw) -> dict:
    return await host.call_action("history_page", {"run_id": ctx.run_id, **kw})


def _turn(host: LocalHost, text: str, answer: str | None, ident: Identity | None = None):
    """One run as the orchestrator sees it: the user's message, then (unless None) the answer."""
    ctx = host.make_context(text, identity=ident)
    if answer is not None:
        host.apply_result(ctx.run_id, RunnerResult.message_delta(ctx.run_id, {"role": "assistant", "content": answer}))
        host.apply_result(ctx.run_id, RunnerResult.message_completed(ctx.run_id, {"role": "assistant", "content": answer}))
        host.apply_result(ctx.run_id, RunnerResult.run_completed(ctx.run_id, message={"role": "assistant",
                                                                                      "content": answer}))
    return ctx


async def test_history_page_serves_the_conversation_transcript_like_langbot():
    host = LocalHost()
    ada = _turn(host, "my name is Ada", "Hello Ada")
    _turn(host, "somewhere else", "other answer", Identity(conversation_id="conv-2"))
    _turn(host, "the answer failed", None)
    ctx = _turn(host, "what is my name?", None)
    page = await _page(host, ctx)
    # newest first; the current run's message is already there; one assistant item per answered run
    assert [(i["role"], i["content"]) for i in page["items"]] == [
        ("user", "what is my name?"), ("user", "the answer failed"), ("assistant", "Hello Ada"), ("user", "my name is Ada"),
    ]
    assert page["has_more"] is False and page["next_cursor"] is None
    assert page["prev_cursor"] == page["items"][0]["cursor"]
    first = page["items"][-1]
    assert first["item_type"] == "message" and first["cursor"] == str(first["seq"]) and first["conversation_id"] == "conv-1"
    assert first["content_json"] == {"role": "user", "content": [{"type": "text", "text": "my name is Ada"}]}
    assert first["event_id"] == ada.event.event_id and first["metadata"]["actor_id"] == "u-1"
    answer = page["items"][2]
    assert answer["content_json"]["content"] == "Hello Ada" and answer["metadata"]["run_id"]


async def test_history_page_cursors_page_backward_and_forward():
    host = LocalHost()
    for n in range(3):
        _turn(host, f"q{n}", f"a{n}")
    ctx = host.make_context("q3")
    newest = await _page(host, ctx, limit=3)
    assert [i["content"] for i in newest["items"]] == ["q3", "a2", "q2"]
    assert newest["has_more"] is True and newest["next_cursor"] == newest["items"][-1]["cursor"]
    older = await _page(host, ctx, before_cursor=newest["next_cursor"], limit=3)
    assert [i["content"] for i in older["items"]] == ["a1", "q1", "a0"]
    last = await _page(host, ctx, before_cursor=older["next_cursor"], limit=3)
    assert [i["content"] for i in last["items"]] == ["q0"] and last["has_more"] is False and last["next_cursor"] is None
    forward = await _page(host, ctx, after_cursor=last["items"][0]["cursor"], direction="forward", limit=2)
    assert [i["content"] for i in forward["items"]] == ["a0", "q1"] and forward["has_more"] is True
    # LangBot lists newest first when no cursor is given, whatever the direction
    assert [i["content"] for i in (await _page(host, ctx, direction="forward", limit=1))["items"]] == ["q3"]
    assert len((await _page(host, ctx, limit=500))["items"]) == 7, "the page is capped at 100, not refused"


async def test_history_page_is_scoped_to_the_run_conversation():
    host = LocalHost()
    _turn(host, "in conv-1", "yes")
    ctx = host.make_context("in a thread", identity=Identity(thread_id="t-9"))
    assert [i["content"] for i in (await _page(host, ctx))["items"]] == ["in a thread"], "threads are kept apart"
    with pytest.raises(Exception) as info:
        await _page(host, ctx, conversation_id="conv-other")
    assert "Conversation conv-other is not accessible by this run" in str(info.value)
    alone = host.make_context("no conversation", identity=Identity(conversation_id=None))
    assert alone.context.available_apis.history_page is False
    assert (await _page(host, alone))["items"] == []
    host.reset_conversation(Identity())
    assert [i["content"] for i in (await _page(host, host.make_context("after reset")))["items"]] == ["after reset"]


async def test_history_page_through_the_sdk_proxy_validates_as_history_page():
    host = LocalHost()
    _turn(host, "remember 42", "ok, 42")
    seen = {}

    class Reader(Runner):
        async def run(self, ctx):
            page = await ctx.api.history_page(limit=10, direction="backward")
            seen["page"] = page
            yield RunnerResult.run_completed(ctx.run_id, message={"role": "assistant", "content": "done"})

    r = Reader()
    r.bind_runtime(plugin_runtime_handler=host)
    ctx = host.make_context("what number?")
    [host.apply_result(ctx.run_id, x) async for x in r.invoke(ctx)]
    page = seen["page"]
    items = page.items if hasattr(page, "items") and not isinstance(page, dict) else page["items"]
    texts = [getattr(i, "content", None) or i["content"] for i in items]
    assert texts == ["what number?", "ok, 42", "remember 42"]
    assert [i["content"] for i in host.history][-1] == "done", "the run's answer is recorded after it completes"


async def test_history_keeps_attachment_refs_without_their_bytes():
    host = LocalHost()
    image = {"type": "image_base64", "image_base64": "data:image/png;base64,AAAA"}
    ctx = host.make_context("see this", contents=[{"type": "text", "text": "see this"}, image],
                            attachments=[{"name": "a.png", "content": "QUJD", "mime_type": "image/png"}])
    plain, full = await _page(host, ctx), await _page(host, ctx, include_attachments=True)
    assert plain["items"][0]["attachment_refs"] == [], "refs only when asked for"
    (ref,) = full["items"][0]["attachment_refs"]
    assert ref["name"] == "a.png" and ref["content"] is None and ref["content_redacted"] is True
    part = full["items"][0]["content_json"]["content"][1]
    assert part["image_base64"] is None and part["content_redacted"] is True
    assert "AAAA" not in str(host.history) and "QUJD" not in str(host.history)


def test_transcript_survives_a_new_host(tmp_path):
    path = tmp_path / "s.sqlite"
    host = LocalHost(store=StateStore(path))
    _turn(host, "first process", "first answer")
    host.store.close()
    again = LocalHost(store=StateStore(path))
    assert [(i["role"], i["content"]) for i in again.history] == [("user", "first process"), ("assistant", "first answer")]
