"""Loopback HTTP/1.1 fake-server base for platform fakes.

Written on raw ``asyncio`` streams (no web framework) so tests can inject faults at the byte
level: truncated chunked bodies, stalls, writes split mid-UTF-8, resets. The server runs its own
event loop in a daemon thread, so the same object works from sync tests, from any pytest-asyncio
loop, from subprocess (CLI) tests and from benchmarks. It binds 127.0.0.1 only, port 0 by default.

    class MyFake(FakeHTTPServer):
        def __init__(self):
            super().__init__()
            self.add_route("POST", "/v1/items/{item_id}", self._item)

        async def _item(self, req, resp):
            await resp.json(200, {"id": req.path_params["item_id"]})

    with MyFake() as srv:
        httpx.post(srv.base_url + "/v1/items/1")

Also here: ``closed_port()`` (connection refused) and ``BlackholeServer`` (TCP connect hangs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import struct
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, ClassVar, Self
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = [
    "BlackholeServer",
    "FAULT_STATUSES",
    "STREAM_FAULTS",
    "FakeHTTPServer",
    "Form",
    "FormPart",
    "Headers",
    "Request",
    "Response",
    "PlatformFake",
    "closed_port",
    "fault_names",
    "html_error_page",
    "split_payload",
]

LOOPBACK = "127.0.0.1"
_MAX_LINE = 1 << 20  # request line / header line / chunk-size line limit
_BACKLOG = 1024  # a burst of a thousand connects must not overflow the accept queue (uvicorn: 2048)
_MAX_HEADERS = 256

Handler = Callable[["Request", "Response"], Awaitable[None]]


class _BadRequest(Exception):
    """The client sent something that is not HTTP/1.x."""


# ----------------------------------------------------------------------------------------------
# Request side
# ----------------------------------------------------------------------------------------------


class Headers(Mapping[str, str]):
    """Case-insensitive, order-preserving header mapping; repeated headers joined with ', '."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items: list[tuple[str, str]] = list(items)
        self._map: dict[str, str] = {}
        for k, v in self._items:
            key = k.lower()
            self._map[key] = f"{self._map[key]}, {v}" if key in self._map else v

    def __getitem__(self, key: str) -> str:
        return self._map[key.lower()]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._map

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def get_all(self, key: str) -> list[str]:
        """Every value sent for ``key``, in order."""
        key = key.lower()
        return [v for k, v in self._items if k.lower() == key]

    def raw(self) -> list[tuple[str, str]]:
        """Header pairs exactly as received (original case)."""
        return list(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


@dataclass
class FormPart:
    """One part of a multipart/form-data body."""

    name: str
    data: bytes
    filename: str | None = None
    content_type: str | None = None
    headers: Headers = field(default_factory=Headers)

    @property
    def is_file(self) -> bool:
        """True when the part carried a ``filename`` parameter (even an empty one)."""
        return self.filename is not None

    def text(self, encoding: str = "utf-8") -> str:
        """The part body decoded as text."""
        return self.data.decode(encoding)


@dataclass
class Form:
    """Parsed form body: ``fields`` (text parts, last wins), ``files`` (file parts, first wins), ``parts``."""

    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, FormPart] = field(default_factory=dict)
    parts: list[FormPart] = field(default_factory=list)

    def files_named(self, name: str) -> list[FormPart]:
        """All file parts sent under ``name``."""
        return [p for p in self.parts if p.is_file and p.name == name]


def _parse_header_params(value: str) -> tuple[str, dict[str, str]]:
    """Split ``type; a=1; b="x;y"`` into ``("type", {"a": "1", "b": "x;y"})``."""
    main, _, rest = value.partition(";")
    params: dict[str, str] = {}
    i, n = 0, len(rest)
    while i < n:
        while i < n and rest[i] in " \t;":
            i += 1
        start = i
        while i < n and rest[i] not in "=;":
            i += 1
        key = rest[start:i].strip().lower()
        val = ""
        if i < n and rest[i] == "=":
            i += 1
            if i < n and rest[i] == '"':
                i += 1
                buf = []
                while i < n and rest[i] != '"':
                    if rest[i] == "\\" and i + 1 < n:
                        i += 1
                    buf.append(rest[i])
                    i += 1
                i += 1  # closing quote
                val = "".join(buf)
            else:
                start = i
                while i < n and rest[i] != ";":
                    i += 1
                val = rest[start:i].strip()
        if key:
            params[key] = val
    return main.strip().lower(), params


