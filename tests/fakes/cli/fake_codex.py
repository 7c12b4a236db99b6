#!/usr/bin/env python3
"""A scripted ``codex app-server`` (Codex CLI 0.171.0) for tests: the same JSON-RPC lines on stdio.

It gets its answers from an OpenAI Responses API, exactly as the real CLI does: the provider block
of ``$CODEX_HOME/config.toml`` (``model_provider``, ``[model_providers.<id>]`` ``base_url``,
``env_key``, ``request_max_retries``, ``stream_max_retries``; ``-c key=value`` overrides on the
command line) → ``POST <base_url>/responses`` with ``stream: true``, ``Authorization: Bearer
$<env_key>``, ``session-id`` / ``thread-id`` headers and, for the tests, ``x-fake-agent-pid: <pid>`` and
``x-fake-agent-cwd: <the thread's cwd>``.
Stdlib only, so it starts fast. Point it at ``tests/fakes/model_api.py``.

What it reproduces from the real transcripts (``shared/fixtures/real-peers/codex-app-server/`` and
``tests/plugins/transcripts/codex/captured/``):

- JSON-RPC without the ``"jsonrpc"`` member (accepted when a client sends it); ``initialize`` →
  ``{userAgent, codexHome, platformFamily, platformOs}`` plus ``remoteControl/status/changed``;
  any other request first → ``Not initialized``;
- ``thread/start`` → ``{thread, model, modelProvider, cwd, approvalPolicy, sandbox, …}`` and
  ``thread/started``; the model-metadata ``warning`` for every model (a custom provider has no
  metadata); ``thread/resume`` of a stored thread → ``deprecationNotice``, ``thread/status/changed``
  and the thread, and before its first turn the thread's old ``thread/tokenUsage/updated`` again,
  under the old turn's id; an unknown id → error ``-32600 no rollout found for thread id <id>``; a
  malformed one → ``invalid session id: …``;
- ``turn/start`` → ``{turn: {id, status: "inProgress"}}``, then ``turn/started``, the
  ``userMessage`` item, per model call: ``agentMessage`` items with ``item/agentMessage/delta``,
  ``reasoning`` items with ``item/reasoning/summaryPartAdded`` / ``summaryTextDelta``,
  ``commandExecution`` items for ``exec_command`` calls (run for real: ``/bin/bash -lc`` in the
  thread's cwd, in its own session like the real tool shells), ``thread/tokenUsage/updated``
  (cumulative ``total`` for the thread, ``last`` for the request; only when the API reported
  usage), ``account/rateLimits/updated``; finally ``thread/status/changed`` idle and
  ``turn/completed`` with ``completed`` / ``failed`` / ``interrupted``; several turns per process;
- model-API failures as 0.171.0 words them: ``unexpected status 401 Unauthorized: <body message>,
  url: <url>`` (``httpConnectionFailed``), ``exceeded retry limit, last status: 429 Too Many
  Requests`` (``responseTooManyFailedAttempts``), the generic "high demand" line for a 500
  (``internalServerError``), ``The model does not exist…`` for a 404 (``modelNotFound``), a 400's
  body verbatim (``other``), an HTML page verbatim; a stream that ends early, is cut, carries
  ``response.failed`` or invalid UTF-8 → ``stream disconnected before completion: …`` (``other``);
  ``Reconnecting... n/N (…)`` ``error`` notifications with ``willRetry: true`` before each retry; a
  model API that refuses the connection: ``Reconnecting... waiting for network`` (``willRetry``,
  ``additionalDetails: "Connection failed: error sending request"``) at once and every 5 s, forever;
- approvals: with ``approvalPolicy`` ``untrusted`` every command that is not known to be read-only
  asks ``item/commandExecution/requestApproval`` (id from 0, ``availableDecisions``) and waits;
  ``accept`` runs it, ``decline`` completes the item ``declined`` and the turn goes on, ``cancel``
  also interrupts the turn; ``serverRequest/resolved`` follows the answer; a ``read-only`` sandbox
  fails commands that write (``on-failure`` then asks to run it outside the sandbox);
- ``turn/interrupt {threadId, turnId}`` → ``{}``; the running request is dropped, the running tool
  killed (its whole process group), no ``item/completed`` for it, ``turn/completed interrupted``;
- end of input: stop the turn, kill the tool, exit 0; SIGTERM / SIGINT: kill the tool, die of the
  signal (nothing survives, as with the real app-server);
- threads on disk under ``$CODEX_HOME/sessions/`` (history, token totals), so a new process resumes.

Test hook (not part of Codex): ``FAKE_CODEX_EVENTS=<file>`` appends one JSON line at start (argv,
the names of the environment variables, cwd, PATH), per handled request, per approval and per
interrupt, so a test can see what the runner started and that ``turn/interrupt`` arrived.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import select
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
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


VERSION = "0.171.0"
READ_ONLY = {"echo", "ls", "cat", "pwd", "true", "head", "tail", "grep", "wc", "date", "whoami", "sleep", "rg"}
WRITES = re.compile(r"(^|[;&|]\s*)(touch|mkdir|rm|mv|cp|tee)\b|>")
HIGH_DEMAND = "We\u2019re currently experiencing high demand, which may cause temporary errors."
MODEL_NOT_FOUND = "The model does not exist or you do not have access to it."
CUT = "stream disconnected before completion: "
NETWORK_WAIT = 5.0  # seconds between "waiting for network" notices
UUID = re.compile(r"^(urn:uuid:)?[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 413: "Payload Too Large",
           429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}

_out_lock = threading.Lock()


def now_ms() -> int:
    return int(time.time() * 1000)


def emit(obj: dict[str, Any]) -> None:
    with _out_lock:
        try:
            sys.stdout.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            os._exit(0)


def notify(method: str, params: dict[str, Any]) -> None:
    emit({"method": method, "params": params, "emittedAtMs": now_ms()})


def record(kind: str, **fields: Any) -> None:
    path = os.environ.get("FAKE_CODEX_EVENTS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"event": kind, "pid": os.getpid(), **fields}) + "\n")


def new_id() -> str:
    """A time-ordered id shaped like Codex's (uuid v7 style)."""
    ms = now_ms()
    rand = uuid.uuid4().hex
    return f"{ms >> 16:08x}-{ms & 0xFFFF:04x}-7{rand[:3]}-{rand[3:7]}-{rand[7:19]}"


