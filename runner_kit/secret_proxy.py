"""Keep a coding agent's secrets out of its reach: a loopback proxy that holds them for it.

A coding agent needs its model API key (and the LangBot MCP bridge's token) to work, but every tool
it runs can read its environment, its config files and ``/proc/<agent>/environ``. So the agent
never gets a secret. It gets a *stand-in*: a random value that means nothing anywhere else, and a
base URL on 127.0.0.1 that points here. This proxy forwards each request to the real upstream and
puts the real secret where the stand-in was (any header value, the query string); the real value
never enters the agent's sandbox, its files or its environment, so no tool call can print it and no
tool result or log line can carry it. Nor does an answer bring it in: an upstream that echoes the
secret back (a header, an error body "invalid key sk-…") has it swapped for the stand-in on the way
to the agent, and the agent cannot leave the route's path prefix (``..`` in any spelling is refused).

A tool that finds the stand-in can still reach the model through this proxy while the agent runs
(it has the agent's own access, nothing more); the proxy closes with the agent process, and the
stand-in then opens nothing. Responses pass through as they come (streams included), compressed
ones decoded so that no secret hides in them.

    async with SecretProxy.open(redact=env.redact) as proxy:
        base = proxy.route("https://api.anthropic.com")
        env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"] = base, proxy.stand_in(api_key)
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets as _secrets
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from .http import shared_client
from .logs import get_logger

log = get_logger("runner_kit.secret_proxy")

STAND_IN_PREFIX = "lbr-standin-"
MAX_REQUEST_BYTES = 64 * 1024 * 1024
_TIMEOUT = httpx.Timeout(30.0, read=None)  # a model stream may be quiet for long; the run's deadline rules
_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                  "trailers", "transfer-encoding", "upgrade", "host", "content-length"})
_DECODED = frozenset({"gzip", "deflate", "identity", ""})  # what httpx decodes; asked of every upstream
MIN_MASKED = 8  # a shorter "secret" is not one; swapping it in every answer would garble them


class _Mask:
    """Swaps each real secret for its stand-in in a stream of bytes, a secret split across chunks
    included; holds back only a tail that could still be the start of one (an event's closing
    newlines are never held)."""

    def __init__(self, pairs: dict[str, str]):
        self._pairs = [(r.encode(), s.encode()) for r, s in pairs.items() if len(r) >= MIN_MASKED]
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        buf = self._held + chunk
        for real, stand_in in self._pairs:
            buf = buf.replace(real, stand_in)
        keep = 0
        for real, _ in self._pairs:
            # the longest tail that starts this secret: only where its first byte is (a stream that
            # comes a few bytes at a time would otherwise cost the secret's length per byte)
            at = buf.find(real[:1], max(len(buf) - len(real) + 1, 0))
            while at != -1 and len(buf) - at > keep:
                if real.startswith(buf[at:]):
                    keep = len(buf) - at
                    break
                at = buf.find(real[:1], at + 1)
        self._held = buf[len(buf) - keep:] if keep else b""
        return buf[:len(buf) - keep] if keep else buf

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return held

    def text(self, value: str) -> str:
        for real, stand_in in self._pairs:
            value = value.replace(real.decode(), stand_in.decode())
        return value


def _forward_path(raw: str, rid: str) -> str | None:
    """The path after ``/r/<rid>`` as the agent wrote it (percent-escapes kept, so ``%23`` or
    ``%3F`` stay part of the path); None when a segment is ``.`` or ``..`` in any spelling
    (``%2e%2e``, ``..%2f``, a backslash), which would leave the route's path prefix upstream."""
    if raw.startswith(("http://", "https://")):  # an absolute-form request line
        parts = urlsplit(raw)
        raw = parts.path
    path = raw.split("?", 1)[0].split("#", 1)[0]
    head = f"/r/{rid}"
    if not path.startswith(head):
        return None
    rest = path[len(head):]
    if rest and not rest.startswith("/"):
        return None
    for seg in rest.split("/"):
        plain = unquote(seg).replace("\\", "/")
        if any(p in (".", "..") for p in plain.split("/")):
            return None
    return rest