def _parse_multipart(body: bytes, boundary: str) -> Form:
    form = Form()
    delim = b"--" + boundary.encode("latin-1")
    chunks = body.split(delim)
    # chunks[0] is the preamble; a chunk starting with "--" is the close delimiter
    for raw in chunks[1:]:
        if raw.startswith(b"--"):
            break
        if raw.startswith(b"\r\n"):
            raw = raw[2:]
        if raw.endswith(b"\r\n"):
            raw = raw[:-2]
        head, sep, data = raw.partition(b"\r\n\r\n")
        if not sep:  # part without body (headers only, or nothing)
            head, data = raw, b""
        items = []
        for line in head.split(b"\r\n"):
            if b":" in line:
                k, _, v = line.decode("utf-8", "replace").partition(":")
                items.append((k.strip(), v.strip()))
        headers = Headers(items)
        _, disp = _parse_header_params(headers.get("content-disposition", ""))
        filename: str | None = disp.get("filename")
        if "filename*" in disp:  # RFC 5987: UTF-8''name
            enc_val = disp["filename*"]
            charset, _, rest = enc_val.partition("'")
            _, _, encoded = rest.partition("'")
            filename = unquote(encoded, encoding=charset or "utf-8")
        part = FormPart(
            name=disp.get("name", ""),
            data=data,
            filename=filename,
            content_type=headers.get("content-type"),
            headers=headers,
        )
        form.parts.append(part)
        if part.is_file:
            form.files.setdefault(part.name, part)
        else:
            form.fields[part.name] = data.decode("utf-8", "replace")
    return form


@dataclass
class Request:
    """One recorded HTTP request."""

    method: str
    target: str
    path: str
    query: dict[str, str]
    query_multi: dict[str, list[str]]
    headers: Headers
    body: bytes
    version: str = "HTTP/1.1"
    path_params: dict[str, str] = field(default_factory=dict)
    connection_id: int = 0
    received_at: float = field(default_factory=time.time)
    chunked: bool = False
    #: status of the response the fake started (None: no response head was sent)
    response_status: int | None = None

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)

    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode("utf-8")

    def form(self) -> Form:
        """Parse a multipart/form-data (or urlencoded) body into fields, files and parts."""
        ctype, params = _parse_header_params(self.headers.get("content-type", ""))
        if ctype == "multipart/form-data":
            boundary = params.get("boundary")
            if not boundary:
                raise ValueError("multipart body without boundary")
            return _parse_multipart(self.body, boundary)
        if ctype == "application/x-www-form-urlencoded":
            form = Form()
            for k, vs in parse_qs(self.body.decode("utf-8"), keep_blank_values=True).items():
                form.fields[k] = vs[-1]
            return form
        raise ValueError(f"not a form body: {ctype or '(no content-type)'}")


# ----------------------------------------------------------------------------------------------
# Response side
# ----------------------------------------------------------------------------------------------


def split_payload(data: bytes, sizes: Iterable[int] = (1, 3, 2, 5, 7, 4, 11)) -> list[bytes]:
    """Cut ``data`` into small pieces, always inside every multi-byte UTF-8 character.

    Piece lengths cycle through ``sizes``; additionally a cut is placed one byte into each
    multi-byte UTF-8 sequence so a client decoding chunk-by-chunk will see split characters.
    """
    cuts: set[int] = set()
    size_list = [s for s in sizes if s > 0] or [1]
    pos, k = 0, 0
    while pos < len(data):
        pos += size_list[k % len(size_list)]
        k += 1
        cuts.add(pos)
    for i, b in enumerate(data):
        if b >= 0xC0:  # UTF-8 lead byte of a multi-byte sequence
            cuts.add(i + 1)
    points = sorted(c for c in cuts if 0 < c < len(data))
    out, prev = [], 0
    for c in points:
        out.append(data[prev:c])
        prev = c
    out.append(data[prev:])
    return [p for p in out if p]


