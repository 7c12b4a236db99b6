"""Coze Open API v3 chat adapter.

Stream (``POST /v3/chat?conversation_id=…`` with ``stream: true``; SSE ``event:<name>`` /
``data:<json>`` with no space after the colon):

``conversation.chat.created`` → ``conversation.chat.in_progress`` →
(``conversation.message.delta``* → ``conversation.message.completed``)* per message →
``conversation.chat.completed`` (usage) → ``done`` (``data:"[DONE]"``, often without a final blank
line).

- ``message.delta`` of type ``answer`` carries a text piece in ``content`` and, for reasoning
  models, a ``reasoning_content`` piece; ``message.completed`` repeats the whole message (not
  appended again). A multi-answer bot sends several answer messages (shown one after the other).
- ``message.completed`` also brings ``function_call`` (content: JSON ``{name, arguments, …}``),
  ``tool_output``/``tool_response``, ``knowledge``, ``verbose`` and ``follow_up`` messages.
- The run ends early with ``conversation.chat.failed`` (``last_error {code, msg}``), an ``error``
  event (``{code, msg}``) or ``conversation.chat.requires_action`` (a client-side tool call: asked
  in the chat, kept in conversation state under the interaction id, and answered in a later run
  through ``POST /v3/chat/submit_tool_outputs``, whose stream is read like a chat's).
- A request Coze refuses is usually answered with HTTP 200 and a JSON business envelope
  ``{"code": <non-zero>, "msg": …}`` instead of a stream.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from runner_kit import approvals as ap
from runner_kit import errors
from runner_kit import events as ev
from runner_kit.errors import RunnerError, SessionMissing
from runner_kit.http import finish_body, open_stream, read_bounded, read_json, timeout_for
from runner_kit.inputs import InputFile, safe_file_name, upload_all, upload_failed
from runner_kit.logs import get_logger
from runner_kit.netguard import chat_link
from runner_kit.pending import PendingAction
from runner_kit.results import progress_line
from runner_kit.runner import CANCEL_GRACE, Adapter
from runner_kit.streams import SSEDecoder
from runner_kit.usage import usage_from
from runner_kit.wire import cut_off, maybe_json

from . import const
from .errors import (
    BASE_URL_HINT,
    conversation_missing,
    envelope_error,
    json_object,
    map_error,
    parse_http_error,
)

log = get_logger("runner_kit.coze")

MAX_JSON_BODY = 16 * 1024 * 1024
MAX_FOLLOW_UPS = 5
_TEXT_TYPES = (None, "", "text")


def normalize_base(raw: Any) -> str:
    """The API root from ``api-base`` as users write it: with or without ``/v3`` or ``/v1`` and a
    trailing slash. Only plain http(s) addresses are accepted."""
    base = str(raw or "").strip() or const.DEFAULT_BASE
    parts = urlsplit(base)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or " " in base:
        raise RunnerError(
            "config.invalid",
            "config key 'api-base' must be an http(s) address such as https://api.coze.cn or https://api.coze.com",
        )
    if parts.query or parts.fragment:
        base = base.split("?", 1)[0].split("#", 1)[0]
    base = base.rstrip("/")
    changed = True
    while changed:
        changed = False
        for suffix in const.API_SUFFIXES:
            if base.lower().endswith(suffix):
                base = base[: -len(suffix)].rstrip("/")
                changed = True
    return base


def _string_map(values: dict[str, Any]) -> dict[str, str]:
    """Coze's ``custom_variables`` is a string map: other values are sent as JSON text."""
    out: dict[str, str] = {}
    for k, v in values.items():
        if v is None:
            continue
        out[str(k)] = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    return out


