"""LICOS agent runtime adapter (licos-agent-runtime: ``POST /stream_run``).

One turn is one ``POST {base-url}/stream_run`` with ``{"session_id", "content": {"query": {"prompt":
[text block, upload_file blocks…]}}}`` (plus ``messages``, the recent LangBot transcript, with
``history-source: langbot``), the headers ``Authorization: Bearer`` (optional), the identity header
(``X-Licos-Current-User-Id``), ``X-Licos-Current-Org-Id`` (optional) and ``X-Run-Id`` (the runtime
adopts it, so the run id is known before any byte comes back and the run can be cancelled with
``POST /cancel/{run_id}``). The answer is SSE with LF line ends, every event ``event: message`` and
``data: {"type": T, "content": {T: {...}}}``:

- legacy: ``message_start {msg_id}`` (= run id = run-record trace id), ``answer {answer}`` — one
  *whole* model turn each (not a token delta), ``thinking_delta {text}`` / ``thinking_done``,
  ``tool_request`` / ``tool_response``, ``approval_required``, ``error {code, error_msg}``
  (105000 model failure, 105001 timeout, 105002 attachment/parameter), ``message_end {code,
  token_cost {input_tokens, output_tokens, total_tokens, complete}}``; a Bearer token the service
  cannot check gives one untyped ``{"error_code", "error_message", "category"}`` event instead;
- managed (``x-licos-stream-resume: events-v1``): ``message_start`` without ``id:``, then every runtime
  event with ``id: N`` — ``run_started``, ``graph_event`` (``mode: "messages"`` carries the model's
  token chunks as ``[AIMessageChunk, metadata]``), the legacy events (also wrapped as
  ``platform_event`` in the raw events format), ``run_status {status, pending, error}`` — then
  ``message_end`` without ``complete``. A dropped stream is resumed with
  ``GET /agent/v1/runs/{run_id}/events?after=<last id>&format=chat``, which sends only what came after.

Errors before the stream are JSON: 400 ``{"detail": "Invalid JSON format: …"}``, 402
``{"code": 20802, "errorCode": "INSUFFICIENT_CREDIT_BALANCE", …}``, 500 ``{"detail": {"error_code",
"error_message", "stack_trace"}}``, 409, 426; a plain ``/run`` also answers 202 ``{"status":
"pending_approval", "run_id", "pending"}`` while a tool call waits for approval.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx

from runner_kit import events as ev
from runner_kit.errors import RunnerError
from runner_kit.history import recent_messages
from runner_kit.http import base_url, finish_body, open_stream, read_json, shown_url, timeout_for
from runner_kit.inputs import safe_file_name
from runner_kit.logs import get_logger
from runner_kit.runner import CANCEL_GRACE, Adapter
from runner_kit.streams import iter_sse
from runner_kit.usage import usage_from
from runner_kit.wire import cut_off, maybe_json, read_json_answer, tool_input

from . import const
from .errors import map_http, stream_error, untyped_error

log = get_logger("runner_kit.licos")


def service_root(raw: object) -> str:
    return base_url(raw, "base-url", suffixes=const.URL_SUFFIXES, example="http://127.0.0.1:8000")


def _choice(value: Any, options: tuple[str, ...]) -> str:
    text = str(value or "").strip().lower()
    return text if text in options else options[0]


def _turns(value: Any) -> int:
    try:
        n = int(float(value))
    except (TypeError, ValueError):
        return const.DEFAULT_HISTORY_TURNS
    return max(0, min(n, const.MAX_HISTORY_TURNS))


def _text_of(content: Any) -> str:
    """A LangChain message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _pending_names(pending: Any) -> list[str]:
    names: list[str] = []
    for item in pending if isinstance(pending, list) else []:
        if isinstance(item, dict):
            inner = item.get("value") if isinstance(item.get("value"), dict) else item
            name = inner.get("tool_name") or inner.get("name") or inner.get("action") or inner.get("type")
            if name:
                names.append(str(name))
    return names


class _AlreadyGone(Exception):
    """LICOS says the session to delete does not exist (any more)."""