class Response:
    """Writer for one response; handlers call exactly one of json/text/send, or stream."""

    def __init__(self, server: FakeHTTPServer, conn: _Conn, request: Request) -> None:
        self._server = server
        self._conn = conn
        self.request = request
        self.status: int | None = None
        self.started = False
        self.streaming = False
        self.finished = False
        self.aborted = False
        #: set True to send ``Connection: close`` and close after this response
        self.close_connection = not conn.keep_alive_requested
        self.bytes_sent = 0

    # -- state -------------------------------------------------------------------------------

    @property
    def client_disconnected(self) -> bool:
        """True once the client closed its side (EOF seen) or the transport is gone."""
        return self._conn.reader.at_eof() or self._conn.writer.transport.is_closing()

    # -- whole responses ---------------------------------------------------------------------

    async def json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        """Send ``obj`` as an ``application/json`` body."""
        body = json.dumps(obj).encode("utf-8")
        await self.send(status, body, "application/json", headers)

    async def text(
        self,
        status: int,
        body: str,
        content_type: str = "text/plain; charset=utf-8",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Send a text body."""
        await self.send(status, body.encode("utf-8"), content_type, headers)

    async def send(
        self,
        status: int,
        body: bytes,
        content_type: str | None = "application/octet-stream",
        headers: Mapping[str, str] | None = None,
        *,
        split: bool = False,
        split_delay: float = 0.001,
    ) -> None:
        """Send a complete Content-Length response; ``split`` writes the body in tiny pieces."""
        hdrs = dict(headers or {})
        if content_type is not None:
            hdrs.setdefault("Content-Type", content_type)
        hdrs["Content-Length"] = str(len(body))
        await self._write_head(status, hdrs)
        if split:
            for piece in split_payload(body):
                await self._raw(piece)
                await self._pause(split_delay)
        else:
            await self._raw(body)
        self.finished = True

    # -- streaming (chunked) -----------------------------------------------------------------

    async def start_stream(
        self,
        status: int = 200,
        content_type: str = "text/event-stream",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Send the head of a ``Transfer-Encoding: chunked`` response."""
        hdrs = dict(headers or {})
        hdrs.setdefault("Content-Type", content_type)
        hdrs.setdefault("Cache-Control", "no-cache")
        hdrs["Transfer-Encoding"] = "chunked"
        await self._write_head(status, hdrs)
        self.streaming = True

    async def write(self, data: bytes | str) -> None:
        """Send ``data`` as one HTTP chunk (empty data is ignored, it would end the body)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not self.streaming:
            raise RuntimeError("write() before start_stream()")
        if not data:
            return
        await self._raw(b"%x\r\n" % len(data) + data + b"\r\n")

    async def write_split(
        self,
        data: bytes | str,
        sizes: Iterable[int] | None = None,
        delay: float = 0.001,
    ) -> None:
        """Send ``data`` as many tiny chunks (see ``split_payload``), flushing/sleeping between."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        pieces = split_payload(data) if sizes is None else split_payload(data, sizes)
        for piece in pieces:
            await self.write(piece)
            await self._pause(delay)

    async def end(self) -> None:
        """Finish a chunked body (terminating zero-length chunk)."""
        if self.finished or self.aborted:
            return
        if self.streaming:
            await self._raw(b"0\r\n\r\n")
        self.finished = True

    async def send_head(self, status: int, headers: Mapping[str, str] | None = None) -> None:
        """Send only the status line and ``headers`` as given (no framing added); body via write_raw."""
        await self._write_head(status, dict(headers or {}))

    # -- faults ------------------------------------------------------------------------------

    async def abort(self, reset: bool = False) -> None:
        """Close the socket now without finishing the body; ``reset`` sends a TCP RST."""
        transport = self._conn.writer.transport
        if self.aborted and transport.is_closing():
            return
        self.aborted = True
        self.close_connection = True
        if reset:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
            return
        with contextlib.suppress(ConnectionError):
            await self._conn.writer.drain()
        transport.close()

    async def stall(self, seconds: float) -> bool:
        """Send nothing for ``seconds``; False if the client went away first. Cancelled by stop()."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if self.client_disconnected:
                self._server.client_disconnects += 1
                return False
            await asyncio.sleep(min(left, 0.05))

    async def write_raw(self, data: bytes) -> None:
        """Write bytes to the socket with no HTTP framing at all (for protocol-violation faults)."""
        if not self.started:
            self.started = True  # caller owns the whole response now
        await self._raw(data)

    # -- internals ---------------------------------------------------------------------------

    async def _pause(self, delay: float) -> None:
        await self._conn.writer.drain()
        await asyncio.sleep(delay)

    async def _write_head(self, status: int, headers: dict[str, str]) -> None:
        if self.started:
            raise RuntimeError("response already started")
        self.started = True
        self.status = status
        self.request.response_status = status
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        lines = [f"HTTP/1.1 {status} {reason}"]
        headers = {**self._server.extra_response_headers, **headers}
        has = {k.lower() for k in headers}
        if "server" not in has:
            lines.append(f"Server: {self._server.server_name}")
        if "date" not in has:
            lines.append("Date: " + time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime()))
        for k, v in headers.items():
            if k.lower() == "connection":
                if v.lower() == "close":
                    self.close_connection = True
                continue
            lines.append(f"{k}: {v}")
        lines.append("Connection: close" if self.close_connection else "Connection: keep-alive")
        await self._raw(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    async def _raw(self, data: bytes) -> None:
        if self.aborted:
            raise ConnectionResetError("response was aborted")
        writer = self._conn.writer
        if writer.transport.is_closing():
            raise ConnectionResetError("client connection is closed")
        writer.write(data)
        self.bytes_sent += len(data)
        await writer.drain()


# ----------------------------------------------------------------------------------------------
# Server
# ----------------------------------------------------------------------------------------------


@dataclass
class _Route:
    method: str
    pattern: str
    regex: re.Pattern[str]
    handler: Handler


@dataclass
class _Conn:
    id: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    keep_alive_requested: bool = True


def _compile_pattern(pattern: str) -> re.Pattern[str]:
    out, pos = [], 0
    for m in re.finditer(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", pattern):
        out.append(re.escape(pattern[pos : m.start()]))
        out.append(f"(?P<{m.group(1)}>[^/]+)")
        pos = m.end()
    out.append(re.escape(pattern[pos:]))
    return re.compile("^" + "".join(out) + "$")


class FakeHTTPServer:
    """Threaded asyncio HTTP/1.1 server on 127.0.0.1 with route table and request recording."""

    server_name = "fake-http"

    def __init__(self, port: int = 0) -> None:
        self._requested_port = port
        self.port: int | None = None
        self._routes: list[_Route] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._conns: dict[int, _Conn] = {}
        self._conn_tasks: set[asyncio.Task[Any]] = set()
        self._next_conn_id = 0
        self._lock = threading.Lock()
        #: total TCP connections accepted since construction
        self.connections_accepted = 0
        #: TCP connections currently open
        self.open_connections = 0
        #: every parsed request, in arrival order (set record_requests False for long benchmarks)
        self.requests: list[Request] = []
        self.record_requests = True
        #: handlers currently running, and the maximum seen
        self.active_requests = 0
        self.peak_active_requests = 0
        #: times a handler noticed the client had gone away mid-response
        self.client_disconnects = 0
        #: exceptions raised by handlers (a test can assert this stays empty)
        self.handler_errors: list[BaseException] = []
        #: headers added to every response (e.g. a Set-Cookie, to prove clients keep no cookies)
        self.extra_response_headers: dict[str, str] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._server is not None

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def base_url(self) -> str:
        """The URL a client is configured with; subclasses may append an API prefix."""
        return self.root_url

    def url(self, path: str) -> str:
        """Absolute URL for a path under ``root_url``."""
        return self.root_url + (path if path.startswith("/") else "/" + path)

    def start(self) -> Self:
        """Bind 127.0.0.1 and serve from a background thread; returns self."""
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
            finally:
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for t in pending:
                    t.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        thread = threading.Thread(target=run, name=f"{type(self).__name__}-loop", daemon=True)
        self._loop, self._thread = loop, thread
        thread.start()
        ready.wait(5)
        port = self.port or self._requested_port  # restart keeps the same port when possible
        fut = asyncio.run_coroutine_threadsafe(self._bind(port), loop)
        try:
            fut.result(5)
        except BaseException:
            self._teardown_thread()
            raise
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Close the listener and every connection (cancelling stalled handlers), join the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:
            raise RuntimeError("stop() called from the server's own thread")
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        with contextlib.suppress(Exception):
            fut.result(timeout)
        self._teardown_thread(timeout)

    def _teardown_thread(self, timeout: float = 5.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
        self._loop = None
        self._thread = None
        self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def call_in_loop(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the server loop (for touching asyncio objects owned by handlers)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(fn)

    # -- routes & recording ------------------------------------------------------------------

    def add_route(self, method: str, path_pattern: str, handler: Handler) -> None:
        """Register ``async def handler(req, resp)``; ``{name}`` segments land in req.path_params."""
        self._routes.append(_Route(method.upper(), path_pattern, _compile_pattern(path_pattern), handler))

    def find_requests(self, method: str | None = None, path: str | None = None) -> list[Request]:
        """Recorded requests filtered by method and/or exact path."""
        return [
            r
            for r in list(self.requests)
            if (method is None or r.method == method.upper()) and (path is None or r.path == path)
        ]

    def clear_requests(self) -> None:
        """Forget recorded requests (counters are kept)."""
        self.requests.clear()

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Block (sync) until ``predicate()`` is true; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.01)
        return predicate()

    async def wait_until_async(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Like wait_until but yields to the caller's event loop while polling."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            await asyncio.sleep(0.01)
        return predicate()

    # -- hooks for subclasses ----------------------------------------------------------------

    async def not_found(self, req: Request, resp: Response) -> None:
        """Response for unknown paths."""
        await resp.json(404, {"status": 404, "code": "not_found", "message": f"No route for {req.path}"})

    async def method_not_allowed(self, req: Request, resp: Response, allowed: list[str]) -> None:
        """Response for a known path with the wrong method."""
        await resp.json(
            405,
            {"status": 405, "code": "method_not_allowed", "message": "The method is not allowed."},
            headers={"Allow": ", ".join(sorted(set(allowed)))},
        )

    # -- internals ---------------------------------------------------------------------------

    async def _bind(self, port: int) -> None:
        async def listen(on: int) -> asyncio.Server:
            return await asyncio.start_server(
                self._on_connection, LOOPBACK, on, limit=_MAX_LINE, reuse_address=True, backlog=_BACKLOG
            )

        try:
            self._server = await listen(port)
        except OSError:
            if not port:
                raise
            self._server = await listen(0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for conn in list(self._conns.values()):
            conn.writer.transport.abort()
        # aborted transports end idle reads and stalls on their own; cancel whatever is left
        tasks = [t for t in self._conn_tasks if not t.done()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=0.3)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2.0)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conn_tasks.add(task)
        with self._lock:
            self._next_conn_id += 1
            conn = _Conn(self._next_conn_id, reader, writer)
            self.connections_accepted += 1
            self.open_connections += 1
        self._conns[conn.id] = conn
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while self._server is not None:
                try:
                    req = await self._read_request(conn)
                except _BadRequest as e:
                    resp = Response(self, conn, Request("?", "?", "?", {}, {}, Headers(), b""))
                    resp.close_connection = True
                    with contextlib.suppress(ConnectionError):
                        await resp.json(400, {"status": 400, "code": "bad_request", "message": str(e)})
                    break
                except (asyncio.IncompleteReadError, ConnectionError, ValueError):
                    break
                if req is None:
                    break
                if self.record_requests:
                    self.requests.append(req)
                resp = Response(self, conn, req)
                await self._dispatch(req, resp)
                if resp.close_connection or resp.aborted or not resp.finished:
                    break
        except asyncio.CancelledError:
            if self._server is not None:
                raise
            # cancelled by stop(): end quietly (asyncio would log a cancelled connection task)
        except Exception as e:  # a bug in the server itself; keep it visible to tests
            self.handler_errors.append(e)
        finally:
            self._conns.pop(conn.id, None)
            with self._lock:
                self.open_connections -= 1
            transport = writer.transport
            if not transport.is_closing():
                transport.close()
            # never wait for a peer that does not read: abort if the flush does not finish soon
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            if not transport.is_closing():
                transport.abort()
            self._conn_tasks.discard(task)

    async def _dispatch(self, req: Request, resp: Response) -> None:
        handler: Handler | None = None
        allowed: list[str] = []
        for route in self._routes:
            m = route.regex.match(req.path)
            if not m:
                continue
            if route.method == req.method:
                handler = route.handler
                req.path_params = m.groupdict()
                break
            allowed.append(route.method)
        self.active_requests += 1
        self.peak_active_requests = max(self.peak_active_requests, self.active_requests)
        try:
            if handler is not None:
                await handler(req, resp)
            elif allowed:
                await self.method_not_allowed(req, resp, allowed)
            else:
                await self.not_found(req, resp)
            if not resp.started and not resp.aborted:
                await resp.json(
                    500,
                    {"status": 500, "code": "fake_error", "message": "handler returned without responding"},
                )
            elif resp.streaming and not resp.finished and not resp.aborted:
                await resp.end()
        except asyncio.CancelledError:
            raise
        except ConnectionError:
            self.client_disconnects += 1
            resp.close_connection = True
        except Exception as e:
            self.handler_errors.append(e)
            resp.close_connection = True
            if not resp.started:
                with contextlib.suppress(Exception):
                    await resp.json(
                        500,
                        {
                            "status": 500,
                            "code": "fake_handler_exception",
                            "message": "".join(traceback.format_exception_only(e)).strip(),
                        },
                    )
            else:
                with contextlib.suppress(Exception):
                    await resp.abort()
        finally:
            self.active_requests -= 1

    async def _read_request(self, conn: _Conn) -> Request | None:
        reader = conn.reader
        line = await reader.readline()
        while line in (b"\r\n", b"\n"):  # tolerate stray CRLF between requests (RFC 9112 2.2)
            line = await reader.readline()
        if not line:
            return None  # clean EOF between requests
        if not line.endswith(b"\n"):
            raise asyncio.IncompleteReadError(line, None)
        parts = line.decode("latin-1").strip().split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _BadRequest(f"malformed request line: {line[:100]!r}")
        method, target, version = parts
        items: list[tuple[str, str]] = []
        while True:
            hline = await reader.readline()
            if not hline.endswith(b"\n"):
                raise asyncio.IncompleteReadError(hline, None)
            if hline in (b"\r\n", b"\n"):
                break
            if len(items) >= _MAX_HEADERS:
                raise _BadRequest("too many headers")
            k, sep, v = hline.decode("latin-1").partition(":")
            if not sep or not k or k != k.strip():
                raise _BadRequest(f"malformed header line: {hline[:100]!r}")
            items.append((k, v.strip()))
        headers = Headers(items)
        conn_tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        if version == "HTTP/1.0":
            conn.keep_alive_requested = "keep-alive" in conn_tokens
        else:
            conn.keep_alive_requested = "close" not in conn_tokens

        if headers.get("expect", "").lower() == "100-continue":
            conn.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await conn.writer.drain()

        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if chunked:
            body = await self._read_chunked(reader)
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise _BadRequest("bad Content-Length") from None
            if length < 0:
                raise _BadRequest("bad Content-Length")
            body = await reader.readexactly(length)
        else:
            body = b""

        split = urlsplit(target)
        qm = parse_qs(split.query, keep_blank_values=True)
        return Request(
            method=method.upper(),
            target=target,
            path=unquote(split.path) or "/",
            query={k: v[0] for k, v in qm.items()},
            query_multi=qm,
            headers=headers,
            body=body,
            version=version,
            connection_id=conn.id,
            chunked=chunked,
        )

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
        buf = bytearray()
        while True:
            size_line = await reader.readline()
            if not size_line.endswith(b"\n"):
                raise asyncio.IncompleteReadError(size_line, None)
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _BadRequest("bad chunk size") from None
            if size == 0:
                while True:  # trailers
                    t = await reader.readline()
                    if t in (b"\r\n", b"\n", b""):
                        return bytes(buf)
            buf += await reader.readexactly(size)
            if await reader.readexactly(2) != b"\r\n":
                raise _BadRequest("chunk not followed by CRLF")


# ----------------------------------------------------------------------------------------------
# Handler-free faults
# ----------------------------------------------------------------------------------------------


def closed_port() -> int:
    """A 127.0.0.1 port with nothing listening (connect → connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class BlackholeServer:
    """A 127.0.0.1 port where TCP connect hangs (SYNs are never answered).

    A listening socket with backlog 0 that never accepts; its accept queue is pre-filled with a
    few client connections, so Linux drops further SYNs and the client's connect times out.
    """

    def __init__(self, fillers: int = 3) -> None:
        self._fillers_wanted = fillers
        self._listener: socket.socket | None = None
        self._fillers: list[socket.socket] = []
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> Self:
        """Open the listener and fill its accept queue."""
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.bind((LOOPBACK, 0))
        ls.listen(0)
        self._listener = ls
        self.port = ls.getsockname()[1]
        for _ in range(self._fillers_wanted):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setblocking(False)
            with contextlib.suppress(BlockingIOError, InterruptedError):
                c.connect((LOOPBACK, self.port))
            self._fillers.append(c)
        time.sleep(0.05)  # let the kernel complete the filler handshakes
        return self

    def stop(self) -> None:
        """Close the fillers and the listener."""
        for c in self._fillers:
            c.close()
        self._fillers.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the fault names every platform fake answers (the fault matrix sets them) ---------------------

#: statuses of the ``http_<status>`` (the platform's own error body) and ``html_<status>`` (a proxy's
#: HTML page) faults
FAULT_STATUSES: tuple[int, ...] = (400, 401, 403, 404, 413, 429, 500, 502, 503)
#: faults inside or instead of a stream
STREAM_FAULTS: tuple[str, ...] = (
    "invalid_json",
    "truncated",
    "error_event",
    "empty",
    "non_utf8",
    "oversized",
    "stall",
    "stall_before_headers",
)


def fault_names(statuses: Iterable[int] = FAULT_STATUSES, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """``http_<s>`` and ``html_<s>`` for ``statuses``, the stream faults, then ``extra``."""
    statuses = tuple(statuses)
    return (tuple(f"http_{s}" for s in statuses) + tuple(f"html_{s}" for s in statuses) + STREAM_FAULTS
            + tuple(extra))


def html_error_page(status: int, server: str = "nginx") -> str:
    """The error page a reverse proxy (nginx, openresty, envoy, ...) puts in front of a platform."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return (f"<html>\r\n<head><title>{status} {phrase}</title></head>\r\n<body>\r\n<center><h1>{status} "
            f"{phrase}</h1></center>\r\n<hr><center>{server}</center>\r\n</body>\r\n</html>\r\n")


class PlatformFake(FakeHTTPServer):
    """A platform fake with a sticky ``fault`` (validated against ``FAULTS``) and the faults that
    come before any answer served the same way everywhere: ``http_<status>`` through the
    platform's own error body (``error_body``), ``html_<status>`` as a proxy's page,
    ``stall_before_headers`` as silence and a close."""

    FAULTS: ClassVar[tuple[str, ...]] = fault_names()
    #: who writes the ``html_<status>`` pages in front of this platform
    proxy_name = "nginx"
    #: how long ``stall`` faults send nothing
    stall_seconds = 30.0

    def __init__(self, port: int = 0) -> None:
        super().__init__(port)
        self._fault: str | None = None

    @property
    def fault(self) -> str | None:
        """Sticky fault applied to every answering request (see ``FAULTS``)."""
        return self._fault

    @fault.setter
    def fault(self, value: str | None) -> None:
        if value is not None and value not in self.FAULTS:
            raise ValueError(f"unknown fault {value!r}; known: {', '.join(self.FAULTS)}")
        self._fault = value

    async def error_body(self, resp: Response, status: int, headers: Mapping[str, str] | None) -> None:
        """Answer ``status`` with the platform's own error body (each fake says how)."""
        await resp.json(status, {"error": HTTPStatus(status).phrase}, headers)

    async def head_fault(
        self,
        resp: Response,
        fault: str | None,
        *,
        headers: Mapping[str, str] | None = None,
        stall_seconds: float | None = None,
        close_after_stall: bool = True,
    ) -> bool:
        """Serve a fault that replaces the whole answer; True when one was served."""
        if fault is None:
            return False
        kind, _, num = fault.partition("_")
        if kind in ("http", "html") and num.isdigit():
            status = int(num)
            if kind == "http":
                await self.error_body(resp, status, headers)
            else:
                await resp.text(status, html_error_page(status, self.proxy_name), "text/html", headers)
            return True
        if fault == "stall_before_headers":
            await resp.stall(self.stall_seconds if stall_seconds is None else stall_seconds)
            if close_after_stall:
                await resp.abort()
            return True
        return False
