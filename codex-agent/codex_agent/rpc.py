"""A small JSON-RPC 2.0 peer over newline-delimited JSON, as ``codex app-server`` speaks it.

Codex omits the ``"jsonrpc"`` member on the wire (its README says so, and the real transcripts show
it), so this peer neither sends nor requires it. Three kinds of message arrive on the agent's stdout:

- a **response** ``{id, result | error}`` to one of our requests: it resolves that request's future;
- a **notification** ``{method, params}``: queued, in arrival order, for whoever drives the turn
  (and shown to ``observe`` at once, before anything that arrives after it is handled);
- a **server request** ``{id, method, params}`` (approvals): handed to ``on_request``, whose return
  value is sent back as the ``result`` (a :class:`RpcError` it raises becomes the ``error``).

Nothing here knows about Codex methods; the transport is two callables, so tests can drive it with
in-memory pipes and the adapter with :class:`runner_kit.process.AgentProcess`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from runner_kit.logs import get_logger

log = get_logger("codex_agent.rpc")

Message = dict[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message | None]]  # None: the other side closed its output
OnRequest = Callable[[str, dict[str, Any]], Awaitable[Any]]

METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603


class RpcError(Exception):
    """A JSON-RPC error response (ours to send, or the agent's answer to one of our requests)."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def as_error(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


class PeerClosed(Exception):
    """The agent's output ended (it exited or closed stdout) while we waited for it."""


@dataclass(slots=True)
class Notification:
    method: str
    params: dict[str, Any]


class Peer:
    """Requests with ids and futures, queued notifications, server requests answered by a callback."""

    def __init__(self, send: Send, receive: Receive, on_request: OnRequest, name: str = "agent",
                 observe: Callable[[Notification], None] | None = None):
        self._send = send
        self._observe = observe
        self._receive = receive
        self._on_request = on_request
        self.name = name
        self._next_id = 1
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._queue: asyncio.Queue[Notification | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.closed = False

    def start(self) -> None:
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a request and wait for its result; raises RpcError or PeerClosed."""
        if self.closed:
            raise PeerClosed(f"{self.name} is not running")
        rid = self._next_id
        self._next_id += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            await self._send({"id": rid, "method": method, "params": params or {}})
            return await fut
        finally:
            self._pending.pop(rid, None)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        msg: Message = {"method": method}
        if params is not None:
            msg["params"] = params
        await self._send(msg)

    async def next_notification(self) -> Notification | None:
        """The next notification in arrival order; None once the agent's output has ended."""
        if self.closed and self._queue.empty():
            return None
        item = await self._queue.get()
        if item is None:
            self._queue.put_nowait(None)  # stay closed for every later reader
        return item

    def pending_notifications(self) -> list[Notification]:
        """Take every notification already queued, without waiting."""
        out: list[Notification] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is None:
                self._queue.put_nowait(None)
                break
            out.append(item)
        return out

    async def _read_loop(self) -> None:
        try:
            while (msg := await self._receive()) is not None:
                self._dispatch(msg)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a broken transport ends the peer like EOF
            log.info("%s: reading its output failed: %s", self.name, type(exc).__name__)
        finally:
            self._close()

    def _dispatch(self, msg: Message) -> None:
        method = msg.get("method")
        has_id = "id" in msg and msg["id"] is not None
        if isinstance(method, str) and has_id:
            task = asyncio.get_running_loop().create_task(self._answer(msg["id"], method, _params(msg)))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        elif isinstance(method, str):
            note = Notification(method, _params(msg))
            if self._observe is not None:
                self._observe(note)  # synchronously, before any server request that follows it
            self._queue.put_nowait(note)
        elif has_id:
            fut = self._pending.get(msg["id"]) if isinstance(msg["id"], int) else None
            if fut is None or fut.done():
                log.debug("%s: a response to no pending request (id %r)", self.name, msg["id"])
            elif isinstance(msg.get("error"), dict):
                err = msg["error"]
                fut.set_exception(RpcError(_int(err.get("code")), str(err.get("message") or ""), err.get("data")))
            else:
                fut.set_result(msg.get("result"))
        else:
            log.debug("%s: ignored a message that is neither request, response nor notification", self.name)

    async def _answer(self, rid: Any, method: str, params: dict[str, Any]) -> None:
        try:
            result = await self._on_request(method, params)
            reply: Message = {"id": rid, "result": result}
        except RpcError as exc:
            reply = {"id": rid, "error": exc.as_error()}
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the agent must get an answer either way
            log.warning("%s: answering %s failed: %s", self.name, method, type(exc).__name__)
            reply = {"id": rid, "error": {"code": INTERNAL_ERROR, "message": "the client could not answer"}}
        with contextlib.suppress(Exception):
            await self._send(reply)

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(PeerClosed(f"{self.name} stopped before it answered"))
        self._queue.put_nowait(None)

    async def aclose(self) -> None:
        """Stop reading and answering; pending requests fail with PeerClosed."""
        tasks = [t for t in (self._reader, *self._handlers) if t is not None and not t.done()]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        self._close()


def _params(msg: Message) -> dict[str, Any]:
    params = msg.get("params")
    return params if isinstance(params, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else INTERNAL_ERROR
