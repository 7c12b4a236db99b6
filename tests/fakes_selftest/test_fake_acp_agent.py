"""The scripted codex-acp-shaped ACP agent (tests/fakes/cli/acp_agent.py) behaves like the real one
where the runner relies on it: shapes, session store across processes, cancel, stdin EOF."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import AllowedOutcome, RequestPermissionResponse

from tests.fakes.model_api import FakeModelAPI

AGENT = Path(__file__).resolve().parents[1] / "fakes" / "cli" / "acp_agent.py"


class Recorder:
    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.permissions: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kw: Any):
        self.permissions.append((tool_call, options))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id="approved"))

    def texts(self, kind: str = "agent_message_chunk") -> list[str]:
        return [u.content.text for u in self.updates if u.session_update == kind]


@contextlib.asynccontextmanager
async def agent(api: FakeModelAPI, home: Path, *extra: str, scenario: str | None = None):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(AGENT), "-c", 'model_provider="fake"',
        "-c", f'model_providers.fake.base_url="{api.openai_base_url(scenario)}"',
        "-c", 'model_providers.fake.env_key="FAKE_KEY"', *extra,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        env={"PATH": os.environ["PATH"], "CODEX_HOME": str(home), "FAKE_KEY": api.api_key}, start_new_session=True)
    rec = Recorder()
    conn = ClientSideConnection(rec, proc.stdin, proc.stdout, use_unstable_protocol=True)
    try:
        yield proc, conn, rec
    finally:
        with contextlib.suppress(Exception):
            await conn.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


@pytest.fixture
def api():
    with FakeModelAPI() as srv:
        yield srv


async def test_initialize_new_session_and_a_prompt_look_like_codex_acp(api, tmp_path):
    async with agent(api, tmp_path) as (proc, conn, rec):
        init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert init.protocol_version == 1 and init.agent_capabilities.load_session
        assert init.agent_capabilities.session_capabilities.resume is not None
        assert init.agent_capabilities.prompt_capabilities.image
        new = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        assert new.modes.current_mode_id == "full-access"
        resp = await conn.prompt(session_id=new.session_id, prompt=[text_block("say hello")])
        assert resp.stop_reason == "end_turn" and resp.usage.output_tokens == 7
        texts = rec.texts()
        assert texts[0].startswith("Model metadata for `fake-model` not found.")
        assert "".join(texts[1:]) == "Hello from the fake model."
        assert any(u.session_update == "usage_update" for u in rec.updates)
        assert api.agent_pids() == [proc.pid]
        await conn.prompt(session_id=new.session_id, prompt=[text_block("again")])
        assert sum(t.startswith("Model metadata") for t in rec.texts()) == 1, "the warning comes once per process"


async def test_sessions_survive_the_process_and_unknown_ids_fail(api, tmp_path):
    async with agent(api, tmp_path) as (_, conn, _rec):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await conn.prompt(session_id=sid, prompt=[text_block("say hello")])
    async with agent(api, tmp_path) as (_, conn, rec):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        await conn.load_session(session_id=sid, cwd=str(tmp_path), mcp_servers=[])
        assert [u.session_update for u in rec.updates] == ["user_message_chunk", "agent_message_chunk"]
        await conn.resume_session(session_id=sid, cwd=str(tmp_path), mcp_servers=[])
        with pytest.raises(RequestError) as err:
            await conn.resume_session(session_id="no-such-session", cwd=str(tmp_path), mcp_servers=[])
        assert err.value.code == -32002
    assert len(api.model_requests()) == 1


async def test_a_tool_asks_permission_unless_full_access_and_runs_for_real(api, tmp_path):
    api.tool_command = "echo ran > proof.txt"
    async with agent(api, tmp_path) as (_, conn, rec):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await conn.set_session_mode(session_id=sid, mode_id="auto")
        await conn.prompt(session_id=sid, prompt=[text_block("run it")])
        assert [o.option_id for o in rec.permissions[0][1]] == ["approved", "approved-execpolicy-amendment", "abort"]
        kinds = [(u.session_update, getattr(u, "status", None)) for u in rec.updates
                 if u.session_update.startswith("tool_call")]
        assert kinds == [("tool_call", "in_progress"), ("tool_call_update", "completed")]
    assert (tmp_path / "proof.txt").read_text() == "ran\n"


async def test_cancel_answers_cancelled_and_kills_the_tool(api, tmp_path):
    api.tool_command = "sleep 30"
    async with agent(api, tmp_path) as (proc, conn, rec):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        prompt = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("sleep")]))
        for _ in range(100):
            if any(u.session_update == "tool_call" for u in rec.updates):
                break
            await asyncio.sleep(0.05)
        await conn.cancel(session_id=sid)
        resp = await asyncio.wait_for(prompt, 5)
        assert resp.stop_reason == "cancelled"
        from runner_kit.process import descendants

        assert not descendants(proc.pid), "the tool's shell is gone"


@pytest.mark.parametrize(("flag", "exits"), [((), False), (("--exit-on-eof",), True)])
async def test_stdin_eof_is_ignored_like_codex_acp_unless_asked(api, tmp_path, flag, exits):
    async with agent(api, tmp_path, *flag) as (proc, conn, _):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 1.5)
            exited = True
        except TimeoutError:
            exited = False
        assert exited is exits


async def test_model_errors_come_back_in_codex_words(api, tmp_path):
    async with agent(api, tmp_path, scenario="err429") as (_, conn, _):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        with pytest.raises(RequestError) as err:
            await conn.prompt(session_id=sid, prompt=[text_block("hi")])
        assert err.value.code == -32603 and "last status: 429" in err.value.data["message"]


def test_the_shapes_it_writes_by_hand_are_the_acp_librarys():
    """The agent builds its messages as JSON (importing the library's models cost a second a start):
    each must be what the library's own helpers dump, or the runner under test reads something no
    real agent sends."""
    from acp import (
        start_tool_call,
        update_agent_message_text,
        update_agent_thought_text,
        update_tool_call,
        update_user_message_text,
    )
    from acp.schema import (
        CurrentModeUpdate,
        InitializeResponse,
        PermissionOption,
        RequestPermissionRequest,
        SessionMode,
        ToolCallUpdate,
        UsageUpdate,
    )
    from acp.utils import serialize_params

    from tests.fakes.cli import acp_agent as fake

    def dumped(model: Any) -> Any:
        return model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)

    raw = {"call_id": "c1", "command": ["/bin/bash", "-lc", "ls"], "cwd": "/w", "parsed_cmd": []}
    pairs = [
        (fake.update_agent_message_text("hi"), update_agent_message_text("hi")),
        (fake.update_agent_thought_text("hm"), update_agent_thought_text("hm")),
        (fake.update_user_message_text("yo"), update_user_message_text("yo")),
        (fake.start_tool_call("c1", "ls", kind="execute", status="in_progress", raw_input=raw),
         start_tool_call("c1", "ls", kind="execute", status="in_progress", raw_input=raw)),
        (fake.update_tool_call("c1", status="completed", raw_output={"stdout": "x", "exit_code": 0}, content=[]),
         update_tool_call("c1", status="completed", raw_output={"stdout": "x", "exit_code": 0}, content=[])),
        (fake.mode_update("auto"), CurrentModeUpdate(session_update="current_mode_update", current_mode_id="auto")),
        (fake.usage_update(5, 9), UsageUpdate(session_update="usage_update", used=5, size=9)),
        (fake.MODES[0], SessionMode(id="read-only", name="Read Only",
                                    description="Codex can read files in the current workspace.")),
    ]
    for mine, theirs in pairs:
        assert mine == dumped(theirs)
    asked = {"sessionId": "s", "toolCall": fake._without_kind(fake.update_tool_call(
        "c1", title="ls", kind="execute", status="pending", raw_input=raw)),
        "options": [fake.permission_option("abort", "No", "reject_once")]}
    assert asked == serialize_params(RequestPermissionRequest(
        session_id="s", tool_call=ToolCallUpdate(tool_call_id="c1", title="ls", kind="execute", status="pending",
                                                 raw_input=raw),
        options=[PermissionOption(option_id="abort", name="No", kind="reject_once")]))
    init = InitializeResponse.model_validate(fake.INITIALIZE_RESULT)
    assert init.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True) == fake.INITIALIZE_RESULT
