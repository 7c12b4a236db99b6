"""Deadline-aware HTTP for adapters: one shared client per plugin process, status and error
envelopes mapped before any stream is parsed, and transport failures mapped to the taxonomy."""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import asynccontextmanager
from functools import lru_cache
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from . import texts
from .errors import RunnerError, status_to_code, url_userinfo
from .logs import install_http_filters, remember_secret

install_http_filters()  # httpx logs every request's URL; its loggers exist now

MAX_ERROR_BODY = 64 * 1024
# No cap on concurrent connections: each streaming run holds one for its whole answer, so a cap
# makes run N+1 wait for a whole answer (and httpcore's waiting queue costs O(waiting x open)).
# Idle keep-alive connections are capped, which bounds what stays open between runs.
POOL_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=50, keepalive_expiry=30.0)

# TCP keepalive on every connection: a streaming answer can be silent for minutes while the platform
# works, and a connection whose peer vanished (a restarted server, a NAT that dropped it) would
# otherwise wait for the run's whole deadline, or a day with timeout 0. The kernel probes after
# KEEPALIVE_IDLE quiet seconds and gives up after KEEPALIVE_COUNT unanswered probes.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 30, 10, 3


def keepalive_options() -> list[tuple[int, int, int]]:
    """The socket options that turn TCP keepalive on (the timings where the platform has them)."""
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
                        ("TCP_KEEPCNT", KEEPALIVE_COUNT)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


# One client per event loop (keyed by id: a loop object is never kept alive by this table). Entries
# of loops that have closed are dropped on the next lookup, so their clients can be freed.
_clients: dict[int, tuple[asyncio.AbstractEventLoop, httpx.AsyncClient]] = {}


def _no_cookies() -> CookieJar:
    """A jar that refuses every cookie: one process serves many bots, and an upstream's cookies
    from one bot's run must never ride along on another bot's request to the same host."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


@lru_cache(maxsize=1)
def ssl_context() -> ssl.SSLContext:
    """One verifying TLS context per process (SSL_CERT_FILE / SSL_CERT_DIR honoured, as httpx does):
    loading the CA bundle costs 0.1-0.9 s, which a new client per event loop would pay each time."""
    return httpx.create_ssl_context(trust_env=True)


def shared_client() -> httpx.AsyncClient:
    """The process's shared AsyncClient for the running event loop (connections are reused).

    It keeps no cookies, sends a URL's ``user:password@`` as a header (:class:`UserinfoAuth`),
    turns TCP keepalive on for direct connections (:func:`keepalive_options`), and honours
    HTTP(S)_PROXY / NO_PROXY and SSL_CERT_FILE like other HTTP clients do.
    """
    loop = asyncio.get_running_loop()
    for key, (other, _) in list(_clients.items()):
        if other.is_closed():
            del _clients[key]
    entry = _clients.get(id(loop))
    client = entry[1] if entry is not None and entry[0] is loop else None
    if client is None or client.is_closed:
        client = httpx.AsyncClient(limits=POOL_LIMITS, follow_redirects=False, trust_env=True, cookies=_no_cookies(),
                                   auth=UserinfoAuth(), verify=ssl_context())
        # the direct transport again, with keepalive: passing it to the constructor would turn the
        # environment's proxies off (httpx mounts them only when it builds its own transport)
        if isinstance(getattr(client, "_transport", None), httpx.AsyncHTTPTransport):
            client._transport = httpx.AsyncHTTPTransport(verify=ssl_context(), limits=POOL_LIMITS, trust_env=True,
                                                         socket_options=keepalive_options())
        _clients[id(loop)] = (loop, client)
    return client


async def close_shared_client() -> None:
    """Close the running loop's shared client (tests and CLI shutdown)."""
    entry = _clients.pop(id(asyncio.get_running_loop()), None)
    if entry is not None:
        await entry[1].aclose()


def timeout_for(budget: float, connect: float = 10.0) -> httpx.Timeout:
    """An httpx timeout that never outlives the run's remaining budget (seconds)."""
    budget = max(budget, 0.05)
    return httpx.Timeout(connect=min(connect, budget), read=budget, write=budget, pool=budget)


ErrorParser = Callable[[int, bytes, str], Exception]  # a RunnerError, or SessionMissing for a gone conversation


def base_url(
    raw: object,
    key: str,
    *,
    default: str = "",
    suffixes: tuple[str, ...] = (),
    add: str = "",
    example: str = "",
) -> str:
    """One base URL from what an owner pastes or a migration carries.

    Blanks, a query or fragment and trailing slashes are dropped; then any of ``suffixes`` (API
    prefixes an owner may paste, matched case-insensitively, repeatedly) is cut off and ``add`` is
    appended, so ``http://h:8080``, ``http://h:8080/`` and ``http://h:8080/api/v1/`` all give
    ``http://h:8080/api/v1`` with ``suffixes=("/api/v1",), add="/api/v1"``. Anything but a plain
    http(s) address is ``config.invalid`` naming ``key`` (and ``example`` when given).

    A ``user:password@`` in the address is kept (it is sent as ``Authorization: Basic``) and its
    values join the run's redactor, so no message or log line shows them.
    """
    text = str(raw if raw is not None else "").strip() or default
    remember_secret(*url_userinfo(text))
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or any(c.isspace() for c in text):
        shown = f" such as {example}" if example else ""
        raise RunnerError("config.invalid", f"config key {key!r} must be an http(s) address{shown}")
    path = parts.path.rstrip("/")
    cut = True
    while cut:
        cut = False
        for suffix in suffixes:
            suffix = suffix.rstrip("/")
            if suffix and path.lower().endswith(suffix.lower()):
                path = path[: -len(suffix)].rstrip("/")
                cut = True
    return urlunsplit((parts.scheme.lower(), parts.netloc, path + add, "", ""))


