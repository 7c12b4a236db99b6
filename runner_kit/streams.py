"""Incremental decoders for the streaming bodies agent platforms send.

Three wire formats are covered:

* :class:`SSEDecoder` — Server-Sent Events (Dify, Coze, DashScope, WeKnora, Tbox, LangGraph).
* :class:`NDJSONDecoder` — one JSON value per line (n8n streaming, CLI ``stream-json`` output).
* :class:`ConcatJSONDecoder` — JSON objects back to back, separated by any whitespace (Langflow,
  which labels the body ``text/event-stream`` but sends no SSE framing).

The decoders are pure: ``feed(chunk)`` takes the next bytes exactly as they came off the socket
(chunk boundaries are arbitrary: mid-line, mid-UTF-8 character, mid-``\\r\\n``) and returns what
became complete; ``close()`` is called at end of body and returns whatever the body ended with.
``iter_sse`` / ``iter_ndjson`` / ``iter_concat_json`` wrap them around an async byte iterator
(e.g. ``response.aiter_bytes()``).

Malformed input raises :class:`~runner_kit.errors.RunnerError` with code ``upstream.protocol``:
bytes that are not UTF-8, invalid JSON, and any single event / line / object larger than the
configured maximum (raised as soon as the buffered part passes the limit, so a misbehaving
upstream cannot make us buffer without bound). After a decoder raised, discard it.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from .errors import RunnerError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ConcatJSONDecoder",
    "NDJSONDecoder",
    "SSEDecoder",
    "SSEEvent",
    "iter_concat_json",
    "iter_ndjson",
    "iter_sse",
]

DEFAULT_MAX_BYTES = 8 * 1024 * 1024

# how much of an offending payload an error message may quote
_SNIPPET_CHARS = 120

_json_decoder = json.JSONDecoder()
_loads = _json_decoder.decode
_raw_decode = _json_decoder.raw_decode

_BOM = b"\xef\xbb\xbf"


# --- shared error helpers --------------------------------------------------------------------


def _too_big(limit: int) -> RunnerError:
    return RunnerError("upstream.protocol", f"upstream event exceeds {limit} bytes")


def _bad_utf8() -> RunnerError:
    return RunnerError("upstream.protocol", "upstream sent bytes that are not valid UTF-8")


def _snippet(text: str) -> str:
    if len(text) > _SNIPPET_CHARS:
        return repr(text[:_SNIPPET_CHARS]) + "…"
    return repr(text)


def _bad_json(what: str, text: str, exc: json.JSONDecodeError | None = None) -> RunnerError:
    detail = f": {exc.msg} at char {exc.pos}" if exc is not None else ""
    return RunnerError(
        "upstream.protocol", f"upstream sent invalid JSON in {what}{detail}; got {_snippet(text)}"
    )


def _as_bytes(chunk: bytes | bytearray | memoryview) -> bytes:
    return chunk if type(chunk) is bytes else bytes(chunk)


# --- SSE -------------------------------------------------------------------------------------


@dataclass(slots=True)
class SSEEvent:
    """One dispatched Server-Sent Event.

    ``id`` and ``retry`` are the values given inside *this* event's block (``None`` if absent);
    the decoder keeps the spec's sticky values in ``SSEDecoder.last_event_id`` / ``.retry_ms``.
    """

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None

    def json(self) -> Any:
        """The data parsed as JSON; ``RunnerError('upstream.protocol')`` if it is not JSON."""
        try:
            return _loads(self.data)
        except json.JSONDecodeError as exc:
            raise _bad_json(f"SSE event {self.event[:40]!r}", self.data, exc) from None


class SSEDecoder:
    """Incremental SSE parser (WHATWG event-stream rules, plus flush of a pending event at EOF).

    * ``field:value`` and ``field: value`` (exactly one leading space is stripped); a line with no
      colon is a field with an empty value; lines starting with ``:`` are comments.
    * ``\\n``, ``\\r\\n`` and lone ``\\r`` end lines, also when a ``\\r\\n`` pair is split across chunks.
    * A blank line dispatches the event if it had a ``data`` line or a non-empty ``event`` name
      (so a bare ``event: ping`` block is dispatched with ``data == ""``).
    * A leading UTF-8 byte-order mark is dropped.
    * ``max_event_bytes`` bounds the UTF-8 bytes of one event's lines (line endings and complete
      comment lines not counted) plus the line still being received, whatever its kind.

    Lines are split on bytes (CR/LF never occur inside a multi-byte UTF-8 sequence), so characters
    split across chunks are reassembled before decoding. Comment lines are not decoded.
    """

    __slots__ = (
        "_max",
        "_partial",
        "_skip_lf",
        "_head",
        "_data",
        "_name",
        "_id",
        "_retry",
        "_size",
        "last_event_id",
        "retry_ms",
    )

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_BYTES):
        if max_event_bytes <= 0:
            raise ValueError("max_event_bytes must be positive")
        self._max = max_event_bytes
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None
        self._reset()

    def _reset(self) -> None:
        self._partial = bytearray()  # bytes of the line being received (no terminator yet)
        self._skip_lf = False  # the previous chunk ended with "\r": drop a leading "\n"
        self._head: bytes | None = b""  # bytes seen before the BOM check; None once done
        self._data: list[str] = []
        self._name = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._size = 0  # bytes of the current event's complete lines

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume the next bytes of the body; return the events completed by them."""
        chunk = _as_bytes(chunk)
        if self._head is not None:
            chunk = self._strip_bom(chunk, final=False)
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 10:
                chunk = chunk[1:]
                if not chunk:
                    return []
        if b"\r" in chunk:
            if chunk[-1] == 13:
                self._skip_lf = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        tail = lines.pop()
        partial = self._partial
        if lines:
            if partial:
                partial += lines[0]
                lines[0] = bytes(partial)
                partial.clear()
            events = self._lines(lines)
        else:
            events = []
        if tail:
            partial += tail
            if self._size + len(partial) > self._max:
                raise _too_big(self._max)
        return events

    def close(self) -> list[SSEEvent]:
        """End of body: return the pending event even without a final blank line; then reset."""
        events: list[SSEEvent] = []
        if self._head is not None:
            rest = self._strip_bom(b"", final=True)
            if rest:
                events.extend(self.feed(rest))
        lines = [bytes(self._partial)] if self._partial else []
        lines.append(b"")
        events.extend(self._lines(lines))
        self._reset()
        return events

    def _strip_bom(self, chunk: bytes, *, final: bool) -> bytes:
        head = self._head + chunk  # type: ignore[operator]
        if not final and len(head) < 3 and _BOM.startswith(head):
            self._head = head
            return b""
        self._head = None
        return head[3:] if head.startswith(_BOM) else head

    def _lines(self, lines: list[bytes]) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        data = self._data
        name = self._name
        eid = self._id
        retry = self._retry
        size = self._size
        limit = self._max
        try:
            for raw in lines:
                if not raw:  # blank line: dispatch
                    if data or name:
                        out.append(
                            SSEEvent(
                                name or "message", data[0] if len(data) == 1 else "\n".join(data), eid, retry
                            )
                        )
                        data.clear()
                    name = ""
                    eid = None
                    retry = None
                    size = 0
                    continue
                if raw[0] == 58:  # ":" comment
                    continue
                size += len(raw)
                if size > limit:
                    raise _too_big(limit)
                # fast path for the line nearly every event consists of
                head = raw[:6]
                if head == b"data: ":
                    data.append(raw[6:].decode())
                    continue
                if head[:5] == b"data:":
                    data.append(raw[5:].decode())
                    continue
                line = raw.decode()
                colon = line.find(":")
                if colon < 0:
                    field, value = line, ""
                else:
                    field = line[:colon]
                    value = line[colon + 1 :]
                    if value and value[0] == " ":
                        value = value[1:]
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)
                elif field == "id":
                    if "\0" not in value:
                        eid = value
                        self.last_event_id = value
                elif field == "retry":
                    if value.isascii() and value.isdigit():
                        retry = int(value)
                        self.retry_ms = retry
                # any other field is ignored
        except UnicodeDecodeError:
            raise _bad_utf8() from None
        self._data = data
        self._name = name
        self._id = eid
        self._retry = retry
        self._size = size
        return out


