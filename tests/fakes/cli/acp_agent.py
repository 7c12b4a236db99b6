"""A small scripted ACP agent in the shape of codex-acp, on the ``acp`` library (agent side).

Run as ``python -m tests.fakes.cli.acp_agent [-c key=value ...]`` (or by path). It takes its
model API like codex-acp: Codex ``-c`` overrides ``model_providers.<p>.base_url`` (an OpenAI
Responses base ending in ``/v1``), ``model_providers.<p>.env_key`` (the variable holding the key)
and ``model``, with ``model_provider = "<p>"``; it keeps its sessions under ``$CODEX_HOME/sessions``
(``$HOME`` when unset) so a resume in a new process works and an unknown id fails.

What it does like the real codex-acp (fixtures/real-peers/codex-acp):

- ``initialize``: protocol 1, ``loadSession``, ``promptCapabilities {image, embeddedContext}``,
  ``mcpCapabilities {http}``, ``sessionCapabilities {list, resume, close}``, codex-acp's
  ``authMethods``; ``session/new`` → a session id and the modes ``read-only``/``auto``/``full-access``
  (current ``full-access``); ``session/load`` replays the history as user/agent chunks,
  ``session/resume`` does not; an unknown id → ``-32002 Resource not found``.
- ``session/prompt``: the model-metadata warning as the first ``agent_message_chunk`` of the
  process, then the model's reasoning (``agent_thought_chunk``) and text (``agent_message_chunk``)
  delta by delta, a tool call (``tool_call`` kind ``execute`` with codex-acp's ``rawInput``, then
  ``tool_call_update`` with ``rawOutput``) run for real with ``bash -lc`` in the session's cwd —
  asking ``session/request_permission`` (options ``approved`` / ``approved-execpolicy-amendment``
  / ``abort``) unless the mode is ``full-access`` (before any ``session/set_mode``: only with
  ``-c approval_policy="untrusted"``, as codex-acp) or the program was approved with the
  amendment in this process (codex's execpolicy amendment); each answer is noted in
  ``FAKE_ACP_LOG`` (``permission``, with a deny reason sent in ``_meta.langbot.reason``, which also
  reaches the model in the tool output) —, ``usage_update {used, size}``, and the result
  ``{stopReason, usage}`` (usage only when the model reported it).
- model API errors → ``-32603 "Internal error"`` with ``data {message, codex_error_info}`` in the
  Codex core's wording (500: "We're currently experiencing high demand…"; 429: "exceeded retry
  limit, last status: 429 Too Many Requests"; other statuses: "unexpected status <s> <reason>:
  <message>, url: <url>"); a broken stream → "stream disconnected before completion: …".
- a tool command ``elicit {"message": …, "schema": {…}}`` (the test's stand-in for an agent that
  needs input) sends ``elicitation/create`` in form mode when the client advertised
  ``elicitation.form`` and feeds the answer (``{action, content}``) back as the tool output; without
  the capability the output says so. Each is noted in ``FAKE_ACP_LOG`` (``elicitation``).
- ``session/cancel`` stops the model call and kills the tool (its whole process group), and the
  prompt answers ``cancelled``.
- like codex-acp it does **not** exit on stdin EOF (``--exit-on-eof`` makes it, like the others).
- ``FAKE_ACP_NOISE=1`` prints a line that is not JSON on stdout first; ``FAKE_ACP_LOG=<file>``
  records cancels and mode switches; ``FAKE_ACP_STATE=<dir>`` moves the session store.

Every model request carries ``x-fake-agent-pid: <pid>``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pydantic

# build the protocol's ~300 pydantic models on first use, not at import: the agent starts in about
# two thirds of the time, which matters for the contract cells with a 3 s deadline
pydantic.BaseModel.model_config["defer_build"] = True

from acp import (  # noqa: E402
    PROTOCOL_VERSION,
    RequestError,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
    update_user_message_text,
)
from acp.schema import (  # noqa: E402
    AgentCapabilities,
    AuthMethodAgent,
    CurrentModeUpdate,
    ElicitationFormSessionMode,
    ElicitationSchema,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionModeResponse,
    Usage,
    UsageUpdate,
)


def _agent_id() -> int:
    """This process's identity for ``x-fake-agent-pid``: its pid, or, inside a PID namespace (the
    runners' sandbox, where every agent is pid 2), a random number that is as unique per process."""
    try:
        with open("/proc/1/cmdline", "rb") as fh:
            namespaced = b"bwrap" in fh.read()
    except OSError:
        namespaced = False
    return 10_000_000 + int.from_bytes(os.urandom(3), "big") if namespaced else os.getpid()


