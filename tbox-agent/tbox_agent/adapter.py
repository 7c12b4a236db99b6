"""Tbox (百宝箱) agent API adapter.

``POST /api/chat`` (chat agents, 对话型) or ``POST /api/completion`` (generation agents, 生成型,
with ``inputs``), ``Authorization: <token>`` without a scheme word. The answer is SSE: ``event:
message`` events whose ``data`` is ``{"type", "lane", "payload"}`` with ``payload`` itself a JSON
string, and ``event: error`` with ``{"description"}``. Per lane (an output channel, ``default``
when absent): ``header`` (``mediaType``, the conversation id as ``sessionId`` or
``conversationId``) → ``chunk``* (``{"text"}``, or image URLs on an image lane); besides them
``thinking`` (reasoning pieces), ``meta`` and ``charge`` (usage when present), ``revoke``
(moderation withdrew the answer), ``followup`` (suggested questions), ``error`` and ``end``.

Quirks handled: Tbox often sends no ``end``, so a body that ends cleanly ends the answer (a
connection cut mid-body is still a failure); a ``chunk`` may arrive before its lane's ``header``
(it is text); text may carry ``<think>`` markers (shown as reasoning); a refused request is
answered with a JSON envelope, with status 200 as often as with 4xx.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from runner_kit import events as ev
from runner_kit import texts
from runner_kit.errors import RunnerError, SessionMissing
from runner_kit.http import (
    base_url,
    finish_body,
    open_stream,
    read_json,
)
from runner_kit.inputs import InputFile, download, upload_all, upload_failed
from runner_kit.logs import get_logger
from runner_kit.runner import Adapter
from runner_kit.streams import iter_sse
from runner_kit.wire import json_object, open_answer

from . import const
from .errors import BASE_URL_HINT, conversation_missing, error_fields, map_error, parse_http_error
from .lanes import AnswerState
from .payloads import file_type, follow_ups, payload_of, token, usage_of

log = get_logger("runner_kit.tbox")

MAX_DOWNLOAD = 64 * 1024 * 1024


class TboxAdapter(Adapter):
    """Maps one LangBot turn onto ``/api/chat`` or ``/api/completion`` (streaming)."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY

    def __init__(self, env):
        super().__init__(env)
        cfg = env.config
        self.base = base_url(cfg.get("base-url"), "base-url", default=const.DEFAULT_BASE,
                             suffixes=const.API_SUFFIXES, example=const.DEFAULT_BASE)
        self.app_id = str(cfg["app-id"]).strip()
        self.completion = cfg.get("app-type") == const.COMPLETION_APP
        self.headers = {"Authorization": token(cfg["api-key"]), "source": const.SOURCE}

    # --- request building ----------------------------------------------------------------------

    async def _file_bytes(self, f: InputFile) -> bytes:
        """Tbox only takes uploaded files: a file that came as a link is downloaded first, through
        the kit's guarded fetch (public addresses only, unless RUNNER_KIT_FETCH_ALLOW allows more)."""
        if f.data is not None or f.url is None:
            return f.data or b""
        mb = self.env.config.get("max-file-size-mb")
        limit = int(float(mb) * 1024 * 1024) if isinstance(mb, (int, float)) and mb > 0 else MAX_DOWNLOAD
        return await download(f, max_bytes=limit, budget=self.env.budget())

    async def _upload(self, f: InputFile, data: bytes) -> dict[str, str]:
        name = f.name.replace("/", "_").replace("\\", "_") or "file"

        def on_error(status: int, raw: bytes, ctype: str) -> RunnerError:
            return upload_failed(name, parse_http_error(status, raw, ctype))

        async with open_stream(
            self.env.client,
            "POST",
            self.base + const.UPLOAD_PATH,
            budget=self.env.budget(),
            platform=self.platform,
            error_parser=on_error,
            headers=self.headers,
            files={"file": (name, data, f.mime_type)},
        ) as resp:
            doc = await read_json(resp, self.platform)
        if isinstance(doc, dict) and (fields := error_fields(doc)) is not None:
            raise upload_failed(name, map_error(None, *fields))
        fid = doc.get("data") if isinstance(doc, dict) else None
        if isinstance(fid, dict):
            fid = fid.get("fileId") or fid.get("id")
        if not isinstance(fid, (str, int)) or not str(fid).strip():
            raise RunnerError("upstream.protocol", f"{self.platform} upload of '{name}' returned no file id")
        return {"fileId": str(fid), "type": file_type(f)}


    def _inputs(self, text: str) -> dict[str, Any]:
        """A generation agent's ``inputs``: fixed ones, LangBot's variables, then the user's text."""
        cfg = self.env.config
        fixed = cfg.get("inputs")
        inputs: dict[str, Any] = dict(fixed) if isinstance(fixed, dict) else {}
        inputs.update(self.env.input.params)
        name = str(cfg.get("text-input-name") or "").strip()
        if name:
            inputs[name] = text
        return inputs

    async def _request(self) -> tuple[str, dict[str, Any]]:
        cfg, inp = self.env.config, self.env.input
        text = inp.text.strip()
        # every link is downloaded before anything is uploaded: a refused or broken link leaves
        # nothing behind on Tbox
        data = await upload_all(inp.files, self._file_bytes)
        files = await upload_all(list(zip(inp.files, data, strict=True)), lambda fd: self._upload(*fd))
        body: dict[str, Any] = {"appId": self.app_id, "userId": self.env.user, "stream": True}
        if self.completion:
            body["inputs"] = self._inputs(text)
            path = const.COMPLETION_PATH
        else:
            # Tbox needs a query: a message of files alone is sent with base-prompt
            body["query"] = text or texts.own_or_builtin(cfg.get("base-prompt"), const.DEFAULT_BASE_PROMPT,
                                                         const.DEFAULT_BASE_PROMPT_ZH)
            body["searchEngine"] = bool(cfg.get("search-engine", False))
            if self.env.session.current:
                body["conversationId"] = str(self.env.session.current)
            path = const.CHAT_PATH
        if files:
            body["files"] = files
        return self.base + path, body

    # --- streaming -------------------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[ev.Event]:
        url, body = await self._request()
        st = AnswerState(sent_conversation=bool(body.get("conversationId")))

        def gone(status: int, raw: bytes) -> bool:
            doc = json_object(raw)
            fields = error_fields(doc) if doc is not None else None
            return fields is not None and conversation_missing(fields[0], fields[1])

        async with open_answer(self.env.client, url, budget=self.env.budget(), platform=self.platform,
                               parse_error=parse_http_error, hint=BASE_URL_HINT,
                               gone=gone if st.sent_conversation else None, headers=self.headers,
                               json=body) as answer:
            resp = answer.resp
            ctype = resp.headers.get("content-type", "").lower()
            if answer.json is not None:
                for item in self._blocking(answer.json, st):
                    yield item
                return
            events = iter_sse(resp.aiter_bytes(), touch=self.env.touch)
            async for sse in events:
                for item in self._event(sse.event, sse.data, st):
                    yield item
                if st.finished:
                    break
            if st.finished:
                await finish_body(events)  # lets the connection be reused
        for item in st.close():
            yield item
        if not st.seen:
            if "event-stream" not in ctype:
                raise RunnerError(
                    "upstream.protocol",
                    f"{self.platform} answered without a content type and sent no events ({BASE_URL_HINT})",
                )
            raise RunnerError("upstream.empty_response", f"{self.platform} closed the stream without sending anything")
        if st.conversation is None and not self.completion:
            log.info("%s: the stream named no conversation id; the next message starts a new one", self.platform)
        for item in self._closing(st):
            yield item

    def _event(self, name: str, raw: str, st: AnswerState) -> list[ev.Event]:
        if name not in ("message", const.ERROR):
            return []  # the SDK reads only these two; anything else carries nothing to show
        if not raw.strip():
            return []
        st.seen = True
        try:
            data = json.loads(raw)
        except ValueError:
            raise RunnerError("upstream.protocol", f"{self.platform} sent an event that is not JSON: {raw[:120]!r}") \
                from None
        if not isinstance(data, dict):
            raise RunnerError("upstream.protocol", f"{self.platform} sent an event that is not a JSON object")
        if name == const.ERROR:
            raise self._failure(data, st)
        return self._message(data, st)

    def _failure(self, doc: dict[str, Any], st: AnswerState) -> Exception:
        """``event: error`` or a ``type: error`` message: terminal; the stored conversation is only
        dropped when Tbox says it is gone and nothing was shown yet."""
        fields = error_fields(doc) or (doc.get("errorCode") or doc.get("code"), None, doc.get("traceId"))
        code, message, trace = fields
        if st.sent_conversation and not st.output and conversation_missing(code, message):
            return SessionMissing()
        if not message and not code:
            return RunnerError("upstream.error", f"{self.platform} ended the answer with an error and no details")
        return map_error(None, code, message, trace)

    def _conversation(self, st: AnswerState, *sources: dict[str, Any]) -> list[ev.Event]:
        """The conversation id, under either name Tbox uses, the first time it appears (a
        generation agent keeps no conversation, so its id is not stored)."""
        cid = next((v for src in sources for k in const.CONVERSATION_KEYS if (v := src.get(k))), None)
        if not cid or self.completion or str(cid) == st.conversation:
            return []
        st.conversation = str(cid)
        return [ev.SessionId(str(cid))]

    def _message(self, data: dict[str, Any], st: AnswerState) -> list[ev.Event]:
        mtype = data.get("type")
        lane = str(data.get("lane") or const.DEFAULT_LANE)
        payload = payload_of(data)
        out = self._conversation(st, payload, data)
        if mtype == const.CHUNK:
            out.extend(st.chunk(lane, payload))
        elif mtype == const.THINKING:
            piece = payload.get("text")
            if isinstance(piece, str) and piece:
                out.append(ev.Think(piece))
        elif mtype == const.HEADER:
            st.lanes[lane] = str(payload.get("mediaType") or const.TEXT).lower()
        elif mtype == const.END:
            st.finished = True
        elif mtype == const.FOLLOWUP:
            for q in follow_ups(payload):
                if len(st.follow_ups) < const.MAX_FOLLOW_UPS and q not in st.follow_ups:
                    st.follow_ups.append(q)
        elif mtype == const.REVOKE:
            out.extend(st.close())
            st.revoked = True
            text = payload.get("text")
            out.append(ev.ReplaceText(text if isinstance(text, str) and text.strip() else const.REVOKED_TEXT))
        elif mtype in (const.CHARGE, const.META):
            usage = usage_of(payload)
            if usage is not None:
                st.usage = usage
        elif mtype == const.ERROR:
            raise self._failure({**data, **payload}, st)
        elif mtype not in const.IGNORED and mtype not in st.unknown:
            st.unknown.add(str(mtype))
            log.info("%s: skipping unknown message type %r", self.platform, str(mtype)[:60])
        return out

    def _blocking(self, doc: dict[str, Any], st: AnswerState) -> list[ev.Event]:
        """A JSON body where a stream was expected: Tbox's error envelope, or a non-stream answer."""
        fields = error_fields(doc)
        if fields is not None:
            code, message, trace = fields
            if st.sent_conversation and conversation_missing(code, message):
                raise SessionMissing()
            raise map_error(None, code, message, trace)
        data = doc.get("data")
        items = data.get("result") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise RunnerError(
                "upstream.protocol", f"{self.platform} answered with a JSON document instead of an event stream "
                f"({BASE_URL_HINT})"
            )
        st.seen = True
        out: list[ev.Event] = []
        for item in items:
            if not isinstance(item, dict):
                continue
            out.extend(self._conversation(st, item))
            lane = str(item.get("lane") or const.DEFAULT_LANE)
            st.lanes.setdefault(lane, str(item.get("mediaType") or const.TEXT).lower())
            text = item.get("chunk", item.get("text"))
            out.extend(st.chunk(lane, {"text": text, "url": item.get("url")}))
        out.extend(st.close())
        return out

    def _closing(self, st: AnswerState) -> list[ev.Event]:
        out: list[ev.Event] = []
        if st.usage is not None:
            out.append(st.usage)
        if st.follow_ups and st.text_shown and not st.revoked and self.env.config.get("follow-up-suggestions", True):
            out.append(ev.Text("\n\n" + "\n".join(f"- {q}" for q in st.follow_ups)))
        return out
