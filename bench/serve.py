"""``python -m bench.serve PLUGIN``: run one plugin's fake platform in its own process.

Keeping the fake out of the measured process means the benchmark's CPU time and peak RSS hold
only the client side. The fake is instrumented to record, per run (keyed by the run's input text),
the CLOCK_MONOTONIC time right after each answer-token write returned (bytes handed to the
kernel). Control is JSON lines: the first stdout line is ``{"base_url": ..., "port": ...}``; then
one reply line per command read from stdin:

    {"op": "stream", "tokens": N, "delay": D}  make every following run stream N tokens, D s apart
    {"op": "stream", ..., "prefix": P}          the same, only for runs whose key starts with P
    {"op": "marks"}                            {key: [ns, ...]} recorded since the last call
    {"op": "stats"}                            connection and request counters (requests by route)
    {"op": "quit"}
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections import Counter
from typing import Any

from tests.fakes.http_server import FakeHTTPServer, Response

from .common import now_ns, tokens
from .registry import http_plugin


class Marks:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[str, list[int]] = {}

    def add(self, key: str, t: int) -> None:
        with self._lock:
            self._marks.setdefault(key, []).append(t)

    def take(self) -> dict[str, list[int]]:
        with self._lock:
            out, self._marks = self._marks, {}
        return out


def instrument(entry: Any, marks: Marks) -> None:
    """Time every answer-token write of any fake built on FakeHTTPServer (this process only)."""
    original = Response.write

    async def write(self: Response, data: bytes | str) -> None:
        await original(self, data)
        raw = data.encode("utf-8") if isinstance(data, str) else data
        if entry.is_token_write(raw):
            t = now_ns()
            key = self.__dict__.get("_bench_key")
            if key is None:
                try:
                    key = entry.run_key(self.request) or ""
                except Exception:  # noqa: BLE001 - an unkeyed request is simply not timed
                    key = ""
                self.__dict__["_bench_key"] = key
            marks.add(key, t)

    Response.write = write  # type: ignore[method-assign]


class Plans:
    """How many tokens, how far apart: a default plus per-key-prefix plans, applied to the fake
    the moment a request is dispatched (its handler reads the knobs before its first await), so
    runs with different plans can be in flight together."""

    def __init__(self) -> None:
        self.default: tuple[int, float] = (4, 0.0)
        self.by_prefix: dict[str, tuple[int, float]] = {}

    def set(self, n: int, delay: float, prefix: str | None) -> None:
        if prefix:
            self.by_prefix[prefix] = (n, delay)
        else:
            self.default = (n, delay)
            self.by_prefix.clear()

    def pick(self, key: str) -> tuple[int, float]:
        best = ""
        for p in self.by_prefix:
            if key.startswith(p) and len(p) > len(best):
                best = p
        return self.by_prefix[best] if best else self.default


_ID = re.compile(r"/[0-9a-fA-F-]{8,}|/(?=[^/]*\d)[^/]{12,}")


def route(method: str, path: str) -> str:
    """A request's route with its ids starred (``POST /threads/*/runs/stream``), for counting."""
    return f"{method} {_ID.sub('/*', path.split('?', 1)[0])}"


def apply_plans(entry: Any, plans: Plans, routes: Counter[str]) -> None:
    original = FakeHTTPServer._dispatch

    async def dispatch(self: FakeHTTPServer, req: Any, resp: Response) -> None:
        routes[route(req.method, req.path)] += 1
        try:
            key = entry.run_key(req)
        except Exception:  # noqa: BLE001 - not a run request (upload, stop, ...)
            key = None
        if key is not None:
            n, delay = plans.pick(key)
            entry.stream(self, tokens(n), delay)
        await original(self, req, resp)

    FakeHTTPServer._dispatch = dispatch  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    entry = http_plugin(args[0])
    marks = Marks()
    instrument(entry, marks)
    plans = Plans()
    routes: Counter[str] = Counter()
    apply_plans(entry, plans, routes)
    srv = entry.start_server()
    out = sys.stdout

    def reply(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    reply({"base_url": srv.base_url, "port": srv.port})
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            op = cmd.get("op")
            if op == "stream":
                plans.set(int(cmd["tokens"]), float(cmd["delay"]), cmd.get("prefix"))
                reply({"ok": True})
            elif op == "marks":
                reply({"marks": marks.take()})
            elif op == "stats":
                reply(
                    {
                        "connections_accepted": srv.connections_accepted,
                        "open_connections": srv.open_connections,
                        "active_requests": srv.active_requests,
                        "peak_active_requests": srv.peak_active_requests,
                        "client_disconnects": srv.client_disconnects,
                        "handler_errors": [repr(e) for e in srv.handler_errors[:5]],
                        "requests": dict(routes),
                    }
                )
            elif op == "quit":
                reply({"ok": True})
                break
            else:
                reply({"error": f"unknown op {op!r}"})
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