AGENT_ID = _agent_id()


WARNING = ("Model metadata for `{model}` not found. Defaulting to fallback metadata; this can degrade "
           "performance and cause issues.")
HIGH_DEMAND = "We're currently experiencing high demand, which may cause temporary errors."
CONTEXT_SIZE = 258400
MAX_LINE = 4 * 1024 * 1024
MODES = [
    SessionMode(id="read-only", name="Read Only", description="Codex can read files in the current workspace."),
    SessionMode(id="auto", name="Default", description="Codex can read and edit files in the workspace."),
    SessionMode(id="full-access", name="Full Access", description="Codex can edit files outside this workspace."),
]


def parse_overrides(argv: list[str]) -> dict[str, Any]:
    """``-c key=value`` pairs; values read as JSON (TOML basic strings, numbers, booleans) or text."""
    out: dict[str, Any] = {}
    it = iter(argv)
    for arg in it:
        if arg in ("-c", "--config"):
            key, _, raw = next(it, "").partition("=")
            try:
                out[key.strip()] = json.loads(raw)
            except ValueError:
                out[key.strip()] = raw.strip()
    return out


class StreamBroken(Exception):
    pass


class ModelError(Exception):
    def __init__(self, message: str, info: str | None):
        super().__init__(message)
        self.info = info


