"""Deadline-aware HTTP for adapters: one shared client per plugin process, status and error
envelopes mapped before any stream is parsed, and transport failures mapped to the taxonomy."""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from .errors import RunnerError, status_to_code

MAX_ERROR_BODY = 64 * 1024
# No cap on concurrent connections: each streaming run holds one for its whole answer, so a cap
# makes run N+1 wait for a whole answer (and httpcore's waiting queue costs O(waiting x open)).
# Idle keep-alive connections are capped, which bounds what stays open between runs.
POOL_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=50, keepalive_expiry=30.0)

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def shared_client() -> httpx.AsyncClient:
    """The process's shared AsyncClient for the running event loop (connections are reused).

    It honours HTTP(S)_PROXY / NO_PROXY and SSL_CERT_FILE like other HTTP clients do.
    """
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None or client.is_closed:
        client = httpx.AsyncClient(limits=POOL_LIMITS, follow_redirects=False, trust_env=True)
        _clients[loop] = client
    return client


async def close_shared_client() -> None:
    """Close the running loop's shared client (tests and CLI shutdown)."""
    client = _clients.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()


def timeout_for(budget: float, connect: float = 10.0) -> httpx.Timeout:
    """An httpx timeout that never outlives the run's remaining budget (seconds)."""
    budget = max(budget, 0.05)
    return httpx.Timeout(connect=min(connect, budget), read=budget, write=budget, pool=budget)


ErrorParser = Callable[[int, bytes, str], RunnerError]


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


def transport_error(exc: BaseException, platform: str = "upstream") -> RunnerError:
    """Map an httpx transport exception to the taxonomy (never includes headers or keys)."""
    if isinstance(exc, RunnerError):
        return exc
    if isinstance(exc, httpx.ConnectTimeout):
        return RunnerError("upstream.timeout", f"timed out connecting to {platform}")
    if isinstance(exc, httpx.PoolTimeout):
        return RunnerError("upstream.timeout", f"timed out waiting for a free connection to {platform}")
    if isinstance(exc, httpx.TimeoutException):
        return RunnerError("upstream.timeout", f"{platform} stopped responding (read timed out)")
    if isinstance(exc, httpx.ConnectError):
        return RunnerError("upstream.unavailable", f"cannot connect to {platform} (connection refused or unreachable)")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return RunnerError("upstream.unavailable", f"the connection to {platform} was closed before the answer finished")
    if isinstance(exc, httpx.UnsupportedProtocol):
        return RunnerError("config.invalid", f"the {platform} URL must start with http:// or https://")
    if isinstance(exc, httpx.InvalidURL):
        return RunnerError("config.invalid", f"the {platform} URL is not valid")
    if isinstance(exc, httpx.HTTPError):
        return RunnerError("upstream.error", f"HTTP error talking to {platform}: {type(exc).__name__}")
    return RunnerError("runner.internal", f"{type(exc).__name__}")


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
    req = client.build_request(method, url, timeout=timeout_for(budget), **kwargs)
    try:
        resp = await client.send(req, stream=True)
    except httpx.HTTPError as exc:
        raise transport_error(exc, platform) from None
    try:
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
