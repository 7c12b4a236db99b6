"""TboxAgent and the ends of a conversation (issue 33 items 14, 15). Tbox's API (tboxsdk 0.0.12,
the latest: ``tbox.py`` TboxClient offers chat, completion, conversation create/list, messages,
file upload, datasets and plugins) has no call to stop an answer or to delete or end a
conversation: a stop closes the connection, a LangBot reset just starts a new Tbox conversation.
Tbox sends no keep-alives, but its gateway cuts an answer off after about 90 s
(shared docs platforms.md §6 Errors), so the default idle timeout (180 s) never ends a working
answer and still ends a dead connection when the run's own time limit is long or off."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from tests.helpers import failure, final_text, rtype, run, state_updates, terminal
from tests.plugins.test_tbox_agent import KEY, SESSION, cfg, tbox_fake  # noqa: F401 - tbox_fake: the srv fixture

PLUGIN = "tbox-agent"  # tests/plugins/conftest.py: the host and runner fixtures
GATEWAY_CUT = 90.0  # seconds after which Tbox's gateway was seen cutting an answer off
SCALE = 0.005  # the default idle timeout and the gateway's cut, both scaled to milliseconds


async def test_a_reset_starts_a_new_tbox_conversation_and_asks_tbox_nothing_else(srv, host, runner):
    old = state_updates(await run(runner, host, "one", config=cfg(srv)))[SESSION]
    await run(runner, host, "two", config=cfg(srv))
    host.reset_conversation()
    third = await run(runner, host, "three", config=cfg(srv))
    assert rtype(terminal(third)) == "run.completed"
    await asyncio.sleep(0.1)
    assert [r.path for r in srv.requests] == ["/api/chat"] * 3, "Tbox has no call to end a conversation"
    assert [r.json().get("conversationId") for r in srv.chat_requests()] == [None, old, None]
    assert state_updates(third)[SESSION] != old and old in srv.conversations


async def test_a_stop_closes_the_connection_and_calls_nothing_else(srv, host, runner):
    srv.fault = "stall"
    srv.stall_seconds = 30
    results = await run(runner, host, config=cfg(srv, timeout=1))
    assert failure(results)[0] == "upstream.timeout"
    assert await srv.wait_until_async(lambda: srv.client_disconnects >= 1, timeout=3), "the answer was walked away from"
    await asyncio.sleep(0.1)
    assert [r.path for r in srv.requests] == ["/api/chat"], "Tbox has no stop call"


@pytest.fixture
def scaled_default(runner, monkeypatch):
    fields = type(runner).schema.fields
    field = fields["idle-timeout"]
    monkeypatch.setitem(fields, "idle-timeout", dataclasses.replace(field, default=field.default * SCALE))
    return field.default * SCALE


def test_the_default_idle_timeout_is_twice_the_gateways_cut(runner):
    assert type(runner).schema.fields["idle-timeout"].default == 2 * GATEWAY_CUT


async def test_a_silence_as_long_as_tbox_ever_keeps_does_not_end_the_answer(srv, host, runner, scaled_default):
    srv.fault = "stall"  # silent after the first piece, as long as the gateway lets an answer run
    srv.stall_seconds = GATEWAY_CUT * SCALE
    results = await run(runner, host, config=cfg(srv, timeout=0))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "Hello from Tbox."


async def test_a_dead_connection_is_given_up_on_by_the_default_idle_timeout_even_without_a_time_limit(
        srv, host, runner, scaled_default):
    srv.fault = "stall"
    srv.stall_seconds = 30
    started = time.monotonic()
    results = await run(runner, host, config=cfg(srv, timeout=0))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.timeout", True)
    assert f"{scaled_default:g} s" in message and "nothing" in message, message
    assert time.monotonic() - started < 5, "not the 24 h of no time limit"
