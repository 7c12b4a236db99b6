"""One turn two ways: through the plugin's runner and the local host (the full path), and through
the bare floor (same request, same HTTP client, bytes parsed only as far as the wire demands)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from langbot_plugin.api.definition.components.runner.runner import Runner

from runner_kit.http import shared_client
from runners_cli.host import Identity, LocalHost
from runners_cli.plugins import find, load_runner_class

from .common import delta_text, now_ns, rtype
from .registry import HttpPlugin


def load_runner(plugin: str) -> tuple[Any, LocalHost]:
    """The plugin's runner bound to a local host, as the plugin runtime would bind it."""
    info = find(plugin)
    host = LocalHost(runner_id=info.runner_id)
    runner = load_runner_class(info)()
    runner.bind_runtime(plugin_runtime_handler=host, plugin_identity=f"{info.author}/{info.name}")
    return runner, host


@dataclass
class Turn:
    key: str
    results: list[Any] = field(default_factory=list)
    # (monotonic ns when the host got it, all_content length) per message.delta
    deltas: list[tuple[int, int]] = field(default_factory=list)
    first_text_ns: int | None = None
    text: str = ""
    terminal: str | None = None
    code: str | None = None
    events: int = 0  # floor only: wire events parsed


async def runner_turn(
    runner: Any, host: LocalHost, config: dict[str, Any], key: str, keep: bool = True, via: str = "runner"
) -> Turn:
    """One run through ``runner.invoke`` with results applied to the host, as LangBot does.

    ``via="sdk"`` goes through the SDK's own ``Runner.invoke`` instead of the kit's lean one;
    ``via="kit"`` iterates ``runner.run``, leaving out any ``invoke`` wrapper (per-invocation API,
    result queue and task), to tell the kit's share from the wrapper's."""
    turn = Turn(key)
    # one conversation per run, as concurrent chats are (a platform may refuse a second message
    # while one conversation is still answering, as Coze does)
    ctx = host.make_context(key, config=config, identity=Identity(conversation_id=f"bench-{key}"))
    results = runner.run(ctx) if via == "kit" else Runner.invoke(runner, ctx) if via == "sdk" else runner.invoke(ctx)
    async for result in results:
        t = now_ns()
        host.apply_result(ctx.run_id, result)
        kind = rtype(result)
        if kind == "message.delta":
            text = delta_text(result)
            if text and turn.first_text_ns is None:
                turn.first_text_ns = t
            turn.deltas.append((t, len(text)))
        elif kind == "message.completed":
            content = result.data["message"]["content"]
            turn.text = content if isinstance(content, str) else ""
        elif kind in ("run.completed", "run.failed"):
            # a pipeline run whose failure is shown in the chat ends in run.completed with the
            # code as its finish_reason (runner_kit.explain): that is a failure here too
            reason = result.data.get("finish_reason")
            failed = kind == "run.failed" or reason not in (None, "stop")
            turn.terminal = "run.failed" if failed else kind
            turn.code = result.data.get("code") if kind == "run.failed" else (reason if failed else None)
        if keep:
            turn.results.append(result)
    return turn


async def floor_turn(
    entry: HttpPlugin, base_url: str, key: str, client: httpx.AsyncClient | None = None, timed: bool = True
) -> Turn:
    """The least any client must do for the same answer: send the request, read the bytes, split
    the wire format, parse each JSON event, take the token text. Kept as lean as the stdlib allows
    (str decoding into one JSONDecoder, no per-line copies) so that it really is the floor.
    ``timed`` records the time of every token (else only of the first)."""
    turn = Turn(key)
    client = client or shared_client()
    if entry.floor_prepare is not None:
        req = await entry.floor_prepare(client, base_url, key)
    else:
        req = entry.floor_request(base_url, key)
    pieces: list[str] = []
    token_of = entry.floor_token
    decode = _DECODER.decode
    sse = entry.wire == "sse"
    events = 0
    async with client.stream(req.pop("method"), req.pop("url"), timeout=httpx.Timeout(60.0), **req) as resp:
        resp.raise_for_status()
        partial = b""
        async for chunk in resp.aiter_bytes():
            if partial:
                chunk = partial + chunk
            lines = chunk.split(b"\n")
            partial = lines.pop()
            for line in lines:
                if sse:
                    if line[:5] != b"data:":
                        continue
                    obj = decode(line[5:].decode())
                elif line.strip():
                    obj = decode(line.decode())
                else:
                    continue
                events += 1
                tok = token_of(obj)
                if tok:
                    if timed or turn.first_text_ns is None:
                        t = now_ns()
                        if turn.first_text_ns is None:
                            turn.first_text_ns = t
                        turn.deltas.append((t, 0))
                    pieces.append(tok)
    turn.events = events
    turn.text = "".join(pieces)
    turn.terminal = "run.completed"
    return turn


_DECODER = json.JSONDecoder()