class CozeAdapter(Adapter):
    """Maps one LangBot turn onto ``POST /v3/chat`` (streaming)."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY

    def __init__(self, env):
        super().__init__(env)
        cfg = env.config
        self.base = normalize_base(cfg.get("api-base"))
        self.bot_id = str(cfg["bot-id"]).strip()
        self.headers = {"Authorization": f"Bearer {str(cfg['api-key']).strip()}"}
        self.chat_id: str | None = None
        self.conversation_id: str | None = None
        self.sent_conversation = False
        self._done = False
        self._unknown: set[str] = set()
        self._submitted_refusal = False  # a JSON envelope instead of a stream (read by _submit)
        # kept per session like the conversation id: in a shared conversation only the asker (or an
        # approver) answers, and everyone else's messages wait for the chat it paused to go on
        self.pending = PendingAction(env, const.PENDING_KEY, "Coze bot's question")

    # --- request building ----------------------------------------------------------------------

    async def _upload(self, f: InputFile) -> dict[str, Any]:
        kind = "image" if f.kind == "image" or f.mime_type.startswith("image/") else "file"
        if f.url is not None:
            return {"type": kind, "file_url": f.url}
        name = safe_file_name(f.name)

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
            files={"file": (name, f.data or b"", f.mime_type)},
        ) as resp:
            doc = await read_json(resp, self.platform)
        if isinstance(doc, dict):
            err = envelope_error(doc)
            if err is not None:
                raise upload_failed(name, err)
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, dict) or not data.get("id"):
            raise RunnerError("upstream.protocol", f"{self.platform} upload of '{name}' returned no file id")
        return {"type": kind, "file_id": str(data["id"])}


    async def _request(self) -> tuple[dict[str, Any], dict[str, str]]:
        cfg, inp = self.env.config, self.env.input
        text = inp.text.strip()
        if not text and not inp.files:
            raise RunnerError("input.invalid", "the message has no text or files to send to Coze")
        parts = await upload_all(inp.files, self._upload)
        if parts:
            items = ([{"type": "text", "text": text}] if text else []) + parts
            message = {
                "role": "user",
                "type": "question",
                "content": json.dumps(items, ensure_ascii=False),
                "content_type": "object_string",
            }
        else:
            message = {"role": "user", "type": "question", "content": text, "content_type": "text"}
        body: dict[str, Any] = {
            "bot_id": self.bot_id,
            "user_id": self.env.user,
            "stream": True,
            "auto_save_history": bool(cfg.get("auto-save-history", True)),
            "additional_messages": [message],
        }
        variables = _string_map(inp.params)
        if variables:
            body["custom_variables"] = variables
        query = {"conversation_id": str(self.env.session.current)} if self.env.session.current else {}
        return body, query

    # --- streaming -------------------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[ev.Event]:
        res = self.pending.resolve(self._read_click, self._read_typed)
        for item in res.events:
            yield item
        if res.answer is not None and res.record is not None:
            # then what others wrote while the question was open, as one new chat in the same
            # conversation (it could not go there before: one chat per conversation, see
            # runner_kit.pending)
            async for item in self.pending.settle(res, self._submit(res.record, res.answer), self._chat):
                yield item
            return
        if not res.go_on:
            return
        async for item in self._chat():
            yield item

    async def _chat(self) -> AsyncIterator[ev.Event]:
        """``POST /v3/chat`` with this run's message, streamed."""
        self._done = False
        body, query = await self._request()
        sent_conversation = self.sent_conversation = bool(query)

        def on_error(status: int, raw: bytes, ctype: str) -> Exception:
            if sent_conversation and conversation_missing(json_object(raw)):
                return SessionMissing()
            return parse_http_error(status, raw, ctype)

        async with open_stream(
            self.env.client,
            "POST",
            self.base + const.CHAT_PATH,
            budget=self.env.budget(),
            platform=self.platform,
            error_parser=on_error,  # type: ignore[arg-type]
            headers=self.headers,
            params=query,
            json=body,
        ) as resp:
            async for item in self._consume(resp, sent_conversation):
                yield item

    async def _consume(self, resp: httpx.Response, sent_conversation: bool) -> AsyncIterator[ev.Event]:
        """One chat event stream (``/v3/chat`` or ``/v3/chat/submit_tool_outputs``) as events."""
        ctype = resp.headers.get("content-type", "").lower()
        if ctype and "event-stream" not in ctype:
            await self._refused(resp, ctype, sent_conversation)
        st = _StreamState()
        decoder = SSEDecoder()
        chunks = resp.aiter_bytes()
        touch = self.env.touch  # every chunk is life for idle-timeout
        ended = False
        while not (st.finished or ended):
            try:
                chunk = await anext(chunks)
                touch()
                batch = decoder.feed(chunk)
            except StopAsyncIteration:
                batch, ended = decoder.close(), True
            except (httpx.HTTPError, RunnerError) as exc:
                if not ((st.completed or st.action is not None) and cut_off(exc)):
                    raise
                log.info("%s: the stream broke off after the chat ended; the answer is complete", self.platform)
                break
            # the events of one read arrived together: their text goes to the kit as one piece
            pending: list[ev.Event] = []
            error: Exception | None = None
            for sse in batch:
                try:
                    pending.extend(self._map(sse.event, sse.data, st))
                except (RunnerError, SessionMissing) as exc:
                    error = exc
                    break
                if st.finished:
                    break
            for item in _merged(pending):
                yield item
            if error is not None:
                raise error
        if st.finished:
            await finish_body(chunks)  # lets the connection be reused
        self._done = True
        if not st.seen_events:
            if "event-stream" not in ctype:
                raise RunnerError(
                    "upstream.protocol",
                    f"{self.platform} answered without a content type and sent no events ({BASE_URL_HINT})",
                )
            raise RunnerError("upstream.empty_response", f"{self.platform} closed the stream without sending anything")
        if st.action is not None:
            for item in self._ask(st.action):
                yield item
            return
        if not st.completed:
            raise RunnerError("upstream.unavailable", f"{self.platform} closed the stream before the answer finished")
        for item in self._closing(st):
            yield item

    # --- requires_action: ask the chat, answer through submit_tool_outputs ---------------------

    def _ask(self, data: dict[str, Any]) -> list[ev.Event]:
        """``conversation.chat.requires_action``: one question in the chat (buttons or one field
        where the platform renders them), what resuming needs kept in conversation state."""
        calls = _tool_calls(data)
        chat_id = str(data.get("id") or self.chat_id or "")
        conv_id = str(data.get("conversation_id") or self.conversation_id or "")
        if not calls or not chat_id or not conv_id:
            raise RunnerError("upstream.paused", _requires_action(data))
        q = _question(calls)
        record = {
            "id": q.id, "conversation_id": conv_id, "chat_id": chat_id,
            "tool_calls": [c["id"] for c in calls], "user": self.env.user,
            "title": q.title, "detail": q.detail, "free_text": q.free_text,
            "options": [{"value": o.value, "label": o.label} for o in q.options],
        }
        log.info("%s: chat %s requires action (%s)", self.platform, chat_id,
                 ", ".join(c["name"] for c in calls)[:200])
        return self.pending.ask(
            record, text=ap.question_text(self.platform, q),
            expires_at=time.time() + ap.approval_timeout(self.env.config),
            request=lambda caps, expires: ap.interaction_request(self.platform, q, expires, caps),
        )

    def _read_click(self, submission: Any) -> str | None:
        q = _record_question(self.pending.record() or {})
        d = ap.from_submission(submission, q) if q is not None else None
        return d.answer if d is not None else None

    def _read_typed(self, text: str) -> str | None:
        q = _record_question(self.pending.record() or {})
        d = ap.parse_answer(text, q) if q is not None else None
        return d.answer if d is not None else None

    async def _submit(self, record: dict[str, Any], answer: str) -> AsyncIterator[ev.Event]:
        """``POST /v3/chat/submit_tool_outputs`` (streaming) with the answer as every pending tool
        call's output; the continuation streams like a chat."""
        outputs = [{"tool_call_id": str(cid), "output": answer} for cid in record.get("tool_calls") or []]
        query = {"conversation_id": str(record["conversation_id"]), "chat_id": str(record["chat_id"])}
        self.conversation_id, self.chat_id = query["conversation_id"], query["chat_id"]
        title = str(record.get("title") or "the bot's question")
        # dropped before submitting: Coze refuses a second submit for the same chat, and a free-text
        # question left pending would read every later message as its answer
        yield self.pending.done()

        def on_error(status: int, raw: bytes, ctype: str) -> Exception:
            return _submit_failed(title, parse_http_error(status, raw, ctype))

        try:
            async with open_stream(
                self.env.client,
                "POST",
                self.base + const.SUBMIT_PATH,
                budget=self.env.budget(),
                platform=self.platform,
                error_parser=on_error,  # type: ignore[arg-type]
                headers=self.headers,
                params=query,
                json={"tool_outputs": outputs, "stream": True},
            ) as resp:
                async for item in self._consume(resp, False):
                    yield item
        except RunnerError as exc:
            if exc.message.startswith("Coze did not take"):
                raise
            if self._submitted_refusal:
                raise _submit_failed(title, exc) from None
            raise

    async def _refused(self, resp: httpx.Response, ctype: str, sent_conversation: bool) -> None:
        """A 2xx body that is not an event stream: Coze's business envelope, or a page that is not Coze."""
        raw = await read_bounded(resp, MAX_JSON_BODY + 1, self.platform, strict=True)
        self._done = True
        self._submitted_refusal = True
        doc = json_object(raw)
        if doc is not None:
            if sent_conversation and conversation_missing(doc):
                raise SessionMissing()
            err = envelope_error(doc)
            if err is not None:
                raise err
            raise RunnerError(
                "upstream.protocol",
                f"{self.platform} answered with a JSON document instead of an event stream ({BASE_URL_HINT})",
            )
        html = errors.looks_html(raw, ctype)
        kind = "an HTML page" if html else f"a {ctype.split(';', 1)[0].strip()} body"
        raise RunnerError(
            "upstream.protocol",
            f"{self.platform} answered HTTP {resp.status_code} with {kind} instead of an event stream ({BASE_URL_HINT})",
        )

    def _map(self, name: str, raw: str, st: _StreamState) -> list[ev.Event]:
        st.seen_events = True
        if name == const.MESSAGE_DELTA:  # nearly every event: the short path
            data = _parse(name, raw)
            if type(data) is not dict:
                raise RunnerError("upstream.protocol", f"{self.platform} sent a message delta that is not an object")
            return self._delta(data, st)
        if name == const.DONE:
            st.finished = True
            return []
        if name in const.IGNORED_EVENTS:
            return []
        data = _parse(name, raw)
        if name == const.ERROR:
            self._done = True
            if isinstance(data, dict) and (data.get("code") or data.get("msg")):
                raise self._failure(data.get("code"), data.get("msg"))
            raise RunnerError("upstream.error", f"{self.platform} ended the answer with an error event and no details")
        if not isinstance(data, dict):
            raise RunnerError("upstream.protocol", f"{self.platform} sent a {name[:60]!r} event that is not an object")
        out: list[ev.Event] = []
        cid = data.get("conversation_id")
        if cid and name.startswith("conversation.chat."):
            self.conversation_id = str(cid)
            if str(cid) != st.conversation_id:
                st.conversation_id = str(cid)
                out.append(ev.SessionId(str(cid)))
        if name.startswith("conversation.chat.") and data.get("id"):
            self.chat_id = str(data["id"])
        if name == const.MESSAGE_COMPLETED:
            out.extend(self._completed(data, st))
        elif name == const.CHAT_COMPLETED:
            st.completed = True
            st.finished = True
            self._done = True
            usage = usage_from(data.get("usage"), prompt="input_count", completion="output_count", total="token_count")
            if usage is not None and (usage.total_tokens or usage.prompt_tokens or usage.completion_tokens):
                out.append(usage)  # all zeros is what Coze sends when it did not count (unknown, not 0)
        elif name == const.CHAT_FAILED:
            self._done = True
            err = data.get("last_error") if isinstance(data.get("last_error"), dict) else {}
            if err.get("code") or err.get("msg"):
                raise self._failure(err.get("code"), err.get("msg"))
            raise RunnerError("upstream.error", f"the {self.platform} chat failed without saying why")
        elif name == const.CHAT_REQUIRES_ACTION:
            # the chat pauses for a client-side tool result; the stream then sends done
            self._done = True
            st.action = data
        elif name in (const.CHAT_CREATED, const.CHAT_IN_PROGRESS):
            pass
        elif name == "conversation.chat.canceled":
            self._done = True
            raise RunnerError("upstream.error", f"the {self.platform} chat was cancelled before it finished")
        elif name not in self._unknown:
            self._unknown.add(name)
            log.info("%s: skipping unknown stream event %r", self.platform, name[:80])
        return out

    def _failure(self, code: Any, msg: Any) -> Exception:
        """An in-stream failure; Coze's own "conversation not found" means the stored id is gone."""
        if self.sent_conversation and str(code) == str(const.CONVERSATION_MISSING):
            return SessionMissing()
        return map_error(None, code, msg if isinstance(msg, str) else None)

    def _answer_start(self, mid: str, st: _StreamState) -> list[ev.Event]:
        """A new answer message after an earlier one is shown after it, as its own paragraph."""
        if mid in st.answer_ids:
            return []
        st.answer_ids.append(mid)
        return [ev.Text("\n\n")] if st.answer_text else []

    def _delta(self, data: dict[str, Any], st: _StreamState) -> list[ev.Event]:
        get = data.get
        if get("type", const.ANSWER) != const.ANSWER or get("content_type") not in _TEXT_TYPES:
            return []  # audio, cards and multimodal answers are read from message.completed
        mid = get("id") or ""
        content = get("content")
        reasoning = get("reasoning_content")
        if mid == st.current and not reasoning:  # the next piece of the answer being streamed
            return [ev.Text(content)] if type(content) is str and content else []
        mid = str(mid)
        st.streamed.add(mid)
        out: list[ev.Event] = []
        if isinstance(reasoning, str) and reasoning:
            out.append(ev.Think(reasoning))
        if isinstance(content, str) and content:
            out.extend(self._answer_start(mid, st))
            st.answer_text = True
            st.current = mid
            out.append(ev.Text(content))
        return out

    def _completed(self, data: dict[str, Any], st: _StreamState) -> list[ev.Event]:
        mtype = data.get("type")
        mid = str(data.get("id") or "")
        content = data.get("content")
        if mtype == const.ANSWER:
            if mid in st.streamed:
                return []  # repeats the deltas
            out: list[ev.Event] = []
            reasoning = data.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                out.append(ev.Think(reasoning))
            text, attachments = _answer_content(data.get("content_type"), content)
            if text:
                out.extend(self._answer_start(mid, st))
                st.answer_text = True
                out.append(ev.Text(text))
            st.attachments += len(attachments)
            out.extend(attachments)
            return out
        if mtype == const.FUNCTION_CALL:
            call = maybe_json(content)
            call = call if isinstance(call, dict) else {"arguments": call}
            name = str(call.get("name") or call.get("plugin_name") or "tool")
            call_id = mid or f"call-{len(st.open_calls) + st.calls_done}"
            st.open_calls.append((call_id, name))
            args = maybe_json(call.get("arguments"))
            params = args if isinstance(args, dict) else ({} if args in (None, "") else {"arguments": args})
            # Coze sends nothing while the plugin or workflow runs: until the answer starts, the
            # streamed message says what it is waiting on
            return [ev.ToolStarted(call_id=call_id, name=name, parameters=params),
                    ev.Progress(progress_line(name, params))]
        if mtype in const.TOOL_OUTPUTS:
            if st.open_calls:
                call_id, name = st.open_calls.pop(0)
            else:
                call_id, name = mid or f"call-{st.calls_done}", "tool"
                # an output without a call we saw: still one started/completed pair for the ledger
                st.calls_done += 1
                return [ev.ToolStarted(call_id=call_id, name=name),
                        ev.ToolCompleted(call_id=call_id, name=name, result=maybe_json(content))]
            st.calls_done += 1
            return [ev.ToolCompleted(call_id=call_id, name=name, result=maybe_json(content))]
        if mtype == const.FOLLOW_UP:
            if isinstance(content, str) and content.strip() and len(st.follow_ups) < MAX_FOLLOW_UPS:
                st.follow_ups.append(" ".join(content.split()))
            return []
        return []  # verbose, knowledge and types this runner does not show

    def _closing(self, st: _StreamState) -> list[ev.Event]:
        """After chat.completed: the empty-answer check and the suggested questions."""
        if not st.answer_text and not st.attachments:
            hint = "; it only ran tools" if st.calls_done or st.open_calls else ""
            raise RunnerError(
                "upstream.empty_response",
                f"the {self.platform} bot finished without producing any answer{hint} (check the bot's prompt, "
                "workflow output or model in Coze)",
            )
        if st.follow_ups and self.env.config.get("follow-up-suggestions"):
            lines = "\n".join(f"- {q}" for q in st.follow_ups)
            return [ev.Text(f"\n\n{lines}")]
        return []

    async def end_conversation(self, upstream_id: Any) -> None:
        """A LangBot reset left this Coze conversation behind: ``DELETE /v1/conversations/{id}``
        removes it and its messages (nobody writes in it again; clearing its context would keep them).
        Only the account whose token created it may; one Coze no longer has (4002) is left at that,
        other refusals are raised for the kit to log."""
        if not isinstance(upstream_id, str) or not upstream_id.strip():
            return
        url = self.base + const.CONVERSATION_PATH.format(conversation_id=quote(upstream_id, safe=""))
        async with open_stream(self.env.client, "DELETE", url, budget=CANCEL_GRACE, platform=self.platform,
                               error_parser=parse_http_error, headers=self.headers) as resp:
            doc = await read_json(resp, self.platform)
        if isinstance(doc, dict) and conversation_missing(doc):
            log.info("%s: conversation %s was already gone", self.platform, upstream_id[:64])
            return
        err = envelope_error(doc) if isinstance(doc, dict) else None
        if err is not None:
            raise err
        log.info("%s: deleted conversation %s after a LangBot reset", self.platform, upstream_id[:64])

    async def cancel(self) -> None:
        """Cancel the running chat (``/v3/chat/cancel`` needs both ids from the stream)."""
        if self._done or not self.chat_id or not self.conversation_id:
            return
        try:
            await self.env.client.post(
                self.base + const.CANCEL_PATH,
                json={"conversation_id": self.conversation_id, "chat_id": self.chat_id},
                headers=self.headers,
                timeout=timeout_for(2.0),
            )
        except Exception:  # noqa: BLE001 - best effort on cancel
            log.info("%s: could not cancel the chat", self.platform)


