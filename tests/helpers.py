"""Shared test helpers: load a plugin's runner, bind it to the local host, run it."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runners_cli.host import Identity, LocalHost
from runners_cli.plugins import PluginInfo, find, load_runner_class

TERMINAL = {"run.completed", "run.failed"}


def rtype(result: Any) -> str:
    return getattr(result.type, "value", result.type)


def make_runner(info: PluginInfo | str, host: LocalHost) -> Any:
    if isinstance(info, str):
        info = find(info)
    runner = load_runner_class(info)()
    runner.bind_runtime(plugin_runtime_handler=host, plugin_identity=f"{info.author}/{info.name}")
    return runner


async def run(runner: Any, host: LocalHost, text: str = "hello", **ctx_kwargs: Any) -> list[Any]:
    """One turn: build the context, invoke, apply results to host state, return the results."""
    ctx = host.make_context(text, **ctx_kwargs)
    out = []
    async for result in runner.invoke(ctx):
        host.apply_result(ctx.run_id, result)
        out.append(result)
    return out


async def run_answering(runner: Any, host: LocalHost, ctx: Any, answers: Any = (), when: str = "wants to") -> list[Any]:
    """Invoke ``ctx`` like :func:`run`; each time a question reaches the chat (a complete message
    containing ``when``, or a refusal saying who may answer), the next of ``answers`` is typed into
    the running run as a follow-up: text, or ``(text, Identity)`` for someone else."""
    pending = list(answers)
    out = []
    async for r in runner.invoke(ctx):
        host.apply_result(ctx.run_id, r)
        out.append(r)
        if rtype(r) == "message.completed" and pending:
            content = r.data["message"]["content"]
            if isinstance(content, str) and (when in content or "Only" in content):
                a = pending.pop(0)
                text, ident = a if isinstance(a, tuple) else (a, None)
                host.queue_steering(ctx, text, ident)
    return out


def terminal(results: list[Any]) -> Any:
    ends = [r for r in results if rtype(r) in TERMINAL]
    assert len(ends) == 1, [rtype(r) for r in results]
    assert results[-1] is ends[0], "nothing may follow the terminal result"
    return ends[0]


def failure(results: list[Any]) -> tuple[str, bool, str]:
    """(code, retryable, message) of a failed run, in either shape the kit ends one with.

    ``run.failed``; or, for a pipeline run whose failure is shown in the chat, the failure log line
    followed by ``run.completed`` whose finish_reason is the code (runner_kit.explain explains why).
    """
    from runner_kit.explain import parse_failure_log

    end = terminal(results)
    if rtype(end) == "run.failed":
        return end.data["code"], end.data["retryable"], end.data["error"]
    logged = [f for r in results if rtype(r) == "processor.log" and (f := parse_failure_log(r.data.get("text")))]
    assert rtype(end) == "run.completed" and logged, f"expected a failed run, got {rtype(end)} {end.data}"
    assert len(logged) == 1, logged
    code, retryable, message = logged[0]
    assert end.data.get("finish_reason") == code, (end.data, code)
    return code, retryable, message


def final_text(results: list[Any]) -> str:
    msgs = [r for r in results if rtype(r) == "message.completed"]
    msgs += [r for r in results if rtype(r) == "run.completed" and r.data.get("message")]
    assert len(msgs) == 1, f"expected exactly one complete message, got {len(msgs)}"
    msg = msgs[0].data["message"]
    content = msg["content"]
    if isinstance(content, list):
        return "".join(c.get("text") or "" for c in content if c.get("type") == "text")
    return content or ""


def deltas(results: list[Any]) -> list[str]:
    return [r.data["chunk"]["all_content"] for r in results if rtype(r) == "message.delta"]


def dump(results: list[Any]) -> str:
    return json.dumps([r.model_dump(mode="json") for r in results], ensure_ascii=False)


def shared_dir() -> Path:
    """The project's shared material (docs, real-peer fixtures): ``$RUNNERS_SHARED_DIR``, or the
    ``shared/`` folder beside the repository (where CI and developers have it)."""
    given = os.environ.get("RUNNERS_SHARED_DIR")
    return Path(given) if given else Path(__file__).resolve().parents[1].parent / "shared"


def real_peer_fixtures(name: str) -> Path:
    """``fixtures/real-peers/<name>`` of the shared material."""
    return shared_dir() / "fixtures" / "real-peers" / name


def stored_key(base: str, identity: Identity | None = None, source: str = "actor") -> str:
    """The state key a run stores its upstream id under for this identity (see runner_kit.session)."""
    from runner_kit.session import session_key

    ident = identity or Identity()
    users = {
        "actor": f"{ident.actor_type}_{ident.actor_id}",
        "conversation": f"conversation_{ident.conversation_id}",
    }
    key = session_key(base, source, users.get(source, ""))
    assert key is not None
    return key


def state_updates(results: list[Any], *, books: bool = False) -> dict[str, Any]:
    """Every key a run stored and its last value; without ``books``, not the coding agents' session
    book and day totals (runner_kit.chat_commands), which every turn of theirs updates."""
    from runner_kit.chat_commands import BOOK_SUFFIX, DAY_KEY

    return {r.data["key"]: r.data["value"] for r in results if rtype(r) == "state.updated"
            and (books or not (r.data["key"].endswith(BOOK_SUFFIX) or r.data["key"] == DAY_KEY))}


__all__ = ["Identity", "LocalHost", "make_runner", "run", "terminal", "failure", "final_text", "deltas", "dump"]


def messages(results: list[Any]) -> list[str]:
    """The text of every complete message of a run, in order (a multi-turn run has one per turn)."""
    out = []
    for r in results:
        if rtype(r) == "message.completed":
            content = r.data["message"]["content"]
            out.append(content if isinstance(content, str) else "".join(c.get("text") or "" for c in content))
    return out


async def collect(runner: Any, host: LocalHost, ctx: Any, during: Any = None) -> list[Any]:
    """Invoke with an existing context, applying results to the host; ``during(result)`` runs after
    each one (to queue follow-ups or change the fake mid-run)."""
    out = []
    async for result in runner.invoke(ctx):
        host.apply_result(ctx.run_id, result)
        out.append(result)
        if during is not None:
            during(result)
    return out


async def children_left(timeout: float = 5.0) -> set[int]:
    """Live descendants of this test process still running after ``timeout`` (empty when every
    process a runner started has ended)."""
    import asyncio
    import time

    from runner_kit.process import alive, descendants

    end = time.monotonic() + timeout
    while True:
        left = {p for p in descendants(os.getpid()) if alive(p)}
        if not left or time.monotonic() > end:
            return left
        await asyncio.sleep(0.05)


def scripted_runner(adapter_base: type, schema: Any, **class_attrs: Any) -> tuple[Any, LocalHost, type]:
    """A KitRunner over a fresh subclass of ``adapter_base`` carrying ``class_attrs`` (the script
    the test plays), bound to a new local host: ``(runner, host, adapter class)``."""
    from runner_kit.runner import KitRunner

    cls = type(adapter_base.__name__ + "Case", (adapter_base,), dict(class_attrs))
    runner_cls = type("ScriptedRunner", (KitRunner,), {"adapter": cls, "schema": schema})
    host = LocalHost()
    runner = runner_cls()
    runner.bind_runtime(plugin_runtime_handler=host)
    return runner, host, cls


def sleep_step(seconds: float) -> Any:
    """A script step that waits ``seconds`` (scripted adapters await callables)."""
    import asyncio

    async def step(_: Any) -> None:
        await asyncio.sleep(seconds)

    return step


def agent_pids(script: str) -> list[int]:
    """Host pids of this test process's descendants running ``script`` (e.g. ``fake_claude.py``).
    A sandboxed agent reports its pid inside its PID namespace (2), which means nothing here."""
    from runner_kit.process import descendants

    found = []
    for pid in sorted(descendants(os.getpid())):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if b"bwrap" not in os.path.basename(argv[0]) and any(a.endswith(script.encode()) for a in argv):
            found.append(pid)
    return found


def fake_dns(monkeypatch: Any, table: Mapping[str, str | list[str]], calls: list[str] | None = None) -> None:
    """Answer the kit's URL guard's lookups (``runner_kit.netguard``) from ``table``: an address per
    name, or a list of successive answers (the last repeated); any other name does not resolve.
    ``calls`` collects the names looked up."""
    import socket

    from runner_kit import netguard

    answered: dict[str, int] = {}

    async def resolve(host: str, port: int) -> list[Any]:
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        answers = table[host]
        answers = [answers] if isinstance(answers, str) else answers
        n = answered[host] = answered.get(host, -1) + 1
        ip = answers[min(n, len(answers) - 1)]
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (ip, port))]

    monkeypatch.setattr(netguard, "_getaddrinfo", resolve)