# --- NDJSON ----------------------------------------------------------------------------------


class NDJSONDecoder:
    """One JSON value per ``\\n``-terminated line; ``\\r\\n`` is fine; blank lines are skipped.

    A last line without a newline is parsed by ``close()``. ``max_line_bytes`` bounds one line,
    including a line still being received.
    """

    __slots__ = ("_max", "_partial")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_BYTES):
        if max_line_bytes <= 0:
            raise ValueError("max_line_bytes must be positive")
        self._max = max_line_bytes
        self._partial = bytearray()

    def feed(self, chunk: bytes) -> list[Any]:
        """Consume the next bytes; return the values of the lines completed by them."""
        chunk = _as_bytes(chunk)
        lines = chunk.split(b"\n")
        tail = lines.pop()
        partial = self._partial
        out: list[Any] = []
        if lines:
            if partial:
                partial += lines[0]
                lines[0] = bytes(partial)
                partial.clear()
            self._parse(lines, out)
        if tail:
            partial += tail
            if len(partial) > self._max:
                raise _too_big(self._max)
        return out

    def close(self) -> list[Any]:
        """End of body: parse a final line that had no newline; then reset."""
        out: list[Any] = []
        if self._partial:
            line = bytes(self._partial)
            self._partial.clear()
            self._parse([line], out)
        return out

    def _parse(self, lines: list[bytes], out: list[Any]) -> None:
        limit = self._max
        for raw in lines:
            if len(raw) > limit:
                raise _too_big(limit)
            if not raw or raw.isspace():
                continue
            try:
                text = raw.decode()
            except UnicodeDecodeError:
                raise _bad_utf8() from None
            try:
                out.append(_loads(text))
            except json.JSONDecodeError as exc:
                raise _bad_json("NDJSON line", text, exc) from None