class _StreamState:
    __slots__ = (
        "action",
        "answer_ids",
        "answer_text",
        "attachments",
        "calls_done",
        "completed",
        "conversation_id",
        "current",
        "finished",
        "follow_ups",
        "open_calls",
        "seen_events",
        "streamed",
    )

    def __init__(self) -> None:
        self.action: dict[str, Any] | None = None  # the requires_action chat object
        self.answer_ids: list[str] = []  # answer messages in the order they began
        self.answer_text = False
        self.attachments = 0
        self.calls_done = 0
        self.completed = False  # conversation.chat.completed arrived
        self.conversation_id: str | None = None
        self.current: str | None = None  # the answer message whose text is streaming now
        self.finished = False
        self.follow_ups: list[str] = []
        self.open_calls: list[tuple[str, str]] = []  # function calls waiting for their output
        self.seen_events = False
        self.streamed: set[str] = set()  # answer message ids that arrived as deltas


def _merged(items: list[ev.Event]) -> list[ev.Event]:
    """Adjacent text (or reasoning) pieces joined, everything else kept in order."""
    if len(items) < 2:
        return items
    out: list[ev.Event] = []
    run: list[str] = []
    kind: type | None = None
    for item in items:
        if type(item) is kind:
            run.append(item.text)  # type: ignore[union-attr]
            continue
        if kind is not None:
            out.append(kind("".join(run)))
            kind, run = None, []
        if type(item) in (ev.Text, ev.Think):
            kind, run = type(item), [item.text]  # type: ignore[union-attr]
        else:
            out.append(item)
    if kind is not None:
        out.append(kind("".join(run)))
    return out


