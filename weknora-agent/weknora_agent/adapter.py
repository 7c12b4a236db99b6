"""WeKnora adapter: one LangBot turn is one ``knowledge-chat`` or ``agent-chat`` call in a session.

Before the first turn a session is created (``POST /sessions`` with a JSON body, answered 201);
its id is kept under ``weknora.session_id``. The answer is a gin-written SSE stream,
``event:message`` / ``data:{StreamResponse}`` without spaces, every event a ``response_type``:

- knowledge-chat: ``agent_query`` → (``thinking``*) → ``references`` → ``answer``* → ``answer``
  (``done: true``, empty) → ``complete`` → maybe ``session_title``
- agent-chat: ``agent_query`` → (``thinking``* | ``tool_call`` | ``tool_result`` | ``references``
  | ``reflection`` | ``answer``*)* → ``answer`` done → ``complete`` → maybe ``session_title``
  (WeKnora waits up to 3 s for it after ``complete`` when the session has no title)
- a failed tool comes as ``error`` carrying ``data.tool_call_id`` (the agent goes on); any other
  ``error`` ends the answer; ``stop`` follows a stop request; ``tool_approval_required`` and
  ``mcp_oauth_required`` wait for a person in WeKnora's web UI.

The runner ends at ``complete`` (or at the body's end once the answer is done), so a trailing
``session_title`` is never waited for. WeKnora sends no keep-alives and no token usage.

WeKnora generates the answer apart from the connection (qa.go executeQA on a detached context) and
keeps every event of it in its stream manager; each connection reads that list from its first event
(stream.go handleAgentEventsForSSE). A connection that breaks off before the answer is complete is
resumed with ``GET /sessions/continue-stream/{sid}?message_id=<assistant_message_id>``, which
replays the list from the start (stream.go ContinueStream): the events already taken in are
skipped by position, so the chat never shows a piece twice. A resume that fails, or a stream that
keeps breaking off without bringing anything new, ends the run with a retryable error after
``POST /sessions/{sid}/stop``, so WeKnora does not finish (and store) an answer nobody saw; any
other failure while WeKnora still generates stops it too. A LangBot reset deletes the WeKnora
session it left behind (``DELETE /sessions/{id}``).

Files the agent's skills produce are announced on ``complete`` (``data.artifacts``); after the
answer each is downloaded (``GET /sessions/{sid}/messages/{mid}/artifacts/{index}/download``, with
the run's own user header) and attached to it, within ``max-file-size-mb`` and what one LangBot
message can carry; what is left out is named in one line after the answer.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any
from urllib.parse import quote

import httpx

from runner_kit import events as ev
from runner_kit import outfiles
from runner_kit.errors import RunnerError
from runner_kit.http import base_url, finish_body, open_stream, read_json, timeout_for
from runner_kit.inputs import InputFile
from runner_kit.logs import get_logger
from runner_kit.results import escaped_len
from runner_kit.runner import Adapter
from runner_kit.streams import iter_sse
from runner_kit.usage import usage_from
from runner_kit.wire import cut_off, maybe_json, open_answer, sse_objects, tool_input

from . import const
from .artifacts import (
    Artifact,
    announced,
    likely_image,
    mime_of,
    url_segment,
    why_left_out,
)
from .errors import BASE_URL_HINT, error_fields, map_error, parse_error, session_missing
from .render import paused_message, references_text, score

log = get_logger("runner_kit.weknora")

OFF_LOOP_BYTES = 256 * 1024
SESSION_TIMEOUT = 30.0  # the longest a session creation may take (within the run's budget)


def _user_header(user: str) -> str | None:
    """The user id as a header WeKnora accepts (≤128 printable ASCII characters), else None.

    Non-ASCII ids (an IM nickname-style id) are percent-encoded: HTTP headers carry ASCII only."""
    if not user.isascii():
        user = quote(user, safe="")
    if not user or len(user) > const.MAX_USER_ID or any(ord(c) < 0x20 or ord(c) == 0x7F for c in user):
        return None
    return user


async def _b64(data: bytes) -> str:
    """Base64 text of ``data``; large files are encoded off the event loop."""
    if len(data) <= OFF_LOOP_BYTES:
        return base64.b64encode(data).decode()
    return await asyncio.to_thread(lambda: base64.b64encode(data).decode())


class WeKnoraAdapter(Adapter):
    """Maps one LangBot turn onto a WeKnora session chat."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY

    def __init__(self, env):
        super().__init__(env)
        cfg = env.config
        self.base = base_url(
            cfg.get("base-url"), "base-url", suffixes=(const.API_PREFIX,), add=const.API_PREFIX,
            example=const.EXAMPLE_BASE_URL,
        )
        self.app_type = "agent" if cfg.get("app-type") == "agent" else "chat"
        self.headers = {"X-API-Key": str(cfg["api-key"]).strip(), "Accept": "text/event-stream"}
        user = _user_header(env.user)
        if user is not None:
            self.headers[const.USER_HEADER] = user
        self.session_id: str | None = None
        self.message_id: str | None = None  # the assistant message being generated (for stop and resume)
        self.params: dict[str, str] = {}
        self._done = False
        self._unknown: set[str] = set()
        self._stored = False  # WeKnora has stored the answer whose files are downloaded
        self._waits: list[float] = []  # the pauses left for WeKnora to store it (all files share them)

    # --- request building ----------------------------------------------------------------------

    async def _body(self) -> dict[str, Any]:
        cfg, inp = self.env.config, self.env.input
        # base-prompt stands in for a message without text (files only), as LangBot's old runner did
        query = inp.text.strip() or str(cfg.get("base-prompt") or "").strip() or "."
        agent_id = str(cfg.get("agent-id") or "").strip() or const.DEFAULT_AGENTS[self.app_type]
        body: dict[str, Any] = {"query": query, "agent_id": agent_id, "channel": "im"}
        if self.app_type == "agent":
            body["agent_enabled"] = True
        kbs: list[str] = []
        for kb in cfg.get("knowledge-base-ids") or []:
            kb = str(kb).strip()
            if kb and kb not in kbs:
                kbs.append(kb)
        if kbs:
            body["knowledge_base_ids"] = kbs
        if cfg.get("web-search-enabled"):
            body["web_search_enabled"] = True
        images, uploads = await self._files(inp.files)
        if images:
            body["images"] = images
        if uploads:
            body["attachment_uploads"] = uploads
        return body

    async def _files(self, files: list[InputFile]) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
        """Images as ``images`` data URIs, other files as ``attachment_uploads`` (both inline)."""
        images: list[dict[str, str]] = []
        uploads: list[dict[str, Any]] = []
        for f in files:
            if f.data is None:
                # WeKnora takes inline bytes only (it drops client-given image URLs)
                self.env.log.info("skipped %r: WeKnora accepts attached files only as inline data", f.name)
                continue
            if f.kind == "image" or f.mime_type.startswith("image/"):
                head = f"data:{f.mime_type or 'application/octet-stream'};base64,"
                images.append({"data": head + await _b64(f.data)})
            elif len(uploads) < const.MAX_ATTACHMENTS:
                name = f.name.replace("/", "_").replace("\\", "_") or "file"
                uploads.append({"data": await _b64(f.data), "file_name": name, "file_size": f.size})
            else:
                self.env.log.info("skipped %r: WeKnora takes at most %d files per message", f.name,
                                  const.MAX_ATTACHMENTS)
        return images, uploads

    async def _create_session(self) -> str:
        title = const.SESSION_TITLE.format(user=self.env.user)[:200]
        async with open_stream(
            self.env.client,
            "POST",
            self.base + const.SESSIONS_PATH,
            budget=min(self.env.budget(), SESSION_TIMEOUT),
            platform=self.platform,
            error_parser=parse_error,
            headers={k: v for k, v in self.headers.items() if k != "Accept"},
            json={"title": title},  # WeKnora refuses an empty body
        ) as resp:
            doc = await read_json(resp, self.platform)
        data = doc.get("data") if isinstance(doc, dict) else None
        sid = data.get("id") if isinstance(data, dict) else None
        if not isinstance(sid, str) or not sid:
            fields = error_fields(doc) if isinstance(doc, dict) else None
            if fields is not None:
                raise map_error(None, *fields)
            raise RunnerError("upstream.protocol", f"{self.platform} created a session but sent no session id "
                                                   f"({BASE_URL_HINT})")
        return sid

    # --- streaming -------------------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[ev.Event]:
        body = await self._body()
        stored = self.env.session.current
        sid = str(stored) if stored else None
        if sid is None:
            sid = await self._create_session()
            yield ev.SessionId(sid)
        self.session_id = sid
        url = self.base + const.CHAT_PATHS[self.app_type].format(sid=quote(sid, safe=""))
        self.params = {"resource_urls": "public"} if self.env.config.get("public-resource-links") else {}
        st = _State()
        try:
            # WeKnora saves and parses inline files before it answers at all (qa.go parseQARequest):
            # that wait is work, not silence, so idle-timeout starts counting once it answers
            beat = self.env.keep_alive() if body.get("attachment_uploads") else None
            try:
                # only WeKnora's own "Session not found" for a stored id means it is gone
                async with open_answer(self.env.client, url, budget=self.env.budget(), platform=self.platform,
                                       parse_error=parse_error, hint=BASE_URL_HINT,
                                       gone=session_missing if stored else None, json_when_untyped=True,
                                       headers=self.headers, params=self.params or None, json=body) as answer:
                    if beat is not None:
                        beat.cancel()
                    if answer.json is not None:
                        fields = error_fields(answer.json)
                        if fields is not None:
                            raise map_error(None, *fields)
                        raise RunnerError("upstream.protocol", f"{self.platform} answered with JSON instead of an "
                                                               f"event stream ({BASE_URL_HINT})")
                    async for item in self._read(answer.resp, st):
                        yield item
            finally:
                if beat is not None:
                    beat.cancel()
            async for item in self._resume(st):
                yield item
        except RunnerError:
            if not self._done:
                await self._stop()  # WeKnora would go on and store an answer nobody sees
            raise
        self._done = True
        if not st.seen:
            raise RunnerError("upstream.empty_response", f"{self.platform} closed the stream without sending anything")
        if not st.finished and not st.answer_done:
            raise RunnerError("upstream.unavailable", f"{self.platform} closed the stream before the answer finished")
        for item in self._closing(st):
            yield item
        async for item in self._attachments(st):
            yield item

    async def _read(self, resp: httpx.Response, st: _State) -> AsyncIterator[ev.Event]:
        """The events of one response, from the run's first: those taken in before are skipped (a
        resume replays them). A connection that breaks off, or ends, while the answer still runs sets
        ``st.cut`` once the assistant message is known (it can then be resumed)."""
        st.cut = False
        position = 0
        events = iter_sse(resp.aiter_bytes(), touch=self.env.touch)
        async with aclosing(sse_objects(events, self.platform, complete=lambda: st.answer_done)) as objects:
            while True:
                try:
                    data = await anext(objects)
                except StopAsyncIteration:
                    break
                except (httpx.HTTPError, RunnerError) as exc:
                    if self.message_id is None or not cut_off(exc):
                        raise
                    log.info("%s: the stream broke off (%s)", self.platform, type(exc).__name__)
                    st.cut = True
                    return
                position += 1
                if position <= st.taken:
                    continue  # shown already: continue-stream replays from the first event
                st.taken = position
                for item in await self._map(data, st):
                    yield item
                if st.finished:
                    break
        if st.finished:
            await finish_body(events)  # lets the connection be reused
        elif not st.answer_done and self.message_id is not None:
            st.cut = True  # WeKnora ends a stream only at complete or stop: a proxy or a restart ended this one

    async def _resume(self, st: _State) -> AsyncIterator[ev.Event]:
        """Follow a broken-off answer with continue-stream until it is complete, or give up (bounded)."""
        fruitless = resumes = 0
        while st.cut:
            if fruitless >= const.MAX_RESUMES or resumes >= const.MAX_RESUMES_TOTAL:
                raise RunnerError("upstream.unavailable", f"the connection to {self.platform} kept breaking off "
                                                          f"({resumes} resumes) before the answer finished")
            if fruitless:
                await asyncio.sleep(min(const.RESUME_BACKOFF * 2 ** (fruitless - 1), self.env.budget()))
            resumes += 1
            fruitless += 1
            before = st.taken
            yield ev.Log(f"{self.platform} stream of message {self.message_id} broke off after {st.taken} events; "
                         "resuming")
            path = const.CONTINUE_PATH.format(sid=quote(self.session_id or "", safe=""))
            budget = self.env.budget()  # out of time: the run's timeout, not a failed resume
            opened = False
            try:
                async with open_stream(self.env.client, "GET", self.base + path, budget=budget,
                                       platform=self.platform, error_parser=parse_error, headers=self.headers,
                                       params={"message_id": self.message_id, **self.params}) as resp:
                    opened = True
                    async for item in self._read(resp, st):
                        yield item
            except RunnerError as exc:
                if opened:
                    raise  # what the answer itself said (an error event, a stop)
                if not cut_off(exc):  # e.g. 404 "No stream events found": WeKnora restarted or forgot them
                    raise RunnerError("upstream.unavailable", f"the connection to {self.platform} broke off and the "
                                                              f"answer could not be resumed: {exc.message}") from None
                st.cut = True  # the server is not back yet: try again
            if st.taken > before:
                fruitless = 0

    async def _map(self, data: dict[str, Any], st: _State) -> list[ev.Event]:
        kind = str(data.get("response_type") or "")
        content = data.get("content") if isinstance(data.get("content"), str) else ""
        meta = data.get("data") if isinstance(data.get("data"), dict) else {}
        st.seen = True
        if isinstance(data.get("usage"), dict):
            st.usage = usage_from(data["usage"]) or st.usage
        out: list[ev.Event] = []
        if kind == "agent_query":
            self.message_id = data.get("assistant_message_id") or meta.get("assistant_message_id") or self.message_id
        elif kind == "answer":
            if content:
                if st.after_tool and st.answer_text and not st.answer_text.endswith("\n"):
                    content = "\n\n" + content  # a new answer round after tool steps
                st.after_tool = False
                st.answer_text += content
                out.append(ev.Text(content))
            if data.get("done"):
                st.answer_done = True
        elif kind in ("thinking", "reflection"):
            # reasoning that interleaves with the answer being streamed would split its sentences
            # with a <think> block; it is shown at the start and between tool rounds only
            if content and not (st.answer_text and not st.after_tool):
                st.think_len += escaped_len(content)
                out.append(ev.Think(content))
        elif kind == "tool_call":
            # WeKnora announces each call twice: first without arguments while the model still writes
            # it ("pending"), then with them when it runs. One start, with the arguments; a call whose
            # second event never comes is started when its result arrives
            st.after_tool = True
            if st.answer_text:
                # answer text before a tool call was a round's preamble ("Let me look that up."), not
                # the answer: WeKnora drops it from the stored answer and its web UI retracts it
                # (Tencent/WeKnora @412dcc41 agent_stream_handler.go handleToolCall: superseded)
                st.answer_text = ""
                out.append(ev.ReplaceText(""))
            call_id = str(meta.get("tool_call_id") or data.get("id") or len(st.tools))
            name = str(meta.get("tool_name") or "tool")
            args = meta.get("arguments")
            if call_id in st.started:
                pass
            elif not args and call_id not in st.tools:
                st.tools[call_id] = name  # pending
            else:
                st.tools[call_id] = name
                st.started.add(call_id)
                out.append(ev.ToolStarted(call_id=call_id, name=name, parameters=tool_input(args)))
        elif kind == "tool_result" or (kind == "error" and meta.get("tool_call_id")):
            # a failed tool is sent as an "error" with the tool's ids; the agent carries on
            call_id = str(meta.get("tool_call_id") or "")
            name = str(meta.get("tool_name") or st.tools.get(call_id) or "tool")
            if call_id not in st.started:  # announced only as pending (or not at all)
                st.started.add(call_id)
                out.append(ev.ToolStarted(call_id=call_id, name=name))
            if kind == "error" or meta.get("success") is False:
                failed = content or str(meta.get("error") or "the tool failed")
                out.append(ev.ToolCompleted(call_id=call_id, name=name, error=failed[:500]))
            else:
                out.append(ev.ToolCompleted(call_id=call_id, name=name, result=maybe_json(content)))
        elif kind == "references":
            for ref in data.get("knowledge_references") or meta.get("references") or []:
                if isinstance(ref, dict):
                    st.add_reference(ref)
        elif kind == "complete":
            st.finished = True
            st.artifacts = announced(meta.get("artifacts"))
        elif kind == "error":
            stage = str(meta.get("stage") or "").strip()
            raise map_error(None, None, (content or str(meta.get("error") or "")) + (f" (stage {stage})" if stage else ""))
        elif kind == "stop":
            self._done = True
            raise RunnerError("upstream.error", f"{self.platform} stopped this answer: {content or 'generation stopped'}")
        elif kind in ("tool_approval_required", "mcp_oauth_required"):
            await self._stop()
            raise RunnerError("upstream.paused", paused_message(kind, meta))
        elif kind not in const.IGNORED_TYPES and kind not in self._unknown:
            self._unknown.add(kind)
            log.info("%s: skipping unknown response type %r", self.platform, kind[:40])
        return out

    def _closing(self, st: _State) -> list[ev.Event]:
        """What follows a finished answer: the knowledge references and usage (when sent)."""
        out: list[ev.Event] = []
        cfg = self.env.config
        if st.references and st.answer_text.strip() and cfg.get("show-references", True) is not False:
            heading = str(cfg.get("references-heading") or "").strip()
            refs = references_text(st.references, heading, st.answer_text)
            st.closing_len += escaped_len(refs)
            out.append(ev.Text(refs))
        if st.usage is not None:
            out.append(st.usage)
        return out

    # --- files the agent's skills produced -----------------------------------------------------------

    async def _attachments(self, st: _State) -> AsyncIterator[ev.Event]:
        """The answer's artifacts, attached to it: at most outfiles.MAX_FILES files, each within
        ``max-file-size-mb`` and all within what one LangBot message can carry (the answer's text
        travels in the same result; base64 is 4/3 of the bytes). Images come first: LangBot 4.11.2
        shows an inline image, while it cannot take an inline file from a plugin (the kit names such
        a file instead). A file that is too large or cannot be downloaded is named in one line after
        the answer; the answer stands either way."""
        if not st.artifacts:
            return
        sid, mid = url_segment(self.session_id), url_segment(self.message_id)
        if sid is None or mid is None:
            log.info("%s: %d artifacts announced without a message id to fetch them by", self.platform,
                     len(st.artifacts))
            return
        room = outfiles.room(escaped_len(st.answer_text) + st.think_len + st.closing_len)
        max_bytes = self.env.max_bytes
        self._waits = list(const.ARTIFACT_WAITS)
        left_out: list[str] = []
        ordered = sorted(st.artifacts, key=lambda a: not likely_image(a.name))
        for n, art in enumerate(ordered):
            if n >= outfiles.MAX_FILES:
                left_out.append(outfiles.too_many(art.name))
                continue
            url = self.base + const.ARTIFACT_PATH.format(sid=sid, mid=mid, index=art.index)
            try:
                data, ctype = await self._artifact(url, art, min(max_bytes, room))
            except RunnerError as err:
                log.info("%s: artifact %d not attached: %s", self.platform, art.index, err.message)
                left_out.append(why_left_out(art.name, err, max_bytes, room))
                continue
            room -= len(data)
            mime = mime_of(ctype, art.name)
            yield ev.Attachment(url=f"data:{mime};base64,{await _b64(data)}",
                                kind="image" if mime in const.IMAGE_TYPES else "file", name=art.name, mime_type=mime)
        if left_out:
            yield ev.Text(outfiles.left_out_note(left_out))

    async def _artifact(self, url: str, art: Artifact, limit: int) -> tuple[bytes, str]:
        """One artifact's bytes and content type, at most ``limit`` bytes (a larger one is not read
        whole). Until WeKnora has stored the answer, its files are 404 "artifact index out of range":
        that is tried again after a few pauses, which all the answer's files share (bounded by the run's
        time too)."""
        if art.size is not None and art.size > limit:
            raise RunnerError("input.too_large", f"artifact {art.index} is {art.size} bytes")
        headers = {k: v for k, v in self.headers.items() if k != "Accept"}  # the run's key and user
        waits = self._waits
        while True:
            try:
                async with open_stream(self.env.client, "GET", url, budget=self.env.budget(), platform=self.platform,
                                       error_parser=parse_error, headers=headers) as resp:
                    self._stored = True
                    declared = resp.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > limit:
                        raise RunnerError("input.too_large", f"artifact {art.index} is {int(declared)} bytes")
                    buf = bytearray()
                    async for chunk in resp.aiter_bytes():
                        self.env.touch()
                        buf += chunk
                        if len(buf) > limit:
                            raise RunnerError("input.too_large", f"artifact {art.index} is over {limit} bytes")
                    return bytes(buf), resp.headers.get("content-type", "")
            except RunnerError as err:
                later = err.status == 404 and const.NOT_STORED_YET in err.message and not self._stored
                if not later or not waits or self.env.budget() <= waits[0]:
                    raise
            self.env.touch()
            await asyncio.sleep(waits.pop(0))

    async def _stop(self) -> None:
        """Ask WeKnora to stop generating this answer (best effort)."""
        if not (self.session_id and self.message_id):
            return
        self._done = True
        path = const.STOP_PATH.format(sid=quote(self.session_id, safe=""))
        headers = {k: v for k, v in self.headers.items() if k != "Accept"}
        try:
            await self.env.client.post(self.base + path, json={"message_id": self.message_id}, headers=headers,
                                       timeout=timeout_for(2.0))
        except Exception:  # noqa: BLE001 - best effort
            log.info("%s: could not stop the answer", self.platform)

    async def cancel(self) -> None:
        """The host cancelled the run: stop the answer WeKnora is still generating."""
        if not self._done:
            await self._stop()

    async def end_conversation(self, upstream_id: Any) -> None:
        """A LangBot reset left this WeKnora session behind: delete it (``DELETE /sessions/{id}``,
        the same chat capability and user scope as creating it; Tencent/WeKnora @412dcc41
        internal/router/routes_chat.go RegisterSessionRoutes, handler.go DeleteSession). A session
        already gone (404) is fine."""
        sid = str(upstream_id or "").strip()
        if not sid:
            return
        headers = {k: v for k, v in self.headers.items() if k != "Accept"}
        try:
            resp = await self.env.client.delete(self.base + const.SESSION_PATH.format(sid=quote(sid, safe="")),
                                                headers=headers, timeout=timeout_for(2.5))
        except httpx.HTTPError as exc:
            raise RunnerError("upstream.unavailable", f"{self.platform} could not be reached to delete the old "
                                                      f"session ({type(exc).__name__})") from None
        if resp.status_code >= 400 and resp.status_code != 404:
            raise parse_error(resp.status_code, resp.content[:4096], resp.headers.get("content-type", ""))