# --- concatenated JSON (Langflow) ------------------------------------------------------------

_WS = re.compile(r"[ \t\r\n]*")
# outside strings: the characters that change nesting or start a string
_STRUCT = re.compile(r'[{}\[\]"]')
# inside strings: the end quote or an escape
_IN_STR = re.compile(r'["\\]')


class ConcatJSONDecoder:
    """JSON objects (or arrays) back to back, separated by any amount of whitespace, or none.

    Complete values are parsed with ``json.JSONDecoder.raw_decode`` straight off the buffered text.
    When that fails the value is either incomplete (wait for more bytes) or invalid: a structural
    scan — brackets and quotes, honouring strings and escapes — tells which, and is resumed on
    each new chunk rather than re-run over the buffer. A top-level value must start with ``{`` or
    ``[``, so stray text such as ``not json`` raises at once; ``close()`` raises if the body ended
    inside a value. ``max_object_bytes`` bounds one value, including one still being received.
    """

    __slots__ = ("_max", "_dec", "_pending", "_pending_bytes", "_depth", "_in_str", "_esc")

    def __init__(self, max_object_bytes: int = DEFAULT_MAX_BYTES):
        if max_object_bytes <= 0:
            raise ValueError("max_object_bytes must be positive")
        self._max = max_object_bytes
        self._dec = codecs.getincrementaldecoder("utf-8")("strict")
        self._pending: list[str] = []  # text of an incomplete value, from its first character
        self._pending_bytes = 0
        self._depth = 0
        self._in_str = False
        self._esc = False

    def feed(self, chunk: bytes) -> list[Any]:
        """Consume the next bytes; return the values completed by them."""
        try:
            text = self._dec.decode(chunk)
        except UnicodeDecodeError:
            raise _bad_utf8() from None
        out: list[Any] = []
        if text:
            self._text(text, out)
        return out

    def close(self) -> list[Any]:
        """End of body: raise if the body ended inside a value; then reset."""
        try:
            text = self._dec.decode(b"", final=True)
        except UnicodeDecodeError:
            raise _bad_utf8() from None
        out: list[Any] = []
        if text:
            self._text(text, out)
        if self._pending:
            pending = "".join(self._pending)
            self._pending = []
            self._pending_bytes = 0
            raise RunnerError(
                "upstream.protocol",
                f"upstream stream ended inside a JSON value (truncated); got {_snippet(pending)}",
            )
        self._dec.reset()
        self._depth = 0
        self._in_str = False
        self._esc = False
        return out

    def _text(self, text: str, out: list[Any]) -> None:
        limit = self._max
        pos = 0
        if self._pending:
            end = self._scan(text, 0)
            if end < 0:
                self._add_pending(text)
                return
            value = "".join(self._pending) + text[:end]
            nbytes = self._pending_bytes + _utf8_len(text[:end])
            self._pending = []
            self._pending_bytes = 0
            if nbytes > limit:
                raise _too_big(limit)
            try:
                out.append(_loads(value))
            except json.JSONDecodeError as exc:
                raise _bad_json("concatenated JSON stream", value, exc) from None
            pos = end
        n = len(text)
        ascii_text = text.isascii()
        ws = _WS.match
        while True:
            pos = ws(text, pos).end()  # type: ignore[union-attr]  # \s* always matches
            if pos >= n:
                return
            c = text[pos]
            if c != "{" and c != "[":
                raise _bad_json("concatenated JSON stream", text[pos:])
            try:
                obj, end = _raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                self._depth = 0
                self._in_str = False
                self._esc = False
                close_at = self._scan(text, pos)
                if close_at >= 0:  # the value is complete yet does not parse
                    raise _bad_json("concatenated JSON stream", text[pos:close_at], exc) from None
                self._add_pending(text[pos:])
                return
            size = end - pos
            if size * 4 > limit and (size > limit or (not ascii_text and _utf8_len(text[pos:end]) > limit)):
                raise _too_big(limit)
            out.append(obj)
            pos = end

    def _add_pending(self, piece: str) -> None:
        self._pending.append(piece)
        self._pending_bytes += _utf8_len(piece)
        if self._pending_bytes > self._max:
            raise _too_big(self._max)

    def _scan(self, s: str, i: int) -> int:
        """Continue the structural scan over ``s[i:]``; index just past the value's end, or -1."""
        depth = self._depth
        in_str = self._in_str
        n = len(s)
        if self._esc:
            if i >= n:
                return -1
            self._esc = False
            i += 1
        while i < n:
            if in_str:
                m = _IN_STR.search(s, i)
                if m is None:
                    break
                j = m.start()
                if s[j] == '"':
                    in_str = False
                    i = j + 1
                elif j + 1 >= n:  # a backslash ends the text: skip the escaped char next time
                    self._esc = True
                    break
                else:
                    i = j + 2
            else:
                m = _STRUCT.search(s, i)
                if m is None:
                    break
                j = m.start()
                c = s[j]
                i = j + 1
                if c == '"':
                    in_str = True
                elif c == "{" or c == "[":
                    depth += 1
                else:
                    depth -= 1
                    if depth <= 0:
                        self._depth = 0
                        self._in_str = False
                        return i
        self._depth = depth
        self._in_str = in_str
        return -1


