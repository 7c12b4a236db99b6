"""LicosAgent and the ends of a conversation (issue 33 items 14, 15): a LangBot reset deletes the
managed LICOS session it left behind (the legacy protocol has none to delete); the default idle
timeout outlasts LICOS's keep-alives (legacy) and a slow tool (managed, whose run the plugin asks
about meanwhile), and gives up on a LICOS that sends nothing at all."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from runners_cli.host import Identity
from tests.helpers import failure, final_text, rtype, run, state_updates, stored_key, terminal
from tests.plugins.test_licos_agent import (  # noqa: F401 - the srv and msrv fixtures, as test_licos_agent has them
    TOKEN,
    cfg,
    licos_fake,
    licos_managed_fake,
    mcfg,
)

PLUGIN = "licos-agent"  # tests/plugins/conftest.py: the host and runner fixtures
SESSION = stored_key("licos.session_id")
ALICE = Identity(actor_id="alice", actor_name="Alice")
BOB = Identity(actor_id="bob", actor_name="Bob")
# licos-agent-runtime 0.6.33 stream_runner.py RunOpt.workflow_ping_interval_seconds (30.0), used by
# service.py _stream_sse_agent_platform for the legacy /stream_run: ": ping" after that long quiet
PING_INTERVAL = 30.0
SCALE = 0.01  # the default idle timeout and LICOS's ping interval, both scaled to milliseconds


async def settled(srv, n, wait=2.0):
    """The DELETE requests so far, once ``n`` arrived (the end call comes after the run)."""
    await srv.wait_until_async(lambda: len(srv.find_requests("DELETE")) >= n, timeout=wait)
    return srv.find_requests("DELETE")


# --- reset ------------------------------------------------------------------------------------------


async def test_a_reset_deletes_the_old_managed_session_and_the_next_message_starts_a_new_one(msrv, host, runner):
    msrv.memory, msrv.echo_memory = "session", True
    first = await run(runner, host, "my name is Ada", config=mcfg(msrv))
    old = state_updates(first)[SESSION]
    await run(runner, host, "still there?", config=mcfg(msrv))
    assert msrv.find_requests("DELETE") == []
    host.reset_conversation()
    second = await run(runner, host, "who am I?", config=mcfg(msrv))
    assert rtype(terminal(second)) == "run.completed"
    assert final_text(second) == "You said before: nothing.", "the new session starts empty"
    (delete,) = await settled(msrv, 1)
    assert delete.path == f"/agent/v1/sessions/{old}"
    assert delete.headers["authorization"] == f"Bearer {TOKEN}"
    assert delete.headers["x-licos-current-user-id"] == "user_u-1"
    assert msrv.deleted_sessions == [old] and old not in msrv.sessions
    new = state_updates(second)[SESSION]
    assert new != old and [r.session_id for r in msrv.runs] == [old, old, new]
    await run(runner, host, "and now?", config=mcfg(msrv))
    await asyncio.sleep(0.05)
    assert msrv.deleted_sessions == [old], "deleted once"


async def test_in_a_group_each_members_session_is_deleted_when_that_member_writes(msrv, host, runner):
    a = state_updates(await run(runner, host, "hi", identity=ALICE, config=mcfg(msrv)))[stored_key("licos.session_id", ALICE)]
    b = state_updates(await run(runner, host, "hi", identity=BOB, config=mcfg(msrv)))[stored_key("licos.session_id", BOB)]
    host.reset_conversation(ALICE)
    await run(runner, host, "again", identity=ALICE, config=mcfg(msrv))
    await settled(msrv, 1)
    assert msrv.deleted_sessions == [a] and b in msrv.session_owners
    await run(runner, host, "me too", identity=BOB, config=mcfg(msrv))
    await settled(msrv, 2)
    assert msrv.deleted_sessions == [a, b]


async def test_a_session_waiting_for_approval_is_kept_and_the_chat_goes_on(msrv, host, runner):
    """LICOS refuses to delete a session whose run is unfinished (409): it stays for whoever decides
    the approval on the service; the next message is answered in a new session all the same."""
    msrv.approval = True
    first = await run(runner, host, "weather?", config=mcfg(msrv))
    old = state_updates(first)[SESSION]
    msrv.approval = False
    host.reset_conversation()
    second = await run(runner, host, "hello again", config=mcfg(msrv))
    assert final_text(second) == "Hello from the fake model."
    (delete,) = await settled(msrv, 1)
    assert delete.path == f"/agent/v1/sessions/{old}"
    assert msrv.deleted_sessions == [] and old in msrv.session_owners


async def test_a_session_licos_no_longer_has_is_left_at_that(msrv, host, runner):
    await run(runner, host, "one", config=mcfg(msrv))
    msrv.session_owners.clear()  # deleted on the service meanwhile
    host.reset_conversation()
    second = await run(runner, host, "two", config=mcfg(msrv))
    assert final_text(second) == "Hello from the fake model.", "nothing about it in the chat"
    await settled(msrv, 1)
    assert msrv.deleted_sessions == []


async def test_the_legacy_protocol_has_no_session_to_delete(srv, host, runner):
    await run(runner, host, "one", config=cfg(srv))
    host.reset_conversation()
    await run(runner, host, "two", config=cfg(srv))
    await asyncio.sleep(0.1)
    assert srv.find_requests("DELETE") == []
    a, b = [r.session_id for r in srv.runs]
    assert a != b, "the reset starts a new session"


# --- liveness ---------------------------------------------------------------------------------------


@pytest.fixture
def scaled_default(runner, monkeypatch):
    """The runner's own idle-timeout default, scaled like the fake's timings, applied the way a
    binding without advanced settings gets it."""
    fields = type(runner).schema.fields
    field = fields["idle-timeout"]
    monkeypatch.setitem(fields, "idle-timeout", dataclasses.replace(field, default=field.default * SCALE))
    return field.default * SCALE


def test_the_default_idle_timeout_is_three_missed_keepalives(runner):
    default = type(runner).schema.fields["idle-timeout"].default
    assert default == 3 * PING_INTERVAL


async def test_legacy_a_slow_tool_outlives_the_default_idle_timeout_on_keepalives(srv, host, runner, scaled_default):
    srv.ping_interval = PING_INTERVAL * SCALE
    srv.tool_call = True
    srv.tool_seconds = 3 * scaled_default
    results = await run(runner, host, "weather?", config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "Hello from the fake model."


async def test_legacy_a_stuck_service_is_given_up_on_by_the_default_idle_timeout(srv, host, runner, scaled_default):
    srv.ping_interval = 0  # its event loop is stuck: not even a keep-alive
    srv.fault = "stall"
    started = time.monotonic()
    results = await run(runner, host, config=cfg(srv))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.timeout", True)
    assert f"{scaled_default:g} s" in message and "nothing" in message, message
    assert time.monotonic() - started < 5, "ended by the idle timeout, not the run's time limit"


async def test_managed_a_slow_tool_outlives_the_default_idle_timeout(msrv, host, runner, scaled_default):
    """The managed stream is silent while the tool runs; LICOS reports the run running meanwhile."""
    msrv.tool_call = True
    msrv.tool_seconds = 3 * scaled_default
    results = await run(runner, host, "weather?", config=mcfg(msrv))
    assert rtype(terminal(results)) == "run.completed", failure(results) if rtype(terminal(results)) != "run.completed" else ""
    assert final_text(results) == "Hello from the fake model."
    asked = msrv.find_requests("GET", f"/agent/v1/runs/{msrv.runs[0].run_id}")
    assert asked and asked[0].headers["authorization"] == f"Bearer {TOKEN}"


async def test_managed_a_tool_on_a_service_that_stopped_answering_is_given_up_on(msrv, host, runner, scaled_default):
    msrv.tool_call = True
    msrv.tool_seconds = 30
    msrv.hang_status = True
    started = time.monotonic()
    code, retryable, message = failure(await run(runner, host, "weather?", config=mcfg(msrv)))
    assert (code, retryable) == ("upstream.timeout", True) and "nothing" in message, message
    assert time.monotonic() - started < 5


async def test_managed_silence_outside_a_tool_is_given_up_on_without_asking(msrv, host, runner, scaled_default):
    msrv.fault = "stall"  # the model stops after its first token
    started = time.monotonic()
    results = await run(runner, host, config=mcfg(msrv))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.timeout", True) and f"{scaled_default:g} s" in message, message
    assert time.monotonic() - started < 5
    assert msrv.find_requests("GET", f"/agent/v1/runs/{msrv.runs[0].run_id}") == [], "no tool was running"
