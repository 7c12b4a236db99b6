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
  ``{stopReason, usage}`` (usage only when the model reported it, and never with
  ``FAKE_ACP_NO_RESULT_USAGE`` set: the real codex-acp 0.16.0 sends only ``usage_update``).
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

# The wire is written here as JSON (JSON-RPC 2.0, one message per line), not with the ``acp``
# library: importing its ~300 pydantic models took about a second of every agent start, and the
# test suite starts this agent hundreds of times. The runner under test still reads every message
# with the library's models, and tests/fakes_selftest/test_fake_acp_agent.py checks each shape
# below against the library's own helpers.
PROTOCOL_VERSION = 1


class RequestError(Exception):
    """A JSON-RPC error answer, with the ``acp`` library's codes and messages."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code, self.data = code, data

    def to_error_obj(self) -> dict[str, Any]:
        return {"code": self.code, "message": str(self), "data": self.data}

    @classmethod
    def method_not_found(cls, method: str) -> RequestError:
        return cls(-32601, "Method not found", {"method": method})

    @classmethod
    def invalid_params(cls, data: dict[str, Any] | None = None) -> RequestError:
        return cls(-32602, "Invalid params", data)

    @classmethod
    def internal_error(cls, data: dict[str, Any] | None = None) -> RequestError:
        return cls(-32603, "Internal error", data)

    @classmethod
    def resource_not_found(cls, uri: str | None = None) -> RequestError:
        return cls(-32002, "Resource not found", {"uri": uri} if uri is not None else None)


# --- the shapes this agent sends (camelCase, as the library's models dump them) --------------------


def _text_chunk(kind: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def update_agent_message_text(text: str) -> dict[str, Any]:
    return _text_chunk("agent_message_chunk", text)


def update_agent_thought_text(text: str) -> dict[str, Any]:
    return _text_chunk("agent_thought_chunk", text)


def update_user_message_text(text: str) -> dict[str, Any]:
    return _text_chunk("user_message_chunk", text)


def start_tool_call(call_id: str, title: str, *, kind: str, status: str, raw_input: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": title, "kind": kind, "status": status,
            "rawInput": raw_input}


def update_tool_call(call_id: str, *, title: str | None = None, kind: str | None = None, status: str | None = None,
                     raw_input: Any = None, raw_output: Any = None, content: list[Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"sessionUpdate": "tool_call_update", "toolCallId": call_id}
    for key, value in (("title", title), ("kind", kind), ("status", status), ("rawInput", raw_input),
                       ("rawOutput", raw_output), ("content", content)):
        if value is not None:
            out[key] = value
    return out


def _without_kind(update: dict[str, Any]) -> dict[str, Any]:
    """A tool call as a permission request carries it: the update without its ``sessionUpdate``."""
    return {k: v for k, v in update.items() if k != "sessionUpdate"}


def mode_update(mode_id: str) -> dict[str, Any]:
    return {"sessionUpdate": "current_mode_update", "currentModeId": mode_id}


def usage_update(used: int, size: int, cost: float | None = None) -> dict[str, Any]:
    """``cost``: the session's cumulative cost in USD (FAKE_ACP_COST per model call, counted from this
    process's start: an agent need not remember what earlier processes spent)."""
    out: dict[str, Any] = {"sessionUpdate": "usage_update", "used": used, "size": size}
    if cost is not None:
        out["cost"] = {"amount": round(cost, 6), "currency": "USD"}
    return out


def permission_option(option_id: str, name: str, kind: str) -> dict[str, Any]:
    return {"optionId": option_id, "name": name, "kind": kind}


def session_mode(mode_id: str, name: str, description: str) -> dict[str, Any]:
    return {"id": mode_id, "name": name, "description": description}


INITIALIZE_RESULT = {
    "protocolVersion": PROTOCOL_VERSION,
    "agentCapabilities": {
        "loadSession": True,
        "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": False},
        "sessionCapabilities": {"list": {}, "resume": {}},
    },
    "authMethods": [{"id": "openai-api-key", "name": "Use OPENAI_API_KEY"}],
    "agentInfo": {"name": "codex-acp", "title": "Codex", "version": "0.0.0-fake"},
}


