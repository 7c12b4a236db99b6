"""DeerFlow (and any LangGraph Platform-compatible server) adapter.

One turn: ``POST {api}/threads`` once per conversation (the thread id is kept under
``deerflow.thread_id``), then ``POST {api}/threads/{id}/runs/stream`` with ``stream_mode``
``values, messages-tuple, updates, custom``. The SSE stream (LangGraph: CRLF, ``: heartbeat``
comments every 5 s, ends by closing; DeerFlow: LF, heartbeats, a final ``event: end`` with
``data: null``) carries, in order:

- ``metadata`` ``{"run_id", …}`` (the run id is also in the ``Content-Location`` header);
- ``values`` — the thread's *whole* state after each step: the first one lists every message from
  earlier turns, which must never be shown again;
- ``messages`` — ``[message, metadata]`` tuples: ``AIMessageChunk`` deltas (text, reasoning in
  ``additional_kwargs.reasoning_content`` or ``thinking`` blocks, ``tool_call_chunks`` with name and
  id only on the first, ``usage_metadata`` on one late chunk); a node that returns a whole ``ai``
  message sends it once in full; tool results come as whole ``tool`` messages;
- ``updates`` — ``{node: partial state}``; a graph ``interrupt()`` shows as ``__interrupt__`` here
  and in ``values``, and then the stream ends;
- ``custom`` — DeerFlow's subagent progress (``task_started`` … ``task_completed``/``task_failed``);
- ``error`` — LangGraph ``{"error", "message"}`` / DeerFlow ``{"name", "message"}``.

Only ``messages`` tuples give answer text as it streams; ``values`` says which ids are old, holds
interrupts and the files presented (``artifacts``), is the last resort when a run streamed no message
at all, and, at the end, carries what a middleware added to a message that already streamed (the
messages mode never sends an id twice). Runs start with ``on_disconnect: "continue"``: a stream cut
mid-answer is joined again (``GET …/runs/{run_id}/stream``, after the last event id), while a stop
from LangBot cancels the run through the API. A LangBot reset deletes the thread it left behind
(:meth:`DeerFlowAdapter.end_conversation`). An interrupt's question ends the run
as its answer and is kept for this session (:mod:`runner_kit.pending`, under
``deerflow.pending-interrupt`` made per session like the thread id): the asker's (or an approver's)
next message resumes the thread with ``command: {"resume": <text>}``, after ``GET
/threads/{id}/state`` says the interrupt still waits (answered in DeerFlow's own UI meanwhile, the
reply goes as an ordinary message with a one-line note). In a shared thread (the default,
``user-id-source: conversation``) anyone else's message is kept and sent right after the question
is settled: a run with new input on an interrupted thread would drop the interrupt (LangGraph starts
the graph afresh; seen on ``langgraph dev``). DeerFlow's own clarifying question (its
``ask_clarification`` tool, ended by ClarificationMiddleware) arrives as a ``tool`` message and is
shown as the answer.
"""

from __future__ import annotations

import asyncio
import base64
import mimetypes
import posixpath
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx

from runner_kit import events as ev
from runner_kit import outfiles
from runner_kit.errors import RunnerError, SessionMissing
from runner_kit.http import (
    base_url,
    finish_body,
    open_stream,
    read_json,
    shown_url,
    timeout_for,
    transport_error,
)
from runner_kit.inputs import InputFile, safe_file_name
from runner_kit.logs import get_logger
from runner_kit.netguard import fetch
from runner_kit.pending import PendingAction
from runner_kit.results import escaped_len
from runner_kit.runner import DEFAULT_SESSION_RESET_TEXT, Adapter
from runner_kit.streams import SSEEvent, iter_sse
from runner_kit.texts import t
from runner_kit.usage import usage_from
from runner_kit.wire import maybe_json, read_json_answer, tool_input

from . import const
from .errors import assistant_missing, map_http, route_missing, stream_error, thread_missing
from .messages import is_chunk, kind, plain_text, question_text, reasoning_of, split_content

log = get_logger("runner_kit.deerflow")

# server root -> the API prefix found by probing it (kept for the life of the process)
_PREFIXES: dict[str, str] = {}
CLARIFY_TOOL = "ask_clarification"


class _JoinRefused(Exception):
    """LangGraph answers a join of a run it does not know with an ``error`` event (an
    ``HTTPException``, "404: Run not found"), not a 404: the run is gone, not failed."""


def _refused_join(sse: SSEEvent) -> bool:
    data = sse.json() if sse.data else None
    return isinstance(data, dict) and data.get("error") == "HTTPException"


class _NoRoute(Exception):
    """This prefix has no LangGraph API (FastAPI's bare 404, a web page, 405): try the next one."""


def api_location(raw: object) -> tuple[str, tuple[str, ...]]:
    """``(server root, API prefixes to use or probe)`` from ``api-base`` as pasted or migrated."""
    url = base_url(raw, "api-base", example="http://127.0.0.1:2026")
    low = url.lower()
    for prefix in (const.NGINX_PREFIX, const.GATEWAY_PREFIX):
        if low.endswith(prefix):
            return url[: -len(prefix)], (prefix,)
    return url, const.PROBE_ORDER


def stored_thread(value: Any) -> tuple[str | None, dict[str, Any] | None]:
    """The state value: a thread id, or (kept by versions before the question moved to
    :mod:`runner_kit.pending`) ``{"thread_id", "interrupts", "question"}`` while a graph interrupt
    waited for an answer."""
    if isinstance(value, str) and value:
        return value, None
    if isinstance(value, dict) and isinstance(value.get("thread_id"), str) and value["thread_id"]:
        return value["thread_id"], value if isinstance(value.get("interrupts"), list) else None
    return None, None


class _Run:
    """What one run's stream has shown and seen so far."""

    def __init__(self, resumed: set[str]) -> None:
        self.before: set[str] | None = None  # message ids in the first ``values``: earlier turns
        self.last_values: dict[str, Any] | None = None
        self.updated: list[dict[str, Any]] = []  # messages the nodes returned (``updates``), all new
        self.shown: dict[str, str] = {}  # AI message id -> answer text shown for it
        self.thought: dict[str, str] = {}  # AI message id -> reasoning shown for it
        self.texted: list[str] = []  # AI message ids that showed text, in order
        self.calls: dict[tuple[str, Any], dict[str, Any]] = {}  # tool calls still streaming their arguments
        self.started: set[str] = set()
        self.completed: set[str] = set()
        self.usage: dict[str, dict[str, Any]] = {}  # AI message id -> usage_metadata
        self.interrupts: list[dict[str, Any]] = []
        self.resumed = resumed  # interrupt ids this run answers (never shown again)
        self.clarification: str | None = None
        self.events = 0
        self.ended = False
        self.check_kept = False  # a kept thread: notice when it comes back empty
        # joining the run again after its stream was cut (on_disconnect "continue" keeps it running)
        self.last_event_id: str | None = None  # the last ``id:`` seen: a join replays what follows it
        self.gap = False  # DeerFlow no longer keeps the events after that id
        self.catch_up = False  # a join without exact replay: whole messages from ``values`` only
        self.joined_values = False  # a ``values`` event came on the latest join
        # files the agent presented in this run (DeerFlow: values.artifacts, the tools node's updates)
        self.artifacts_before: set[str] | None = None
        self.presented: list[str] = []

    @property
    def any_text(self) -> bool:
        return bool(self.texted)


