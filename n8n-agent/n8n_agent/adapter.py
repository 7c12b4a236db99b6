"""n8n Webhook adapter (platforms.md §2, real-http-peers.md §4).

One LangBot turn is one POST to the workflow's webhook. What comes back depends on the Webhook
node's Respond setting, and is told apart from the first bytes of the body (n8n labels its stream
``application/json`` like a plain answer):

- Streaming: NDJSON, one object per line, ``{"type": "begin"|"item"|"end"|"error", "content"?,
  "metadata": {nodeId, nodeName, itemIndex, runIndex, timestamp?}}``. Every streaming node (an AI
  Agent, a Respond to Webhook node) brackets its output in its own ``begin``/``end``; an AI Agent's
  ``item.content`` is a text delta, a Respond to Webhook node's is its whole body (for a JSON body,
  the JSON serialised as a string); newer n8n may send an object ``{"text_chunk": …}``. An ``error``
  item (a model error carries ``content``, a Stop and Error node none) ends the body without ``end``.
- When Last Node Finishes / Using Respond to Webhook Node: one JSON object, an array of objects
  (all entries), or plain text.
- Immediately: ``{"message": "Workflow was started"}`` — no answer will come.
- A file (Respond to Webhook's Binary File, or First Entry Binary), told apart by its Content-Type
  and Content-Disposition: one attachment for the chat (files.py).

n8n reports no token usage; a workflow may return ``usage`` (OpenAI names) or ``tokenUsage``
(n8n/LangChain names) next to its answer, and that is recorded.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from runner_kit import events as ev
from runner_kit.errors import RunnerError
from runner_kit.http import open_stream
from runner_kit.inputs import sniff
from runner_kit.logs import get_logger
from runner_kit.runner import Adapter
from runner_kit.streams import DEFAULT_MAX_BYTES, NDJSONDecoder

from . import const, fields, files
from .auth import auth_headers
from .errors import json_doc, parse_error, workflow_failed

log = get_logger("runner_kit.n8n")

MAX_BODY = 16 * 1024 * 1024  # the largest plain (non-streamed) answer read into memory
SNIFF_BYTES = 64 * 1024  # decide "stream or plain" by this much when no line has ended yet
_STREAM_START = re.compile(rb'^\{\s*"type"\s*:\s*"(?:begin|item|end|error|keepalive)"')
_HTML_STARTS = (b"<!doctype html", b"<html", b"<head", b"<body")
_MAYBE_JSON = frozenset("{[ \t\r\n")  # an item starting so may be a Respond node's JSON body
_CHARSET = re.compile(r"charset\s*=\s*\"?([\w.:-]+)", re.IGNORECASE)


def webhook_url(raw: Any) -> str:
    """The webhook URL as configured, checked, without a trailing slash (n8n paths never end in one)."""
    url = str(raw or "").strip()
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise RunnerError(
            "config.invalid",
            "config key 'webhook-url' must be the Webhook node's full URL, starting with http:// or https:// "
            "(for example https://n8n.example.com/webhook/<path>)",
        )
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") or "/", parts.query, ""))


def _usage(doc: dict[str, Any]) -> ev.Usage | None:
    raw = doc.get("usage") if isinstance(doc.get("usage"), dict) else doc.get("tokenUsage")
    if not isinstance(raw, dict):
        return None

    def num(*keys: str) -> int | None:
        for k in keys:
            v = raw.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return int(v)
        return None

    prompt = num("prompt_tokens", "promptTokens", "input_tokens", "inputTokens")
    completion = num("completion_tokens", "completionTokens", "output_tokens", "outputTokens")
    total = num("total_tokens", "totalTokens")
    if total is None and prompt is not None and completion is not None:
        total = prompt + completion
    if prompt is None and completion is None and total is None:
        return None
    return ev.Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _reset_generation(ctx: Any) -> str | None:
    """The conversation's reset generation once LangBot has reset it, else None.

    LangBot 4.11.2 seeds ``external.conversation_id`` with its own conversation id, and after a reset
    with a new reset generation (``agent/runner/persistent_state_store.py`` and ``context_reset.py``),
    so the two differ exactly when the conversation was reset."""
    snapshot = getattr(getattr(ctx, "state", None), "conversation", None)
    seeded = snapshot.get("external.conversation_id") if isinstance(snapshot, dict) else None
    conv = getattr(ctx, "conversation", None)
    own = getattr(conv, "conversation_id", None) if conv is not None else None
    if seeded in (None, "") or not own or str(seeded) == str(own):
        return None
    return str(seeded)


class N8nAdapter(Adapter):
    """Maps one LangBot turn onto a POST to an n8n workflow's Webhook node."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY

    def __init__(self, env: Any):
        super().__init__(env)
        cfg = env.config
        self.url = webhook_url(cfg.get("webhook-url"))
        self.output_key = str(cfg.get("output-key") or "").strip()
        self.ignore = str(cfg.get("response-handling") or "reply") == "ignore"
        self.ignored = False  # the workflow answered and response-handling said not to reply
        self._unknown: set[str] = set()

    # --- request ----------------------------------------------------------------------------------

    def _session_id(self) -> str | None:
        """The stored sessionId, or None when this conversation (or person) has none yet."""
        current = self.env.session.current
        return str(current) if current else None

    def _new_session_id(self) -> str:
        if str(self.env.config.get("user-id-source") or "") == "legacy-session":
            # LangBot 4.10 keyed n8n conversations by the launcher; a migrated workflow's memory continues
            # until the conversation is reset in LangBot, which then starts a new memory
            user = str(self.env.user)
            reset = _reset_generation(self.env.ctx)
            if reset is not None:
                return f"{user}-{hashlib.sha256(reset.encode()).hexdigest()[:12]}"
            return user
        return f"langbot-{uuid.uuid4().hex}"

    def _fields(self, session_id: str) -> dict[str, Any]:
        return fields.body(self.env, session_id)

    def _request(self, session_id: str) -> dict[str, Any]:
        fields = self._fields(session_id)
        byte_files = [f for f in self.env.input.files if f.data is not None]
        described = []
        for n, f in enumerate(self.env.input.files):
            item: dict[str, Any] = {"name": f.name, "kind": f.kind, "mimeType": f.mime_type}
            if f.data is not None:
                item["field"] = f"file{n}"
                item["size"] = f.size
            else:
                item["url"] = f.url
            described.append(item)
        if described:
            fields["files"] = described
        if not byte_files:
            return {"json": fields}
        # n8n's Webhook node puts multipart text fields into body and each file into a binary property
        data = {k: (v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)) for k, v in fields.items()
                if v is not None}
        files = []
        for n, f in enumerate(self.env.input.files):
            if f.data is not None:
                name = f.name.replace("/", "_").replace("\\", "_") or f"file{n}"
                files.append((f"file{n}", (name, f.data, f.mime_type)))
        return {"data": data, "files": files}

    # --- response ---------------------------------------------------------------------------------

    def _error(self, status: int, body: bytes, ctype: str) -> RunnerError:
        err = parse_error(status, body, ctype)
        cfg = self.env.config
        if err.code == "upstream.auth" and str(cfg.get("auth-type") or "") == "basic":
            enc = str(cfg.get("basic-encoding") or "latin1").replace("-", "").replace("_", "").lower()
            creds = f"{cfg.get('basic-username') or ''}{cfg.get('basic-password') or ''}"
            if enc != "utf8" and not creds.isascii():
                return RunnerError(
                    err.code,
                    f"{err.message}; n8n reads Basic credentials as UTF-8, so with characters beyond ASCII set "
                    "basic-encoding to utf-8",
                    status=err.status,
                )
        return err

    async def stream(self) -> AsyncIterator[ev.Event]:
        headers = auth_headers(self.env.config)
        session_id = self._session_id()
        if session_id is None:
            session_id = self._new_session_id()
            yield ev.SessionId(session_id)
        async with open_stream(
            self.env.client,
            "POST",
            self.url,
            budget=self.env.budget(),
            platform=self.platform,
            error_parser=self._error,
            headers=headers,
            **self._request(session_id),
        ) as resp:
            ctype = resp.headers.get("content-type", "")
            chunks = resp.aiter_bytes()
            touch = self.env.touch  # every chunk is life for idle-timeout
            disposition = resp.headers.get("content-disposition", "")
            if files.is_file(ctype, disposition):  # a Binary File answer: never a stream (files.py)
                raw = await self._read_file(resp.headers.get("content-length"), chunks)
                for item in self._file(raw, files.mime_of(ctype), disposition, resp.status_code):
                    yield item
                if self.ignore:
                    self.ignored = True
                    yield ev.NoReply()
                return
            head = bytearray()
            ended = True
            async for chunk in chunks:
                touch()
                head += chunk
                body = head.lstrip()
                if b"\n" in body or len(head) >= SNIFF_BYTES:
                    ended = False
                    break
            if _streamed(bytes(head), complete=ended or b"\n" in head.lstrip()):
                # NDJSON items as they arrive (read here, not in a nested generator: one hop less per token)
                decoder = NDJSONDecoder(DEFAULT_MAX_BYTES)
                st = _StreamState()
                item_events = self._item
                for obj in decoder.feed(bytes(head)):
                    for item in item_events(obj, st):
                        yield item
                if not ended:
                    async for chunk in chunks:
                        touch()
                        for obj in decoder.feed(chunk):
                            for item in item_events(obj, st):
                                yield item
                for obj in decoder.close():
                    for item in item_events(obj, st):
                        yield item
                self._stream_ended(st)
            else:
                raw = bytes(head)
                if not ended:
                    buf = bytearray(head)
                    async for chunk in chunks:
                        touch()
                        buf += chunk
                        if len(buf) > MAX_BODY:
                            raise RunnerError(
                                "upstream.protocol", f"{self.platform}'s answer is larger than {MAX_BODY} bytes"
                            )
                    raw = bytes(buf)
                for item in self._plain(raw, ctype, resp.status_code):
                    yield item
        if self.ignore:
            self.ignored = True
            yield ev.NoReply()  # the workflow ran; response-handling says the chat gets no reply

    def _stream_ended(self, st: _StreamState) -> None:
        """The stream's body ended: it must not stop inside a node's output, and must have said something."""
        if st.open:
            node = next(iter(st.open.values()))
            raise RunnerError(
                "upstream.unavailable",
                f"{self.platform} ended the stream while node '{node}' was still streaming (no end item)",
            )
        if not st.text and not self.ignore:
            if st.groups:
                raise RunnerError(
                    "upstream.empty_response",
                    f"the {self.platform} workflow's streaming nodes sent no text",
                )
            raise RunnerError("upstream.empty_response", f"{self.platform} sent an empty stream")

    def _item(self, obj: Any, st: _StreamState) -> list[ev.Event]:
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "item":  # the hot path: one per token
            content = obj.get("content")
            text: str | None
            usage: ev.Usage | None
            # a string is text: a model's tokens ("[1]", '{"a": 1}') are never parsed. Only the first
            # item of its node's group may be a Respond to Webhook node's whole JSON body (which n8n
            # streams as one item, its body as a JSON string: fixtures/real-peers/n8n/02)
            first = st.first_item()
            if isinstance(content, str) and content and (not first or content[0] not in _MAYBE_JSON):
                text, usage = content, None
            else:
                text, usage = self._content(content)
            out: list[ev.Event] = [] if usage is None else [usage]
            if text and not self.ignore:
                if st.new_group:
                    st.new_group = False
                    if st.text:
                        text = "\n\n" + text  # another node's output: its own paragraph
                st.text = True
                out.append(ev.Text(text))
            return out
        if not isinstance(kind, str):
            raise RunnerError("upstream.protocol", f"{self.platform} sent a stream line that is not a stream item")
        if kind == const.KEEPALIVE:
            return []
        if kind not in const.STREAM_TYPES:
            if kind not in self._unknown:
                self._unknown.add(kind)
                log.info("%s: skipping unknown stream item type %r", self.platform, kind[:40])
            return []
        raw_meta = obj.get("metadata")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        node = str(meta.get("nodeName") or meta.get("nodeId") or "")
        key = (meta.get("nodeId"), meta.get("runIndex"), meta.get("itemIndex"))
        if kind == "begin":
            st.open[key] = node or "?"
            st.groups += 1
            st.items = 0
            st.new_group = True
            return []
        if kind == "end":
            st.open.pop(key, None)
            return []
        content = obj.get("content")  # kind == "error"
        detail = _as_text(content).strip() if content not in (None, "") else ""
        raise workflow_failed(node, detail)

    def _content(self, content: Any) -> tuple[str | None, ev.Usage | None]:
        """An item's text (and usage): a delta string, an object, or a Respond node's JSON body."""
        if content is None:
            return None, None
        if isinstance(content, str):
            if content.lstrip()[:1] in ("{", "["):
                try:
                    doc = json.loads(content)
                except ValueError:
                    return content, None
                # a body is an object, or a list of objects (all incoming items); "[1]" is text
                if isinstance(doc, dict) or (isinstance(doc, list) and doc and all(isinstance(x, dict) for x in doc)):
                    text, usage = self._answer(doc)
                    if text is not None or usage is not None:
                        return text, usage
            return content, None
        if isinstance(content, dict):
            for k in const.CHUNK_TEXT_KEYS:
                if isinstance(content.get(k), str):
                    return content[k], _usage(content)
            text, usage = self._answer(content)
            if text is None and usage is None and content:
                text = _as_text(content)
            return text, usage
        if isinstance(content, list):
            return self._answer(content)
        return str(content), None

    def _answer(self, doc: Any) -> tuple[str | None, ev.Usage | None]:
        """The answer in a JSON document: output-key, then the usual keys; an array joins its items."""
        if isinstance(doc, list):
            texts: list[str] = []
            usage: ev.Usage | None = None
            for entry in doc:
                text, u = self._answer(entry) if isinstance(entry, (dict, list)) else (_as_text(entry), None)
                if text is None and isinstance(entry, dict) and entry:
                    text = _as_text(entry)
                if text:
                    texts.append(text)
                usage = usage or u
            return ("\n\n".join(texts) if texts else None), usage
        if not isinstance(doc, dict):
            return (None if doc is None else _as_text(doc)), None
        usage = _usage(doc)
        keys = ((self.output_key,) if self.output_key else ()) + const.FALLBACK_KEYS
        for k in keys:
            if k in doc and doc[k] is not None:
                return _as_text(doc[k]), usage
        return None, usage

    def _plain(self, raw: bytes, ctype: str, status: int) -> list[ev.Event]:
        """A whole (non-streamed) answer: JSON object, array of objects, or plain text."""
        lowered = ctype.lower()
        stripped = raw.strip()
        if not stripped:
            if self.ignore:
                return []
            raise RunnerError(
                "upstream.empty_response",
                f"{self.platform} answered HTTP {status} with an empty body (set the Webhook node to respond with "
                "Streaming, When Last Node Finishes or a Respond to Webhook node that sends data; in Streaming mode "
                "a Respond to Webhook node that responds with a binary file sends nothing, so answer files with "
                "'Using Respond to Webhook Node' or 'When Last Node Finishes')",
            )
        # n8n labels a Respond to Webhook node's text "text/html" (express's default for a string), so
        # only a body that is an HTML document is a page rather than the workflow's answer
        if stripped[:15].lower().startswith(_HTML_STARTS):
            raise RunnerError(
                "upstream.protocol",
                f"{self.platform} answered HTTP {status} with an HTML page instead of the workflow's answer "
                f"({const.URL_HINT})",
            )
        doc = json_doc(raw)
        if doc is None and "json" in lowered:
            raise RunnerError("upstream.protocol", f"{self.platform} returned a body that is not valid JSON")
        if doc is None:
            return self._text_answer(raw, ctype)
        if isinstance(doc, dict) and set(doc) == {"message"}:
            if doc["message"] == const.STARTED_MESSAGE:
                if self.ignore:
                    return []
                raise RunnerError(
                    "config.invalid",
                    f"the {self.platform} Webhook node answers immediately (\"{const.STARTED_MESSAGE}\"), before "
                    "the workflow has an answer: set its Respond option to Streaming, When Last Node Finishes or "
                    "Using 'Respond to Webhook' Node, or set response-handling to ignore",
                )
            if doc["message"] == const.WORKFLOW_ERROR:
                raise workflow_failed("", "")
        text, usage = self._answer(doc)
        out: list[ev.Event] = [usage] if usage is not None else []
        if text is None:
            if doc in ({}, [], None) or (isinstance(doc, dict) and set(doc) <= {"usage", "tokenUsage"}):
                if self.ignore:
                    return out
                raise RunnerError("upstream.empty_response", f"the {self.platform} workflow returned no answer")
            log.info("%s: no output key %r in the answer; showing the whole JSON", self.platform, self.output_key)
            text = _as_text(doc)
        if not self.ignore:
            out.append(ev.FinalText(text))
        return out

    def _text_answer(self, raw: bytes, ctype: str) -> list[ev.Event]:
        m = _CHARSET.search(ctype)
        charset = m.group(1) if m else "utf-8"
        try:
            text = raw.decode(charset)
        except (LookupError, UnicodeDecodeError):
            if not files.mime_of(ctype) and sniff(raw):  # an unlabelled image or PDF, not text
                if len(raw) > (most := files.limit(self.env.max_bytes)):
                    raise files.too_large(len(raw), most) from None
                return self._file(raw, "", "", 200)
            raise RunnerError("upstream.protocol", f"{self.platform} sent text that is not valid {charset}") from None
        return [] if self.ignore else [ev.FinalText(text.strip("\r\n"))]

    async def _read_file(self, length: str | None, chunks: AsyncIterator[bytes]) -> bytes:
        """A file answer's bytes, refused as soon as it is known to be too large for the chat (a file
        n8n sends as a JSON Buffer may take four times its size on the wire: files.py)."""
        most = files.limit(self.env.max_bytes)
        size = int(length) if length is not None and length.strip().isdigit() else None
        if size is not None and size > files.BUFFER_JSON_FACTOR * most + 64:
            raise files.too_large(None, most)
        ceiling: int | None = None  # known once the first bytes tell which form the file comes in
        buf = bytearray()
        touch = self.env.touch
        async for chunk in chunks:
            touch()
            buf += chunk
            if ceiling is None and len(buf) >= 16:
                ceiling = files.BUFFER_JSON_FACTOR * most + 64 if files.buffer_json(bytes(buf[:64])) else most
                if size is not None and size > ceiling:
                    raise files.too_large(size if ceiling == most else None, most)
            if ceiling is not None and len(buf) > ceiling:
                raise files.too_large(size if ceiling == most else None, most)
        data = files.unwrap(bytes(buf))
        if len(data) > most:
            raise files.too_large(len(data), most)
        return data

    def _file(self, raw: bytes, mime: str, disposition: str, status: int) -> list[ev.Event]:
        if not raw:
            return self._plain(raw, mime, status)  # nothing in it: the empty-answer error
        if self.ignore:
            return []
        return [files.attachment(raw, mime, disposition)]


class _StreamState:
    __slots__ = ("groups", "items", "new_group", "open", "text")

    def __init__(self) -> None:
        self.groups = 0  # begin items seen
        self.items = 0  # items since the last begin
        self.new_group = False  # a begin arrived since the last text
        self.open: dict[tuple[Any, Any, Any], str] = {}  # groups begun and not ended -> node name
        self.text = False  # any answer text sent

    def first_item(self) -> bool:
        """Whether this item is the first since its group began (or of a stream without groups)."""
        self.items += 1
        return self.items == 1


def _streamed(head: bytes, *, complete: bool) -> bool:
    """Whether the body is n8n's NDJSON stream, from its first line (or its first bytes)."""
    body = head.lstrip()
    if not body:
        return False
    if not complete:
        return bool(_STREAM_START.match(body))
    line = body.split(b"\n", 1)[0]
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return bool(_STREAM_START.match(body)) and b"\n" in body  # a broken stream line is still a stream
    return isinstance(obj, dict) and obj.get("type") in const.STREAM_TYPES and set(obj) <= const.STREAM_KEYS