def shown_url(url: object) -> str:
    """``url`` fit for a message or a log line: without its ``user:password@`` and query."""
    parts = urlsplit(str(url))
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return urlunsplit((parts.scheme, f"{host}:{port}" if port else host, parts.path, "", ""))


def _address(url: httpx.URL) -> str:
    """``host:port`` of a request, for naming where a connection failed."""
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{url.port}" if url.port else host


class UserinfoAuth(httpx.Auth):
    """The shared client's auth: a URL's ``user:password@`` goes out as ``Authorization: Basic``
    and leaves the URL, which httpx logs ("HTTP Request: POST …") and its errors carry.

    An Authorization header the adapter set (the platform's API key) is kept, as curl keeps a
    header given with ``-H``; httpx alone would replace it with the Basic one.
    """

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        url = request.url
        if url.userinfo:
            if "authorization" not in request.headers:
                pair = f"{url.username}:{url.password}".encode()
                request.headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
            request.url = url.copy_with(userinfo=b"")
        yield request


def default_error(status: int, body: bytes, content_type: str, platform: str = "upstream") -> RunnerError:
    """Map a non-2xx response using a generic {code, message} / {error: {...}} envelope."""
    code = status_to_code(status)
    detail = ""
    if "json" in content_type or body[:1] in (b"{", b"["):
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            inner: dict[str, Any] = doc["error"] if isinstance(doc.get("error"), dict) else doc
            msg = inner.get("message") or inner.get("msg") or inner.get("detail") or ""
            ecode = inner.get("code") or inner.get("type") or ""
            detail = f"{ecode}: {msg}" if ecode and msg else str(msg or ecode)
    if not detail:
        detail = "non-JSON error page" if body.lstrip()[:1] == b"<" else "no error details"
    return RunnerError(code, f"{platform} returned HTTP {status} ({detail[:300]})", status=status)


_WHY_ZH = {"no host has that name": "找不到这个主机名", "nothing accepts connections at that port": "该端口上没有服务在接受连接"}


def _nothing_there(exc: BaseException) -> str | None:
    """Why a connection could not even be opened, when that points at the configured address (nothing
    listens at that port; no such host name) rather than at a passing outage; else None."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, socket.gaierror) and e.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)):
            return "no host has that name"
        if isinstance(e, ConnectionRefusedError) or (isinstance(e, OSError) and e.errno == errno.ECONNREFUSED):
            return "nothing accepts connections at that port"
        todo += [e.__cause__, e.__context__, *(a for a in e.args if isinstance(a, BaseException))]
    text = str(exc)
    if "Connection refused" in text or "[Errno 111]" in text:
        return "nothing accepts connections at that port"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "no host has that name"
    return None


def transport_error(exc: BaseException, platform: str = "upstream", where: str = "") -> RunnerError:
    """Map an httpx transport exception to the taxonomy (never includes headers or keys); a
    connection that cannot be made names ``where`` (``host:port``) when given."""
    if isinstance(exc, RunnerError):
        return exc
    at = f" at {where}" if where else ""
    if isinstance(exc, httpx.ConnectTimeout):
        return RunnerError("upstream.timeout", f"timed out connecting to {platform}{at}")
    if isinstance(exc, httpx.PoolTimeout):
        return RunnerError("upstream.timeout", f"timed out waiting for a free connection to {platform}")
    if isinstance(exc, httpx.TimeoutException):
        return RunnerError("upstream.timeout", f"{platform} stopped responding (read timed out)")
    if isinstance(exc, httpx.ConnectError) and _tls_failure(exc):
        return RunnerError(
            "upstream.tls",
            f"TLS certificate verification failed for {platform} (self-signed or expired certificate, or the "
            "wrong host name); fix the server's certificate or trust its CA via SSL_CERT_FILE",
        )
    if isinstance(exc, httpx.ConnectError):
        why = _nothing_there(exc)
        if why is None:  # the network or the server is down for now: trying again is the advice
            return RunnerError("upstream.unavailable",
                               f"cannot connect to {platform}{at} (connection refused or unreachable)")
        err = RunnerError("upstream.unavailable", f"nothing answers for {platform}{at}: {why}")
        # not an outage to wait out: usually a wrong URL or port, which only the bot owner can fix
        err.chat = texts.Said(  # type: ignore[attr-defined]  # in the language of the run that shows it
            "{p} is not answering at the address this bot is set to use{at}: {why}. That is usually a wrong URL or "
            "port, or a server that is not running; the bot owner should check the address in this bot's AI settings.",
            "{p} 在此机器人设置的地址{at}没有响应：{why}。通常是 URL 或端口填错了，或者服务器没有运行；请机器人所有者"
            "在机器人的 AI 设置中检查地址。",
            p=platform, at=texts.Said(at, f"（{where}）" if where else ""), why=texts.Said(why, _WHY_ZH.get(why, why)))
        return err
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return RunnerError("upstream.unavailable", f"the connection to {platform} was closed before the answer finished")
    if isinstance(exc, httpx.UnsupportedProtocol):
        return RunnerError("config.invalid", f"the {platform} URL must start with http:// or https://")
    if isinstance(exc, httpx.InvalidURL):
        return RunnerError("config.invalid", f"the {platform} URL is not valid")
    if isinstance(exc, httpx.HTTPError):
        return RunnerError("upstream.error", f"HTTP error talking to {platform}: {type(exc).__name__}")
    return RunnerError("runner.internal", f"{type(exc).__name__}")


def _tls_failure(exc: BaseException) -> bool:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ssl.SSLCertVerificationError):
            return True
        if isinstance(cur, ssl.SSLError) and "CERTIFICATE_VERIFY_FAILED" in str(cur):
            return True
        cur = cur.__cause__ or cur.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


def _safe_location(location: str, base: httpx.URL) -> str:
    """A redirect target fit to show: resolved against the request, without query or credentials."""
    try:
        target = base.join(location)
        parts = urlsplit(str(target))
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, "", ""))[:300]
    except Exception:  # noqa: BLE001 - a malformed Location is still a redirect
        return "an address the server did not state clearly"


def redirect_error(resp: httpx.Response, platform: str) -> RunnerError:
    """A 3xx: the configured URL is not the API's address (http→https is the usual mistake)."""
    where = _safe_location(resp.headers.get("location", ""), resp.request.url)
    hint = ""
    if resp.request.url.scheme == "http" and where.startswith("https://"):
        hint = " (the server wants https://)"
    return RunnerError(
        "config.invalid",
        f"{platform} answered HTTP {resp.status_code}, a redirect to {where}{hint}; set the base URL to that address",
        status=resp.status_code,
    )


