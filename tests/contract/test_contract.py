"""The rules every runner keeps, checked against every plugin over its loopback fake platform."""

from __future__ import annotations

import asyncio
import base64
import logging
import time

import pytest

from runners_cli.plugins import find
from tests.helpers import deltas, dump, failure, final_text, make_runner, rtype, run, terminal

TOKENS = ["Hello", ", ", "this ", "is ", "a ", "streamed ", "answer ", "from ", "the ", "fake."]
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()


async def test_success_one_terminal_one_message_cumulative_deltas(case, server, host):
    case.answer(server, TOKENS, 0.0)
    results = await run(make_runner(case.plugin, host), host, config=case.config(server))
    end = terminal(results)
    assert rtype(end) == "run.completed", end.data
    text = final_text(results)
    assert text == "".join(TOKENS)
    seen = deltas(results)
    assert seen, "a streaming runner sends at least one delta"
    for a, b in zip(seen, seen[1:], strict=False):
        assert b.startswith(a) and len(b) > len(a), "each delta carries the whole text so far"
    assert text.startswith(seen[-1])


async def test_streams_before_upstream_finishes(case, server, host):
    """Text must reach the host while the upstream is still generating (no buffering to the end)."""
    case.answer(server, ["first "] + ["more "] * 5, 0.15)
    runner = make_runner(case.plugin, host)
    ctx = host.make_context("hi", config=case.config(server))
    start = time.monotonic()
    first_delta_at = None
    async for r in runner.invoke(ctx):
        if rtype(r) == "message.delta" and first_delta_at is None:
            first_delta_at = time.monotonic() - start
    total = time.monotonic() - start
    assert first_delta_at is not None and first_delta_at < total - 0.4


async def test_usage_reported_then_omitted_when_unknown(case, server, host):
    case.answer(server, TOKENS, 0.0)
    end = terminal(await run(make_runner(case.plugin, host), host, config=case.config(server)))
    assert end.usage is not None and end.usage.total_tokens
    case.no_usage(server)
    end = terminal(await run(make_runner(case.plugin, host), host, config=case.config(server)))
    assert rtype(end) == "run.completed"
    assert end.usage is None, "unknown usage is omitted, never 0"


async def test_secrets_never_in_results_or_logs(case, server, host, caplog):
    caplog.set_level(logging.DEBUG)
    runner = make_runner(case.plugin, host)
    case.answer(server, TOKENS, 0.0)
    ok = await run(runner, host, config=case.config(server))
    case.set_fault(server, "http_401")
    bad = await run(runner, host, config=case.config(server))
    assert failure(bad)[0] == "upstream.auth"
    text = dump(ok + bad) + "\n".join(r.getMessage() for r in caplog.records)
    for secret in case.secrets(server):
        assert secret not in text


async def test_bad_config_value_is_config_invalid(case, server, host):
    runner = make_runner(case.plugin, host)
    for bad in ({"timeout": "abc"}, {"timeout": "-3"}):
        code, retryable, message = failure(await run(runner, host, config={**case.config(server), **bad}))
        assert code == "config.invalid" and not retryable and "timeout" in message
    assert not server.find_requests(), "no upstream call with an invalid config"


async def test_zero_or_blank_timeout_is_no_limit_as_the_host_reads_it(case, server, host):
    case.answer(server, TOKENS, 0.0)
    runner = make_runner(case.plugin, host)
    for value in ("0", "", 0):
        results = await run(runner, host, config={**case.config(server), "timeout": value})
        assert rtype(terminal(results)) == "run.completed" and final_text(results) == "".join(TOKENS), value


async def test_silent_upstream_times_out_before_deadline(case, server, host):
    case.set_fault(server, "stall_before_headers")
    deadline = time.time() + 2.5 + case.startup
    results = await run(make_runner(case.plugin, host), host, config=case.config(server), deadline_at=deadline)
    code, retryable, _ = failure(results)
    assert (code, retryable) == ("upstream.timeout", True)
    assert time.time() < deadline, "the runner reports before the host's deadline"


async def test_host_cancel_leaves_nothing_open(case, server, host):
    case.answer(server, ["a "] * 200, 0.05)
    runner = make_runner(case.plugin, host)
    ctx = host.make_context("hi", config=case.config(server))
    gen = runner.invoke(ctx)
    async for r in gen:
        if rtype(r) == "message.delta":
            break
    await gen.aclose()
    assert await server.wait_until_async(lambda: case.open_connections(server) == 0, timeout=5)
    await asyncio.sleep(0.05)
    stray = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not stray, stray
    if find(case.plugin).capabilities.get("interrupt") and case.cancel_seen:
        assert await server.wait_until_async(lambda: case.cancel_seen(server), timeout=3), "upstream task stopped"


async def test_declared_capabilities_hold(case, server, host):
    caps = find(case.plugin).capabilities
    if caps.get("multimodal_input"):
        case.answer(server, TOKENS, 0.0)
        contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG}]
        results = await run(make_runner(case.plugin, host), host, "what is this", config=case.config(server),
                            contents=contents)
        assert rtype(terminal(results)) == "run.completed"
        assert case.image_received is not None and case.image_received(server)
    assert caps.get("streaming") is True
    # steering runners are held to tests/contract/test_steering.py
    assert not caps.get("steering") or (caps.get("interrupt") and case.agent_pids is not None)


async def test_nothing_escapes_run_on_garbage_context_values(case, server, host):
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), case.base_url_key: "not a url"}
    code, _, _ = failure(await run(runner, host, config=cfg))
    assert code.startswith("config.") or code.startswith("upstream.")


async def test_sequential_runs_reuse_one_connection(case, server, host):
    """The shared client keeps the connection alive between runs (read to the end of each body)."""
    if case.agent_pids is not None:
        pytest.skip(f"{case.plugin} runs an agent process per run, which opens its own connections")
    case.answer(server, TOKENS, 0.0)
    runner = make_runner(case.plugin, host)
    for _ in range(5):
        assert rtype(terminal(await run(runner, host, config=case.config(server)))) == "run.completed"
    assert server.connections_accepted == 1
