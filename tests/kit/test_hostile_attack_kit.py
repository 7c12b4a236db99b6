"""A member who is not benign, against the kit changes since d6750e7: the "nothing answers at that
address" chat line (runner_kit.http), agents' interrupt signals reset when the plugin ignores them
(runner_kit.process), and the end-of-run cleanup that goes on after the run (runner_kit.runner)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time

import httpx
import pytest

from runner_kit import events as ev
from runner_kit import runner as rk
from runner_kit.config import ConfigSchema
from runner_kit.errors import RunnerError
from runner_kit.http import close_shared_client, transport_error
from runner_kit.netguard import FETCH_ALLOW_ENV, fetch
from runner_kit.process import AgentProcess, alive, child_env
from runner_kit.runner import Adapter
from tests.fakes.http_server import closed_port
from tests.helpers import collect, dump, fake_dns, messages, rtype, scripted_runner

PASSWORD = "S3cr3t-pw"
SECRET = "sk-attack-secret-77"


@pytest.fixture(autouse=True)
async def _close_client():
    yield
    await close_shared_client()


# --- (a) the chat line for an address where nothing answers -----------------------------------


async def test_a_members_link_to_a_closed_port_shows_no_password_no_address_no_port(monkeypatch):
    """A member's link with a password, to a name (allowed by the admin) that resolves to loopback where
    nothing listens: the failure names the link's host only, never its password, the internal address
    it resolved to, or the port (no port-by-port oracle on what the plugin's network reaches)."""
    port = closed_port()
    monkeypatch.setenv(FETCH_ALLOW_ENV, "files.example")
    fake_dns(monkeypatch, {"files.example": "127.0.0.1"})
    with pytest.raises(RunnerError) as err:
        await fetch(f"http://alice:{PASSWORD}@files.example:{port}/a.png?token=tkn-123", label="'a.png'",
                    max_bytes=1 << 20, budget=3.0)
    said = str(err.value)
    assert err.value.code == "input.unreadable" and "files.example" in said, said
    for leak in (PASSWORD, "alice", "127.0.0.1", str(port), "tkn-123"):
        assert leak not in said, (leak, said)
    assert getattr(err.value, "chat", None) is None  # the owner-facing "check the AI settings" line is not used


SCHEMA = ConfigSchema.from_items([
    {"name": "api-key", "type": "secret", "default": SECRET},
    {"name": "timeout", "type": "float", "default": 60},
])


class NoHost(Adapter):
    """An upstream at a per-tenant host that carries the key (``<key>.tenant.example``), whose name does
    not resolve: the kit's own transport_error, as open_stream raises it."""

    platform = "Tenant"

    async def stream(self):
        exc = httpx.ConnectError("[Errno -2] Name or service not known")
        exc.__cause__ = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        raise transport_error(exc, self.platform, f"{SECRET}.tenant.example:443")
        yield  # pragma: no cover


async def test_the_unanswered_address_chat_line_passes_the_runs_redactor():
    r, host, _ = scripted_runner(NoHost, SCHEMA)
    results = await collect(r, host, host.make_context("hi"))
    shown = "\n".join(messages(results))
    assert "tenant.example" in shown and "AI settings" in shown, shown
    assert SECRET not in dump(results), shown


# --- (b) interrupt signals reset for agents ----------------------------------------------------


async def test_with_sigint_ignored_the_agent_can_be_interrupted_and_its_detached_tool_still_dies(tmp_path):
    """The plugin runs with SIGINT ignored; the agent gets it back (not ignored), a member's tool
    detaches (setsid) and the agent then dies of SIGINT: stop still kills the detached tool."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        script = ("grep SigIgn /proc/self/status; setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $!; "
                  "sleep 0.2; kill -INT $$; sleep 60")
        proc = await AgentProcess.spawn(["sh", "-c", script], cwd=tmp_path, env=child_env(), name="agent", stdin=False)
    finally:
        signal.signal(signal.SIGINT, old)
    ign = int((await asyncio.wait_for(proc.reader.readline(), 5)).split()[-1], 16)
    tool = int(await asyncio.wait_for(proc.reader.readline(), 5))
    assert not ign & (1 << (signal.SIGINT - 1)), "the agent still ignores SIGINT"
    assert not ign & (1 << (signal.SIGQUIT - 1)), "the agent still ignores SIGQUIT"
    deadline = time.monotonic() + 5
    while alive(proc.pid) and time.monotonic() < deadline:  # noqa: ASYNC110 - a pid, not an event
        await asyncio.sleep(0.05)
    assert not alive(proc.pid), "the agent was not killed by its SIGINT"
    assert alive(tool)
    await proc.stop(grace=0.5)
    await asyncio.sleep(0.1)
    try:
        assert not alive(tool), "the detached tool outlived the agent and its stop"
    finally:
        if alive(tool):
            os.kill(tool, signal.SIGKILL)


# --- (c) the cleanup after the run -------------------------------------------------------------


TURN_SCHEMA = ConfigSchema.from_items([{"name": "timeout", "type": "float", "default": 60}])


class StuckClose(Adapter):
    """A live agent session whose close never returns (an agent that no longer answers its shutdown)."""

    platform = "Stuck"
    session_key = "stuck.session"
    multi_turn = True
    closes: list = []

    async def turn(self, inp, index):
        yield ev.Text(f"answer to {inp.text}")

    async def interrupt(self):
        pass

    async def cancel(self):
        pass

    async def close(self):
        type(self).closes.append(time.monotonic())
        await asyncio.sleep(3600)


async def test_a_session_whose_close_hangs_still_answers_the_next_message(monkeypatch):
    monkeypatch.setattr(rk, "CLOSE_GRACE", 0.5, raising=False)  # a bound on close, once there is one, kept short
    r, host, cls = scripted_runner(StuckClose, TURN_SCHEMA, closes=[])
    first = host.make_context("one", steering=True, deadline_at=time.time() + 2.0, surface="api")
    start = time.monotonic()
    results = await collect(r, host, first)
    assert time.monotonic() - start < 2.0 and rtype(results[-1]) == "run.completed"
    assert cls.closes, "close was called"
    second = host.make_context("two", steering=True, deadline_at=time.time() + 4.0, surface="api")
    try:
        later = await asyncio.wait_for(collect(r, host, second), 6)
    finally:
        for task in list(rk._CLEANUPS):
            task.cancel()
    assert "answer to two" in "\n".join(messages(later)), dump(later)
