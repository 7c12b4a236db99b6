#!/usr/bin/env python3
"""A scripted ``claude`` (Claude Code CLI 2.1.197) for tests: same flags, same stream-json lines.

It gets its answers from an Anthropic Messages API at ``$ANTHROPIC_BASE_URL`` (the shared
``tests/fakes/model_api.py``), exactly as the real CLI does: a ``HEAD <base>`` probe, then
``POST <base>/v1/messages?beta=true`` with ``stream: true``, ``x-api-key`` (or ``Authorization:
Bearer`` from ``ANTHROPIC_AUTH_TOKEN``), ``x-claude-code-session-id``, the ``ANTHROPIC_CUSTOM_HEADERS``
(``Name: Value`` lines) and, for the tests, ``x-fake-agent-pid: <pid>``. Stdlib only so it starts fast.

What it reproduces from the real transcripts (``shared/fixtures/real-peers/claude/``):
- ``system/init`` at the start of every turn; with ``--include-partial-messages`` a
  ``system/status`` "requesting" and one ``stream_event`` per SSE event, the complete ``assistant``
  line (one per content block, usage from message_start with ``output_tokens: 1``) just before the
  block's ``content_block_stop``; ``user`` tool_result lines; ``result`` with summed usage;
- a failed API call: ``system/api_retry`` per retry (``CLAUDE_CODE_MAX_RETRIES``, default 10), then a
  ``<synthetic>`` ``assistant`` line whose text is the error and whose ``error`` is set, then
  ``result`` with ``subtype: success``, ``is_error: true`` and ``api_error_status``; exit code 1;
- a body that is not a valid stream: ``API Error: API returned an empty or malformed response
  (HTTP 200) …`` with ``api_error_status: null``;
- sessions in ``$HOME/.claude/projects/<cwd with / -> ->/<id>.jsonl``: ``--resume`` of an unknown id
  prints ``No conversation found with session ID: …`` (stderr and ``result.errors``, rc 1);
  ``--session-id`` of an existing one prints ``Error: Session ID … is already in use.`` (rc 1);
- ``--input-format stream-json``: several turns per process, exit 0 on end of input; the control
  request ``interrupt`` answered with a ``control_response`` and the turn ends with ``result``
  ``error_during_execution``; SIGINT kills the running tool and ends with the same result (rc 1);
  SIGTERM exits 143 at once and leaves a running tool alive (its shell is in its own session);
- Bash tool calls run for real (``/bin/bash -c`` in the cwd, own session) under the permission mode:
  ``plan`` refuses every command, ``default`` runs read-only commands, ``acceptEdits`` also file
  edits, ``bypassPermissions`` anything (as root only with ``IS_SANDBOX=1``); refusals are
  ``tool_result`` errors listed in ``result.permission_denials``;
- ``--permission-prompt-tool stdio``: a command the mode does not allow is asked on the control
  channel, ``{"type":"control_request","request_id":…,"request":{"subtype":"can_use_tool",
  "tool_name":"Bash","input":{…},"permission_suggestions":[addRules Bash(<program>:*) localSettings,
  addDirectories cwd session, setMode acceptEdits session],"tool_use_id":…}}`` (2.1.197's shape;
  its own addRules names the whole command), and waits for the ``control_response`` with that request id: ``behavior``
  ``allow`` runs ``updatedInput`` (``updatedPermissions`` rules are kept for the process, so the
  next such command is not asked), ``deny`` makes its ``message`` the tool_result error text.
  Every answer is appended to ``$FAKE_CLAUDE_ANSWERS`` (a file) when that is set.

Test knobs (environment): ``FAKE_CLAUDE_NOISE=1`` prints a line that is not JSON and a JSON line of
an unknown type before each turn's init; ``FAKE_CLAUDE_CRASH=1`` writes a stderr line and exits 3
right after the first model call's first event (a crash mid-stream).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit


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


VERSION = "2.1.197"
TOOLS = ["Task", "Bash", "Edit", "Read", "Write", "WebFetch", "WebSearch"]
READ_ONLY = {"echo", "ls", "cat", "pwd", "true", "head", "tail", "grep", "wc", "sleep", "date", "whoami"}
EDITS = {"touch", "mkdir", "cp", "mv", "tee", "rm"}
MALFORMED = ("API Error: API returned an empty or malformed response (HTTP 200) — check for a proxy or "
             "gateway intercepting the request")
REJECTED = ("The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a "
            "file edit, the new_string was NOT written to the file). STOP what you are doing and wait for the "
            "user to tell you how to proceed.")

_out_lock = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def die(message: str, rc: int = 1) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(rc)


# --- arguments -----------------------------------------------------------------------------------

FLAGS_WITH_VALUE = {
    "--output-format", "--input-format", "--session-id", "--resume", "-r", "--model", "--permission-mode",
    "--allowedTools", "--allowed-tools", "--disallowedTools", "--disallowed-tools", "--append-system-prompt",
    "--system-prompt", "--max-turns", "--permission-prompt-tool", "--mcp-config", "--add-dir", "--settings", "--fallback-model",
}


def parse_args(argv: list[str]) -> tuple[dict[str, str], set[str], list[str]]:
    opts: dict[str, str] = {}
    flags: set[str] = set()
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in FLAGS_WITH_VALUE:
            if i + 1 >= len(argv):
                die(f"error: option '{a}' argument missing")
            opts[a.replace("-allowed-tools", "-allowedTools").replace("-disallowed-tools", "-disallowedTools")] = argv[i + 1]
            i += 2
            continue
        if a.startswith("-"):
            flags.add(a)
        else:
            rest.append(a)
        i += 1
    return opts, flags, rest


# --- sessions ------------------------------------------------------------------------------------


def session_path(session_id: str) -> str:
    home = os.environ.get("HOME") or "/tmp"
    slug = os.getcwd().replace("/", "-")
    return os.path.join(home, ".claude", "projects", slug, f"{session_id}.jsonl")


def load_history(session_id: str) -> list[dict[str, Any]] | None:
    path = session_path(session_id)
    if not os.path.exists(path):
        return None
    messages = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                messages.append(json.loads(line))
    return messages


def save_message(session_id: str, message: dict[str, Any]) -> None:
    path = session_path(session_id)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(message, ensure_ascii=False) + "\n")


# --- the model API -------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status: int | None, text: str, kind: str):
        super().__init__(text)
        self.status = status
        self.text = text
        self.kind = kind  # the assistant line's "error" value


def _error_message(status: int, body: bytes) -> ApiError:
    detail = ""
    try:
        doc = json.loads(body)
        detail = str((doc.get("error") or {}).get("message") or "")
    except (ValueError, AttributeError):
        detail = body[:200].decode("utf-8", "replace").strip()
    if status == 401:
        return ApiError(401, "Invalid API key · Fix external API key", "authentication_failed")
    if status == 403:
        return ApiError(403, f"Failed to authenticate. API Error: 403 {detail}", "authentication_failed")
    if status == 429:
        return ApiError(429, f"API Error: Request rejected (429) · {detail}", "rate_limit")
    if status >= 500:
        return ApiError(status, f"API Error: {status} {detail}. This is a server-side issue, usually temporary — "
                                "try again in a moment.", "server_error")
    return ApiError(status, f"API Error: {status} {detail}", "invalid_request")


class ModelCall(threading.Thread):
    """One streaming POST /v1/messages in a thread; SSE events go to ``events``."""

    def __init__(self, base: str, body: dict[str, Any], session_id: str, events: queue.Queue):
        super().__init__(daemon=True)
        self.base, self.body, self.session_id, self.events = base, body, session_id, events
        self.conn: http.client.HTTPConnection | None = None

    def _connection(self) -> tuple[http.client.HTTPConnection, str]:
        parts = urlsplit(self.base)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        return cls(parts.hostname or "127.0.0.1", parts.port, timeout=600), parts.path.rstrip("/")

    def headers(self) -> dict[str, str]:
        h = {"content-type": "application/json", "anthropic-version": "2023-06-01",
             "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
             "user-agent": f"claude-cli/{VERSION} (external, cli)", "x-claude-code-session-id": self.session_id,
             "x-fake-agent-pid": str(AGENT_ID), "accept": "application/json"}
        for line in (os.environ.get("ANTHROPIC_CUSTOM_HEADERS") or "").splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip():
                h[name.strip().lower()] = value.strip()
        if os.environ.get("ANTHROPIC_AUTH_TOKEN"):
            h["authorization"] = f"Bearer {os.environ['ANTHROPIC_AUTH_TOKEN']}"
        elif os.environ.get("ANTHROPIC_API_KEY"):
            h["x-api-key"] = os.environ["ANTHROPIC_API_KEY"]
        return h

    def run(self) -> None:
        try:
            self._run()
        except ApiError as exc:
            self.events.put(("api_error", exc))
        except (OSError, http.client.HTTPException) as exc:
            if self.conn is None:
                return
            self.events.put(("api_error", ApiError(None, f"API Error: Connection error. ({type(exc).__name__})",
                                                   "unknown")))

    def _run(self) -> None:
        conn, path = self._connection()
        self.conn = conn
        try:  # the pre-connect probe the real CLI sends before each request
            conn.request("HEAD", path or "/", headers={"x-fake-agent-pid": str(AGENT_ID)})
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn, path = self._connection()
            self.conn = conn
        data = json.dumps(self.body).encode()
        conn.request("POST", f"{path}/v1/messages?beta=true", body=data, headers=self.headers())
        resp = conn.getresponse()
        if resp.status != 200:
            raise _error_message(resp.status, resp.read())
        ctype = resp.getheader("content-type") or ""
        if "event-stream" not in ctype:
            raw = resp.read()
            try:
                doc = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                raise ApiError(None, "API Error: Failed to parse JSON", "unknown") from None
            if not isinstance(doc, dict) or doc.get("type") != "message":
                raise ApiError(None, MALFORMED, "unknown")
            self.events.put(("message", doc))
            return
        self._read_sse(resp)

    def _read_sse(self, resp: http.client.HTTPResponse) -> None:
        data: list[str] = []
        stopped = False
        while True:
            raw = resp.readline()
            if not raw:
                break
            line = raw.decode("utf-8", "replace").rstrip("\r\n")  # as Node decodes: bad bytes become U+FFFD
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
                continue
            if line or not data:
                continue
            try:
                event = json.loads("\n".join(data))
            except ValueError:
                raise ApiError(None, MALFORMED, "unknown") from None
            data = []
            if event.get("type") == "error":
                raise ApiError(None, MALFORMED, "unknown")
            self.events.put(("sse", event))
            if event.get("type") == "message_stop":
                stopped = True
                break
        if not stopped:
            raise ApiError(None, MALFORMED, "unknown")
        self.events.put(("done", None))

    def abort(self) -> None:
        if self.conn is not None:
            try:
                if self.conn.sock is not None:
                    self.conn.sock.shutdown(2)
            except OSError:
                pass
            self.conn.close()
        self.conn = None


# --- the agent -----------------------------------------------------------------------------------


class Interrupted(Exception):
    """The turn was stopped (control interrupt or SIGINT)."""

    def __init__(self, during_tool: bool):
        self.during_tool = during_tool


class Agent:
    def __init__(self, opts: dict[str, str], flags: set[str]):
        self.opts, self.flags = opts, flags
        self.partial = "--include-partial-messages" in flags
        self.events: queue.Queue = queue.Queue()  # stdin lines, model events, tool ends, signals
        self.pending: list[dict[str, Any]] = []  # user lines that came in while a turn ran
        self.mode = opts.get("--permission-mode") or (
            "bypassPermissions" if "--dangerously-skip-permissions" in flags else "default")
        self.base = (os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com").rstrip("/")
        self.model = opts.get("--model") or os.environ.get("ANTHROPIC_MODEL") or "claude-opus-4-8"
        self.max_turns = int(opts.get("--max-turns") or 0)
        self.retries = int(os.environ.get("CLAUDE_CODE_MAX_RETRIES") or 10)
        self.allowed = [t.strip() for t in (opts.get("--allowedTools") or "").split(",") if t.strip()]
        self.denied = [t.strip() for t in (opts.get("--disallowedTools") or "").split(",") if t.strip()]
        self.messages: list[dict[str, Any]] = []
        self.session_id = ""
        self.cost = 0.0
        self.stdin_open = True

    # --- setup ---------------------------------------------------------------------------------

    def open_session(self) -> None:
        resume = self.opts.get("--resume") or self.opts.get("-r")
        if resume:
            history = load_history(resume)
            if history is None:
                message = f"No conversation found with session ID: {resume}"
                emit({"type": "result", "subtype": "error_during_execution", "duration_ms": 0, "duration_api_ms": 0,
                      "is_error": True, "num_turns": 0, "stop_reason": None, "session_id": resume,
                      "total_cost_usd": 0, "usage": self._usage_dict(0, 0), "modelUsage": {},
                      "permission_denials": [], "uuid": str(uuid.uuid4()), "errors": [message]})
                die(message)
            self.session_id, self.messages = resume, history
            return
        sid = self.opts.get("--session-id") or str(uuid.uuid4())
        if self.opts.get("--session-id"):
            try:
                uuid.UUID(sid)
            except ValueError:
                die("Error: Invalid session ID. Must be a valid UUID.")
            if load_history(sid) is not None:
                die(f"Error: Session ID {sid} is already in use.")
        self.session_id = sid

    def init_line(self) -> dict[str, Any]:
        mcp = []
        if self.opts.get("--mcp-config"):
            try:
                servers = json.loads(self.opts["--mcp-config"]).get("mcpServers") or {}
                mcp = [{"name": n, "status": "connected"} for n in servers]
            except (ValueError, AttributeError):
                mcp = []
        return {"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": self.session_id,
                "tools": TOOLS, "mcp_servers": mcp, "model": f"{self.model}[1m]", "permissionMode": self.mode,
                "slash_commands": [], "apiKeySource": "ANTHROPIC_API_KEY" if os.environ.get("ANTHROPIC_API_KEY")
                else "none", "claude_code_version": VERSION, "output_style": "default", "agents": [],
                "skills": [], "plugins": [], "uuid": str(uuid.uuid4())}

    # --- input ---------------------------------------------------------------------------------

    def read_stdin(self) -> None:
        for raw in sys.stdin.buffer:
            line = raw.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            self.events.put(("stdin", obj))
        self.events.put(("eof", None))

    def next_user(self) -> dict[str, Any] | None:
        """The next user line (pending ones first); None at end of input."""
        if self.pending:
            return self.pending.pop(0)
        while self.stdin_open:
            kind, value = self.events.get()
            if kind == "eof":
                self.stdin_open = False
                return None
            if kind == "sigint":
                os._exit(130)
            if kind == "stdin":
                if value.get("type") == "user":
                    return value
                if value.get("type") == "control_request":
                    self._control(value, running=False)
        return None

    def _control(self, obj: dict[str, Any], running: bool) -> bool:
        """Answer a control request; True when it interrupts the running turn."""
        emit({"type": "control_response", "response": {"subtype": "success", "request_id": obj.get("request_id")}})
        return running and (obj.get("request") or {}).get("subtype") == "interrupt"

    def wait_event(self, running_tool: bool) -> tuple[str, Any]:
        """The next event for the running turn; raises Interrupted on interrupt/SIGINT."""
        while True:
            kind, value = self.events.get()
            if kind == "stdin":
                if value.get("type") == "control_request":
                    if self._control(value, running=True):
                        raise Interrupted(running_tool)
                elif value.get("type") == "control_response":
                    return "control_response", value
                elif value.get("type") == "user":
                    self.pending.append(value)
                continue
            if kind == "eof":
                self.stdin_open = False
                continue
            if kind == "sigint":
                self.sigint = True
                raise Interrupted(running_tool)
            return kind, value

    # --- one turn ------------------------------------------------------------------------------

    def _usage_dict(self, inp: int, out: int) -> dict[str, Any]:
        return {"input_tokens": inp, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                "output_tokens": out, "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
                "service_tier": "standard"}

    def _line(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, **fields, "parent_tool_use_id": None, "session_id": self.session_id,
                "uuid": str(uuid.uuid4())}

    def request_body(self) -> dict[str, Any]:
        system = [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."}]
        if self.opts.get("--append-system-prompt"):
            system.append({"type": "text", "text": self.opts["--append-system-prompt"]})
        tools = [{"name": "Bash", "description": "Run a shell command", "input_schema": {
            "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]
        return {"model": self.model, "max_tokens": 32000, "system": system, "messages": self.messages,
                "tools": tools, "stream": True, "metadata": {"user_id": f"session_{self.session_id}"}}

    def call_model(self) -> tuple[dict[str, Any], int, int]:
        """One model call with retries; the assistant message, input and output tokens."""
        attempt = 0
        while True:
            call = ModelCall(self.base, self.request_body(), self.session_id, self.events)
            if self.partial:
                emit(self._line("system", subtype="status", status="requesting"))
            call.start()
            try:
                return self._stream(call)
            except ApiError as exc:
                if attempt >= self.retries or exc.status in (400, 403, 404, 413) or exc.status is None:
                    raise
                attempt += 1
                emit(self._line("system", subtype="api_retry", attempt=attempt, max_retries=self.retries,
                                retry_delay_ms=50.0 * attempt, error_status=exc.status, error=exc.kind))
                time.sleep(0.05 * attempt)
            finally:
                call.abort()

    def _stream(self, call: ModelCall) -> tuple[dict[str, Any], int, int]:
        msg: dict[str, Any] = {}
        blocks: dict[int, dict[str, Any]] = {}
        self.partial_blocks, self.partial_id = [], None
        json_parts: dict[int, str] = {}
        inp = out = 0
        while True:
            try:
                kind, value = self.wait_event(running_tool=False)
            except Interrupted:
                self.partial_blocks = [b for _, b in sorted(blocks.items()) if b.get("type") == "text" and b["text"]]
                self.partial_id = msg.get("id")
                raise
            if kind == "api_error":
                raise value
            if kind == "message":  # a non-streaming answer
                u = value.get("usage") or {}
                for block in value.get("content") or []:
                    self._emit_assistant(value, block)
                return value, int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
            if kind == "done":
                content = [blocks[i] for i in sorted(blocks)]
                return {**msg, "content": content}, inp, out
            if kind != "sse":
                continue
            if os.environ.get("FAKE_CLAUDE_CRASH"):
                die("Error: fake crash in the middle of a stream", 3)
            event = value
            etype = event.get("type")
            if self.partial and etype not in ("ping", "content_block_stop"):
                emit(self._line("stream_event", event=event))
            if etype == "message_start":
                msg = dict(event.get("message") or {})
                inp = int((msg.get("usage") or {}).get("input_tokens") or 0)
                out = int((msg.get("usage") or {}).get("output_tokens") or 0)
            elif etype == "content_block_start":
                blocks[event["index"]] = dict(event.get("content_block") or {})
            elif etype == "content_block_delta":
                block = blocks.setdefault(event.get("index", 0), {"type": "text", "text": ""})
                delta = event.get("delta") or {}
                if delta.get("type") == "text_delta":
                    block["text"] = block.get("text", "") + delta.get("text", "")
                elif delta.get("type") == "thinking_delta":
                    block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
                elif delta.get("type") == "input_json_delta":
                    json_parts[event.get("index", 0)] = json_parts.get(event.get("index", 0), "") + \
                        delta.get("partial_json", "")
            elif etype == "content_block_stop":
                idx = event.get("index", 0)
                block = blocks.get(idx, {})
                if block.get("type") == "tool_use" and idx in json_parts:
                    try:
                        block["input"] = json.loads(json_parts[idx] or "{}")
                    except ValueError:
                        block["input"] = {}
                self._emit_assistant(msg, block)  # the real CLI prints it before the block's stop event
                if self.partial:
                    emit(self._line("stream_event", event=event))
            elif etype == "message_delta":
                u = event.get("usage") or {}
                if "output_tokens" in u:
                    out = int(u.get("output_tokens") or 0)
                msg["stop_reason"] = (event.get("delta") or {}).get("stop_reason")

    def _emit_assistant(self, msg: dict[str, Any], block: dict[str, Any]) -> None:
        usage = msg.get("usage") or {}
        line = self._line("assistant", message={
            "id": msg.get("id"), "type": "message", "role": "assistant", "model": msg.get("model") or self.model,
            "content": [block], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            "context_management": None})
        emit(line)

    def permitted(self, command: str) -> bool:
        for rule in self.denied:
            if rule == "Bash" or (rule.startswith("Bash(") and command.startswith(rule[5:].rstrip(")*:"))):
                return False
        for rule in self.allowed:
            if rule == "Bash" or (rule.startswith("Bash(") and command.startswith(rule[5:].rstrip(")*:"))):
                return True
        if self.mode == "plan":
            return False
        if self.mode == "bypassPermissions":
            return True
        parts = [shlex.split(p) for p in command.replace("&&", ";").replace("|", ";").split(";") if p.strip()]
        allowed = READ_ONLY | (EDITS if self.mode == "acceptEdits" else set())
        return bool(parts) and all(p and os.path.basename(p[0]) in allowed for p in parts)

    def ask_permission(self, block: dict[str, Any]) -> dict[str, Any]:
        """``--permission-prompt-tool stdio``: ask over the control channel, wait for the answer."""
        tool_input = block.get("input") or {}
        command = str(tool_input.get("command") or "")
        program = (shlex.split(command) or ["sh"])[0] if command else "sh"
        request_id = str(uuid.uuid4())
        emit({"type": "control_request", "request_id": request_id, "request": {
            "subtype": "can_use_tool", "tool_name": block.get("name"), "input": tool_input,
            "display_name": block.get("name"), "description": command,
            "permission_suggestions": [
                {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": f"{program}:*"}],
                 "behavior": "allow", "destination": "localSettings"},
                {"type": "addDirectories", "directories": [os.getcwd()], "destination": "session"},
                {"type": "setMode", "mode": "acceptEdits", "destination": "session"}],
            "tool_use_id": block.get("id")}})
        while True:
            kind, value = self.wait_event(running_tool=False)
            if kind == "control_response":
                response = value.get("response") or {}
                if response.get("request_id") != request_id:
                    continue
                if path := os.environ.get("FAKE_CLAUDE_ANSWERS"):
                    with open(path, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(response) + "\n")
                answer = response.get("response") or {}
                for update in answer.get("updatedPermissions") or []:
                    for rule in update.get("rules") or []:
                        self.allowed.append(f"{rule.get('toolName')}({rule.get('ruleContent')})")
                return answer

    def run_tool(self, block: dict[str, Any], denials: list[dict[str, Any]]) -> dict[str, Any]:
        command = str((block.get("input") or {}).get("command") or "")
        if (self.opts.get("--permission-prompt-tool") == "stdio" and block.get("name") == "Bash"
                and self.mode == "default" and not self.permitted(command)):
            answer = self.ask_permission(block)
            if answer.get("behavior") == "allow":
                block = {**block, "input": answer.get("updatedInput") or block.get("input")}
                command = str((block.get("input") or {}).get("command") or "")
                return self._run_bash(block, command)
            denials.append({"tool_name": block.get("name"), "tool_use_id": block.get("id"),
                            "tool_input": block.get("input")})
            return {"tool_use_id": block.get("id"), "type": "tool_result", "is_error": True,
                    "content": str(answer.get("message") or REJECTED)}
        if block.get("name") != "Bash" or not self.permitted(command):
            denials.append({"tool_name": block.get("name"), "tool_use_id": block.get("id"),
                            "tool_input": block.get("input")})
            text = (f"Claude requested permissions to use {block.get('name')}, but you haven't granted it yet."
                    if self.mode != "plan" else "Claude is in plan mode and cannot run commands.")
            return {"tool_use_id": block.get("id"), "type": "tool_result", "content": text, "is_error": True}
        return self._run_bash(block, command)

    def _run_bash(self, block: dict[str, Any], command: str) -> dict[str, Any]:
        proc = subprocess.Popen(["/bin/bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.tool_id = block.get("id")

        def wait() -> None:
            output, _ = proc.communicate()
            self.events.put(("tool_done", (output.decode("utf-8", "replace").rstrip("\n"), proc.returncode)))

        threading.Thread(target=wait, daemon=True).start()
        try:
            while True:
                kind, value = self.wait_event(running_tool=True)
                if kind == "tool_done":
                    output, rc = value
                    return {"tool_use_id": block.get("id"), "type": "tool_result", "content": output,
                            "is_error": rc != 0}
        except Interrupted:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            raise

    def turn(self, content: Any) -> int:
        started = time.time()
        if os.environ.get("FAKE_CLAUDE_NOISE"):
            with _out_lock:
                sys.stdout.write("Warning: this is not a JSON line\n")
                sys.stdout.flush()
            emit({"type": "future_kind", "value": 1})
        emit(self.init_line())
        user = {"role": "user", "content": content}
        self.messages.append(user)
        save_message(self.session_id, user)
        inp_total = out_total = calls = 0
        denials: list[dict[str, Any]] = []
        final_text = ""
        stop_reason = None
        try:
            while True:
                if self.max_turns and calls >= self.max_turns:
                    return self._result(started, calls, inp_total, out_total, denials, "error_max_turns", True,
                                        None, "", stop_reason)
                calls += 1
                try:
                    msg, inp, out = self.call_model()
                except ApiError as exc:
                    synthetic = self._line("assistant", message={
                        "id": str(uuid.uuid4()), "container": None, "model": "<synthetic>", "role": "assistant",
                        "stop_details": None, "stop_reason": "stop_sequence", "stop_sequence": "", "type": "message",
                        "usage": self._usage_dict(0, 0), "content": [{"type": "text", "text": exc.text}],
                        "context_management": None}, error=exc.kind)
                    emit(synthetic)
                    return self._result(started, calls, inp_total, out_total, denials, "success", True,
                                        exc.status, exc.text, "stop_sequence")
                inp_total += inp
                out_total += out
                content_blocks = msg.get("content") or []
                stop_reason = msg.get("stop_reason") or "end_turn"
                assistant = {"role": "assistant", "content": content_blocks}
                self.messages.append(assistant)
                save_message(self.session_id, assistant)
                texts = [b.get("text", "") for b in content_blocks if b.get("type") == "text"]
                if texts:
                    final_text = "".join(texts)
                tools = [b for b in content_blocks if b.get("type") == "tool_use"]
                if not tools:
                    return self._result(started, calls, inp_total, out_total, denials, "success", False, None,
                                        final_text, stop_reason)
                results = []
                for block in tools:
                    result = self.run_tool(block, denials)
                    results.append(result)
                    emit(self._line("user", message={"role": "user", "content": [result]},
                                    timestamp=time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                                    tool_use_result={"stdout": result["content"], "stderr": "",
                                                     "interrupted": False, "isImage": False}))
                tool_msg = {"role": "user", "content": results}
                self.messages.append(tool_msg)
                save_message(self.session_id, tool_msg)
        except Interrupted as intr:
            if not intr.during_tool and getattr(self, "partial_blocks", None):
                emit(self._line("assistant", message={
                    "id": self.partial_id, "type": "message", "role": "assistant", "model": self.model,
                    "content": self.partial_blocks, "stop_reason": None, "stop_sequence": None,
                    "usage": self._usage_dict(inp_total, 1), "context_management": None}))
            if intr.during_tool:
                rejected = {"type": "tool_result", "content": REJECTED, "is_error": True, "tool_use_id": self.tool_id}
                emit(self._line("user", message={"role": "user", "content": [rejected]},
                                tool_use_result="User rejected tool use"))
                self.messages.append({"role": "user", "content": [rejected]})
                save_message(self.session_id, self.messages[-1])
            note = "[Request interrupted by user for tool use]" if intr.during_tool else "[Request interrupted by user]"
            emit(self._line("user", message={"role": "user", "content": [{"type": "text", "text": note}]}))
            self._result(started, calls + 1, inp_total, out_total, denials, "error_during_execution", True, None,
                         "", "tool_use" if intr.during_tool else None)
            if getattr(self, "sigint", False):
                sys.stdout.flush()
                os._exit(1)
            return 1

    def _result(self, started: float, calls: int, inp: int, out: int, denials: list[dict[str, Any]], subtype: str,
                is_error: bool, status: int | None, text: str, stop_reason: str | None) -> int:
        cost = inp * 5e-6 + out * 25e-6
        self.cost += cost
        line: dict[str, Any] = {
            "type": "result", "subtype": subtype, "is_error": is_error, "api_error_status": status,
            "duration_ms": int((time.time() - started) * 1000), "duration_api_ms": 0, "num_turns": calls,
            "stop_reason": stop_reason, "session_id": self.session_id, "total_cost_usd": self.cost,
            "usage": self._usage_dict(inp, out), "modelUsage": {}, "permission_denials": denials,
            "terminal_reason": "completed", "uuid": str(uuid.uuid4())}
        if subtype == "success":
            line["result"] = text
        emit(line)
        return 1 if is_error else 0


def main(argv: list[str]) -> int:
    opts, flags, rest = parse_args(argv)
    if "--version" in flags or "-v" in flags:
        print(f"{VERSION} (Claude Code)")
        return 0
    if "-p" not in flags and "--print" not in flags:
        die("this fake only supports -p (print mode)")
    out_fmt = opts.get("--output-format", "text")
    in_fmt = opts.get("--input-format", "text")
    if out_fmt == "stream-json" and "--verbose" not in flags:
        die("Error: When using --print, --output-format=stream-json requires --verbose")
    if in_fmt == "stream-json" and out_fmt != "stream-json":
        die("Error: --input-format=stream-json requires output-format=stream-json.")
    agent = Agent(opts, flags)
    if agent.mode == "bypassPermissions" and os.geteuid() == 0 and os.environ.get("IS_SANDBOX") != "1":
        die("--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons")

    signal.signal(signal.SIGINT, lambda *_: agent.events.put(("sigint", None)))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))  # the tool shell is left running, as the real one
    agent.open_session()
    rc = 0
    if in_fmt == "stream-json":
        threading.Thread(target=agent.read_stdin, daemon=True).start()
        while True:
            line = agent.next_user()
            if line is None:
                return rc
            content = (line.get("message") or {}).get("content")
            rc = agent.turn(content)
    prompt = " ".join(rest)
    if not prompt:
        die("Error: Input must be provided either through stdin or as a prompt argument when using --print")
    return agent.turn([{"type": "text", "text": prompt}])


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