class DeerFlowAdapter(Adapter):
    """Maps one LangBot turn onto a DeerFlow / LangGraph thread run."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY

    def __init__(self, env):
        super().__init__(env)
        cfg = env.config
        self.root, self.prefixes = api_location(cfg.get("api-base"))
        self.prefix: str | None = self.prefixes[0] if len(self.prefixes) == 1 else _PREFIXES.get(self.root)
        self._confirmed = False
        self.assistant = str(cfg.get("assistant-id") or "").strip() or const.DEFAULT_ASSISTANT
        self.headers: dict[str, str] = {}
        auth = str(cfg.get("auth-header") or "").strip()
        key = str(cfg.get("api-key") or "").strip()
        if auth:
            self.headers["Authorization"] = auth
        elif key:
            self.headers["Authorization"] = f"Bearer {key}"
        if key:
            self.headers["x-api-key"] = key  # LangGraph Platform's header
        self.extra = extra_configurable(cfg.get("extra-configurable"))
        self.thread_id: str | None = None
        self.run_id: str | None = None
        # a graph interrupt waiting for the person who asked, kept per session like the thread id
        self.pending = PendingAction(env, const.PENDING_KEY, "DeerFlow question")
        self._done = False
        self._unknown: set[str] = set()

    # --- HTTP ------------------------------------------------------------------------------------

    @property
    def deerflow(self) -> bool:
        """The API found is DeerFlow's (its gateway, or behind its nginx), not a plain LangGraph server."""
        return self.prefix in (const.NGINX_PREFIX, const.GATEWAY_PREFIX)

    @asynccontextmanager
    async def _open(
        self, method: str, path: str, on_error: Callable[[int, bytes, str], Exception], *,
        json_for: Callable[[str], Any] | None = None, extra_headers: dict[str, str] | None = None, **kw: Any
    ) -> AsyncIterator[httpx.Response]:
        """``open_stream`` on the API; while the prefix is unknown, each candidate in turn. A prefix
        remembered from an earlier run is tried first, but the others still follow it: the server at
        that address may have changed (DeerFlow replaced by a plain LangGraph server, say).
        ``json_for(prefix)`` is the JSON body for the server behind that prefix."""
        if self.prefix is None:
            tries = self.prefixes
        elif self._confirmed or len(self.prefixes) == 1:
            tries = (self.prefix,)
        else:
            tries = (self.prefix, *(p for p in self.prefixes if p != self.prefix))
        probing = len(tries) > 1

        def parser(status: int, body: bytes, ctype: str) -> Exception:
            if probing and route_missing(status, body):
                return _NoRoute()
            return on_error(status, body, ctype)

        headers = {**self.headers, **(extra_headers or {})}
        for prefix in tries:
            stack = AsyncExitStack()
            if json_for is not None:
                kw["json"] = json_for(prefix)
            try:
                resp = await stack.enter_async_context(open_stream(
                    self.env.client, method, self.root + prefix + path, budget=self.env.budget(),
                    platform=self.platform, error_parser=parser, headers=headers, **kw))  # type: ignore[arg-type]
            except _NoRoute:
                await stack.aclose()
                continue
            async with stack:
                self.prefix = prefix
                self._confirmed = True  # answered in this run: later requests of the run go straight there
                if probing:
                    _PREFIXES[self.root] = prefix
                yield resp
            return
        raise RunnerError(
            "config.invalid",
            f"no DeerFlow or LangGraph API answered at {shown_url(self.root)} (tried "
            f"{', '.join(p or '/' for p in tries)}); {const.BASE_URL_HINT}",
        )

    async def _create_thread(self) -> str:
        body = {"metadata": {"source": "langbot", "langbot_user": self.env.user}}
        async with self._open("POST", const.THREADS_PATH, map_http, json=body) as resp:
            doc = await read_json(resp, self.platform)
        tid = doc.get("thread_id") if isinstance(doc, dict) else None
        if not isinstance(tid, str) or not tid:
            raise RunnerError("upstream.protocol", f"{self.platform} created a thread but sent no thread_id")
        return tid

    async def _upload(self, files: list[InputFile]) -> list[dict[str, Any]]:
        """DeerFlow's ``POST /api/threads/{id}/uploads`` (multipart ``files``), in one request."""
        parts = [("files", (safe_file_name(f.name), f.data or b"", f.mime_type))
                 for f in files]
        names = ", ".join(repr(p[1][0]) for p in parts)

        def on_error(status: int, raw: bytes, ctype: str) -> RunnerError:
            err = map_http(status, raw, ctype)
            return RunnerError(err.code, f"uploading {names} failed: {err.message}", retryable=err.retryable,
                               status=err.status)

        url = self.root + const.UPLOAD_PATH.format(thread_id=quote(self.thread_id or "", safe=""))
        async with open_stream(self.env.client, "POST", url, budget=self.env.budget(), platform=self.platform,
                               error_parser=on_error, headers=self.headers, files=parts) as resp:
            doc = await read_json(resp, self.platform)
        got = doc.get("files") if isinstance(doc, dict) else None
        if not isinstance(got, list):
            raise RunnerError("upstream.protocol", f"{self.platform} upload of {names} returned no file list")
        return [{"filename": f.get("filename"), "size": f.get("size"), "path": f.get("virtual_path") or f.get("path"),
                 "status": "uploaded"} for f in got if isinstance(f, dict)]

    # --- request ---------------------------------------------------------------------------------

    async def _message(self) -> tuple[dict[str, Any], list[str]]:
        """The human message (images as content parts, other files uploaded) and what was left out."""
        inp = self.env.input
        images = [f for f in inp.files if f.kind == "image" or f.mime_type.startswith("image/")]
        others = [f for f in inp.files if f not in images]
        content: Any = inp.text
        if images:
            parts: list[dict[str, Any]] = [{"type": "text", "text": inp.text}] if inp.text else []
            for f in images:
                url = f.url if f.data is None else f"data:{f.mime_type};base64,{base64.b64encode(f.data).decode()}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
            content = parts
        msg: dict[str, Any] = {"role": "user", "content": content}
        skipped: list[str] = []
        uploadable = [f for f in others if f.data is not None]
        skipped += [f.name for f in others if f.data is None]
        if uploadable and self.prefix in (const.NGINX_PREFIX, const.GATEWAY_PREFIX):
            msg["additional_kwargs"] = {"files": await self._upload(uploadable)}
        else:
            skipped += [f.name for f in uploadable]
        return msg, skipped

    def _context(self) -> dict[str, Any]:
        cfg = self.env.config
        ctx: dict[str, Any] = {  # (the server sets thread_id itself)
            "thinking_enabled": bool(cfg.get("thinking-enabled")),
            "is_plan_mode": bool(cfg.get("plan-mode")),
            "subagent_enabled": bool(cfg.get("subagent-enabled")),
            "max_concurrent_subagents": _positive(cfg.get("max-concurrent-subagents"), const.DEFAULT_MAX_SUBAGENTS),
        }
        if model := str(cfg.get("model-name") or "").strip():
            ctx["model_name"] = model
        return ctx

    def _for_server(self, body: dict[str, Any]) -> Callable[[str], dict[str, Any]]:
        """The run body for the server behind ``prefix``. The owner's extra-configurable values go
        where each server passes them to the graph: DeerFlow copies ``config.configurable`` into the
        graph's config as it is but only its own keys from ``context`` (``build_run_config``,
        ``merge_run_context_overrides`` in app/gateway/services.py); LangGraph refuses configurable
        next to context and copies ``context`` into the graph's configurable (langgraph-api
        ``models/run.py`` ``create_valid_run``), so there they join the context. A plain LangGraph
        server keeps the run's events for a join only when asked (``stream_resumable``); DeerFlow
        keeps them anyway and refuses that field."""
        def build(prefix: str) -> dict[str, Any]:
            out = dict(body)
            if prefix in (const.NGINX_PREFIX, const.GATEWAY_PREFIX):
                if self.extra:
                    out["config"] = {**body["config"], "configurable": dict(self.extra)}
            else:
                out["stream_resumable"] = True
                if self.extra:
                    out["context"] = {**self.extra, **body["context"]}
            return out
        return build

    async def _body(self, resume: list[str] | None) -> tuple[dict[str, Any], list[str]]:
        body: dict[str, Any] = {
            "assistant_id": self.assistant,
            "stream_mode": list(const.STREAM_MODES),
            # settings go in ``context`` (LangGraph refuses configurable and context together);
            # extra-configurable is placed per server (_for_server)
            "config": {"recursion_limit": _positive(self.env.config.get("recursion-limit"),
                                                    const.DEFAULT_RECURSION_LIMIT)},
            "context": self._context(),
            "multitask_strategy": "reject",
            # a cut stream must not cancel the run: it is joined again (_rejoin); a stop from
            # LangBot cancels it through the API (cancel)
            "on_disconnect": "continue",
        }
        if resume is not None:  # a typed answer (a message with files is never one: runner_kit.pending)
            text = self.env.input.text
            ids = [i for i in resume if i]
            body["command"] = {"resume": {i: text for i in ids} if len(ids) > 1 else text}
            return body, []
        msg, skipped = await self._message()
        body["input"] = {"messages": [msg]}
        return body, skipped

    # --- the question an interrupt asks ----------------------------------------------------------

    def _read_typed(self, text: str) -> str | None:
        """Whatever the asker types next is the value the interrupt resumes with."""
        return text if text.strip() else None

    async def _waiting(self, thread_id: str) -> set[str] | bool | None:
        """What the thread waits on now (``GET /threads/{id}/state``): the ids of its interrupts
        where the server lists them (LangGraph: ``interrupts``, and each task's), else whether the
        graph waits at all (DeerFlow's gateway lists tasks without interrupts: ``next``); None when
        the state cannot be read (the answer then goes as a resume, as the thread was left)."""
        path = const.STATE_PATH.format(thread_id=quote(thread_id, safe=""))
        try:
            async with self._open("GET", path, map_http) as resp:
                doc = await read_json(resp, self.platform)
        except (RunnerError, httpx.HTTPError) as exc:
            log.info("%s: could not read the state of thread %s (%s); resuming as asked", self.platform,
                     thread_id, str(exc)[:200])
            return None
        if not isinstance(doc, dict):
            return None
        tasks = [t for t in doc.get("tasks") or [] if isinstance(t, dict)] if isinstance(doc.get("tasks"), list) else []
        groups = [g for g in (doc.get("interrupts"), *(t.get("interrupts") for t in tasks)) if isinstance(g, list)]
        if groups:
            return {str(i.get("id") or "") for g in groups for i in g if isinstance(i, dict)}
        if isinstance(doc.get("next"), list):
            return bool(doc["next"])
        return None

    async def _still_asked(self, record: dict[str, Any], thread_id: str) -> tuple[list[str] | None, str]:
        """``(interrupt ids to resume, "")``, or ``(None, why)`` when nothing of the question waits
        any more and the answer must go as an ordinary message (a resume would run nothing: the
        server answers it with the thread's values unchanged)."""
        ids = [str(i) for i in record.get("interrupts") or []]
        if record.get("thread_id") and record["thread_id"] != thread_id:
            return None, t("its thread is gone", "它所在的线程已不存在")
        waiting = await self._waiting(thread_id)
        elsewhere = t("it was answered elsewhere (in DeerFlow itself?)", "它已在别处得到回答（也许是在 DeerFlow 中？）")
        if waiting is None:
            return ids, ""
        if isinstance(waiting, bool):
            return (ids, "") if waiting else (None, elsewhere)
        live = [i for i in ids if i in waiting] if any(ids) else (ids if waiting else [])
        return (live, "") if live else (None, elsewhere)

    # --- streaming -------------------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[ev.Event]:
        thread_id, legacy = stored_thread(self.env.session.current)
        if legacy is not None and self.pending.record() is None:  # kept in the thread's value before
            self.pending.adopt({"thread_id": thread_id, "interrupts": legacy["interrupts"],
                                "title": str(legacy.get("question") or "").strip().split("\n")[0][:120]})
        res = self.pending.resolve(lambda _submission: None, self._read_typed)
        for item in res.events:
            yield item
        if res.answer is None and not res.go_on:
            return
        if self.pending.foreign and res.record is not None:  # an approver answering another member's
            thread_id = str(res.record.get("thread_id") or "") or None  # question: it is in their thread
        stored = thread_id is not None
        if thread_id is None:
            thread_id = await self._create_thread()
        self.thread_id = thread_id
        resume: list[str] | None = None
        kept = res.kept
        if res.answer is not None and res.record is not None:
            resume, why = await self._still_asked(res.record, thread_id)
            if resume is None:
                what = self.pending.what(res.record)
                log.info("%s: %s no longer waits (%s); the reply goes as a new message", self.platform,
                         res.record["id"], why)
                yield self.pending.gone()
                yield ev.Text(t("({What} no longer waits for an answer: {why}; your reply was sent as a new message.)",
                                "（{What}已不再等待回答：{why}；你的回复已作为新消息发送。）",
                                What=what[:1].upper() + what[1:], why=why) + "\n\n")
                if kept:
                    yield self.pending.kept_sent()
                    self.env.input = self.pending.with_kept(kept)
                    kept = []
        async for item in self._run(thread_id, stored, resume):
            if not (self.pending.foreign and isinstance(item, ev.SessionId)):
                yield item  # (that thread is the other member's, not this session's)
        if kept and self.pending.record() is None:
            # what others wrote while the question was open, now that it is answered: a new run on
            # the thread (before, it would have dropped the interrupt: runner_kit.pending)
            yield self.pending.kept_sent()
            yield ev.Text(self.pending.kept_note(kept))
            self.env.input = self.pending.kept_input(kept)
            async for item in self._run(thread_id, True, None):
                yield item

    async def _run(self, thread_id: str, stored: bool, resume: list[str] | None) -> AsyncIterator[ev.Event]:
        """One run on the thread: this run's message, or the answer to the interrupts ``resume``."""
        self.run_id = None
        self._done = False
        body, skipped = await self._body(resume)
        note: list[ev.Event] = []
        if skipped:
            why = (t("only images can be passed to this server", "这个服务器只能接收图片") if self.prefix not in
                   (const.NGINX_PREFIX, const.GATEWAY_PREFIX) else t("they were only links", "它们只是链接"))
            names = ", ".join(repr(n) for n in skipped)
            note = [ev.Log(f"files not sent to {self.platform}: {names} ({why})", "warning"),
                    ev.Text(t("(Not sent to {p}: {names}; {why}.)", "（未发送给 {p}：{names}；{why}。）",
                              p=self.platform, names=names, why=why) + "\n\n")]

        def on_error(status: int, raw: bytes, ctype: str) -> Exception:
            if thread_missing(status, raw):
                # for a thread made a moment ago the unknown one is the assistant: never retry that
                return SessionMissing() if stored else assistant_missing(self.assistant)
            return map_http(status, raw, ctype)

        st = _Run(set(resume or ()))
        st.check_kept = stored and resume is None
        path = const.RUN_STREAM_PATH.format(thread_id=quote(thread_id, safe=""))
        dropped: RunnerError | None = None
        async with self._open("POST", path, on_error, json_for=self._for_server(body)) as resp:
            self.run_id = _run_id(resp.headers.get("content-location"))
            if not stored:  # kept once a run started in it, so a kept thread never is empty
                yield ev.SessionId(thread_id)
            if resume is not None:  # the server took the answer: the question is settled
                yield self.pending.done()
            for item in note:  # only now: a stored thread found gone is retried before any output
                yield item
            ctype = resp.headers.get("content-type", "").lower()
            if "event-stream" not in ctype:
                doc = await read_json_answer(resp, ctype, self.platform, const.BASE_URL_HINT)
                raise RunnerError("upstream.protocol",
                                  f"{self.platform} answered with JSON instead of an event stream "
                                  f"(keys: {', '.join(sorted(doc))[:120]}; {const.BASE_URL_HINT})")
            try:
                async for item in self._read(resp, st):
                    yield item
            except httpx.HTTPError as exc:
                dropped = self._cut(exc)
        if dropped is None and self.deerflow and st.events and not st.ended:
            # DeerFlow ends every stream with ``end``: without it the connection was cut (a proxy)
            dropped = RunnerError("upstream.unavailable",
                                  f"the connection to {self.platform} was closed before the answer finished")
        if dropped is not None:
            async for item in self._rejoin(thread_id, st, dropped):
                yield item
        self._done = True
        for item in self._finish(st):
            yield item
        for item in await self._attachments(thread_id, st):
            yield item

    async def _read(self, resp: httpx.Response, st: _Run, *, joining: bool = False) -> AsyncIterator[ev.Event]:
        """The events of one stream (the run's own, or a join) until ``end`` or the body ends."""
        events = iter_sse(resp.aiter_bytes(), touch=self.env.touch)
        async for sse in events:
            st.events += 1
            if joining and sse.event == "error" and _refused_join(sse):
                raise _JoinRefused
            if sse.id:
                st.last_event_id = sse.id
            if sse.event == "end":
                st.ended = True
                break
            if sse.event == "gap":  # DeerFlow: the events after Last-Event-ID are no longer kept
                st.gap = True
                break
            for item in self._map(sse, st):
                yield item
        if st.ended:
            await finish_body(events)  # lets the connection be reused

    def _cut(self, exc: httpx.HTTPError) -> RunnerError:
        """A stream that broke off mid-answer (the connection closed: a proxy, a restart, the
        network) while the run may go on; anything else (a read timeout is the run's own time
        limit) is raised as it is."""
        if self.run_id and isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
            return transport_error(exc, self.platform)
        raise exc

    async def _rejoin(self, thread_id: str, st: _Run, err: RunnerError) -> AsyncIterator[ev.Event]:
        """Join the run whose stream was cut (``GET …/runs/{run_id}/stream``) and read it to its end,
        again and again while the joins move on (a proxy that cuts every long stream), but at most
        ``len(REJOIN_DELAYS)`` times in a row without a new event and ``MAX_REJOINS`` times in all.
        With the last event id the server replays exactly what followed it (DeerFlow always,
        LangGraph for a ``stream_resumable`` run); without it (or after DeerFlow's ``gap``) the answer
        is caught up from ``values``' whole messages only, so nothing shown is repeated. A join that
        ends without the run's final state reads it from the thread. When the joins give up, ``err``
        stands (the answer so far is kept, marked incomplete)."""
        path = const.JOIN_PATH.format(thread_id=quote(thread_id, safe=""), run_id=quote(self.run_id or "", safe=""))
        fruitless = joins = 0
        while fruitless < len(const.REJOIN_DELAYS) and joins < const.MAX_REJOINS:
            if delay := const.REJOIN_DELAYS[fruitless]:
                await asyncio.sleep(min(delay, self.env.budget()))
            joins += 1
            fruitless += 1
            if st.gap or st.last_event_id is None:
                st.catch_up, st.gap, st.last_event_id = True, False, None
            # while catching up, too, a join after the last event seen goes on from there
            headers = {"Last-Event-ID": st.last_event_id} if st.last_event_id else {}
            before = st.last_event_id
            st.ended = st.joined_values = False
            opened = False
            log.info("%s: the stream of run %s was cut (%s); joining it again (%d)%s", self.platform,
                     self.run_id, err.message, joins, " from values" if st.catch_up else " after its last event")
            try:
                async with self._open("GET", path, map_http, extra_headers=headers) as resp:
                    if "event-stream" not in resp.headers.get("content-type", "").lower():
                        raise RunnerError("upstream.protocol", f"{self.platform} did not answer the join with a stream")
                    opened = True
                    try:
                        async for item in self._read(resp, st, joining=True):
                            yield item
                    except httpx.HTTPError as exc:
                        err = self._cut(exc)
                        fruitless = 0 if st.last_event_id not in (None, before) else fruitless
                        continue
            except _JoinRefused:
                log.info("%s: run %s is not known to the server any more", self.platform, self.run_id)
                raise err from None
            except RunnerError as exc:
                if opened:
                    raise  # what the run itself ended with (its error event), not the join
                if exc.code == "upstream.unavailable":
                    err = exc  # not reachable for a moment (a restart, the network): try again
                    continue
                if exc.code == "upstream.timeout":
                    raise
                log.info("%s: run %s cannot be joined (%s)", self.platform, self.run_id, exc.message)
                raise err from None
            if st.gap or (self.deerflow and not st.ended):
                # cut again, or DeerFlow no longer has what followed: once more (then from values)
                fruitless = 0 if st.last_event_id not in (None, before) else fruitless
                continue
            if st.joined_values or await self._final_state(thread_id, st):
                return
            fruitless = 0 if st.last_event_id not in (None, before) else fruitless  # still going
        raise err

    async def _final_state(self, thread_id: str, st: _Run) -> bool:
        """After a join that brought no final state (LangGraph joins a run live: one that ended
        meanwhile sends nothing; DeerFlow forgets a run's events a minute after it ended): how the
        run ended (``GET …/runs/{run_id}``) and, when it finished, the thread's values. False while
        the run still goes on."""
        path = const.RUN_PATH.format(thread_id=quote(thread_id, safe=""), run_id=quote(self.run_id or "", safe=""))
        async with self._open("GET", path, map_http) as resp:
            run = await read_json(resp, self.platform)
        status = str(run.get("status") or "") if isinstance(run, dict) else ""
        if status in const.RUN_GOING:
            return False
        if status == "error":
            raise RunnerError("upstream.error", f"{self.platform}'s run failed after the connection to it was cut")
        if status == "interrupted":
            raise RunnerError("upstream.error", f"{self.platform}'s run was stopped on the server")
        if status == "timeout":
            raise RunnerError("upstream.timeout", f"{self.platform}'s run reached its time limit on the server",
                              retryable=True)
        async with self._open("GET", const.STATE_PATH.format(thread_id=quote(thread_id, safe="")), map_http) as resp:
            doc = await read_json(resp, self.platform)
        values = doc.get("values") if isinstance(doc, dict) else None
        if isinstance(values, dict):
            self._take_values(values, st, show=False)
        return True

    def _map(self, sse: SSEEvent, st: _Run) -> list[ev.Event]:
        name = sse.event
        if "|" in name or name in const.IGNORED_EVENTS:
            return []  # subgraph events (not requested) and modes with nothing to show
        data = sse.json() if sse.data else None
        if name == "metadata":
            if isinstance(data, dict) and not self.run_id and isinstance(data.get("run_id"), str):
                self.run_id = data["run_id"]
            return []
        if st.catch_up and name.startswith("messages"):
            return []  # deltas since an unknown point: the whole messages in ``values`` say it instead
        if name in ("messages", "messages-tuple"):
            msg = data[0] if isinstance(data, list) and data else data
            return self._message_event(msg, st, accumulated=False) if isinstance(msg, dict) else []
        if name in ("messages/partial", "messages/complete"):  # mode "messages": the whole message so far
            out: list[ev.Event] = []
            for msg in data if isinstance(data, list) else []:
                if isinstance(msg, dict):
                    out += self._message_event(msg, st, accumulated=True)
            return out
        out = self._flush_calls(st)
        if name == "values" and isinstance(data, dict):
            messages = data.get("messages") if isinstance(data.get("messages"), list) else []
            if st.before is None and not st.catch_up:
                # DeerFlow before 2.0-rc restarted a missing thread empty where LangGraph (and DeerFlow
                # since) says 404: notice it here
                if st.check_kept and self.deerflow and "messages" in data and len(messages) <= 1:
                    out += self._thread_lost()
            out += self._take_values(data, st, show=st.catch_up)
        elif name == "updates" and isinstance(data, dict):
            self._interrupts(data.get("__interrupt__"), st)
            for node, update in data.items():
                if node == "__interrupt__" or not isinstance(update, dict):
                    continue
                if isinstance(update.get("messages"), list):
                    st.updated += [m for m in update["messages"] if isinstance(m, dict)]
                if isinstance(update.get("artifacts"), list):  # DeerFlow's present_files (a Command update)
                    st.presented += [p for p in update["artifacts"] if isinstance(p, str) and p not in st.presented]
        elif name == "custom":
            out += self._custom(data, st)
        elif name == "error":
            raise stream_error(data)
        elif name not in ("values", "updates") and name not in self._unknown:
            self._unknown.add(name)
            log.info("%s: skipping unknown stream event %r", self.platform, name)
        return out

    def _take_values(self, data: dict[str, Any], st: _Run, *, show: bool) -> list[ev.Event]:
        """A ``values`` event (or the thread's state read after a join): the thread's whole state.
        The run's first one says which messages (and files) were there before it; while catching up
        after a cut stream (``show``), its new whole messages are shown as far as they go beyond
        what was shown."""
        messages = [m for m in data.get("messages") or [] if isinstance(m, dict)] \
            if isinstance(data.get("messages"), list) else []
        if st.before is None:
            if st.catch_up:  # this run's first values were missed: what came before its last input
                humans = [i for i, m in enumerate(messages) if str(m.get("type") or m.get("role")) in ("human", "user")]
                messages_before = messages[: humans[-1] + 1] if humans else []
            else:
                messages_before = messages
            st.before = {str(m["id"]) for m in messages_before if m.get("id")}
            if st.artifacts_before is None and not st.catch_up:
                st.artifacts_before = {p for p in data.get("artifacts") or [] if isinstance(p, str)} \
                    if isinstance(data.get("artifacts"), list) else set()
        st.last_values = data
        st.joined_values = True
        self._interrupts(data.get("__interrupt__"), st)
        out: list[ev.Event] = []
        if show:
            for msg in messages:
                if str(msg.get("id") or "") not in st.before:
                    out += self._message_event(msg, st, accumulated=True)
        return out

    def _thread_lost(self) -> list[ev.Event]:
        """The kept thread came back empty: DeerFlow before 2.0-rc started a missing thread afresh
        instead of answering 404, so the earlier conversation is gone; say so like a fresh session."""
        log.info("%s: the kept thread %s had no history; it was started afresh", self.platform, self.thread_id)
        cfg = self.env.config
        if cfg.get("session-reset-notice") is False:
            return []
        text = str(cfg.get("session-reset-text") or "").strip() or DEFAULT_SESSION_RESET_TEXT
        return [ev.Text(text + "\n\n")]

    def _interrupts(self, value: Any, st: _Run) -> None:
        if isinstance(value, list):
            fresh = [i for i in value if isinstance(i, dict) and str(i.get("id") or "") not in st.resumed]
            if fresh:
                st.interrupts = fresh

    def _message_event(self, msg: dict[str, Any], st: _Run, *, accumulated: bool) -> list[ev.Event]:
        mid = str(msg.get("id") or "_")
        if st.before is not None and mid in st.before:
            return []  # a message from an earlier turn
        what = kind(msg)
        if what == "tool":
            return self._flush_calls(st) + self._tool_result(msg, st)
        if what != "ai":
            return []
        out: list[ev.Event] = []
        if any(key[0] != mid for key in st.calls):
            out += self._flush_calls(st)
        delta = is_chunk(msg) and not accumulated
        text, think = split_content(msg.get("content"))
        think = reasoning_of(msg) + think
        out += self._piece(st.thought, mid, think, delta, ev.Think)
        pieces = self._piece(st.shown, mid, text, delta, ev.Text)
        if pieces and mid not in st.texted:
            if st.texted:
                out.append(ev.Text("\n\n"))  # the next model turn's answer (after a tool step)
            st.texted.append(mid)
        out += pieces
        for i, chunk in enumerate((msg.get("tool_call_chunks") or []) if delta else []):
            if isinstance(chunk, dict):
                index = chunk.get("index")
                call = st.calls.setdefault((mid, i if index is None else index), {"id": None, "name": None, "args": ""})
                call["id"] = call["id"] or chunk.get("id")
                call["name"] = call["name"] or chunk.get("name")
                if isinstance(chunk.get("args"), str):
                    call["args"] += chunk["args"]
        if not delta:
            for call in msg.get("tool_calls") or []:
                if isinstance(call, dict) and call.get("id"):
                    out += self._start(st, str(call["id"]), str(call.get("name") or "tool"),
                                       call.get("args") if isinstance(call.get("args"), dict) else {})
        usage = msg.get("usage_metadata")
        if isinstance(usage, dict):
            if delta and mid in st.usage:  # chunk usage adds up, as LangChain merges chunks
                st.usage[mid] = {k: (st.usage[mid].get(k) or 0) + (v if isinstance(v, int) else 0)
                                 for k, v in usage.items() if k.endswith("_tokens")}
            else:
                st.usage[mid] = dict(usage)
        meta = msg.get("response_metadata") if isinstance(msg.get("response_metadata"), dict) else {}
        if meta.get("finish_reason") or msg.get("chunk_position") == "last":
            out += self._flush_calls(st)
        return out

    @staticmethod
    def _piece(seen: dict[str, str], mid: str, text: str, delta: bool, make: type) -> list[ev.Event]:
        """The new part of a message's text: the delta itself, or what a whole message adds to
        what was shown (a rewrite of shown text is left alone)."""
        if not text:
            return []
        shown = seen.get(mid, "")
        if delta:
            seen[mid] = shown + text
            return [make(text)]
        if not text.startswith(shown) or text == shown:
            return []
        seen[mid] = text
        return [make(text[len(shown):])]

    def _start(self, st: _Run, call_id: str, name: str, params: dict[str, Any]) -> list[ev.Event]:
        if call_id in st.started or name == CLARIFY_TOOL:
            return []
        st.started.add(call_id)
        return [ev.ToolStarted(call_id=call_id, name=name, parameters=params)]

    def _flush_calls(self, st: _Run) -> list[ev.Event]:
        """Tool calls whose arguments finished streaming: start them with the whole arguments."""
        out: list[ev.Event] = []
        for key, call in list(st.calls.items()):
            del st.calls[key]
            call_id = str(call["id"] or f"{key[0]}:{key[1]}")
            out += self._start(st, call_id, str(call["name"] or "tool"), tool_input(call["args"]))
        return out

    def _tool_result(self, msg: dict[str, Any], st: _Run) -> list[ev.Event]:
        name = str(msg.get("name") or "tool")
        text = plain_text(msg.get("content"))
        if name == CLARIFY_TOOL:
            st.clarification = text.strip() or st.clarification
            return []
        call_id = str(msg.get("tool_call_id") or msg.get("id") or uuid.uuid4().hex)
        return self._complete(st, call_id, name, maybe_json(text), text if msg.get("status") == "error" else None)

    def _complete(self, st: _Run, call_id: str, name: str, result: Any, error: str | None) -> list[ev.Event]:
        if call_id in st.completed:
            return []
        out = self._start(st, call_id, name, {})
        st.completed.add(call_id)
        return [*out, ev.ToolCompleted(call_id=call_id, name=name, result=result, error=error)]

    def _custom(self, data: Any, st: _Run) -> list[ev.Event]:
        """DeerFlow subagent tasks (``task_id`` is the ``task`` tool call's id) as tool steps."""
        if not isinstance(data, dict) or not data.get("task_id"):
            return []
        kind_, call_id = str(data.get("type") or ""), str(data["task_id"])
        if kind_ == "task_started":
            label = str(data.get("description") or "").strip()
            return self._start(st, call_id, f"subagent: {label}" if label else "subagent", {})
        if kind_ not in const.TASK_END:
            return []  # task_running: progress inside the subagent
        out: list[ev.Event] = []
        if isinstance(u := usage_from(data.get("usage"), prompt="input_tokens", completion="output_tokens"), ev.Usage):
            out.append(u)  # the subagent's own model calls, not in the lead agent's messages
        status = const.TASK_END[kind_]
        error = None if status is None else f"subagent task {status}: {data.get('error') or ''}".rstrip(": ")
        return out + self._complete(st, call_id, "task", data.get("result"), error)

    def _finish(self, st: _Run) -> list[ev.Event]:
        if not st.events:
            raise RunnerError("upstream.empty_response", f"{self.platform} closed the stream without sending anything")
        out = self._flush_calls(st)
        fresh = self._new_in_values(st) or st.updated
        if not st.any_text:
            # no message tuple carried text (a server without the messages mode): the run's own last answer
            for msg in reversed(fresh):
                text, _ = split_content(msg.get("content")) if kind(msg) == "ai" else ("", "")
                if text.strip():
                    out.append(ev.Text(text))
                    st.texted.append(str(msg.get("id") or "_"))
                    break
        else:
            out += self._settle(fresh, st)
        for msg in fresh:
            if kind(msg) == "tool" and msg.get("name") == CLARIFY_TOOL and st.clarification is None:
                st.clarification = plain_text(msg.get("content")).strip() or None
            if kind(msg) == "ai" and msg.get("id") and str(msg["id"]) not in st.usage and isinstance(
                    msg.get("usage_metadata"), dict):
                st.usage[str(msg["id"])] = msg["usage_metadata"]
        for usage in st.usage.values():
            if (u := usage_from(usage, prompt="input_tokens", completion="output_tokens")) is not None:
                out.append(u)
        questions = [q for q in (question_text(i.get("value")) for i in st.interrupts) if q]
        asks = [q for q in (st.clarification, *questions) if q]
        text = ("\n\n" if st.any_text else "") + "\n\n".join(asks)
        out.append(ev.SessionId(self.thread_id))  # a value kept by an older version becomes the id again
        if st.interrupts:
            # the graph waits: the question is kept for this session, answered by its asker (or an
            # approver) with the next message; anyone else's is kept until then (runner_kit.pending)
            ids = [str(i.get("id") or "") for i in st.interrupts]
            title = (questions[0] if questions else "").strip().split("\n")[0][:120]
            out += self.pending.ask({"thread_id": self.thread_id, "interrupts": ids, "title": title},
                                    text=text, expires_at=None)
        elif asks:
            out.append(ev.Text(text))
        return out

    def _settle(self, fresh: list[dict[str, Any]], st: _Run) -> list[ev.Event]:
        """What the run's final state says beyond what streamed. A middleware that rewrites the
        model's message after it streamed (DeerFlow's LoopDetectionMiddleware appends "[FORCED STOP]
        …", SafetyFinishReasonMiddleware its explanation: deer-flow
        agents/middlewares/loop_detection_middleware.py ``_append_text``,
        safety_finish_reason_middleware.py) returns it under the same id, and the messages mode
        never sends a message id twice (langgraph ``StreamMessagesHandler._emit(dedupe=True)``): the
        added text is only in ``values``. So: the rest of each streamed message, and a message after
        the last streamed one that only now has text (an empty one given its explanation)."""
        out: list[ev.Event] = []
        ids = [str(m.get("id") or "_") for m in fresh]
        last = max((i for i, mid in enumerate(ids) if mid in st.texted), default=-1)
        for i, msg in enumerate(fresh):
            if kind(msg) != "ai":
                continue
            mid = ids[i]
            text, _ = split_content(msg.get("content"))
            if mid in st.shown:
                out += self._piece(st.shown, mid, text, False, ev.Text)
            elif i > last and text.strip():
                out += [ev.Text("\n\n"), *self._piece(st.shown, mid, text, False, ev.Text)]
                st.texted.append(mid)
        return out

    @staticmethod
    def _new_in_values(st: _Run) -> list[dict[str, Any]]:
        """Messages of the last ``values`` that this run added (not in its first ``values``); else
        (a stream without ``values``) what the nodes returned in ``updates``."""
        if st.last_values is None or st.before is None:
            return []
        messages = st.last_values.get("messages")
        return [m for m in messages if isinstance(m, dict) and str(m.get("id") or "") not in st.before] \
            if isinstance(messages, list) else []

    # --- files the agent presented ----------------------------------------------------------------

    @staticmethod
    def _new_artifacts(st: _Run) -> list[str]:
        """The files this run presented: the tools node's ``artifacts`` updates, and what the run's
        last ``values.artifacts`` lists beyond its first (the list is merged over the thread's life:
        deer-flow agents/thread_state.py ``merge_artifacts``). When the run's first ``values`` was
        missed (a stream that fell behind DeerFlow's buffer, caught up from values), what it listed
        before is unknown: the files are those of that list that this run's own ``present_files``
        calls named (deer-flow tools/builtins/present_file_tool.py, args ``filepaths``)."""
        out = list(st.presented)
        final = st.last_values.get("artifacts") if isinstance(st.last_values, dict) else None
        if isinstance(final, list) and st.artifacts_before is not None:
            out += [p for p in final if isinstance(p, str) and p not in st.artifacts_before and p not in out]
        elif isinstance(final, list):
            calls = [c for m in DeerFlowAdapter._new_in_values(st) if kind(m) == "ai"
                     for c in m.get("tool_calls") or [] if isinstance(c, dict) and c.get("name") == "present_files"]
            named = {p for c in calls if isinstance(c.get("args"), dict) and isinstance(c["args"].get("filepaths"), list)
                     for p in c["args"]["filepaths"] if isinstance(p, str)}
            out += [p for p in final if isinstance(p, str) and p in named and p not in out]
        return out

    async def _attachments(self, thread_id: str, st: _Run) -> list[ev.Event]:
        """The run's new files, attached to the answer: a DeerFlow virtual path is read from the
        thread's artifacts route (``GET /api/threads/{id}/artifacts/<path>``, deer-flow
        app/gateway/routers/artifacts.py), a link only when it points to a public address
        (:mod:`runner_kit.netguard`), each within ``max-file-size-mb`` and all within what one LangBot
        message can carry; what is left out is named in one line."""
        paths = self._new_artifacts(st)
        if not paths:
            return []
        paths = outfiles.images_first(paths, _artifact_name)  # the chat shows images: they come first
        if not self.deerflow:
            log.info("%s: the run listed %d artifacts, but this server has no artifacts route", self.platform, len(paths))
            return []
        out: list[ev.Event] = []
        left_out: list[str] = []
        budget = outfiles.room(sum(escaped_len(v) for v in (*st.shown.values(), *st.thought.values())))
        # fetching is the run's work, not DeerFlow's silence (idle-timeout), and bounded in all
        ends = asyncio.get_running_loop().time() + const.ARTIFACT_SECONDS
        async with self.env.busy():
            for n, path in enumerate(paths):
                name = _artifact_name(path)
                if n >= outfiles.MAX_FILES:
                    left_out.append(outfiles.too_many(name))
                    continue
                try:
                    async with asyncio.timeout_at(ends):
                        data, ctype = await self._artifact(thread_id, path, name, budget)
                except (RunnerError, TimeoutError) as exc:
                    err = exc if isinstance(exc, RunnerError) else RunnerError("upstream.timeout", "no time was left")
                    log.info("%s: artifact %s not attached: %s", self.platform, name, err.message)
                    link = path.lower().startswith(("http://", "https://"))
                    left_out.append(_why_left_out(name, err, self.env.max_bytes, budget, link))
                    continue
                budget -= len(data)
                mime = (ctype.split(";")[0].strip().lower() or mimetypes.guess_type(name)[0]
                        or "application/octet-stream")
                out.append(outfiles.attachment(data, mime, name))
        if left_out:
            out.append(ev.Text(outfiles.left_out_note(left_out)))
        return out

    async def _artifact(self, thread_id: str, path: str, name: str, budget: int) -> tuple[bytes, str]:
        """One presented file's bytes and content type: at most ``max-file-size-mb`` and ``budget``."""
        limit = min(self.env.max_bytes, budget)
        label = repr(name)
        if path.lower().startswith(("http://", "https://")):
            got = await fetch(path, label=label, max_bytes=limit, budget=self.env.budget())
            return got.data, got.content_type
        url = self._artifact_url(thread_id, path)
        if url is None:
            raise RunnerError("input.refused", f"{label} is not a file in the thread's workspace")

        def on_error(status: int, raw: bytes, ctype: str) -> RunnerError:
            err = map_http(status, raw, ctype)
            return RunnerError(err.code, f"{label} could not be read: {err.message}", retryable=err.retryable,
                               status=status)

        async with open_stream(self.env.client, "GET", url, budget=self.env.budget(), platform=self.platform,
                               error_parser=on_error, headers=self.headers) as resp:
            declared = resp.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise RunnerError("input.too_large", f"{label} is {int(declared)} bytes")
            buf = bytearray()
            try:
                async for chunk in resp.aiter_bytes():
                    buf += chunk
                    if len(buf) > limit:
                        raise RunnerError("input.too_large", f"{label} is larger than {limit} bytes")
            except httpx.HTTPError as exc:
                raise transport_error(exc, self.platform) from None
            return bytes(buf), resp.headers.get("content-type", "")

    def _artifact_url(self, thread_id: str, path: str) -> str | None:
        """The artifacts route of a virtual path under ``/mnt/user-data/``, each segment quoted;
        None for anything else (a relative path, ``..``, a backslash, a control character)."""
        if not path.startswith(const.ARTIFACT_ROOT) or "\\" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
            return None
        segments = path[1:].split("/")
        if any(seg in ("", ".", "..") for seg in segments):
            return None
        return (self.root + const.ARTIFACTS_PATH.format(thread_id=quote(thread_id, safe=""))
                + "".join("/" + quote(seg, safe="") for seg in segments))

    # --- a LangBot reset ------------------------------------------------------------------------

    async def end_conversation(self, upstream_id: Any) -> None:
        """A LangBot reset left this session's thread behind: delete it (``DELETE /threads/{id}``;
        LangGraph answers 204, DeerFlow 200, both 404 when it is already gone, DeerFlow 409 while a
        run is still in flight there)."""
        thread_id, _legacy = stored_thread(upstream_id)
        if thread_id is None:
            return
        path = const.THREAD_PATH.format(thread_id=quote(thread_id, safe=""))
        try:
            async with self._open("DELETE", path, map_http) as resp:
                await finish_body(resp.aiter_bytes())
        except RunnerError as err:
            if err.status == 404:
                log.info("%s: thread %s was already gone", self.platform, thread_id)
                return
            raise
        log.info("%s: deleted thread %s, which a LangBot reset left behind", self.platform, thread_id)

    async def cancel(self) -> None:
        """Cancel the run upstream (host cancel, deadline or idle timeout)."""
        if self._done or not self.thread_id or not self.run_id or self.prefix is None:
            return
        path = const.CANCEL_PATH.format(thread_id=quote(self.thread_id, safe=""), run_id=quote(self.run_id, safe=""))
        try:
            await self.env.client.post(self.root + self.prefix + path, headers=self.headers, timeout=timeout_for(2.0))
        except Exception:  # noqa: BLE001 - best effort on cancel
            log.info("%s: could not cancel the run", self.platform)