def _parse(name: str, raw: str) -> Any:
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        snippet = raw[:120]
        raise RunnerError(
            "upstream.protocol", f"Coze sent invalid JSON in the {name[:60]!r} event; got {snippet!r}"
        ) from None


def _answer_content(content_type: Any, content: Any) -> tuple[str, list[ev.Attachment]]:
    """Text and files of a complete answer message (``text``, or ``object_string`` parts)."""
    if not isinstance(content, str):
        return "", []
    if content_type != "object_string":
        return (content if content_type in (None, "", "text") else ""), []
    items = maybe_json(content)
    if not isinstance(items, list):
        return content, []
    texts: list[str] = []
    files: list[ev.Attachment] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "text" and isinstance(item.get("text"), str):
            texts.append(item["text"])
        elif item.get("file_url"):
            kind = "image" if item.get("type") == "image" else "file"
            link = chat_link(str(item["file_url"]))  # a bot can echo a member's link (netguard.chat_link)
            if link is None:
                log.warning("Coze: a file in the answer is not linked: its link is not a public http(s) one")
                continue
            files.append(ev.Attachment(url=link, kind=kind, name=item.get("name")))
    return "\n".join(texts), files


def _requires_action(data: dict[str, Any]) -> str:
    """A requires_action this runner cannot ask about (no tool call with an id, or no chat ids)."""
    action = data.get("required_action") if isinstance(data.get("required_action"), dict) else {}
    kind = str(action.get("type") or "unknown")[:60]
    return (
        f"the {const.PLATFORM} bot stopped for a client-side action ({kind}) but named no tool call to answer, "
        "so the chat cannot answer it; give the bot a plugin or workflow for it in Coze instead"
    )