class SecretProxy:
    """One agent process's proxy: routes (upstream base URLs) and stand-ins for its secrets."""

    def __init__(self, redact: Any = None):
        self._redact = redact
        self._routes: dict[str, str] = {}  # route id -> upstream base URL (no trailing slash)
        self._stand_ins: dict[str, str] = {}  # stand-in -> real secret
        self._by_secret: dict[str, str] = {}
        self._runner: Any = None
        self._client: httpx.AsyncClient | None = None
        self.base = ""
        self._active: set[asyncio.Task[Any]] = set()  # requests being served

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, redact: Any = None) -> AsyncIterator[SecretProxy]:
        proxy = cls(redact)
        await proxy.start()
        try:
            yield proxy
        finally:
            await proxy.close()

    def stand_in(self, secret: str) -> str:
        """The value the agent gets instead of ``secret`` (the same one each time)."""
        if not secret:
            return secret
        if secret not in self._by_secret:
            value = STAND_IN_PREFIX + _secrets.token_hex(16)
            self._by_secret[secret] = value
            self._stand_ins[value] = secret
            if self._redact is not None:
                self._redact.add(secret)
        return self._by_secret[secret]

    def route(self, upstream: str) -> str:
        """A base URL on this proxy that forwards to ``upstream`` (path prefix kept)."""
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("upstream must be an http(s) URL")
        rid = _secrets.token_hex(6)
        self._routes[rid] = upstream.rstrip("/")
        return f"{self.base}/r/{rid}"

    async def start(self) -> None:
        from aiohttp import web

        self._client = shared_client()  # no cookies; keeps its connections across agents and runs
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_route("*", "/r/{rid}", self._handle)
        app.router.add_route("*", "/r/{rid}/{rest:.*}", self._handle)
        # a request whose client went away is cancelled (its upstream stream closed with it), and a
        # close never waits for a stalled upstream: the agent is gone by then
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True,
                                     shutdown_timeout=0.05)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base = f"http://127.0.0.1:{port}"

    async def close(self) -> None:
        """Stop listening and forget every secret; safe to call twice."""
        self._routes.clear()
        self._stand_ins.clear()
        self._by_secret.clear()
        runner, self._runner = self._runner, None
        client, self._client = self._client, None
        for task in list(self._active):
            task.cancel()
        if runner is not None:
            with contextlib.suppress(Exception):
                await runner.cleanup()
        del client  # the process's shared client: not ours to close

    def _fill(self, text: str) -> str:
        if STAND_IN_PREFIX not in text:
            return text
        for stand_in, real in self._stand_ins.items():
            text = text.replace(stand_in, real)
        return text

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        upstream = self._routes.get(request.match_info["rid"])
        client = self._client
        if upstream is None or client is None:
            return web.json_response({"error": {"type": "not_found", "message": "no such route"}}, status=404)
        rest = _forward_path(request.raw_path, request.match_info["rid"])
        if rest is None:
            return web.json_response({"error": {"type": "bad_path", "message": "this path leaves the route"}},
                                     status=400)
        url = upstream + rest
        if request.query_string:
            url += "?" + self._fill(request.query_string)
        headers = [(k, self._fill(v)) for k, v in request.headers.items()
                   if k.lower() not in _HOP and k.lower() != "accept-encoding"]
        headers.append(("accept-encoding", "gzip, deflate"))  # what can be decoded and searched
        mask = _Mask(self._by_secret)
        body = await request.read()
        task = asyncio.current_task()
        if task is not None:
            self._active.add(task)
            task.add_done_callback(self._active.discard)
        try:
            req = client.build_request(request.method, url, headers=headers, content=body, timeout=_TIMEOUT)
            resp = await client.send(req, stream=True)
        except httpx.HTTPError as exc:
            host = urlsplit(upstream).hostname or "the upstream"
            log.info("secret proxy: %s %s failed: %s", request.method, host, type(exc).__name__)
            return web.json_response(
                {"error": {"type": "proxy_error", "message": f"could not reach {host} ({type(exc).__name__})"}},
                status=502)
        try:
            codings = {c.strip().lower() for c in resp.headers.get("content-encoding", "").split(",")}
            decode = codings <= _DECODED  # else passed on as it came: nothing here can read it
            out = web.StreamResponse(status=resp.status_code, reason=mask.text(resp.reason_phrase or "") or None)
            for k, v in resp.headers.multi_items():
                if k.lower() not in _HOP and not (decode and k.lower() == "content-encoding"):
                    out.headers.add(k, mask.text(v))
            await out.prepare(request)
            if request.method != "HEAD":
                async for chunk in (resp.aiter_bytes() if decode else resp.aiter_raw()):
                    data = mask.feed(chunk) if decode else chunk
                    if data:
                        await out.write(data)
                if tail := mask.flush():
                    await out.write(tail)
            await out.write_eof()
            return out
        except (httpx.HTTPError, ConnectionError) as exc:
            log.info("secret proxy: the stream ended early: %s", type(exc).__name__)
            raise asyncio.CancelledError from None  # the agent sees its connection close, as upstream's did
        finally:
            await resp.aclose()


def mcp_behind(server: Any, proxy: SecretProxy) -> Any:
    """A :class:`runner_kit.agent_mcp.LangBotMCP` as the agent gets it: its URL through ``proxy``
    and a stand-in for its token (in the stdio proxy's environment too)."""
    import dataclasses

    parts = urlsplit(server.url)
    origin = f"{parts.scheme}://{parts.netloc}"
    routed = proxy.route(origin)
    token = proxy.stand_in(server.token)

    def swap(text: str) -> str:
        return text.replace(server.token, token).replace(origin, routed)

    return dataclasses.replace(
        server, url=swap(server.url), token=token,
        stdio_args=tuple(swap(a) for a in server.stdio_args),
        stdio_env={k: swap(v) for k, v in server.stdio_env.items()},
    )


__all__ = ["STAND_IN_PREFIX", "SecretProxy", "mcp_behind"]