class _Turn:
    """What one run's stream(s) have shown and seen."""

    def __init__(self) -> None:
        self.any_text = False
        self.streamed = False  # token chunks shown since the last whole ``answer``
        self.chunk_ids: set[str] = set()
        self.last_seq: int | None = None
        self.resumable = False
        self.error: RunnerError | None = None
        self.ended = False  # message_end (or a terminal run_status on the raw events route)
        self.waiting: str | None = None
        self.events = 0
        self.cut = False  # the last response broke off (managed: resumed from last_seq)
        self.tools: set[str] = set()  # tool calls LICOS started and has not answered yet


class LicosAdapter(Adapter):
    """Maps one LangBot turn onto a LICOS agent run."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY

    def __init__(self, env):
        super().__init__(env)
        cfg = env.config
        self.root = service_root(cfg.get("base-url"))
        self.protocol = _choice(cfg.get("protocol"), const.PROTOCOLS)
        self.history = _choice(cfg.get("history-source"), const.HISTORY_SOURCES)
        self.thinking = bool(cfg.get("thinking", False))
        self.run_id = uuid.uuid4().hex
        self.headers: dict[str, str] = {"Accept": "text/event-stream", const.RUN_ID_HEADER: self.run_id}
        if key := str(cfg.get("api-key") or "").strip():
            self.headers["Authorization"] = f"Bearer {key}"
        elif self.protocol == "managed":
            raise RunnerError("config.missing", "config key 'api-key' is empty: the managed LICOS protocol needs a "
                                                "LICOS user token (the service answers a bare HTTP 500 without one)")
        user_header = str(cfg.get("user-id-header", const.DEFAULT_USER_HEADER) or "").strip()
        if user_header and env.user:
            self.headers[user_header] = env.user
        if org := str(cfg.get("org-id") or "").strip():
            self.headers[const.ORG_HEADER] = org
        # who is asking, for the calls beside a run (its record, a session to delete)
        self.control = {k: v for k, v in self.headers.items() if k not in ("Accept", const.RUN_ID_HEADER)}
        self.files: list[str] = []
        self._started = False
        self._done = False

    # --- request ---------------------------------------------------------------------------------

    def _prompt(self) -> list[dict[str, Any]]:
        inp = self.env.input
        blocks: list[dict[str, Any]] = [{"type": "text", "content": {"text": inp.text}}] if inp.text else []
        for f in inp.files:
            if f.data is not None:
                url = f"data:{f.mime_type};base64,{base64.b64encode(f.data).decode()}"
            elif f.url and f.url.lower().startswith(("http://", "https://", "data:")):
                url = f.url
            else:
                continue
            name = safe_file_name(f.name)
            self.files.append(name)
            blocks.append({"type": "upload_file",
                           "content": {"upload_file": {"file_name": name, "url": url, "mime_type": f.mime_type}}})
        return blocks

    async def _body(self, session: str) -> dict[str, Any]:
        body: dict[str, Any] = {"session_id": session, "content": {"query": {"prompt": self._prompt()}}}
        if self.history == "langbot":
            turns = _turns(self.env.config.get("history-turns", const.DEFAULT_HISTORY_TURNS))
            earlier = await recent_messages(self.env.ctx, turns, self.env.input.text)
            if earlier is None and turns:
                log.info("%s: LangBot offers no conversation history to this run; sending session_id only",
                         self.platform)
            elif earlier is not None:
                body["messages"] = [*earlier, {"role": "user", "content": self.env.input.text}]
        return body

    # --- streaming -------------------------------------------------------------------------------

    def _on_error(self, status: int, raw: bytes, ctype: str) -> RunnerError:
        return map_http(status, raw, ctype, self.files)

    async def stream(self) -> AsyncIterator[ev.Event]:
        session = self.env.session.current if isinstance(self.env.session.current, str) else None
        fresh = session is None
        session = session or f"langbot-{uuid.uuid4().hex}"
        body = await self._body(session)
        st = _Turn()
        async with open_stream(self.env.client, "POST", self.root + const.STREAM_PATH, budget=self.env.budget(),
                               platform=self.platform, error_parser=self._on_error, headers=self.headers,
                               json=body) as resp:
            self._started = True  # the service answered: there is a run to cancel
            if fresh:
                yield ev.SessionId(session)
            yield ev.Log(f"LICOS run {self.run_id} (session {session}); run record: "
                         f"{shown_url(self.root)}{const.RUN_RECORD_PATH.format(run_id=self.run_id)}")
            yield ev.Meta("licos_run_id", self.run_id)
            ctype = resp.headers.get("content-type", "").lower()
            if "event-stream" not in ctype:
                doc = await read_json_answer(resp, ctype, self.platform, const.BASE_URL_HINT)
                for item in self._json_answer(resp.status_code, doc):
                    yield item
                self._done = True
                return
            st.resumable = resp.headers.get(const.RESUME_HEADER, "").lower() == "events-v1"
            if self.protocol == "managed" and not st.resumable:
                log.info("%s: protocol is managed but the service streams the legacy protocol", self.platform)
            async with self._vouching(st):
                async for item in self._read(resp, st):
                    yield item
        resumes = 0
        while st.cut and st.waiting is None and st.error is None and resumes < const.MAX_RESUMES:
            resumes += 1
            st.cut = False
            yield ev.Log(f"LICOS stream of run {self.run_id} broke off after event {st.last_seq}; resuming")
            path = const.EVENTS_PATH.format(run_id=quote(self.run_id, safe=""))
            async with open_stream(self.env.client, "GET", self.root + path, budget=self.env.budget(),
                                   platform=self.platform, error_parser=self._on_error, headers=self.headers,
                                   params={"after": st.last_seq, "format": "chat"}) as resp:
                async with self._vouching(st):
                    async for item in self._read(resp, st):
                        yield item
        self._done = True
        if st.error is not None:
            raise st.error
        if st.cut:
            raise RunnerError("upstream.unavailable", f"the connection to {self.platform} kept breaking off ({resumes} "
                                                      f"resumes) and run {self.run_id} could not be followed to its end")
        if st.waiting is not None:
            yield ev.Text(("\n\n" if st.any_text else "") + st.waiting)
            return
        if not st.events:
            raise RunnerError("upstream.empty_response", f"{self.platform} closed the stream without sending anything")
        if not st.ended and not st.any_text:
            raise RunnerError("upstream.unavailable", f"the connection to {self.platform} closed before the answer "
                                                      "finished (no message_end)")

    @asynccontextmanager
    async def _vouching(self, st: _Turn) -> AsyncIterator[None]:
        """While a managed stream is read (with an idle timeout): :meth:`_vouch` beside it."""
        task = asyncio.create_task(self._vouch(st)) if st.resumable and self.env.idle_timeout > 0 else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                await asyncio.wait({task})

    async def _vouch(self, st: _Turn) -> None:
        """Managed protocol: LICOS streams every model token and step, but nothing while a tool runs
        (no keep-alives: managed_agents.py ``events`` sends stored events only). While a tool call
        is open and the stream has been quiet for a third of idle-timeout, ask the service about the
        run (``GET /agent/v1/runs/{id}``): a run it still reports ``running`` counts as life, so a
        slow tool is not taken for a dead stream. A service that does not answer, or no longer runs
        it, is left to the idle timeout."""
        every = max(self.env.idle_timeout / 3, 0.05)
        url = self.root + const.RUN_PATH.format(run_id=quote(self.run_id, safe=""))
        while True:
            await asyncio.sleep(every)
            if not st.tools or time.monotonic() - self.env.last_activity < every:
                continue
            try:
                async with open_stream(self.env.client, "GET", url, budget=every, platform=self.platform,
                                       headers=self.control) as resp:
                    doc = await read_json(resp, self.platform, limit=64 * 1024)
            except (RunnerError, httpx.HTTPError):
                continue
            if isinstance(doc, dict) and doc.get("status") == "running":
                self.env.touch()

    async def _read(self, resp: httpx.Response, st: _Turn) -> AsyncIterator[ev.Event]:
        """The events of one response; a cut-off stream ends quietly when it can be resumed."""
        events = iter_sse(resp.aiter_bytes(), touch=self.env.touch)
        while True:
            try:
                sse = await anext(events)
            except StopAsyncIteration:
                return
            except (httpx.HTTPError, RunnerError) as exc:
                if self.protocol == "managed" and st.resumable and st.last_seq is not None and cut_off(exc):
                    log.info("%s: the stream broke off (%s)", self.platform, type(exc).__name__)
                    st.cut = True
                    return
                raise
            if sse.id is not None and sse.id.strip().isdigit():
                st.last_seq = int(sse.id.strip())
            if not sse.data:
                continue
            data = sse.json()
            if not isinstance(data, dict):
                raise RunnerError("upstream.protocol", f"{self.platform} sent an event that is not an object")
            st.events += 1
            for item in self._event(data, st):
                yield item
            if st.ended or st.waiting is not None:
                await finish_body(events)
                return

    def _event(self, data: dict[str, Any], st: _Turn) -> list[ev.Event]:
        kind = data.get("type")
        if kind is None and "error_code" in data:
            raise untyped_error(data)
        if kind == "platform_event" and isinstance(data.get("data"), dict):
            data = data["data"]
            kind = data.get("type")
        content = data.get("content")
        payload: dict[str, Any] = (content[kind] if isinstance(content, dict) and isinstance(content.get(kind), dict)
                                   else content if isinstance(content, dict) else data)
        match kind:
            case "message_start" | "run_started":
                return []
            case "answer":
                st.tools.clear()
                return self._answer(payload.get("answer"), st)
            case "graph_event":
                return self._graph(data, st)
            case "thinking_delta":
                text = payload.get("text")
                return [ev.Think(text)] if self.thinking and isinstance(text, str) and text else []
            case "tool_request":
                call_id = str(payload.get("tool_call_id") or uuid.uuid4().hex)
                st.tools.add(call_id)
                return [ev.ToolStarted(call_id=call_id, name=str(payload.get("tool_name") or "tool"),
                                       parameters=tool_input(payload.get("parameters")))]
            case "tool_response":
                st.tools.discard(str(payload.get("tool_call_id") or ""))
                ok = str(payload.get("code", "0")) in ("0", "None", "")
                return [ev.ToolCompleted(call_id=str(payload.get("tool_call_id") or ""),
                                         name=str(payload.get("tool_name") or "tool"),
                                         result=maybe_json(payload.get("result")),
                                         error=None if ok else str(payload.get("message") or "the tool failed"))]
            case "approval_required":
                st.waiting = self._approval([payload])
                return []
            case "error":
                if st.error is None:
                    st.error = stream_error(payload.get("code"), payload.get("error_msg") or payload.get("message"),
                                            self.files)
                return []
            case "run_status":
                return self._status(data, st)
            case "message_end":
                return self._end(payload, st)
        return []

    def _answer(self, text: Any, st: _Turn) -> list[ev.Event]:
        """A whole model turn: shown once, as its own paragraph (managed: unless its tokens streamed)."""
        if st.streamed:
            st.streamed = False
            return []
        if not isinstance(text, str) or not text.strip():
            return []
        sep = "\n\n" if st.any_text else ""
        st.any_text = True
        return [ev.Text(sep + text)]

    def _graph(self, data: dict[str, Any], st: _Turn) -> list[ev.Event]:
        """Managed ``graph_event``: the model's token chunks (``mode: messages``) are the answer."""
        pair = data.get("data")
        if data.get("mode") != "messages" or not isinstance(pair, list) or not pair or not isinstance(pair[0], dict):
            return []
        msg = pair[0]
        if msg.get("type") not in ("AIMessageChunk", "ai"):
            return []
        text = _text_of(msg.get("content"))
        if not text:
            return []
        st.tools.clear()  # the model speaks again: no tool is running
        mid = str(msg.get("id") or "")
        sep = ""
        if mid not in st.chunk_ids:
            st.chunk_ids.add(mid)
            sep = "\n\n" if st.any_text else ""
        st.any_text = st.streamed = True
        return [ev.Text(sep + text)]

    def _status(self, data: dict[str, Any], st: _Turn) -> list[ev.Event]:
        status = str(data.get("status") or "")
        if status == "failed":
            err = data.get("error") if isinstance(data.get("error"), dict) else {}
            st.error = st.error or stream_error(err.get("code"), err.get("message"), self.files)
        elif status in ("waiting_approval", "waiting_input"):
            st.waiting = self._approval(data.get("pending"), status)
        elif status in ("cancelled", "interrupted", "expired"):
            st.error = st.error or RunnerError(
                "upstream.error", f"{self.platform} run {self.run_id} ended as {status} before it answered")
        elif status == "paused":
            st.waiting = f"(The LICOS run {self.run_id} paused before it finished; it can be resumed on the service.)"
        if status in const.TERMINAL and status != "completed":
            st.ended = True
        return []

    def _approval(self, pending: Any, status: str = "waiting_approval") -> str:
        names = _pending_names(pending)
        what = ", ".join(f"'{n}'" for n in names if n not in ("approval", "input")) or "a tool call"
        if status == "waiting_input":
            return f"(The LICOS agent is waiting for more input before it continues run {self.run_id}.)"
        return (f"(The LICOS agent is waiting for approval before it runs {what}. Someone allowed to decide must "
                f"approve or reject it on the LICOS service: GET {const.APPROVALS_PATH.format(run_id=self.run_id)} "
                "lists what waits.)")

    def _end(self, payload: dict[str, Any], st: _Turn) -> list[ev.Event]:
        st.ended = True
        out: list[ev.Event] = []
        cost = payload.get("token_cost") if isinstance(payload.get("token_cost"), dict) else None
        usage = usage_from(cost, prompt="input_tokens", completion="output_tokens")
        counted = usage is not None and any((usage.prompt_tokens, usage.completion_tokens, usage.total_tokens))
        if cost is not None and cost.get("complete") is False:
            # at least one model call reported no usage: the counts are a lower bound, never the total
            out.append(ev.Log(f"LICOS run {self.run_id}: token usage is incomplete (token_cost.complete=false)",
                              "warning"))
            if usage is not None and counted:
                usage.extra["usage_complete"] = False
            else:
                usage = None
        elif not counted:
            usage = None  # all zero: no model call reported usage (unknown, never 0)
        if usage is not None:
            out.append(usage)
        code = str(payload.get("code", "0"))
        if code not in ("0", "") and st.error is None:
            st.error = stream_error(code, payload.get("message"), self.files)
        return out

    def _json_answer(self, status: int, doc: dict[str, Any]) -> list[ev.Event]:
        """A 2xx JSON answer instead of a stream: an approval gate (202) or a final graph state."""
        if str(doc.get("status") or "") in ("pending_approval", "waiting_approval"):
            return [ev.Text(self._approval(doc.get("pending")))]
        if "error_code" in doc:
            raise untyped_error(doc)
        messages = doc.get("messages")
        for msg in reversed(messages if isinstance(messages, list) else []):
            if isinstance(msg, dict) and msg.get("type") in ("ai", "AIMessage", "assistant"):
                if text := _text_of(msg.get("content")).strip():
                    return [ev.Text(text)]
        raise RunnerError("upstream.protocol", f"{self.platform} answered HTTP {status} with JSON but no answer")

    async def end_conversation(self, upstream_id: Any) -> None:
        """A LangBot reset left this LICOS session behind. Managed protocol: ``DELETE
        /agent/v1/sessions/{id}`` removes it with its history, checkpoints and runs (for the user the
        token belongs to; one already gone, 404, is left at that; other refusals, such as 409 while a
        run of it waits for approval, are raised for the kit to log). The legacy protocol has no
        sessions to delete: a project's own memory of one is process-local and expires by itself."""
        if self.protocol != "managed" or not isinstance(upstream_id, str) or not upstream_id.strip():
            return
        url = self.root + const.SESSION_PATH.format(session_id=quote(upstream_id, safe=""))

        def on_error(status: int, raw: bytes, ctype: str) -> Exception:
            return _AlreadyGone() if status == 404 and "session not found" in raw.decode("utf-8", "replace").lower() \
                else map_http(status, raw, ctype)

        try:
            async with open_stream(self.env.client, "DELETE", url, budget=CANCEL_GRACE, platform=self.platform,
                                   error_parser=on_error, headers=self.control):
                pass
        except _AlreadyGone:
            log.info("%s: session %s was already gone", self.platform, upstream_id[:64])
            return
        log.info("%s: deleted session %s after a LangBot reset", self.platform, upstream_id[:64])

    async def cancel(self) -> None:
        """``POST /cancel/{run_id}`` (host cancel, deadline or idle timeout)."""
        if self._done or not self._started:
            return
        url = self.root + const.CANCEL_PATH.format(run_id=quote(self.run_id, safe=""))
        try:
            resp = await self.env.client.post(url, headers=self.headers, timeout=timeout_for(2.0))
        except Exception:  # noqa: BLE001 - best effort on cancel
            log.info("%s: could not cancel run %s", self.platform, self.run_id)
            return
        if resp.status_code == 401 and "Authorization" not in self.headers:
            # the runtime cancels only for the token that started the run; closing the stream stopped it
            log.info("%s: run %s stopped by closing its stream (/cancel needs api-key)", self.platform, self.run_id)
        elif resp.status_code >= 400:
            log.info("%s: /cancel for run %s answered HTTP %s", self.platform, self.run_id, resp.status_code)