def _utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass"))


# --- async helpers ---------------------------------------------------------------------------


async def _iterate(
    decoder: SSEDecoder | NDJSONDecoder | ConcatJSONDecoder,
    chunks: AsyncIterable[bytes],
    touch: Callable[[], None] | None = None,
) -> AsyncIterator[Any]:
    async for chunk in chunks:
        if touch is not None:
            touch()
        for item in decoder.feed(chunk):
            yield item
    for item in decoder.close():
        yield item


def iter_sse(
    chunks: AsyncIterable[bytes],
    *,
    max_event_bytes: int = DEFAULT_MAX_BYTES,
    touch: Callable[[], None] | None = None,
) -> AsyncIterator[SSEEvent]:
    """Yield the SSE events of a byte stream, including a last event without a final blank line;
    ``touch`` is called for every chunk that arrives (``RunEnv.touch``: life for ``idle-timeout``)."""
    return _iterate(SSEDecoder(max_event_bytes), chunks, touch)


def iter_ndjson(
    chunks: AsyncIterable[bytes],
    *,
    max_line_bytes: int = DEFAULT_MAX_BYTES,
    touch: Callable[[], None] | None = None,
) -> AsyncIterator[Any]:
    """Yield the JSON value of each line of an NDJSON byte stream (``touch``: as for :func:`iter_sse`)."""
    return _iterate(NDJSONDecoder(max_line_bytes), chunks, touch)


def iter_concat_json(
    chunks: AsyncIterable[bytes],
    *,
    max_object_bytes: int = DEFAULT_MAX_BYTES,
    touch: Callable[[], None] | None = None,
) -> AsyncIterator[Any]:
    """Yield each JSON value of a stream of whitespace-separated JSON objects (Langflow;
    ``touch``: as for :func:`iter_sse`)."""
    return _iterate(ConcatJSONDecoder(max_object_bytes), chunks, touch)