async def _http_lines(url: str, body: bytes, headers: dict[str, str]):
    """POST and yield the response's lines (after raising for an error status). Plain asyncio
    sockets, so a cancel stops it at once."""
    parts = urlsplit(url)
    try:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80, limit=MAX_LINE + 1024)
    except OSError as exc:
        raise StreamBroken(f"error sending request for url ({url}): {exc.strerror or exc}") from None
    try:
        head = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {parts.netloc}", "Connection: close",
                f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        status_line = await reader.readline()
        if not status_line:
            raise StreamBroken("stream disconnected before completion: connection closed before headers")
        status = int(status_line.split()[1])
        hdrs: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            k, _, v = line.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        chunked = "chunked" in hdrs.get("transfer-encoding", "")

        async def raw_body():
            if chunked:
                while True:
                    size_line = await reader.readline()
                    if not size_line:
                        raise StreamBroken("stream disconnected before completion: connection closed")
                    size = int(size_line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        return
                    yield await reader.readexactly(size)
                    await reader.readexactly(2)
            else:
                length = int(hdrs.get("content-length", "-1"))
                yield await (reader.readexactly(length) if length >= 0 else reader.read())

        if status >= 400:
            data = b"".join([c async for c in raw_body()])
            raise _status_error(status, data, url)
        buf = b""
        try:
            async for chunk in raw_body():
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if len(line) > MAX_LINE:
                        raise StreamBroken("stream disconnected before completion: event too large")
                    yield line.rstrip(b"\r")
                if len(buf) > MAX_LINE:
                    raise StreamBroken("stream disconnected before completion: event too large")
        except asyncio.IncompleteReadError:
            raise StreamBroken("stream disconnected before completion: connection closed mid-body") from None
        if buf:
            yield buf
    finally:
        writer.close()


def _status_error(status: int, data: bytes, url: str) -> ModelError:
    if status >= 500:
        return ModelError(HIGH_DEMAND, "internal_server_error")
    if status == 429:
        return ModelError("exceeded retry limit, last status: 429 Too Many Requests", "usage_limit_exceeded")
    message = data.decode("utf-8", "replace").strip()
    try:
        message = json.loads(data)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = message[:200]
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    info = "unauthorized" if status == 401 else "bad_request" if status == 400 else None
    return ModelError(f"unexpected status {status} {reason}: {message}, url: {url}", info)


class Session:
    def __init__(self, sid: str, cwd: str, items: list[dict[str, Any]] | None = None):
        self.id = sid
        self.cwd = cwd
        self.items: list[dict[str, Any]] = items or []
        self.mode = "full-access"
        self.mode_set = False  # session/set_mode was called (it overrides -c approval_policy)
        self.amended: set[str] = set()  # programs allowed by "approved-execpolicy-amendment"
        self.task: asyncio.Task[Any] | None = None
        self.tool: asyncio.subprocess.Process | None = None


class FakeCodexACP:
    def __init__(self, overrides: dict[str, Any]):
        provider = overrides.get("model_provider")
        self.base = overrides.get(f"model_providers.{provider}.base_url") if provider else None
        env_key = overrides.get(f"model_providers.{provider}.env_key") if provider else None
        self.key = os.environ.get(str(env_key), "") if env_key else os.environ.get("OPENAI_API_KEY", "")
        self.model = str(overrides.get("model") or "fake-model")
        self.approval = overrides.get("approval_policy")
        home = os.environ.get("CODEX_HOME") or os.environ.get("HOME") or "."
        self.store = Path(os.environ.get("FAKE_ACP_STATE") or Path(home) / "sessions")
        self.store.mkdir(parents=True, exist_ok=True)
        self.sessions: dict[str, Session] = {}
        self.warned = False
        self.conn: Any = None

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    @staticmethod
    def note(event: str, **fields: Any) -> None:
        """One line in ``$FAKE_ACP_LOG`` (for tests: what the agent was asked to do)."""
        path = os.environ.get("FAKE_ACP_LOG")
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n")

    # --- sessions ---

    def _save(self, s: Session) -> None:
        (self.store / f"{s.id}.json").write_text(json.dumps({"cwd": s.cwd, "items": s.items}))

    def _open(self, sid: str, cwd: str) -> Session:
        path = self.store / f"{sid}.json"
        if not path.is_file():
            raise RequestError.resource_not_found(sid)
        s = Session(sid, cwd, json.loads(path.read_text())["items"])
        self.sessions[sid] = s
        return s

    def _modes(self, s: Session) -> SessionModeState:
        return SessionModeState(current_mode_id=s.mode, available_modes=MODES)

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
                         **kw: Any) -> InitializeResponse:
        self.client_caps = client_capabilities
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(image=True, audio=False, embedded_context=True),
                mcp_capabilities=McpCapabilities(http=True, sse=False),
                session_capabilities=SessionCapabilities(list=SessionListCapabilities(),
                                                         resume=SessionResumeCapabilities()),
            ),
            auth_methods=[AuthMethodAgent(id="openai-api-key", name="Use OPENAI_API_KEY")],
            agent_info=Implementation(name="codex-acp", title="Codex", version="0.0.0-fake"),
        )

    async def authenticate(self, method_id: str, **kw: Any) -> None:
        if method_id != "openai-api-key":
            raise RequestError.invalid_params({"message": f"unknown auth method {method_id}"})

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kw: Any) -> NewSessionResponse:
        self.note("new_session", cwd=cwd, mcp=[{"name": m.name, "type": getattr(m, "type", "stdio"),
                                                 "headers": [h.name for h in getattr(m, "headers", None) or []]}
                                                for m in mcp_servers or []])
        s = Session(str(uuid.uuid4()), cwd)
        self.sessions[s.id] = s
        self._save(s)
        return NewSessionResponse(session_id=s.id, modes=self._modes(s))

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None, **kw: Any) -> LoadSessionResponse:
        s = self._open(session_id, cwd)
        for item in s.items:
            if item.get("type") == "message":
                text = "".join(c.get("text", "") for c in item.get("content", []) if isinstance(c, dict))
                update = update_user_message_text(text) if item.get("role") == "user" else update_agent_message_text(text)
                await self.conn.session_update(session_id=s.id, update=update)
        return LoadSessionResponse(modes=self._modes(s))

    async def resume_session(self, session_id: str, cwd: str, mcp_servers: Any = None, **kw: Any) -> ResumeSessionResponse:
        s = self._open(session_id, cwd)
        return ResumeSessionResponse(modes=self._modes(s))

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, **kw: Any) -> Any:
        raise RequestError.method_not_found("session/list")

    async def set_session_mode(self, session_id: str, mode_id: str, **kw: Any) -> SetSessionModeResponse:
        s = self.sessions.get(session_id)
        if s is None:
            raise RequestError.resource_not_found(session_id)
        if mode_id not in {m.id for m in MODES}:
            raise RequestError.invalid_params({"message": f"unknown mode {mode_id}"})
        s.mode = mode_id
        s.mode_set = True
        self.note("set_mode", session=session_id, mode=mode_id)
        await self.conn.session_update(session_id=s.id, update=CurrentModeUpdate(session_update="current_mode_update",
                                                                               current_mode_id=mode_id))
        return SetSessionModeResponse()

    # --- prompting ---

    async def prompt(self, session_id: str, prompt: list[Any], **kw: Any) -> PromptResponse:
        s = self.sessions.get(session_id)
        if s is None:
            raise RequestError.resource_not_found(session_id)
        content: list[dict[str, Any]] = []
        for block in prompt:
            if block.type == "text":
                content.append({"type": "input_text", "text": block.text})
            elif block.type == "image":
                content.append({"type": "input_image", "image_url": f"data:{block.mime_type};base64,{block.data}"})
            elif block.type == "resource_link":
                content.append({"type": "input_text", "text": f"[file: {block.uri}]"})
        s.items.append({"type": "message", "role": "user", "content": content})
        s.task = asyncio.current_task()
        try:
            usage = await self._run(s)
        except asyncio.CancelledError:
            await self._kill_tool(s)
            self._save(s)
            return PromptResponse(stop_reason="cancelled")
        except ModelError as exc:
            self._save(s)
            raise RequestError.internal_error({"message": str(exc), "codex_error_info": exc.info}) from None
        finally:
            s.task = None
        self._save(s)
        return PromptResponse(stop_reason="end_turn", usage=usage)

    async def _say(self, s: Session, update: Any) -> None:
        await self.conn.session_update(session_id=s.id, update=update)

    async def _run(self, s: Session) -> Usage | None:
        if not self.warned:
            self.warned = True
            await self._say(s, update_agent_message_text(WARNING.format(model=self.model)))
        total_in = total_out = 0
        seen_usage = False
        for _ in range(8):  # model calls in this turn
            text, calls, usage = await self._model(s)
            if usage:
                seen_usage = True
                total_in += int(usage.get("input_tokens") or 0)
                total_out += int(usage.get("output_tokens") or 0)
                await self._say(s, UsageUpdate(session_update="usage_update", used=total_in + total_out,
                                               size=CONTEXT_SIZE))
            if text:
                s.items.append({"type": "message", "role": "assistant",
                                "content": [{"type": "output_text", "text": text}]})
            if not calls:
                break
            for call in calls:
                await self._tool(s, call)
        if not seen_usage:
            return None
        return Usage(input_tokens=total_in, output_tokens=total_out, total_tokens=total_in + total_out)

    async def _model(self, s: Session) -> tuple[str, list[dict[str, Any]], dict[str, Any] | None]:
        if not self.base:
            raise ModelError("no model provider configured (set model_providers.<name>.base_url)", None)
        url = str(self.base).rstrip("/") + "/responses"
        body = json.dumps({"model": self.model, "stream": True, "input": s.items, "tools": [
            {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]}).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.key}",
                   "x-fake-agent-pid": str(AGENT_ID), "session-id": s.id,
                   "x-fake-agent-cwd": s.cwd}
        text: list[str] = []
        calls: list[dict[str, Any]] = []
        usage = None
        completed = False
        try:
            async for line in _http_lines(url, body, headers):
                if not line.startswith(b"data:"):
                    continue
                try:
                    data = json.loads(line[5:].decode("utf-8"))
                except UnicodeDecodeError:
                    raise StreamBroken("stream disconnected before completion: invalid utf-8 in event") from None
                except ValueError:
                    continue
                kind = data.get("type")
                if kind == "response.output_text.delta":
                    text.append(data["delta"])
                    await self._say(s, update_agent_message_text(data["delta"]))
                elif kind == "response.reasoning_summary_text.delta":
                    await self._say(s, update_agent_thought_text(data["delta"]))
                elif kind == "response.output_item.done" and data["item"].get("type") == "function_call":
                    calls.append(data["item"])
                elif kind == "response.failed":
                    err = (data.get("response") or {}).get("error") or {}
                    info = "internal_server_error" if err.get("code") == "server_error" else None
                    raise ModelError(str(err.get("message") or "response failed"), info)
                elif kind == "response.completed":
                    usage = (data.get("response") or {}).get("usage")
                    completed = True
        except StreamBroken as exc:
            raise ModelError(str(exc), "response_stream_disconnected") from None
        if not completed:
            raise ModelError("stream disconnected before completion: stream closed before response.completed",
                             "response_stream_disconnected")
        return "".join(text), calls, usage

    async def _tool(self, s: Session, call: dict[str, Any]) -> None:
        cmd = json.loads(call.get("arguments") or "{}").get("cmd", "")
        call_id = call.get("call_id") or call.get("id")
        raw_input = {"call_id": call_id, "command": ["/bin/bash", "-lc", cmd], "cwd": s.cwd,
                     "parsed_cmd": [{"type": "unknown", "cmd": cmd}]}
        s.items.append({"type": "function_call", "name": "exec_command", "call_id": call_id,
                        "arguments": call.get("arguments")})
        if cmd.startswith("elicit "):
            s.items.append({"type": "function_call_output", "call_id": call_id, "output": await self._elicit(s, call_id, cmd)})
            return
        allowed = True
        reason = None
        program = cmd.split()[0] if cmd.split() else ""
        asks = s.mode != "full-access" if s.mode_set else self.approval == "untrusted"
        if asks and program not in s.amended:
            answer = await self.conn.request_permission(
                session_id=s.id,
                tool_call=update_tool_call(call_id, title=cmd, kind="execute", status="pending", raw_input=raw_input),
                options=[PermissionOption(option_id="approved", name="Yes, proceed", kind="allow_once"),
                         PermissionOption(option_id="approved-execpolicy-amendment", name="Yes, and don't ask again",
                                          kind="allow_always"),
                         PermissionOption(option_id="abort", name="No", kind="reject_once")])
            outcome = answer.outcome
            allowed = getattr(outcome, "outcome", "") == "selected" and outcome.option_id.startswith("approved")
            meta = getattr(outcome, "field_meta", None) or {}
            reason = (meta.get("langbot") or {}).get("reason") if isinstance(meta.get("langbot"), dict) else None
            self.note("permission", session=s.id, command=cmd, outcome=getattr(outcome, "outcome", None),
                      option=getattr(outcome, "option_id", None), reason=reason)
            if allowed and outcome.option_id == "approved-execpolicy-amendment":
                s.amended.add(program)  # like codex's execpolicy amendment: this program is not asked again
        if not allowed:
            output = "rejected by user" + (f": {reason}" if reason else "")
            await self._say(s, start_tool_call(call_id, cmd, kind="execute", status="failed", raw_input=raw_input))
        else:
            await self._say(s, start_tool_call(call_id, cmd, kind="execute", status="in_progress", raw_input=raw_input))
            proc = s.tool = await asyncio.create_subprocess_exec(
                "/bin/bash", "-lc", cmd, cwd=s.cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True)
            out, _ = await proc.communicate()
            s.tool = None
            output = out.decode("utf-8", "replace")
            status = "completed" if proc.returncode == 0 else "failed"
            await self._say(s, update_tool_call(call_id, status=status, raw_output={
                "stdout": output, "exit_code": proc.returncode}, content=[]))
        s.items.append({"type": "function_call_output", "call_id": call_id, "output": output})

    async def _elicit(self, s: Session, call_id: str, cmd: str) -> str:
        spec = json.loads(cmd[len("elicit "):])
        elicitation = getattr(getattr(self, "client_caps", None), "elicitation", None)
        if elicitation is None or elicitation.form is None:
            self.note("elicitation", offered=False)
            return "the client does not take elicitation requests"
        answer = await self.conn.create_elicitation(
            message=spec["message"],
            mode=ElicitationFormSessionMode(session_id=s.id, tool_call_id=call_id,
                                            requested_schema=ElicitationSchema.model_validate(spec["schema"])))
        result = {"action": answer.action, "content": getattr(answer, "content", None)}
        self.note("elicitation", offered=True, **result)
        return json.dumps(result)

    async def _kill_tool(self, s: Session) -> None:
        proc = s.tool
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()

    async def cancel(self, session_id: str, **kw: Any) -> None:
        s = self.sessions.get(session_id)
        self.note("cancel", session=session_id, running=bool(s and s.task))
        if s is not None and s.task is not None:
            s.task.cancel()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


async def main(argv: list[str]) -> None:
    if os.environ.get("FAKE_ACP_NOISE"):  # a stray line on stdout, as npm wrappers and loggers print
        sys.stdout.write("npm notice: not a JSON-RPC message\n")
        sys.stdout.flush()
    await run_agent(FakeCodexACP(parse_overrides(argv)), use_unstable_protocol=True)
    if "--exit-on-eof" not in argv:
        await asyncio.Event().wait()  # like codex-acp: stdin EOF does not end it


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