@asynccontextmanager
async def open_stream(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    budget: float,
    platform: str,
    error_parser: ErrorParser | None = None,
    **kwargs: Any,
) -> AsyncIterator[httpx.Response]:
    """Send a request and yield a response whose status is 2xx; errors are raised as RunnerError."""
    try:
        req = client.build_request(method, url, timeout=timeout_for(budget), **kwargs)
    except UnicodeEncodeError:
        raise RunnerError(
            "config.invalid",
            f"a key or header value in this bot's {platform} settings contains a character that cannot be sent "
            "over HTTP (a non-ASCII letter, a full-width space or a line break); paste it again",
        ) from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise transport_error(exc, platform) from None
    try:
        resp = await client.send(req, stream=True)
    except httpx.HTTPError as exc:
        raise transport_error(exc, platform, _address(req.url)) from None
    try:
        if 300 <= resp.status_code < 400:
            raise redirect_error(resp, platform)
        if resp.status_code >= 400:
            body = await read_bounded(resp, MAX_ERROR_BODY, platform)
            ctype = resp.headers.get("content-type", "")
            parser = error_parser or (lambda s, b, c: default_error(s, b, c, platform))
            raise parser(resp.status_code, body, ctype)
        yield resp
    except httpx.HTTPError as exc:
        raise transport_error(exc, platform) from None
    finally:
        await resp.aclose()


async def read_bounded(resp: httpx.Response, limit: int, platform: str = "upstream", *, strict: bool = False) -> bytes:
    """Read at most ``limit`` bytes of a streamed body (error pages can be huge).

    With ``strict`` a transport failure is raised as a RunnerError; otherwise what arrived is kept
    (enough to map an error response).
    """
    buf = bytearray()
    try:
        async for chunk in resp.aiter_bytes():
            buf += chunk
            if len(buf) >= limit:
                break
    except httpx.HTTPError as exc:
        if strict:
            raise transport_error(exc, platform) from None
    return bytes(buf[:limit])


async def finish_body(body: AsyncIterator[Any], timeout: float = 0.25) -> None:
    """Read what is left of a stream after its terminal event, briefly, so that the connection
    goes back to the pool for the next run instead of being closed. Pass the same iterator the
    events were read from."""
    try:
        async with asyncio.timeout(timeout):
            async for _ in body:
                pass
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - the answer is complete; whatever follows is irrelevant
        pass


async def read_json(resp: httpx.Response, platform: str, limit: int = 16 * 1024 * 1024) -> Any:
    """Read a whole JSON body (bounded) or raise upstream.protocol."""
    body = await read_bounded(resp, limit + 1, platform, strict=True)
    if len(body) > limit:
        raise RunnerError("upstream.protocol", f"{platform} response exceeds {limit} bytes")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise RunnerError("upstream.protocol", f"{platform} returned a body that is not valid JSON") from None