class _State:
    __slots__ = ("after_tool", "answer_done", "answer_text", "artifacts", "closing_len", "cut", "finished",
                 "references", "seen", "started", "taken", "think_len", "tools", "usage")

    def __init__(self) -> None:
        self.after_tool = False  # a tool step came since the last answer text
        self.cut = False  # the connection broke off while the answer still runs (resumable)
        self.taken = 0  # how many of the run's events were taken in (a resume skips them)
        self.answer_done = False
        self.answer_text = ""
        self.finished = False
        self.references: dict[str, dict[str, Any]] = {}  # one per document, in first-cited order
        self.seen = False
        self.tools: dict[str, str] = {}  # call id -> tool name, announced
        self.started: set[str] = set()  # call ids whose start was reported
        self.usage: ev.Usage | None = None
        self.artifacts: list[Artifact] = []  # the files the answer's complete event announced
        self.think_len = 0  # reasoning shown (as LangBot measures text), for the room left for files
        self.closing_len = 0  # text added after the answer (the cited documents)

    def add_reference(self, ref: dict[str, Any]) -> None:
        key = str(ref.get("knowledge_id") or ref.get("knowledge_filename") or ref.get("knowledge_title")
                  or ref.get("id") or "")
        if not key:
            return
        best = self.references.get(key)
        if best is None or score(ref) > score(best):
            self.references[key] = ref