# --- configuration --------------------------------------------------------------------------------


def load_config(overrides: list[str]) -> dict[str, Any]:
    home = os.environ.get("CODEX_HOME") or os.path.expanduser("~/.codex")
    cfg: dict[str, Any] = {}
    try:
        with open(os.path.join(home, "config.toml"), "rb") as fh:
            cfg = tomllib.load(fh)
    except FileNotFoundError:
        pass
    except tomllib.TOMLDecodeError as exc:
        sys.stderr.write(f"Error loading config.toml: {exc}\n")
        sys.exit(1)
    for item in overrides:
        key, _, raw = item.partition("=")
        try:
            value: Any = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = cfg
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return cfg


class Provider:
    def __init__(self, cfg: dict[str, Any]):
        pid = cfg.get("model_provider") or "openai"
        block = (cfg.get("model_providers") or {}).get(pid) or {}
        self.id = pid
        self.base_url = str(block.get("base_url") or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1")
        self.env_key = block.get("env_key") or ("OPENAI_API_KEY" if pid == "openai" else None)
        self.request_retries = int(block.get("request_max_retries", 4))
        self.stream_retries = int(block.get("stream_max_retries", 5))
        self.model = str(cfg.get("model") or "gpt-5.5-codex")


# --- threads on disk ------------------------------------------------------------------------------


def sessions_dir() -> str:
    home = os.environ.get("CODEX_HOME") or os.path.expanduser("~/.codex")
    return os.path.join(home, "sessions")


def thread_path(tid: str) -> str:
    return os.path.join(sessions_dir(), f"rollout-{tid}.json")


def save_thread(t: dict[str, Any]) -> None:
    os.makedirs(sessions_dir(), exist_ok=True)
    path = thread_path(t["id"])
    tmp = path + f".{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(t, fh)
    os.replace(tmp, path)


def thread_obj(t: dict[str, Any]) -> dict[str, Any]:
    return {"id": t["id"], "sessionId": t["id"], "forkedFromId": None, "preview": t.get("preview", ""),
            "ephemeral": False, "modelProvider": t["provider"], "model": t["model"], "createdAt": t["created"],
            "updatedAt": int(time.time()), "status": {"type": "idle"}, "path": thread_path(t["id"]),
            "cwd": t["cwd"], "cliVersion": VERSION, "source": "vscode", "turns": []}


def sandbox_obj(mode: str) -> dict[str, Any]:
    if mode == "danger-full-access":
        return {"type": "dangerFullAccess"}
    if mode == "workspace-write":
        return {"type": "workspaceWrite", "writableRoots": [], "networkAccess": False}
    return {"type": "readOnly", "networkAccess": False}


# --- the agent ------------------------------------------------------------------------------------


class Rpc(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class TurnFailed(Exception):
    def __init__(self, message: str, info: Any):
        super().__init__(message)
        self.message = message
        self.info = info


class Interrupted(Exception):
    pass


class Turn:
    def __init__(self, agent: Agent, thread: dict[str, Any], turn_id: str, items: list[dict[str, Any]]):
        self.agent = agent
        self.thread = thread
        self.id = turn_id
        self.input = items
        self.stop = threading.Event()
        self.sock: socket.socket | None = None
        self.tool: subprocess.Popen[bytes] | None = None
        self.messages: list[dict[str, Any]] = []
        self.worker = threading.Thread(target=self.run, daemon=True)

    # -- stopping ----------------------------------------------------------------------------

    def interrupt(self) -> None:
        self.stop.set()
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.kill_tool()

    def kill_tool(self) -> None:
        tool = self.tool
        if tool is not None and tool.poll() is None:
            try:
                os.killpg(tool.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def check(self) -> None:
        if self.stop.is_set():
            raise Interrupted()

    # -- the turn ----------------------------------------------------------------------------

    def where(self) -> dict[str, str]:
        return {"threadId": self.thread["id"], "turnId": self.id}

    def run(self) -> None:
        tid = self.thread["id"]
        status, error = "completed", None
        try:
            notify("thread/status/changed", {"threadId": tid, "status": {"type": "active", "activeFlags": []}})
            notify("turn/started", {"threadId": tid, "turn": self.turn_obj("inProgress", None)})
            uid = new_id()
            content = [dict(i, text_elements=[]) if i.get("type") == "text" and "text_elements" not in i else i
                       for i in self.input]
            user = {"type": "userMessage", "id": uid, "clientId": None, "content": content}
            notify("item/started", {"item": user, **self.where(), "startedAtMs": now_ms()})
            notify("item/completed", {"item": user, **self.where(), "completedAtMs": now_ms()})
            self.thread["history"].append(self.user_item())
            if not self.thread.get("preview"):
                self.thread["preview"] = next((i.get("text", "") for i in self.input if i.get("type") == "text"), "")
            self.loop()
        except Interrupted:
            status = "interrupted"
        except TurnFailed as exc:
            status = "failed"
            error = {"message": exc.message, "codexErrorInfo": exc.info, "additionalDetails": None}
            notify("thread/status/changed", {"threadId": tid, "status": {"type": "systemError"}})
            notify("error", {"error": error, "willRetry": False, **self.where()})
        finally:
            self.thread["last_turn"] = self.id
            save_thread(self.thread)
            self.agent.turn_done(self)
        notify("thread/status/changed", {"threadId": tid, "status": {"type": "idle"}})
        notify("turn/completed", {"threadId": tid, "turn": self.turn_obj(status, error)})

    def turn_obj(self, status: str, error: Any) -> dict[str, Any]:
        done = status != "inProgress"
        return {"id": self.id, "rootTurnId": self.id, "items": self.messages if done else [],
                "itemsView": "summary" if done else "notLoaded", "status": status, "error": error,
                "startedAt": int(time.time()), "completedAt": int(time.time()) if done else None, "durationMs": None}

    def user_item(self) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        for item in self.input:
            kind = item.get("type")
            if kind == "text":
                content.append({"type": "input_text", "text": item.get("text", "")})
            elif kind == "image":
                content.append({"type": "input_image", "image_url": item.get("url", "")})
            elif kind == "localImage":
                path = str(item.get("path", ""))
                try:
                    with open(path, "rb") as fh:
                        data = fh.read()
                except OSError:
                    content.append({"type": "input_text", "text": f"<image {path} could not be read>"})
                    continue
                mime = "image/png" if data.startswith(b"\x89PNG") else "image/jpeg" if data[:2] == b"\xff\xd8" else \
                    "image/gif" if data[:4] == b"GIF8" else "image/webp" if data[8:12] == b"WEBP" else "image/png"
                content.append({"type": "input_image", "image_url": f"data:{mime};base64,"
                                                                     f"{base64.b64encode(data).decode()}"})
        return {"type": "message", "role": "user", "content": content}

    def loop(self) -> None:
        while True:
            self.check()
            calls, usage = self.model_call()
            for call in calls:
                self.exec_command(call)
            if usage is not None:
                self.count(usage)
            if not calls:
                return

    # -- usage -------------------------------------------------------------------------------

    def count(self, usage: dict[str, Any]) -> None:
        last = {"totalTokens": int(usage.get("total_tokens") or 0), "inputTokens": int(usage.get("input_tokens") or 0),
                "cachedInputTokens": int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0),
                "cacheWriteInputTokens": 0, "outputTokens": int(usage.get("output_tokens") or 0),
                "reasoningOutputTokens": int((usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0)}
        total = self.thread.get("total") or {k: 0 for k in last}
        total = {k: total.get(k, 0) + v for k, v in last.items()}
        self.thread["total"], self.thread["last"] = total, last
        notify("thread/tokenUsage/updated", {**self.where(), "tokenUsage": {"total": total, "last": last,
                                                                            "modelContextWindow": 258400}})
        notify("account/rateLimits/updated", {"rateLimits": {"limitId": "codex", "primary": None, "secondary": None}})

    # -- the model API -----------------------------------------------------------------------

    def body(self) -> dict[str, Any]:
        env_ctx = (f"<environment_context>\n  <cwd>{self.thread['cwd']}</cwd>\n  <shell>bash</shell>\n"
                   f"  <sandbox_mode>{self.thread['sandbox']}</sandbox_mode>\n</environment_context>")
        tools = [{"type": "function", "name": "exec_command", "description": "Runs a command.", "strict": False,
                  "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]
        developer = [{"type": "input_text", "text": "You are Codex (a scripted fake for tests)."}]
        if self.thread.get("instructions"):
            developer.append({"type": "input_text", "text": self.thread["instructions"]})
        return {"model": self.thread["model"], "instructions": "You are a coding agent.",
                "input": [{"type": "message", "role": "developer", "content": developer},
                          {"type": "message", "role": "user", "content": [{"type": "input_text", "text": env_ctx}]},
                          *self.thread["history"]],
                "tools": tools, "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"summary": "auto"},
                "store": False, "stream": True, "include": [], "prompt_cache_key": self.thread["id"]}

    def model_call(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        provider = self.agent.provider
        request_tries = stream_tries = 0
        while True:
            self.check()
            try:
                return self.attempt(provider)
            except Retry as exc:
                budget = provider.stream_retries if exc.stream else provider.request_retries
                used = stream_tries if exc.stream else request_tries
                if used >= budget:
                    raise TurnFailed(exc.final, exc.info) from None
                used += 1
                if exc.stream:
                    stream_tries = used
                else:
                    request_tries = used
                notify("error", {"error": {"message": f"Reconnecting... {used}/{budget} ({exc.reason})",
                                           "codexErrorInfo": exc.info, "additionalDetails": None},
                                 "willRetry": True, **self.where()})
                if self.stop.wait(min(0.2 * 2 ** (used - 1), 2.0)):
                    raise Interrupted() from None

    def attempt(self, provider: Provider) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        url = provider.base_url.rstrip("/") + "/responses"
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "session-id": self.thread["id"],
                   "thread-id": self.thread["id"], "x-fake-agent-pid": str(AGENT_ID),
                   "x-fake-agent-cwd": self.thread["cwd"],
                   "User-Agent": f"codex_cli_rs/{VERSION} (fake)", "originator": "codex_cli_rs",
                   "x-codex-turn-metadata": json.dumps({"thread_id": self.thread["id"], "turn_id": self.id})}
        if provider.env_key:
            key = os.environ.get(provider.env_key)
            if not key:
                raise TurnFailed(f"Missing environment variable: `{provider.env_key}`.", "other")
            headers["Authorization"] = f"Bearer {key}"
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise TurnFailed(f"{CUT}error sending request for url ({url})", "other")
        payload = json.dumps(self.body()).encode()
        sock = self.connect_or_wait(parts.hostname, parts.port or 80)
        conn = http.client.HTTPConnection(parts.hostname, parts.port or 80)
        conn.sock = sock
        try:
            conn.request("POST", parts.path, body=payload, headers=headers)
            resp = conn.getresponse()
            self.check()
            if resp.status != 200:
                self.http_error(resp.status, resp.read(), url)
            return self.read_stream(resp)
        except (OSError, http.client.HTTPException):
            self.check()
            raise Retry("Transport error: network error: error decoding response body", "other",
                        f"{CUT}Transport error: network error: error decoding response body", stream=True) from None
        finally:
            self.sock = None
            conn.close()

    def connect_or_wait(self, host: str, port: int) -> socket.socket:
        """Like 0.171.0: a model API that cannot be connected to is not an error but a wait for
        the network, announced at once and every NETWORK_WAIT seconds, until it answers or the turn
        is interrupted (no retry limit applies)."""
        while True:
            try:
                return self.connect(host, port)
            except OSError:
                self.check()
                notify("error", {"error": {"message": "Reconnecting... waiting for network",
                                           "codexErrorInfo": {"responseStreamDisconnected": {"httpStatusCode": None}},
                                           "additionalDetails": "Connection failed: error sending request"},
                                 "willRetry": True, **self.where()})
                if self.stop.wait(NETWORK_WAIT):
                    raise Interrupted() from None

    def connect(self, host: str, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        self.sock = sock
        err = sock.connect_ex((host, port))
        if err not in (0, 115, 11):  # EINPROGRESS / EAGAIN
            sock.close()
            raise OSError(err, os.strerror(err))
        while True:
            self.check()
            _, writable, _ = select.select([], [sock], [], 0.1)
            if writable:
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    sock.close()
                    raise OSError(err, os.strerror(err))
                sock.setblocking(True)
                return sock

    def http_error(self, status: int, body: bytes, url: str) -> None:
        text = body.decode("utf-8", "replace")
        try:
            doc = json.loads(text)
            message = str((doc.get("error") or {}).get("message") or text)
        except (ValueError, AttributeError):
            message = text
        reason = REASONS.get(status, "Error")
        if status == 429 or status == 500:
            info = ({"responseTooManyFailedAttempts": {"httpStatusCode": 429}} if status == 429
                    else "internalServerError")
            final = f"exceeded retry limit, last status: 429 {reason}" if status == 429 else HIGH_DEMAND
            raise Retry(f"{status} {reason}" if status == 429 else HIGH_DEMAND, info, final, stream=False)
        if status == 404 and text.lstrip().startswith("{"):
            raise TurnFailed(MODEL_NOT_FOUND, "modelNotFound")
        if status == 400 and text.lstrip().startswith("{"):
            raise TurnFailed(text, "other")
        raise TurnFailed(f"unexpected status {status} {reason}: {message}, url: {url}",
                         {"httpConnectionFailed": {"httpStatusCode": status}})

    def read_stream(self, resp: http.client.HTTPResponse) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        calls: list[dict[str, Any]] = []
        data_lines: list[str] = []
        started: set[str] = set()
        while True:
            raw = resp.readline()
            self.check()
            if not raw:
                raise Retry("stream closed before response.completed", "other",
                            f"{CUT}stream closed before response.completed", stream=True)
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                bad = exc.end - exc.start
                raise Retry("UTF8 error", "other", f"{CUT}UTF8 error: invalid utf-8 sequence of {bad} bytes from "
                                                   f"index {exc.start}", stream=True) from None
            if line.startswith("data:"):
                data_lines.append(line[5:].lstrip(" "))
                continue
            if line or not data_lines:
                continue
            try:
                event = json.loads("\n".join(data_lines))
            except ValueError:
                data_lines = []
                continue
            data_lines = []
            done = self.on_event(event, calls, started)
            if done is not None:
                return calls, done.get("usage")

    def on_event(self, e: dict[str, Any], calls: list[dict[str, Any]], started: set[str]) -> dict[str, Any] | None:
        kind = e.get("type")
        item = e.get("item") if isinstance(e.get("item"), dict) else {}
        if kind == "response.output_item.added" and item.get("type") in ("message", "reasoning"):
            iid = str(item.get("id"))
            started.add(iid)
            if item["type"] == "message":
                notify("item/started", {"item": {"type": "agentMessage", "id": iid, "text": "", "phase": None},
                                        **self.where(), "startedAtMs": now_ms()})
            else:
                notify("item/started", {"item": {"type": "reasoning", "id": iid, "summary": [], "content": []},
                                        **self.where(), "startedAtMs": now_ms()})
        elif kind == "response.output_text.delta":
            notify("item/agentMessage/delta", {**self.where(), "itemId": e.get("item_id"), "delta": e.get("delta", "")})
        elif kind == "response.reasoning_summary_part.added":
            notify("item/reasoning/summaryPartAdded", {**self.where(), "itemId": e.get("item_id"),
                                                       "summaryIndex": e.get("summary_index", 0)})
        elif kind == "response.reasoning_summary_text.delta":
            notify("item/reasoning/summaryTextDelta", {**self.where(), "itemId": e.get("item_id"),
                                                       "delta": e.get("delta", ""),
                                                       "summaryIndex": e.get("summary_index", 0)})
        elif kind == "response.output_item.done":
            self.item_done(item, calls)
        elif kind == "response.failed":
            err = (e.get("response") or {}).get("error") or {}
            message = str(err.get("message") or "response.failed")
            raise Retry(message, "other", CUT + message, stream=True)
        elif kind == "response.completed":
            return e.get("response") or {}
        return None

    def item_done(self, item: dict[str, Any], calls: list[dict[str, Any]]) -> None:
        kind, iid = item.get("type"), str(item.get("id"))
        if kind == "message":
            text = "".join(c.get("text", "") for c in item.get("content") or [] if c.get("type") == "output_text")
            done = {"type": "agentMessage", "id": iid, "text": text, "phase": None}
            self.messages.append(done)
            notify("item/completed", {"item": done, **self.where(), "completedAtMs": now_ms()})
            self.thread["history"].append({"type": "message", "role": "assistant",
                                           "content": [{"type": "output_text", "text": text}]})
        elif kind == "reasoning":
            summary = [s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict)]
            notify("item/completed", {"item": {"type": "reasoning", "id": iid, "summary": summary, "content": []},
                                      **self.where(), "completedAtMs": now_ms()})
        elif kind == "function_call":
            calls.append(item)

    # -- tools -------------------------------------------------------------------------------

    def exec_command(self, call: dict[str, Any]) -> None:
        self.check()
        call_id = str(call.get("call_id") or call.get("id"))
        try:
            cmd = str(json.loads(call.get("arguments") or "{}").get("cmd") or "")
        except ValueError:
            cmd = ""
        command = f"/bin/bash -lc {shlex.quote(cmd)}"
        cwd = self.thread["cwd"]
        item = {"type": "commandExecution", "id": call_id, "command": command, "cwd": cwd, "processId": None,
                "source": "agent", "status": "inProgress", "commandActions": [{"type": "unknown", "command": cmd}],
                "aggregatedOutput": None, "exitCode": None, "durationMs": None}
        self.thread["history"].append({"type": "function_call", "name": "exec_command", "call_id": call_id,
                                       "arguments": call.get("arguments") or "{}"})
        notify("item/started", {"item": item, **self.where(), "startedAtMs": now_ms()})
        policy, sandbox = self.thread["approval"], self.thread["sandbox"]
        words = shlex.split(cmd) if cmd else []
        safe = bool(words) and words[0] in READ_ONLY and not WRITES.search(cmd)
        blocked = sandbox == "read-only" and bool(WRITES.search(cmd))
        if policy == "untrusted" and not safe:
            decision = self.ask(item, cmd)
            if decision != "accept":
                self.finish_tool(item, "declined", None, None, "exec command rejected by user")
                if decision == "cancel":
                    self.interrupt()
                    raise Interrupted()
                return
            blocked = False  # approved: run it as asked
        if blocked and policy == "on-failure":
            decision = self.ask(item, cmd)
            blocked = decision != "accept"
        if blocked:
            self.finish_tool(item, "failed", 1, "bash: Read-only file system\n",
                             "Process exited with code 1\nOutput:\nbash: Read-only file system\n")
            return
        started = time.monotonic()
        try:
            self.tool = subprocess.Popen(["/bin/bash", "-lc", cmd], cwd=cwd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            self.finish_tool(item, "failed", None, str(exc), f"failed to start: {exc}")
            return
        item["processId"] = str(self.tool.pid)
        out, _ = self.tool.communicate()
        self.check()
        code = self.tool.returncode
        text = out.decode("utf-8", "replace")
        item["durationMs"] = int((time.monotonic() - started) * 1000)
        self.finish_tool(item, "completed" if code == 0 else "failed", code, text,
                         f"Process exited with code {code}\nOutput:\n{text}")

    def finish_tool(self, item: dict[str, Any], status: str, code: int | None, output: str | None, result: str) -> None:
        item.update(status=status, exitCode=code, aggregatedOutput=output or None, source="unifiedExecStartup")
        self.tool = None
        notify("item/completed", {"item": item, **self.where(), "completedAtMs": now_ms()})
        self.thread["history"].append({"type": "function_call_output", "call_id": item["id"], "output": result})

    def ask(self, item: dict[str, Any], cmd: str) -> str:
        tid = self.thread["id"]
        notify("thread/status/changed", {"threadId": tid, "status": {"type": "active",
                                                                     "activeFlags": ["waitingOnApproval"]}})
        params = {"kind": "command", **self.where(), "itemId": item["id"], "startedAtMs": now_ms(),
                  "environmentId": "local", "command": item["command"], "cwd": item["cwd"],
                  "commandActions": item["commandActions"], "proposedExecpolicyAmendment": shlex.split(cmd),
                  "availableDecisions": ["accept", {"acceptWithExecpolicyAmendment": {
                      "execpolicy_amendment": shlex.split(cmd)}}, "cancel"]}
        rid, answer = self.agent.server_request("item/commandExecution/requestApproval", params, self.stop)
        record("approval", command=cmd, answer=answer)
        notify("serverRequest/resolved", {"threadId": tid, "requestId": rid})
        notify("thread/status/changed", {"threadId": tid, "status": {"type": "active", "activeFlags": []}})
        self.check()
        decision = (answer or {}).get("decision") if isinstance(answer, dict) else None
        if isinstance(decision, dict):
            return "accept"  # acceptWithExecpolicyAmendment
        if decision in ("accept", "acceptForSession"):
            return "accept"
        return "cancel" if decision == "cancel" else "decline"


class Retry(Exception):
    def __init__(self, reason: str, info: Any, final: str, *, stream: bool):
        super().__init__(reason)
        self.reason = reason
        self.info = info
        self.final = final
        self.stream = stream


class Agent:
    def __init__(self, overrides: list[str]):
        self.cfg = load_config(overrides)
        self.provider = Provider(self.cfg)
        self.initialized = False
        self.threads: dict[str, dict[str, Any]] = {}
        self.resumed: set[str] = set()
        self.warned: set[str] = set()
        self.turn: Turn | None = None
        self.lock = threading.Lock()
        self.next_request = 0
        self.waiting: dict[int, tuple[threading.Event, list[Any]]] = {}

    # -- server -> client requests ------------------------------------------------------------

    def server_request(self, method: str, params: dict[str, Any], stop: threading.Event) -> tuple[int, Any]:
        with self.lock:
            rid = self.next_request
            self.next_request += 1
            done = threading.Event()
            slot: list[Any] = []
            self.waiting[rid] = (done, slot)
        emit({"id": rid, "method": method, "params": params})
        while not done.wait(0.05):
            if stop.is_set():
                break
        with self.lock:
            self.waiting.pop(rid, None)
        return rid, slot[0] if slot else None

    def on_response(self, msg: dict[str, Any]) -> None:
        with self.lock:
            waiting = self.waiting.get(msg.get("id"))  # type: ignore[arg-type]
        if waiting is not None:
            waiting[1].append(msg.get("result") if "result" in msg else {"error": msg.get("error")})
            waiting[0].set()

    # -- requests ------------------------------------------------------------------------------

    def handle(self, msg: dict[str, Any]) -> None:
        rid, method = msg.get("id"), msg.get("method")
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        record("request", method=method, params=params)
        try:
            if method == "initialize":
                result = self.initialize(params)
            elif not self.initialized:
                raise Rpc(-32600, "Not initialized")
            elif method == "thread/start":
                result = self.thread_start(params)
            elif method == "thread/resume":
                result = self.thread_resume(params)
            elif method == "turn/start":
                result = self.turn_start(params)
            elif method == "turn/interrupt":
                result = self.turn_interrupt(params)
            else:
                raise Rpc(-32600, f"Invalid request: unknown variant `{method}`")
        except Rpc as exc:
            if rid is not None:
                emit({"error": {"code": exc.code, "message": exc.message}, "id": rid})
            return
        if rid is not None:
            emit({"id": rid, "result": result})
        self.after(method, result)

    def after(self, method: Any, result: Any) -> None:
        if method == "initialize":
            notify("remoteControl/status/changed", {"status": "disabled", "serverName": "fake", "installationId": None})
        elif method == "thread/start":
            notify("thread/started", {"thread": result["thread"]})
        elif method == "turn/start":
            assert self.turn is not None
            self.turn.worker.start()

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.initialized:
            raise Rpc(-32600, "Already initialized")
        self.initialized = True
        name = (params.get("clientInfo") or {}).get("name") or "client"
        home = os.environ.get("CODEX_HOME") or os.path.expanduser("~/.codex")
        return {"userAgent": f"{name}/{VERSION} (fake)", "codexHome": home, "platformFamily": "unix",
                "platformOs": "linux"}

    def settings(self, t: dict[str, Any], params: dict[str, Any]) -> None:
        t["cwd"] = str(params.get("cwd") or t.get("cwd") or os.getcwd())
        t["model"] = str(params.get("model") or t.get("model") or self.provider.model)
        t["approval"] = str(params.get("approvalPolicy") or t.get("approval") or
                            self.cfg.get("approval_policy") or "on-request")
        t["sandbox"] = str(params.get("sandbox") or t.get("sandbox") or self.cfg.get("sandbox_mode") or "read-only")
        if params.get("developerInstructions"):
            t["instructions"] = str(params["developerInstructions"])

    def thread_result(self, t: dict[str, Any]) -> dict[str, Any]:
        return {"thread": thread_obj(t), "model": t["model"], "modelProvider": t["provider"], "serviceTier": None,
                "cwd": t["cwd"], "instructionSources": [], "approvalPolicy": t["approval"],
                "approvalsReviewer": "user", "sandbox": sandbox_obj(t["sandbox"]), "reasoningEffort": None}

    def thread_start(self, params: dict[str, Any]) -> dict[str, Any]:
        t: dict[str, Any] = {"id": new_id(), "created": int(time.time()), "provider": self.provider.id,
                             "history": [], "total": None, "last": None, "last_turn": None}
        self.settings(t, params)
        if not os.path.isdir(t["cwd"]):
            raise Rpc(-32600, f"cwd does not exist: {t['cwd']}")
        self.threads[t["id"]] = t
        save_thread(t)
        return self.thread_result(t)

    def thread_resume(self, params: dict[str, Any]) -> dict[str, Any]:
        tid = str(params.get("threadId") or "")
        if not UUID.match(tid):
            bad = next((c for c in tid if not (c.isalnum() or c == "-")), tid[:1] or "?")
            raise Rpc(-32600, "invalid session id: invalid character: expected an optional prefix of `urn:uuid:` "
                              f"followed by [0-9a-fA-F-], found `{bad}` at 1")
        if tid not in self.threads:
            try:
                with open(thread_path(tid), encoding="utf-8") as fh:
                    t = json.load(fh)
            except (OSError, ValueError):
                raise Rpc(-32600, f"no rollout found for thread id {tid}") from None
            self.threads[tid] = t
        t = self.threads[tid]
        self.settings(t, params)
        self.resumed.add(tid)
        notify("deprecationNotice", {"summary": "Full-history hydration is deprecated for paginated threads; use "
                                                "`excludeTurns: true`, then page with `thread/turns/list` and "
                                                "`thread/items/list`.", "details": None})
        notify("thread/status/changed", {"threadId": tid, "status": {"type": "idle"}})
        return self.thread_result(t)

    def turn_start(self, params: dict[str, Any]) -> dict[str, Any]:
        tid = str(params.get("threadId") or "")
        t = self.threads.get(tid)
        if t is None:
            raise Rpc(-32600, f"thread not found: {tid}")
        if self.turn is not None:
            raise Rpc(-32600, "a turn is already running on this thread")
        items = params.get("input") if isinstance(params.get("input"), list) else []
        if not items:
            raise Rpc(-32602, "Invalid params: input must not be empty")
        turn = Turn(self, t, new_id(), items)
        if tid in self.resumed:
            self.resumed.discard(tid)
            if t.get("total"):
                notify("thread/tokenUsage/updated", {"threadId": tid, "turnId": t.get("last_turn"), "tokenUsage": {
                    "total": t["total"], "last": t.get("last") or t["total"], "modelContextWindow": 258400}})
            notify("thread/goal/cleared", {"threadId": tid})
        if tid not in self.warned:
            self.warned.add(tid)
            notify("warning", {"threadId": tid, "message": f"Model metadata for `{t['model']}` not found. Defaulting "
                                                           "to fallback metadata; this can degrade performance and "
                                                           "cause issues."})
        self.turn = turn
        return {"turn": turn.turn_obj("inProgress", None) | {"startedAt": None, "items": []}}

    def turn_interrupt(self, params: dict[str, Any]) -> dict[str, Any]:
        turn = self.turn
        record("interrupt", turn=params.get("turnId"))
        if turn is None or turn.id != params.get("turnId"):
            raise Rpc(-32600, "no active turn to interrupt")
        turn.interrupt()
        return {}

    def turn_done(self, turn: Turn) -> None:
        if self.turn is turn:
            self.turn = None

    # -- lifecycle -----------------------------------------------------------------------------

    def stop_all(self) -> None:
        turn = self.turn
        if turn is not None:
            turn.interrupt()

    def serve(self) -> int:
        for raw in sys.stdin.buffer:
            line = raw.strip()
            if not line:
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                emit({"error": {"code": -32700, "message": "Parse error"}, "id": None})
                continue
            if not isinstance(msg, dict):
                continue
            if "method" in msg:
                self.handle(msg)
            elif "id" in msg:
                self.on_response(msg)
        turn = self.turn
        self.stop_all()
        if turn is not None:
            turn.worker.join(2.0)
        return 0


# --- replaying a recorded app-server session ----------------------------------------------------


def replay(paths: list[str]) -> int:
    """``fake_codex.py replay <transcript.jsonl>… app-server``: play back what a real app-server said.

    Each transcript is traffic as recorded (``{"dir": "->" | "<-", "t", "msg"}`` lines, as in
    ``shared/fixtures/real-peers/codex-app-server/``). A ``->`` entry waits for the client's next
    message and checks that it is the same request (method) or a reply to the same server request;
    ``<-`` entries are written as recorded, with response ids mapped onto the client's own request
    ids. Later transcripts skip their ``initialize`` exchange (one process, one handshake), so a
    failed ``thread/resume`` can be followed by the ``thread/start`` of another recording. Every
    client line is appended to ``$FAKE_CODEX_CLIENT_LOG`` when set. A recording that ends in the
    middle of a turn (the real process was killed) ends this one with SIGTERM too; otherwise it
    exits 0 at end of input, as app-server does.
    """
    log = os.environ.get("FAKE_CODEX_CLIENT_LOG")
    ids: dict[Any, Any] = {}
    entries: list[dict[str, Any]] = []
    for n, path in enumerate(paths):
        with open(path, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        if n:
            start = next((i + 1 for i, r in enumerate(rows) if r["msg"].get("method") == "initialized"), 0)
            rows = rows[start:]
        entries.extend(rows)

    def client() -> dict[str, Any] | None:
        raw = sys.stdin.buffer.readline()
        if not raw:
            return None
        msg = json.loads(raw)
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(msg) + "\n")
        return msg

    open_turn = False
    for row in entries:
        msg = row["msg"]
        if row["dir"] == "->":
            got = client()
            if got is None:
                return 0
            if "method" in msg and got.get("method") != msg["method"]:
                sys.stderr.write(f"replay: expected {msg['method']}, the client sent {got.get('method')}\n")
                return 3
            if "method" in msg and "id" in msg:
                ids[msg["id"]] = got.get("id")
            continue
        out = dict(msg)
        if "method" not in out and "id" in out:
            out["id"] = ids.get(out["id"], out["id"])
        if out.get("method") == "turn/started":
            open_turn = True
        elif out.get("method") == "turn/completed":
            open_turn = False
        emit(out)
    if open_turn:
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)
    while client() is not None:
        pass
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["replay"]:
        files = [a for a in argv[1:] if a != "app-server"]
        return replay(files)
    if "--version" in argv or "-V" in argv:
        print(f"codex-cli {VERSION} (fake)")
        return 0
    overrides: list[str] = []
    rest: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg in ("-c", "--config"):
            overrides.append(next(it, ""))
        elif arg.startswith("--config="):
            overrides.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    if not rest or rest[0] != "app-server":
        sys.stderr.write("fake codex: only `codex app-server` is scripted\n")
        return 2
    record("start", argv=[sys.argv[0], *argv], env=sorted(os.environ), cwd=os.getcwd(),
           path=os.environ.get("PATH", ""))
    agent = Agent(overrides)

    def die(signum: int, _frame: Any) -> None:
        agent.stop_all()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, die)
    signal.signal(signal.SIGINT, die)
    return agent.serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
