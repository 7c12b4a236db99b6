"""Transcript replay over a real loopback socket, shared by every plugin's transcript tests.

A transcript is a plain-text file of what the platform wrote on the wire (reviewable in a diff).
``ReplayServer`` answers each listed route with canned ``Reply`` objects in order (the last one is
repeated): an event stream goes out as many tiny chunks, split mid-UTF-8, so parsers meet real
framing; anything else goes out in one piece with a Content-Length.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.fakes.http_server import FakeHTTPServer, Request, Response

TRANSCRIPTS = Path(__file__).resolve().parent.parent / "plugins" / "transcripts"
SSE = "text/event-stream"
JSON = "application/json"


@dataclass
class Reply:
    """One canned response."""

    body: bytes
    status: int = 200
    content_type: str | None = SSE
    drop: bool = False  # close the connection instead of ending the chunked body
    delay: float = 0.0  # pause between the tiny pieces (a slow stream)
    headers: Mapping[str, str] = field(default_factory=dict)
    streamed: bool | None = None  # chunked body; default: when the type is an event stream
    sizes: Iterable[int] | None = None  # the pieces' sizes, cycled (default: tiny, split mid-UTF-8)

    @property
    def chunked(self) -> bool:
        if self.streamed is not None:
            return self.streamed
        return (self.content_type or "").startswith(SSE)


def transcript(platform: str, name: str, **kw) -> Reply:
    """``tests/plugins/transcripts/<platform>/<name>`` as a Reply (keyword arguments as Reply's)."""
    return Reply((TRANSCRIPTS / platform / name).read_bytes(), **kw)


def json_reply(text: str, status: int = 200, **kw) -> Reply:
    return Reply(text.encode("utf-8"), status=status, content_type=JSON, **kw)


class ReplayServer(FakeHTTPServer):
    """Answers ``routes`` (``{"POST /v3/chat": [Reply, ...]}``, path patterns as add_route takes)
    with their replies in order, repeating the last; ``served[route]`` counts the answers."""

    def __init__(self, routes: Mapping[str, Reply | list[Reply]]):
        super().__init__()
        self.replies: dict[str, list[Reply]] = {}
        self.served: dict[str, int] = {}
        for route, replies in routes.items():
            method, pattern = route.split(" ", 1)
            self.replies[route] = list(replies) if isinstance(replies, list) else [replies]
            self.served[route] = 0
            self.add_route(method, pattern, self._handler(route))

    def _handler(self, route: str):
        async def handle(req: Request, resp: Response) -> None:
            replies = self.replies[route]
            reply = replies[min(self.served[route], len(replies) - 1)]
            self.served[route] += 1
            await play(reply, resp)

        return handle


async def play(reply: Reply, resp: Response) -> None:
    """Write one Reply to ``resp``."""
    if not reply.chunked:
        await resp.send(reply.status, reply.body, reply.content_type, reply.headers)
        return
    await resp.start_stream(reply.status, reply.content_type or SSE, reply.headers)
    await resp.write_split(reply.body, sizes=reply.sizes, delay=reply.delay or 0.001)
    if reply.drop:
        await resp.abort()
    else:
        await resp.end()


def split_transcript(raw: bytes) -> tuple[bytes, int, dict[str, str], bytes]:
    """A real-peer ``.http`` capture as (request bytes, status, response headers, response body).

    The captures are ``request``, a blank line, the response head, a blank line, the de-chunked
    body; some were saved with LF line ends instead of CRLF, so both are accepted."""
    m = re.search(rb"(\r?\n){2}(HTTP/1\.[01] (\d{3})[^\r\n]*)", raw)
    if m is None:
        raise ValueError("no response in the transcript")
    request, rest = raw[: m.start()], raw[m.start(2):]
    sep = re.search(rb"\r?\n\r?\n", rest)
    if sep is None:
        raise ValueError("no end of the response head")
    head, body = rest[: sep.start()], rest[sep.end():]
    headers = {}
    for line in head.decode("latin-1").splitlines()[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return request, int(m.group(3)), headers, body