class Connection:
    """The agent's end of the JSON-RPC line protocol: requests from the client run as tasks (a
    ``session/cancel`` arrives while a prompt runs), and the agent's own requests
    (``session/request_permission``, ``elicitation/create``) wait for their answers."""

    METHODS = {
        "initialize": "initialize", "authenticate": "authenticate", "session/new": "new_session",
        "session/load": "load_session", "session/resume": "resume_session", "session/list": "list_sessions",
        "session/set_mode": "set_session_mode", "session/prompt": "prompt",
    }
    NOTIFICATIONS = {"session/cancel": "cancel"}

    def __init__(self, agent: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.agent, self.reader, self.writer = agent, reader, writer
        self.next_id = 0
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.tasks: set[asyncio.Task[Any]] = set()

    async def send(self, message: dict[str, Any]) -> None:
        self.writer.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        await self.writer.drain()

    async def session_update(self, session_id: str, update: dict[str, Any]) -> None:
        await self.send({"method": "session/update", "params": {"sessionId": session_id, "update": update}})

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        rid = self.next_id
        self.waiting[rid] = asyncio.get_running_loop().create_future()
        try:
            await self.send({"id": rid, "method": method, "params": params})
            return await self.waiting[rid]
        finally:
            self.waiting.pop(rid, None)

    async def serve(self) -> None:
        """Read messages until stdin ends."""
        while line := await self.reader.readline():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            if "method" in msg:
                task = asyncio.create_task(self._handle(msg))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            elif (future := self.waiting.get(msg.get("id"))) is not None and not future.done():
                if "error" in msg:
                    err = msg["error"] or {}
                    future.set_exception(RequestError(err.get("code", -32603), err.get("message", ""), err.get("data")))
                else:
                    future.set_result(msg.get("result"))

    async def _handle(self, msg: dict[str, Any]) -> None:
        method, params, rid = msg["method"], msg.get("params") or {}, msg.get("id")
        if rid is None:  # a notification: no answer, whatever happens
            name = self.NOTIFICATIONS.get(method)
            if name is not None:
                try:
                    await getattr(self.agent, name)(params)
                except Exception:  # noqa: BLE001 - a notification has no one to tell
                    pass
            return
        answer: dict[str, Any] = {"id": rid}
        try:
            name = self.METHODS.get(method)
            if name is None:
                raise RequestError.method_not_found(method)
            answer["result"] = await getattr(self.agent, name)(params)
        except RequestError as exc:
            answer["error"] = exc.to_error_obj()
        except (KeyError, TypeError, AttributeError) as exc:  # params without a field the method needs
            answer["error"] = RequestError.invalid_params({"details": repr(exc)}).to_error_obj()
        except Exception as exc:  # noqa: BLE001 - as the library: any other failure is an internal error
            answer["error"] = RequestError.internal_error({"details": str(exc)}).to_error_obj()
        await self.send(answer)


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
    session_mode("read-only", "Read Only", "Codex can read files in the current workspace."),
    session_mode("auto", "Default", "Codex can read and edit files in the workspace."),
    session_mode("full-access", "Full Access", "Codex can edit files outside this workspace."),
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
        self.cost = 0.0  # cumulative, in this process (FAKE_ACP_COST)


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
        self.client_caps: dict[str, Any] = {}

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

    def _modes(self, s: Session) -> dict[str, Any]:
        return {"currentModeId": s.mode, "availableModes": MODES}

    async def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        self.client_caps = params.get("clientCapabilities") or {}
        return INITIALIZE_RESULT

    async def authenticate(self, params: dict[str, Any]) -> None:
        method_id = params.get("methodId")
        if method_id != "openai-api-key":
            raise RequestError.invalid_params({"message": f"unknown auth method {method_id}"})

    async def new_session(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = params["cwd"]
        self.note("new_session", cwd=cwd, mcp=[{"name": m.get("name"), "type": m.get("type", "stdio"),
                                                 "headers": [h.get("name") for h in m.get("headers") or []]}
                                                for m in params.get("mcpServers") or []])
        s = Session(str(uuid.uuid4()), cwd)
        self.sessions[s.id] = s
        self._save(s)
        return {"sessionId": s.id, "modes": self._modes(s)}

    async def load_session(self, params: dict[str, Any]) -> dict[str, Any]:
        s = self._open(params["sessionId"], params["cwd"])
        for item in s.items:
            if item.get("type") == "message":
                text = "".join(c.get("text", "") for c in item.get("content", []) if isinstance(c, dict))
                update = update_user_message_text(text) if item.get("role") == "user" else update_agent_message_text(text)
                await self.conn.session_update(s.id, update)
        return {"modes": self._modes(s)}

    async def resume_session(self, params: dict[str, Any]) -> dict[str, Any]:
        s = self._open(params["sessionId"], params["cwd"])
        return {"modes": self._modes(s)}

    async def list_sessions(self, params: dict[str, Any]) -> Any:
        raise RequestError.method_not_found("session/list")

    async def set_session_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id, mode_id = params.get("sessionId"), params.get("modeId")
        s = self.sessions.get(session_id)
        if s is None:
            raise RequestError.resource_not_found(session_id)
        if mode_id not in {m["id"] for m in MODES}:
            raise RequestError.invalid_params({"message": f"unknown mode {mode_id}"})
        s.mode = mode_id
        s.mode_set = True
        self.note("set_mode", session=session_id, mode=mode_id)
        await self.conn.session_update(s.id, mode_update(mode_id))
        return {}

    # --- prompting ---

    async def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = params.get("sessionId")
        s = self.sessions.get(session_id)
        if s is None:
            raise RequestError.resource_not_found(session_id)
        content: list[dict[str, Any]] = []
        for block in params.get("prompt") or []:
            if block.get("type") == "text":
                content.append({"type": "input_text", "text": block["text"]})
            elif block.get("type") == "image":
                content.append({"type": "input_image", "image_url": f"data:{block['mimeType']};base64,{block['data']}"})
            elif block.get("type") == "resource_link":
                content.append({"type": "input_text", "text": f"[file: {block['uri']}]"})
        s.items.append({"type": "message", "role": "user", "content": content})
        s.task = asyncio.current_task()
        try:
            usage = await self._run(s)
        except asyncio.CancelledError:
            await self._kill_tool(s)
            self._save(s)
            return {"stopReason": "cancelled"}
        except ModelError as exc:
            self._save(s)
            raise RequestError.internal_error({"message": str(exc), "codex_error_info": exc.info}) from None
        finally:
            s.task = None
        self._save(s)
        if os.environ.get("FAKE_ACP_NO_RESULT_USAGE"):  # as the real codex-acp 0.16.0: usage_update only
            usage = None
        return {"stopReason": "end_turn", **({"usage": usage} if usage else {})}

    async def _say(self, s: Session, update: dict[str, Any]) -> None:
        await self.conn.session_update(s.id, update)

    async def _run(self, s: Session) -> dict[str, Any] | None:
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
                per_call = os.environ.get("FAKE_ACP_COST")
                if per_call:
                    s.cost += float(per_call)
                await self._say(s, usage_update(total_in + total_out, CONTEXT_SIZE, s.cost if per_call else None))
            if text:
                s.items.append({"type": "message", "role": "assistant",
                                "content": [{"type": "output_text", "text": text}]})
            if not calls:
                break
            for call in calls:
                await self._tool(s, call)
        if not seen_usage:
            return None
        return {"inputTokens": total_in, "outputTokens": total_out, "totalTokens": total_in + total_out}

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
            answer = await self.conn.request("session/request_permission", {
                "sessionId": s.id,
                "toolCall": _without_kind(update_tool_call(call_id, title=cmd, kind="execute", status="pending",
                                                           raw_input=raw_input)),
                "options": [permission_option("approved", "Yes, proceed", "allow_once"),
                            permission_option("approved-execpolicy-amendment", "Yes, and don't ask again",
                                              "allow_always"),
                            permission_option("abort", "No", "reject_once")]})
            outcome = (answer or {}).get("outcome") or {}
            option = outcome.get("optionId")
            allowed = outcome.get("outcome") == "selected" and str(option).startswith("approved")
            meta = outcome.get("_meta") or {}
            reason = (meta.get("langbot") or {}).get("reason") if isinstance(meta.get("langbot"), dict) else None
            self.note("permission", session=s.id, command=cmd, outcome=outcome.get("outcome"), option=option,
                      reason=reason)
            if allowed and option == "approved-execpolicy-amendment":
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
        elicitation = self.client_caps.get("elicitation") if isinstance(self.client_caps, dict) else None
        if not isinstance(elicitation, dict) or elicitation.get("form") is None:
            self.note("elicitation", offered=False)
            return "the client does not take elicitation requests"
        answer = await self.conn.request("elicitation/create", {
            "sessionId": s.id, "toolCallId": call_id, "message": spec["message"], "mode": "form",
            "requestedSchema": spec["schema"]}) or {}
        result = {"action": answer.get("action"), "content": answer.get("content")}
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

    async def cancel(self, params: dict[str, Any]) -> None:
        session_id = params.get("sessionId")
        s = self.sessions.get(session_id)
        self.note("cancel", session=session_id, running=bool(s and s.task))
        if s is not None and s.task is not None:
            s.task.cancel()


async def _stdio() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE * 16)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def main(argv: list[str]) -> None:
    if os.environ.get("FAKE_ACP_NOISE"):  # a stray line on stdout, as npm wrappers and loggers print
        sys.stdout.write("npm notice: not a JSON-RPC message\n")
        sys.stdout.flush()
    agent = FakeCodexACP(parse_overrides(argv))
    reader, writer = await _stdio()
    agent.conn = Connection(agent, reader, writer)
    await agent.conn.serve()
    if "--exit-on-eof" not in argv:
        await asyncio.Event().wait()  # like codex-acp: stdin EOF does not end it


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
