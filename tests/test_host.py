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
    assert "steer=['follow-up']" in text and "history=1" in text and "prompt=1" in text
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