def _run_id(location: str | None) -> str | None:
    """``/threads/{tid}/runs/{run_id}`` (DeerFlow: ``/api/threads/…``) → run_id."""
    parts = [p for p in (location or "").split("?")[0].split("/") if p]
    if len(parts) >= 2 and parts[-2] == "runs":
        return parts[-1]
    return None


def _positive(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def extra_configurable(value: Any) -> dict[str, Any]:
    """``extra-configurable`` (the kit already made it a JSON object): keys the plugin sets from its
    own fields, or the servers set themselves, are refused, so a value never silently loses."""
    extra = dict(value) if isinstance(value, dict) else {}
    taken = sorted(k for k in extra if k in const.OWN_KEYS or k in const.SERVER_KEYS or k.startswith(("__", "langgraph_")))
    if taken:
        raise RunnerError(
            "config.invalid",
            f"config key 'extra-configurable' may not set {', '.join(repr(k[:40]) for k in taken[:5])}: the plugin "
            "sets model_name, thinking_enabled, is_plan_mode, subagent_enabled and max_concurrent_subagents from its "
            "own settings, and the server sets thread_id, user_id and its internal keys",
        )
    return extra


def _artifact_name(path: str) -> str:
    """A presented file's name as the chat shows it: the last part of its path, on one line."""
    name = posixpath.basename(path.split("?", 1)[0].rstrip("/")) or "file"
    return "".join(c for c in name if c.isprintable())[:80] or "file"


def _why_left_out(name: str, err: RunnerError, max_bytes: int, budget: int, link: bool) -> str:
    """One phrase of the not-attached line, in the run's language."""
    if (size := outfiles.too_large(name, err, max_bytes, budget)) is not None:
        return size
    if err.code == "input.refused" and link:
        return t("'{name}' (a link to a private or local address)", "“{name}”（指向私有或本地地址的链接）", name=name)
    if err.code == "input.refused":
        return t("'{name}' (not a file DeerFlow serves from this thread)", "“{name}”（不是 DeerFlow 在此线程中提供的文件）",
                 name=name)
    return t("'{name}' (it could not be read)", "“{name}”（无法读取）", name=name)