# --- requires_action helpers ----------------------------------------------------------------------
# Shapes: coze-dev/coze-py cozepy/chat/__init__.py (Chat.required_action: ChatRequiredAction
# {type: "submit_tool_outputs", submit_tool_outputs: {tool_calls: [ChatToolCall{id, type:
# "function", function{name, arguments: JSON string}}]}}; ToolOutput{tool_call_id, output: str})
# and docs/platforms.md §Coze. That SDK knows only tool calls of type "function"; a call of another
# type (or without a function) is asked as a free-text question with what Coze sent.

_CHOICE_KEYS = ("options", "choices", "enum", "candidates")
MAX_OPTIONS = 20


def _tool_calls(data: dict[str, Any]) -> list[dict[str, Any]]:
    action = data.get("required_action") if isinstance(data.get("required_action"), dict) else {}
    sto = action.get("submit_tool_outputs") if isinstance(action.get("submit_tool_outputs"), dict) else {}
    out = []
    for c in sto.get("tool_calls") or []:
        if not isinstance(c, dict) or not c.get("id"):
            continue
        fn = c.get("function") if isinstance(c.get("function"), dict) else {}
        args = maybe_json(fn.get("arguments"))
        out.append({"id": str(c["id"]), "type": str(c.get("type") or ""),
                    "name": str(fn.get("name") or c.get("type") or "tool"), "arguments": args})
    return out


