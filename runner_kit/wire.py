"""Small readers for platform payloads that every adapter needs the same way."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from .errors import RunnerError, SessionMissing
from .http import ErrorParser, open_stream, read_bounded
from .logs import get_logger
from .streams import SSEEvent

log = get_logger("runner_kit.wire")

MAX_JSON_BODY = 16 * 1024 * 1024


def json_object(body: bytes | str) -> dict[str, Any] | None:
    """``body`` as a JSON object, or None when it is not one (an HTML page, a list, garbage)."""
    raw = body.strip()
    if raw[:1] not in (b"{", "{"):
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def maybe_json(value: Any) -> Any:
    """A string that holds a JSON object or array, parsed; anything else unchanged."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def as_float(value: Any) -> float | None:
    """A number a payload may send as a number or a string (an expiry, a timestamp); None when it is
    missing or not a number."""
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def tool_input(raw: Any) -> dict[str, Any]:
    """A tool call's parameters as a dict (a JSON string is parsed; anything else is wrapped)."""
    value = maybe_json(raw) if raw not in (None, "") else {}
    return value if isinstance(value, dict) else {"input": value}


def first_error(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first failure inside a (possibly nested) exception group, e.g. from a TaskGroup."""
    first: BaseException = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def cut_off(exc: BaseException) -> bool:
    """A transport failure (connection dropped, read stalled) rather than an answer from the platform."""
    if isinstance(exc, httpx.HTTPError):
        return True
    return isinstance(exc, RunnerError) and exc.code in ("upstream.unavailable", "upstream.timeout")


async def read_json_answer(resp: httpx.Response, ctype: str, platform: str, hint: str) -> dict[str, Any]:
    """A 2xx body that is not an event stream: the platform's one JSON answer, or an error naming
    what came instead (an HTML page usually means the base URL points at the web UI; ``hint`` says
    what the owner should check)."""
    raw = await read_bounded(resp, MAX_JSON_BODY + 1, platform, strict=True)
    html = raw.lstrip()[:1] == b"<" or "html" in ctype
    if html or "json" not in ctype:
        kind = "an HTML page" if html else f"a {ctype.split(';', 1)[0].strip()} body"
        raise RunnerError(
            "upstream.protocol",
            f"{platform} answered HTTP {resp.status_code} with {kind} instead of an event stream ({hint})",
        )
    if len(raw) > MAX_JSON_BODY:
        raise RunnerError("upstream.protocol", f"{platform} response exceeds {MAX_JSON_BODY} bytes")
    doc = json_object(raw)
    if doc is None:
        raise RunnerError("upstream.protocol", f"{platform} returned a body that is not a JSON object")
    return doc


@dataclass
class Answer:
    """An answering response: its event stream (``json`` None) or the one JSON answer a platform
    sent instead (blocking mode, or an error envelope with 200)."""

    resp: httpx.Response
    json: dict[str, Any] | None


@asynccontextmanager
async def open_answer(
    client: httpx.AsyncClient,
    url: str,
    *,
    budget: float,
    platform: str,
    parse_error: ErrorParser,
    hint: str,
    gone: Callable[[int, bytes], bool] | None = None,
    method: str = "POST",
    json_when_untyped: bool = False,
    **kwargs: Any,
) -> AsyncIterator[Answer]:
    """Open the answer request the way every SSE platform needs it: an error status goes through
    ``parse_error``, except the platform's own word that the stored conversation is gone
    (``gone(status, body)``, passed only when a stored id was sent) which raises
    :class:`SessionMissing`; a 2xx that is not an event stream is read as the platform's JSON answer
    (an HTML page or other body becomes a clear ``upstream.protocol`` naming ``hint``). A response
    without a content type counts as a stream unless ``json_when_untyped``."""

    def on_error(status: int, raw: bytes, ctype: str) -> Exception:
        if gone is not None and gone(status, raw):
            return SessionMissing()
        return parse_error(status, raw, ctype)

    async with open_stream(client, method, url, budget=budget, platform=platform, error_parser=on_error,
                           **kwargs) as resp:
        ctype = resp.headers.get("content-type", "").lower()
        doc = None
        if (ctype or json_when_untyped) and "event-stream" not in ctype:
            doc = await read_json_answer(resp, ctype, platform, hint)
        yield Answer(resp, doc)


async def sse_objects(
    events: AsyncIterator[SSEEvent], platform: str, *, complete: Callable[[], bool] = lambda: False
) -> AsyncIterator[dict[str, Any]]:
    """The JSON object of each SSE event with data (an event without data is a keep-alive).

    A connection that breaks off once ``complete()`` is true ends the stream quietly: the platform
    had already sent the whole answer and only its closing events were lost. Data that is not a
    JSON object is ``upstream.protocol``.
    """
    while True:
        try:
            sse = await anext(events)
        except StopAsyncIteration:
            return
        except (httpx.HTTPError, RunnerError) as exc:
            if not (complete() and cut_off(exc)):
                raise
            log.info("%s: the stream broke off after the answer was complete", platform)
            return
        if not sse.data:
            continue
        data = sse.json()
        if not isinstance(data, dict):
            raise RunnerError("upstream.protocol", f"{platform} sent an event that is not an object")
        yield data