def _question(calls: list[dict[str, Any]]) -> ap.Question:
    """One question for the paused chat: the function(s) and their arguments; a list of choices in
    the arguments (``options``/``choices``/``enum``) becomes buttons."""
    first = calls[0]
    names = ", ".join(dict.fromkeys(c["name"] for c in calls))
    title = f"the result of the client-side function {names}"[:300]
    details = []
    options: list[ap.Option] = []
    for c in calls:
        args = c["arguments"]
        if isinstance(args, dict):
            shown = {k: v for k, v in args.items() if k not in _CHOICE_KEYS}
            question = next((args[k] for k in ("question", "prompt", "message") if isinstance(args.get(k), str)), None)
            if question and len(calls) == 1:
                title = question[:300]
            if shown:
                details.append(f"{c['name']}({json.dumps(shown, ensure_ascii=False)[:300]})")
            if c is first:
                for key in _CHOICE_KEYS:
                    raw = args.get(key)
                    if isinstance(raw, list) and 0 < len(raw) <= MAX_OPTIONS:
                        options = [_option(v) for v in raw]
                        break
        elif args not in (None, ""):
            details.append(f"{c['name']}({str(args)[:300]})")
    return ap.Question(title=title, detail="; ".join(details)[:600], kind="question", options=options,
                       free_text=not options)


def _option(v: Any) -> ap.Option:
    if isinstance(v, dict):
        value = str(v.get("value") or v.get("name") or v.get("label") or json.dumps(v, ensure_ascii=False))
        return ap.Option(value=value, label=str(v.get("label") or v.get("name") or value)[:200])
    return ap.Option(value=str(v), label=str(v)[:200])


def _record_question(record: dict[str, Any]) -> ap.Question | None:
    try:
        options = [ap.Option(value=str(o["value"]), label=str(o.get("label") or o["value"]))
                   for o in record.get("options") or []]
        return ap.Question(title=str(record.get("title") or ""), detail=str(record.get("detail") or ""),
                           kind="question", options=options, free_text=bool(record.get("free_text", not options)),
                           id=str(record["id"]))
    except (KeyError, TypeError):
        return None


def _submit_failed(title: str, exc: Exception) -> RunnerError:
    code = exc.code if isinstance(exc, RunnerError) else "upstream.error"
    msg = exc.message if isinstance(exc, RunnerError) else str(exc)
    return RunnerError(code, f"Coze did not take the answer to “{title[:120]}”: {msg[:400]}")
